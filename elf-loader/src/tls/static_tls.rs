//! The loader's own static TLS: the word pair through which the fast paths find each
//! thread's dtv and the static pool for initial-exec modules (both in the loader's
//! `.tbss`/`.tdata`, at offsets from the thread pointer read through `@GOTTPOFF`); the
//! pool's parts (`static_part`, from a module's `Template`) and its bytes in the TLS
//! init image that threads started later copy (`write_init_image`); the system's static
//! TLS block (`static_tls_offset`) and the thread pointer.

use parking_lot::Mutex;
use std::sync::OnceLock;

// The loader's own thread-local word pair (dtv pointer, length), 16 bytes of the
// loader library's static TLS; `elf_loader_tls_dtv@GOTTPOFF` gives its offset from the
// thread pointer (initial-exec: the library that holds this code is loaded at start-up
// or is the executable, where the linker relaxes it to local-exec).
//
// The static pool for initial-exec modules is in `.tdata`, zero-filled: part of the init
// image glibc copies into each thread's static TLS when the thread starts, which is
// where a module with initialised data has its image written (`publish_static`).
std::arch::global_asm!(
    ".section .tbss,\"awT\",@nobits",
    ".p2align 4",
    ".globl elf_loader_tls_dtv",
    ".hidden elf_loader_tls_dtv",
    ".type elf_loader_tls_dtv, @object",
    ".size elf_loader_tls_dtv, 16",
    "elf_loader_tls_dtv:",
    ".zero 16",
    ".section .tdata,\"awT\",@progbits",
    ".p2align 6",
    ".globl elf_loader_static_tls_pool",
    ".hidden elf_loader_static_tls_pool",
    ".type elf_loader_static_tls_pool, @object",
    ".size elf_loader_static_tls_pool, 512",
    "elf_loader_static_tls_pool:",
    ".zero 512",
    ".text",
);

/// Bytes of the loader's static TLS pool for initial-exec modules (the size in the
/// assembly above): about what glibc keeps for `dlopen`ed libraries (its
/// `rtld.optional_static_tls` default is 512 bytes), and what every thread of a process
/// that links the loader carries.
pub const STATIC_POOL_SIZE: usize = 512;

/// Bytes of the static pool handed out so far (never given back: a thread's copy of a
/// part is only zero until a module has used it).
static STATIC_POOL_USED: Mutex<usize> = Mutex::new(0);

/// The offset from the thread pointer of a variable in the loader library's own static
/// TLS (the same in every thread), read from its `@GOTTPOFF` GOT entry.
macro_rules! own_tpoff {
    ($symbol:literal) => {{
        let off: u64;
        // SAFETY: reads the GOT entry (or, relaxed by the linker, the immediate) that
        // holds the offset; no memory is written.
        unsafe {
            std::arch::asm!(
                concat!("mov {o}, qword ptr [rip + ", $symbol, "@GOTTPOFF]"),
                o = out(reg) off,
                options(nostack, readonly, preserves_flags),
            )
        };
        off
    }};
}

/// This thread's offset of `elf_loader_static_tls_pool` from the thread pointer.
pub(super) fn static_pool_tpoff() -> u64 {
    own_tpoff!("elf_loader_static_tls_pool")
}

/// What a module's blocks are made from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Template {
    /// Runtime address of the relocated init image (`.tdata`).
    pub image: usize,
    /// Bytes copied from the image.
    pub filesz: usize,
    /// Block size (`.tdata` + `.tbss`).
    pub memsz: usize,
    /// Block alignment.
    pub align: usize,
    /// The library is flagged `DF_STATIC_TLS` (initial-exec accesses to its own TLS):
    /// give it a part of the static pool if it qualifies (see the module doc).
    pub static_tls: bool,
}

/// A part of the static pool for a module with this template, as its offset from the
/// thread pointer, or why it gets none: it does not ask for static TLS, is aligned
/// beyond the pool's 64 bytes, or does not fit what is left.
pub(super) fn static_part(t: &Template) -> Result<u64, String> {
    if !t.static_tls {
        return Err("it is not flagged DF_STATIC_TLS".into());
    }
    if t.align > 64 {
        return Err(format!(
            "its TLS alignment {} is beyond the static pool's 64",
            t.align
        ));
    }
    let align = t.align.max(1);
    let mut used = STATIC_POOL_USED.lock();
    let start = used.div_ceil(align) * align;
    let end = start.saturating_add(t.memsz.max(1));
    if end > STATIC_POOL_SIZE {
        return Err(format!(
            "it needs {} bytes and the loader's {STATIC_POOL_SIZE}-byte static pool has {} left",
            t.memsz,
            STATIC_POOL_SIZE - *used
        ));
    }
    *used = end;
    Ok(static_pool_tpoff().wrapping_add(start as u64))
}

