//! The entries custom code calls: `__tls_get_addr` and the TLS descriptor functions
//! (assembly fast paths over the dtv, Rust slow paths), their copies next to custom
//! libraries (`near_entries`), the descriptors relocations write, and `TlsIndex` with
//! the address of a variable in the calling thread.

use super::registry::{block_for, OUR_MODULE, REGISTRY};
use super::static_tls::dtv_tpoff;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

/// A `tls_index` as the x86_64 ABI passes it to `__tls_get_addr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TlsIndex {
    /// Module id (ours have bit 63 set; others are the system loader's).
    pub module: u64,
    /// Offset of the variable inside the module's block.
    pub offset: u64,
}

impl TlsIndex {
    /// The calling thread's address of the thread-local variable this index names (as
    /// [`SymbolProvider::tls_sym`](crate::SymbolProvider::tls_sym) gives it): what the
    /// library's own code reaches through `__tls_get_addr` (the thread's block is
    /// allocated on its first access). `None` for a variable of a library this loader
    /// no longer has loaded, an offset past the end of that library's block, or module 0.
    ///
    /// # Safety
    /// For a module of the system loader (an id without bit 63 set), the index must
    /// name a module the system loader has loaded and an offset inside its block (it is
    /// handed to glibc's `__tls_get_addr` as is); indices of this loader's modules are
    /// checked, module and offset.
    pub unsafe fn address_in_thread(&self) -> Option<std::ptr::NonNull<u8>> {
        std::ptr::NonNull::new(address_in_thread(self) as *mut u8)
    }
}

type SysTlsGetAddr = unsafe extern "C" fn(*const TlsIndex) -> *mut u8;

/// The system's `__tls_get_addr` once looked up (0 before): the fast path's tail call
/// for the system loader's module ids.
static SYS_TLS_GET_ADDR: AtomicUsize = AtomicUsize::new(0);

fn system_tls_get_addr() -> SysTlsGetAddr {
    static SYS: OnceLock<usize> = OnceLock::new();
    let addr = *SYS.get_or_init(|| {
        let p = crate::phdr::global_symbol(c"__tls_get_addr")
            .expect("the system loader exports no __tls_get_addr");
        SYS_TLS_GET_ADDR.store(p, Ordering::Release);
        p
    });
    // SAFETY: the address is glibc's __tls_get_addr, which has exactly this signature.
    unsafe { std::mem::transmute::<usize, SysTlsGetAddr>(addr) }
}

/// The address of `ti` in the calling thread, for the slow paths of the assembly
/// entries: our blocks (allocated on first use), or the system's `__tls_get_addr`.
/// An id of ours that is not registered aborts: code of an unloaded library is running,
/// and there is no address to give (handing out memory that belongs to something else
/// would be worse).
fn address_or_abort(ti: TlsIndex) -> usize {
    if ti.module & OUR_MODULE == 0 {
        // SAFETY: a system module id and offset, as __tls_get_addr takes them.
        return unsafe { system_tls_get_addr()(&ti) as usize };
    }
    match block_for(ti.module) {
        Some(b) => b.wrapping_add(ti.offset as usize),
        None => {
            eprintln!(
                "elf-loader: TLS access for module {:#x}, which is not loaded; aborting",
                ti.module
            );
            std::process::abort();
        }
    }
}

/// `__tls_get_addr` for custom-loaded code, after the assembly fast path missed.
///
/// # Safety
/// `ti` must point to a valid `tls_index`.
unsafe extern "C" fn elf_loader_tls_get_addr_impl(ti: *const TlsIndex) -> *mut u8 {
    crate::boundary::or_abort("__tls_get_addr", || {
        // SAFETY: the caller passes a valid tls_index (the ABI contract of __tls_get_addr).
        address_or_abort(unsafe { *ti }) as *mut u8
    })
}

