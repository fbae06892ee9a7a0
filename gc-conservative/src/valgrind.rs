//! Valgrind client requests, so that conservative scanning (which reads every word of a
//! stack, initialised or not) stays valgrind-clean: under valgrind, a range is copied and
//! the copy declared defined before it is scanned. Natively the check is a handful of
//! no-op instructions and the range is scanned in place.
//!
//! The request protocol (a special sequence of rotations of `rdi` followed by
//! `xchg rbx, rbx`, with the request block in `rax` and the result in `rdx`) is
//! valgrind's documented client-request ABI for x86_64.

/// `RUNNING_ON_VALGRIND`.
const RUNNING_ON_VALGRIND: usize = 0x1001;
/// Memcheck's `MAKE_MEM_DEFINED` (tool base 'M','C').
const MAKE_MEM_DEFINED: usize = ((b'M' as usize) << 24 | (b'C' as usize) << 16) + 2;

#[cfg(target_arch = "x86_64")]
fn request(default: usize, args: [usize; 6]) -> usize {
    let mut result = default;
    // SAFETY: natively the sequence rotates rdi by a total of 128 bits (a no-op) and
    // exchanges rbx with itself; valgrind recognises it and reads the argument block.
    unsafe {
        std::arch::asm!(
            "rol rdi, 3",
            "rol rdi, 13",
            "rol rdi, 61",
            "rol rdi, 51",
            "xchg rbx, rbx",
            in("rax") args.as_ptr(),
            inout("rdx") result,
            inout("rdi") 0usize => _,
            options(nostack)
        );
    }
    result
}

#[cfg(not(target_arch = "x86_64"))]
fn request(default: usize, _args: [usize; 6]) -> usize {
    default
}

/// Whether the process runs under valgrind.
pub(crate) fn running_on_valgrind() -> bool {
    request(0, [RUNNING_ON_VALGRIND, 0, 0, 0, 0, 0]) != 0
}

/// Declares `len` bytes at `addr` defined (memcheck only; a no-op otherwise).
pub(crate) fn make_mem_defined(addr: usize, len: usize) {
    request(0, [MAKE_MEM_DEFINED, addr, len, 0, 0, 0]);
}

#[cfg(test)]
mod tests {
    #[test]
    fn natively_not_under_valgrind_and_requests_are_harmless() {
        if std::env::var_os("GC_CONSERVATIVE_UNDER_VALGRIND").is_none() {
            assert!(!super::running_on_valgrind());
        }
        let x = 5u64;
        super::make_mem_defined(&x as *const u64 as usize, 8);
        assert_eq!(x, 5);
    }
}