/// Where the static pool's bytes are in the loader's TLS init image, the image glibc
/// copies into every thread's static TLS when the thread starts: found through
/// `dl_iterate_phdr` as the object whose TLS block in the calling thread
/// (`dlpi_tls_data`) holds the calling thread's pool. With the pages' protection to
/// restore after writing (read-only inside the object's `PT_GNU_RELRO`).
#[derive(Clone, Copy, Debug)]
pub(super) struct PoolTemplate {
    /// Address of the pool's first byte in the init image.
    addr: usize,
    /// The object's `PT_GNU_RELRO` range (start, end), if it has one.
    relro: Option<(usize, usize)>,
}

pub(super) fn pool_template() -> Result<PoolTemplate, String> {
    static FOUND: OnceLock<Result<PoolTemplate, String>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            struct Search {
                pool: usize,
                found: Option<Result<PoolTemplate, String>>,
            }
            unsafe extern "C" fn visit(
                info: *mut libc::dl_phdr_info,
                _size: libc::size_t,
                data: *mut std::ffi::c_void,
            ) -> std::ffi::c_int {
                // SAFETY: glibc passes a valid info for the duration of the call; data is
                // the `Search` below.
                let (info, search) = unsafe { (&*info, &mut *(data as *mut Search)) };
                if info.dlpi_tls_data.is_null() || info.dlpi_phdr.is_null() {
                    return 0;
                }
                // SAFETY: dlpi_phdr has dlpi_phnum entries.
                let phdrs =
                    unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
                let Some(tls) = phdrs.iter().find(|p| p.p_type == libc::PT_TLS) else {
                    return 0;
                };
                let block = info.dlpi_tls_data as usize;
                if search.pool < block || search.pool >= block + tls.p_memsz as usize {
                    return 0;
                }
                let off = search.pool - block;
                search.found = Some(if off + STATIC_POOL_SIZE > tls.p_filesz as usize {
                    Err(format!(
                        "the loader's static pool is not in its TLS init image (offset {off}, init image {} bytes)",
                        tls.p_filesz
                    ))
                } else {
                    let base = info.dlpi_addr as usize;
                    let relro = phdrs
                        .iter()
                        .find(|p| p.p_type == libc::PT_GNU_RELRO)
                        .map(|p| {
                            let start = base + p.p_vaddr as usize;
                            (start, start + p.p_memsz as usize)
                        });
                    Ok(PoolTemplate {
                        addr: base + tls.p_vaddr as usize + off,
                        relro,
                    })
                });
                1
            }
            let mut search = Search {
                pool: thread_pointer().wrapping_add(static_pool_tpoff() as usize),
                found: None,
            };
            // SAFETY: the callback matches dl_iterate_phdr's contract and `search` outlives
            // the call.
            unsafe {
                libc::dl_iterate_phdr(Some(visit), (&mut search as *mut Search).cast());
            }
            search.found.unwrap_or_else(|| {
                Err("no loaded object's TLS block holds the loader's static pool".into())
            })
        })
        .clone()
}

/// Writes `len` bytes from `src` at `part` bytes into the pool's copy in the loader's
/// TLS init image, making its pages writable meanwhile.
pub(super) fn write_init_image(
    t: PoolTemplate,
    part: usize,
    src: usize,
    len: usize,
) -> Result<(), String> {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let dst = t.addr + part;
    let (first, last) = (dst & !(page - 1), (dst + len).div_ceil(page) * page);
    let protect = |prot| {
        // SAFETY: the pages hold the loader's own TLS init image, mapped for the process's
        // life; only their protection changes.
        if unsafe { libc::mprotect(first as *mut libc::c_void, last - first, prot) } != 0 {
            Err(format!(
                "mprotect of the loader's TLS init image: {}",
                std::io::Error::last_os_error()
            ))
        } else {
            Ok(())
        }
    };
    protect(libc::PROT_READ | libc::PROT_WRITE)?;
    // SAFETY: inside the init image's pool (part + len <= STATIC_POOL_SIZE), now writable;
    // the source is the module's relocated image.
    unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, len) };
    let in_relro = t
        .relro
        .is_some_and(|(a, b)| first >= a && last <= b.div_ceil(page) * page);
    protect(if in_relro {
        libc::PROT_READ
    } else {
        libc::PROT_READ | libc::PROT_WRITE
    })
}