/// The dynamic TLS descriptor's slow path: the address (not yet made relative to the
/// thread pointer) of the variable `ti` names, in the calling thread.
///
/// # Safety
/// `ti` must point to a valid `tls_index` (the argument of a descriptor made by
/// [`tlsdesc_dynamic`]).
unsafe extern "C" fn elf_loader_tlsdesc_slow(ti: *const TlsIndex) -> usize {
    crate::boundary::or_abort("TLS descriptor", || {
        // SAFETY: the descriptor's argument is a live TlsIndex owned by its image.
        address_or_abort(unsafe { *ti })
    })
}

/// Size of the stack area the dynamic descriptor's slow path saves the vector state
/// in (`xsave`: CPUID leaf 0xD's size for the enabled features; `fxsave`: 512), and
/// whether `xsave` is used. Set by [`tlsdesc_dynamic`] before any descriptor exists.
static XSAVE_SIZE: AtomicUsize = AtomicUsize::new(4096);
static USE_XSAVE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

fn init_state_save() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        use std::arch::x86_64::{__cpuid, __cpuid_count};
        let osxsave = __cpuid(1).ecx & (1 << 27) != 0;
        if osxsave {
            // Leaf 0xD exists when OSXSAVE is set.
            let size = __cpuid_count(0xd, 0).ebx as usize;
            XSAVE_SIZE.store(size.max(576), Ordering::Relaxed);
            USE_XSAVE.store(1, Ordering::Release);
        } else {
            XSAVE_SIZE.store(512, Ordering::Relaxed);
        }
        // The tail call of the fast path for system ids.
        system_tls_get_addr();
    });
}

// The entries custom code calls. `elf_loader_tls_get_addr_fast` is `__tls_get_addr`: the
// fast path finds the calling thread's block in its dtv (see the module docs); a miss
// on a system module id tail-calls the system's `__tls_get_addr`, any other miss
// realigns the stack (compilers may call __tls_get_addr with a misaligned stack; glibc
// realigns too) and enters Rust.
//
// The TLS descriptor functions (`R_X86_64_TLSDESC`, `-mtls-dialect=gnu2`) are called
// with %rax pointing at the descriptor {function, argument} and return in %rax the
// variable's offset from the thread pointer, preserving every other register, vector
// registers included: `return` (static TLS: the argument is the offset), `undefweak`
// (an undefined weak variable: address 0 + addend) and `dynamic` (the argument is a
// `TlsIndex`: the same fast path as `__tls_get_addr`; its slow path saves the general
// registers the C ABI lets a callee clobber and the whole extended state with `xsave`
// (`fxsave` without it) before entering Rust).
std::arch::global_asm!(
    ".text",
    // Placement: the fast path's two compare-and-branch pairs (at +0x10 and +0x1b)
    // must not cross or end on a 32-byte boundary (Skylake's jump erratum mitigation
    // makes such a branch several cycles slower); 8 bytes past a 32-byte boundary
    // keeps both inside one 32-byte block each.
    ".p2align 5",
    ".skip 16, 0xcc",
    ".globl elf_loader_tls_get_addr_fast",
    ".hidden elf_loader_tls_get_addr_fast",
    ".type elf_loader_tls_get_addr_fast, @function",
    "elf_loader_tls_get_addr_fast:",
    "mov rax, qword ptr [rdi]",
    "mov rcx, qword ptr [rip + elf_loader_tls_dtv@GOTTPOFF]",
    "mov edx, eax",
    "shl rdx, 4",
    "cmp rdx, qword ptr fs:[rcx + 8]",
    "jae 2f",
    "mov rcx, qword ptr fs:[rcx]",
    "cmp rax, qword ptr [rcx + rdx]",
    "jne 2f",
    "mov rax, qword ptr [rcx + rdx + 8]",
    "add rax, qword ptr [rdi + 8]",
    "ret",
    "2:",
    "test rax, rax",
    "js 3f",
    "mov rcx, qword ptr [rip + {sys}]",
    "test rcx, rcx",
    "jz 3f",
    "jmp rcx",
    "3:",
    "push rbp",
    "mov rbp, rsp",
    "and rsp, -16",
    "call {imp}",
    "mov rsp, rbp",
    "pop rbp",
    "ret",
    ".size elf_loader_tls_get_addr_fast, . - elf_loader_tls_get_addr_fast",
    "",
    ".p2align 4",
    ".globl elf_loader_tlsdesc_return",
    ".hidden elf_loader_tlsdesc_return",
    ".type elf_loader_tlsdesc_return, @function",
    "elf_loader_tlsdesc_return:",
    "mov rax, qword ptr [rax + 8]",
    "ret",
    ".size elf_loader_tlsdesc_return, . - elf_loader_tlsdesc_return",
    "",
    ".p2align 4",
    ".globl elf_loader_tlsdesc_undefweak",
    ".hidden elf_loader_tlsdesc_undefweak",
    ".type elf_loader_tlsdesc_undefweak, @function",
    "elf_loader_tlsdesc_undefweak:",
    "mov rax, qword ptr [rax + 8]",
    "sub rax, qword ptr fs:[0]",
    "ret",
    ".size elf_loader_tlsdesc_undefweak, . - elf_loader_tlsdesc_undefweak",
    "",
    ".p2align 4",
    ".globl elf_loader_tlsdesc_dynamic",
    ".hidden elf_loader_tlsdesc_dynamic",
    ".type elf_loader_tlsdesc_dynamic, @function",
    "elf_loader_tlsdesc_dynamic:",
    "push rsi",
    "push rdx",
    "mov rsi, qword ptr [rax + 8]",
    "mov rdx, qword ptr [rip + elf_loader_tls_dtv@GOTTPOFF]",
    "mov eax, dword ptr [rsi]",
    "shl rax, 4",
    "cmp rax, qword ptr fs:[rdx + 8]",
    "jae elf_loader_tlsdesc_slow_entry",
    "add rax, qword ptr fs:[rdx]",
    "mov rdx, qword ptr [rsi]",
    "cmp rdx, qword ptr [rax]",
    "jne elf_loader_tlsdesc_slow_entry",
    "mov rax, qword ptr [rax + 8]",
    "add rax, qword ptr [rsi + 8]",
    "sub rax, qword ptr fs:[0]",
    "pop rdx",
    "pop rsi",
    "ret",
    // The slow path, also entered from the copies in `near_entries`' pages: %rsi and
    // %rdx pushed (in that order), %rsi = the descriptor's TlsIndex.
    ".globl elf_loader_tlsdesc_slow_entry",
    ".hidden elf_loader_tlsdesc_slow_entry",
    "elf_loader_tlsdesc_slow_entry:",
    "push rcx",
    "push rdi",
    "push r8",
    "push r9",
    "push r10",
    "push r11",
    "push rbp",
    "mov rbp, rsp",
    "sub rsp, qword ptr [rip + {xsave_size}]",
    "and rsp, -64",
    "cmp byte ptr [rip + {use_xsave}], 0",
    "je 5f",
    // The XSAVE header must be zero where XSAVE does not write it (XRSTOR checks).
    "xor eax, eax",
    "mov qword ptr [rsp + 512], rax",
    "mov qword ptr [rsp + 520], rax",
    "mov qword ptr [rsp + 528], rax",
    "mov qword ptr [rsp + 536], rax",
    "mov qword ptr [rsp + 544], rax",
    "mov qword ptr [rsp + 552], rax",
    "mov qword ptr [rsp + 560], rax",
    "mov qword ptr [rsp + 568], rax",
    "mov eax, -1",
    "mov edx, -1",
    "xsave64 [rsp]",
    "jmp 6f",
    "5:",
    "fxsave64 [rsp]",
    "6:",
    "mov rdi, rsi",
    "call {slow}",
    "mov r11, rax",
    "cmp byte ptr [rip + {use_xsave}], 0",
    "je 7f",
    "mov eax, -1",
    "mov edx, -1",
    "xrstor64 [rsp]",
    "jmp 8f",
    "7:",
    "fxrstor64 [rsp]",
    "8:",
    "mov rax, r11",
    "sub rax, qword ptr fs:[0]",
    "mov rsp, rbp",
    "pop rbp",
    "pop r11",
    "pop r10",
    "pop r9",
    "pop r8",
    "pop rdi",
    "pop rcx",
    "pop rdx",
    "pop rsi",
    "ret",
    ".size elf_loader_tlsdesc_dynamic, . - elf_loader_tlsdesc_dynamic",
    imp = sym elf_loader_tls_get_addr_impl,
    slow = sym elf_loader_tlsdesc_slow,
    sys = sym SYS_TLS_GET_ADDR,
    xsave_size = sym XSAVE_SIZE,
    use_xsave = sym USE_XSAVE,
);