/// Bytes of the static pool still free for initial-exec modules.
pub fn static_pool_free() -> usize {
    STATIC_POOL_SIZE - *STATIC_POOL_USED.lock()
}

/// This thread's offset of `elf_loader_tls_dtv` from the thread pointer (the same in
/// every thread: it is in the static TLS block).
pub(super) fn dtv_tpoff() -> u64 {
    own_tpoff!("elf_loader_tls_dtv")
}

/// For an address in the calling thread's TLS: its offset from the thread pointer if
/// it lies in the static TLS block (the same offset in every thread, what `TPOFF64`
/// stores), `None` for a dynamically allocated block. The static block's size comes
/// from the system loader (`_dl_get_tls_static_info`, as sanitizers read it).
pub(crate) fn static_tls_offset(addr: usize) -> Option<u64> {
    static SIZE: OnceLock<usize> = OnceLock::new();
    let size = *SIZE.get_or_init(|| {
        let Some(p) = crate::phdr::global_symbol(c"_dl_get_tls_static_info") else {
            // Not glibc's loader: a bound that no heap block is likely to fall under.
            return 1 << 20;
        };
        // SAFETY: glibc's `void _dl_get_tls_static_info(size_t *size, size_t *align)`.
        let f: unsafe extern "C" fn(*mut usize, *mut usize) = unsafe { std::mem::transmute(p) };
        let (mut size, mut align) = (0usize, 0usize);
        // SAFETY: two valid out-pointers.
        unsafe { f(&mut size, &mut align) };
        size
    });
    let tp = thread_pointer();
    (addr < tp && tp - addr <= size).then(|| addr.wrapping_sub(tp) as u64)
}

/// The thread pointer (`%fs:0`).
pub(crate) fn thread_pointer() -> usize {
    let tp: usize;
    // SAFETY: on x86_64 Linux %fs:0 holds the TCB's self pointer.
    unsafe {
        std::arch::asm!("mov {}, fs:0", out(reg) tp, options(nostack, readonly, preserves_flags))
    };
    tp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_pool_parts_go_only_to_static_modules_that_fit() {
        let t = |filesz, memsz, align, static_tls| Template {
            image: 0,
            filesz,
            memsz,
            align,
            static_tls,
        };
        let refused = |t: Template, why: &str| {
            let err = static_part(&t).expect_err(why);
            assert!(err.contains(why), "{err}");
        };
        refused(t(0, 16, 8, false), "DF_STATIC_TLS");
        refused(t(0, 16, 128, true), "alignment 128");
        refused(t(0, STATIC_POOL_SIZE + 1, 8, true), "static pool has");
        let free = static_pool_free();
        let a = static_part(&t(0, 12, 8, true)).expect("a part");
        let b = static_part(&t(0, 8, 16, true)).expect("another");
        assert!(
            b >= a + 12 && b % 16 == static_pool_tpoff() % 16,
            "after a, aligned"
        );
        assert!(static_pool_free() <= free - 20, "parts are not given back");
        // In the static TLS block: below the thread pointer, at most its size away.
        assert!(static_tls_offset(thread_pointer().wrapping_add(a as usize)).is_some());
    }

    /// The pool's bytes in the init image (here: this test executable's, which links the
    /// loader) are what a thread started later finds in its own pool: the mechanism that
    /// gives initialised initial-exec modules their image in later threads. The last 8
    /// bytes of the pool, which no test hands out, carry a pattern and are cleared again.
    #[test]
    fn the_init_image_fills_the_pool_of_threads_started_later() {
        let template = pool_template().expect("the pool is in the loader's TLS init image");
        let last = STATIC_POOL_SIZE - 8;
        let pattern = 0x5eed_0f74_15aa_u64.to_ne_bytes();
        write_init_image(template, last, pattern.as_ptr() as usize, 8).unwrap();
        let read_own = move || {
            let p = thread_pointer().wrapping_add(static_pool_tpoff() as usize + last);
            // SAFETY: inside this thread's static pool.
            unsafe { std::ptr::read_unaligned(p as *const [u8; 8]) }
        };
        let later = std::thread::spawn(read_own).join().unwrap();
        write_init_image(template, last, [0u8; 8].as_ptr() as usize, 8).unwrap();
        let after = std::thread::spawn(read_own).join().unwrap();
        assert_eq!(later, pattern, "a thread started after the write");
        assert_eq!(after, [0; 8], "and after the clearing");
        assert_eq!(
            read_own(),
            [0; 8],
            "this thread's own copy was never written"
        );
    }
}