extern "C" {
    fn elf_loader_tls_get_addr_fast();
    fn elf_loader_tlsdesc_slow_entry();
    fn elf_loader_tlsdesc_return();
    fn elf_loader_tlsdesc_undefweak();
    fn elf_loader_tlsdesc_dynamic();
}

// The same fast paths as a position-independent template that `near_entries` copies
// into a page next to custom-loaded libraries. A call from a library's PLT (or a TLS
// descriptor call) to code more than 4 GiB away, in another 4 GiB-aligned region (the
// loader linked into a PIE executable at 0x55..., the libraries at 0x7f...), costs the
// CPU's branch prediction a few cycles on every call (measured: a three-instruction
// function in the executable took 1.1x glibc's whole `__tls_get_addr`, the same function
// in a library next to the caller 0.93x). The template reads its parameters from its own
// last words: the offset of `elf_loader_tls_dtv` from the thread pointer, and the
// loader's full entries, which a miss jumps to (they repeat the fast path, then take the
// slow one).
std::arch::global_asm!(
    ".text",
    ".p2align 6",
    ".globl elf_loader_tramp_start",
    ".hidden elf_loader_tramp_start",
    "elf_loader_tramp_start:",
    // +0: __tls_get_addr
    "mov rax, qword ptr [rdi]",
    "mov rcx, qword ptr [rip + .Ltramp_tpoff]",
    "mov edx, eax",
    "shl rdx, 4",
    "cmp rdx, qword ptr fs:[rcx + 8]",
    "jae 2f",
    "mov rcx, qword ptr fs:[rcx]",
    "cmp rax, qword ptr [rcx + rdx]",
    "jne 2f",
    "mov rax, qword ptr [rcx + rdx + 8]",
    "add rax, qword ptr [rdi + 8]",
    "ret",
    "2:",
    "jmp qword ptr [rip + .Ltramp_full_get]",
    ".p2align 5",
    ".globl elf_loader_tramp_desc_dynamic",
    ".hidden elf_loader_tramp_desc_dynamic",
    "elf_loader_tramp_desc_dynamic:",
    "push rsi",
    "push rdx",
    "mov rsi, qword ptr [rax + 8]",
    "mov rdx, qword ptr [rip + .Ltramp_tpoff]",
    "mov eax, dword ptr [rsi]",
    "shl rax, 4",
    "cmp rax, qword ptr fs:[rdx + 8]",
    "jae 3f",
    "add rax, qword ptr fs:[rdx]",
    "mov rdx, qword ptr [rsi]",
    "cmp rdx, qword ptr [rax]",
    "jne 3f",
    "mov rax, qword ptr [rax + 8]",
    "add rax, qword ptr [rsi + 8]",
    "sub rax, qword ptr fs:[0]",
    "pop rdx",
    "pop rsi",
    "ret",
    "3:",
    // The loader's slow path, in the state it expects (see elf_loader_tlsdesc_dynamic).
    "jmp qword ptr [rip + .Ltramp_full_desc]",
    ".p2align 4",
    ".globl elf_loader_tramp_desc_return",
    ".hidden elf_loader_tramp_desc_return",
    "elf_loader_tramp_desc_return:",
    "mov rax, qword ptr [rax + 8]",
    "ret",
    ".p2align 4",
    ".globl elf_loader_tramp_desc_undefweak",
    ".hidden elf_loader_tramp_desc_undefweak",
    "elf_loader_tramp_desc_undefweak:",
    "mov rax, qword ptr [rax + 8]",
    "sub rax, qword ptr fs:[0]",
    "ret",
    ".p2align 3",
    ".globl elf_loader_tramp_data",
    ".hidden elf_loader_tramp_data",
    "elf_loader_tramp_data:",
    ".Ltramp_tpoff:",
    ".quad 0",
    ".Ltramp_full_get:",
    ".quad 0",
    ".Ltramp_full_desc:",
    ".quad 0",
    ".globl elf_loader_tramp_end",
    ".hidden elf_loader_tramp_end",
    "elf_loader_tramp_end:",
);

extern "C" {
    static elf_loader_tramp_start: u8;
    static elf_loader_tramp_desc_dynamic: u8;
    static elf_loader_tramp_desc_return: u8;
    static elf_loader_tramp_desc_undefweak: u8;
    static elf_loader_tramp_data: u8;
    static elf_loader_tramp_end: u8;
}

/// The loader's TLS entries for code in one 4 GiB-aligned region of the address space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entries {
    /// `__tls_get_addr`.
    pub tls_get_addr: usize,
    /// The TLS descriptor functions (see the assembly above).
    pub desc_dynamic: usize,
    pub desc_return: usize,
    pub desc_undefweak: usize,
}

/// The entries in the loader's own code (any caller, any distance).
fn global_entries() -> Entries {
    Entries {
        tls_get_addr: elf_loader_tls_get_addr_fast as *const () as usize,
        desc_dynamic: elf_loader_tlsdesc_dynamic as *const () as usize,
        desc_return: elf_loader_tlsdesc_return as *const () as usize,
        desc_undefweak: elf_loader_tlsdesc_undefweak as *const () as usize,
    }
}

/// The TLS entries for a library mapped at `addr`: a copy of the template in a page of
/// the same 4 GiB-aligned region, made once per region and kept for the life of the
/// process (one page); the loader's own entries if the loader is in that region
/// already, or if no page could be placed there.
pub(crate) fn near_entries(addr: usize) -> Entries {
    static NEAR: Mutex<Vec<(usize, Entries)>> = Mutex::new(Vec::new());
    let region = addr >> 32;
    let global = global_entries();
    if global.tls_get_addr >> 32 == region {
        return global;
    }
    let mut near = NEAR.lock();
    if let Some(&(_, e)) = near.iter().find(|(r, _)| *r == region) {
        return e;
    }
    let e = make_near_page(addr).unwrap_or(global);
    near.push((region, e));
    e
}

/// Maps one page below `addr` in its 4 GiB region, copies the template into it with
/// its parameters, and makes it read-only and executable.
fn make_near_page(addr: usize) -> Option<Entries> {
    const PAGE: usize = 4096;
    let region = addr >> 32;
    let (start, end, data) = (
        &raw const elf_loader_tramp_start as usize,
        &raw const elf_loader_tramp_end as usize,
        &raw const elf_loader_tramp_data as usize,
    );
    let len = end - start;
    assert!(len <= PAGE, "the TLS trampoline template fits one page");
    let mut page = 0usize;
    // Below the library (mmap allocates top-down, so this is usually free), then
    // above its (at most 1 GiB) span.
    let below = (1..=64).map(|k| (addr & !(PAGE - 1)).wrapping_sub(k * 0x10_0000));
    let above = (1..=64).map(|k| (addr & !(PAGE - 1)).wrapping_add((1 << 30) + k * 0x10_0000));
    for hint in below.chain(above) {
        if hint >> 32 != region {
            continue;
        }
        // SAFETY: a new anonymous private mapping; MAP_FIXED_NOREPLACE never replaces
        // an existing one (an older kernel treats the address as a hint only, which the
        // region check below catches).
        let p = unsafe {
            libc::mmap(
                hint as *mut libc::c_void,
                PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            continue;
        }
        if (p as usize) >> 32 == region {
            page = p as usize;
            break;
        }
        // SAFETY: the mapping just made, used by nothing.
        unsafe { libc::munmap(p, PAGE) };
    }
    if page == 0 {
        tracing::debug!(
            addr,
            "no page for TLS entries in this 4 GiB region; using the loader's own"
        );
        return None;
    }
    init_state_save();
    let global = global_entries();
    let params = [
        dtv_tpoff(),
        global.tls_get_addr as u64,
        elf_loader_tlsdesc_slow_entry as *const () as u64,
    ];
    // SAFETY: `page` is a fresh writable page of PAGE bytes; the template's `len <= PAGE`
    // bytes are readable code of the loader; the data words lie inside the copy.
    unsafe {
        std::ptr::copy_nonoverlapping(start as *const u8, page as *mut u8, len);
        let d = (page + (data - start)) as *mut u64;
        for (i, v) in params.into_iter().enumerate() {
            d.add(i).write_unaligned(v);
        }
    }
    // SAFETY: the page is ours; from now on it is only executed and read.
    if unsafe {
        libc::mprotect(
            page as *mut libc::c_void,
            PAGE,
            libc::PROT_READ | libc::PROT_EXEC,
        )
    } != 0
    {
        // SAFETY: as above.
        unsafe { libc::munmap(page as *mut libc::c_void, PAGE) };
        return None;
    }
    let at = |label: *const u8| page + (label as usize - start);
    Some(Entries {
        tls_get_addr: page,
        desc_dynamic: at(&raw const elf_loader_tramp_desc_dynamic),
        desc_return: at(&raw const elf_loader_tramp_desc_return),
        desc_undefweak: at(&raw const elf_loader_tramp_desc_undefweak),
    })
}

/// Address of the loader's `__tls_get_addr` entry.
pub(crate) fn tls_get_addr_entry() -> usize {
    elf_loader_tls_get_addr_fast as *const () as usize
}

/// A TLS descriptor (`struct tlsdesc`: function, argument) for a variable at
/// `tp_offset` from the thread pointer in every thread (the system's static TLS), with
/// the entries `e` (see [`near_entries`]).
pub(crate) fn tlsdesc_static(e: &Entries, tp_offset: u64) -> [u64; 2] {
    [e.desc_return as u64, tp_offset]
}

/// A TLS descriptor for an undefined weak variable: its address is the addend.
pub(crate) fn tlsdesc_undefweak(e: &Entries, addend: u64) -> [u64; 2] {
    [e.desc_undefweak as u64, addend]
}

/// A TLS descriptor for a variable in a dynamically allocated block (ours, or a
/// system module's): `ti` must stay valid as long as the descriptor is used (its image
/// owns it).
pub(crate) fn tlsdesc_dynamic(e: &Entries, ti: &TlsIndex) -> [u64; 2] {
    init_state_save();
    [e.desc_dynamic as u64, ti as *const TlsIndex as u64]
}

/// The address of `ti` in the calling thread: our modules' blocks, or the system's
/// `__tls_get_addr` for the system loader's modules (which allocates a dynamic module's
/// block on first use, as any access would). 0 for one of our ids that is not loaded.
///
/// Unlike the fast paths (which serve running code of a loaded library, the only code
/// that holds its module id), this checks that the module is still registered: a
/// thread's dtv keeps the entry of a module unloaded since (its block freed), which
/// only this module's id matches.
pub(crate) fn address_in_thread(ti: &TlsIndex) -> usize {
    if ti.module & OUR_MODULE != 0 {
        let slot = (ti.module & 0xffff_ffff) as usize;
        // The module must be registered and the offset inside its block (one past the
        // end is the end of a zero-sized last variable).
        let size = match REGISTRY.read().slots.get(slot) {
            Some(Some(m)) if m.id == ti.module => m.template.memsz,
            _ => return 0,
        };
        if ti.offset > size as u64 {
            return 0;
        }
        return block_for(ti.module).map_or(0, |b| b + ti.offset as usize);
    }
    if ti.module == 0 {
        // No loader gives out module 0 (glibc's ids start at 1).
        return 0;
    }
    // SAFETY: a system module id and offset, as __tls_get_addr takes them.
    unsafe { system_tls_get_addr()(ti) as usize }
}
