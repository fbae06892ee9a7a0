//! `dl_iterate_phdr`, both ways: the system loader's list of loaded objects behind a
//! safe iterator (used to find C runtime libraries, TLS module ids and blocks), and the
//! `dl_iterate_phdr` that custom-loaded code calls, which adds its namespace's libraries.

use std::ffi::{c_int, c_void, CStr};
use std::sync::atomic::{AtomicU64, Ordering};

/// One object of the system loader, as `dl_iterate_phdr` describes it.
pub(crate) struct SystemObject<'a> {
    /// Load address (`dlpi_addr`).
    pub addr: usize,
    /// Path (empty for the main program).
    pub name: &'a CStr,
    /// Program headers.
    pub phdrs: &'a [libc::Elf64_Phdr],
    /// TLS module id (0: no TLS).
    pub tls_modid: usize,
    /// The calling thread's TLS block of the object (0 if none or not allocated yet).
    pub tls_data: usize,
}

/// Calls `f` for each object of the system loader (under its list lock) until `f`
/// returns true.
pub(crate) fn for_each_system_object(mut f: impl FnMut(&SystemObject<'_>) -> bool) {
    type Visit<'f> = &'f mut dyn FnMut(&SystemObject<'_>) -> bool;
    unsafe extern "C" fn callback(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: dl_iterate_phdr passes a valid info, and `data` is our `Visit`.
        let (info, f) = unsafe { (&*info, &mut *(data as *mut Visit<'_>)) };
        let phdrs = if info.dlpi_phdr.is_null() {
            &[][..]
        } else {
            // SAFETY: dlpi_phdr has dlpi_phnum entries.
            unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) }
        };
        let name = if info.dlpi_name.is_null() {
            c""
        } else {
            // SAFETY: a NUL-terminated path owned by the system loader.
            unsafe { CStr::from_ptr(info.dlpi_name) }
        };
        let o = SystemObject {
            addr: info.dlpi_addr as usize,
            name,
            phdrs,
            tls_modid: info.dlpi_tls_modid,
            tls_data: info.dlpi_tls_data as usize,
        };
        c_int::from(f(&o))
    }
    let mut visit: Visit<'_> = &mut f;
    // SAFETY: the callback only reads the info it is given and calls `f`, which lives
    // for the whole call.
    unsafe { libc::dl_iterate_phdr(Some(callback), &mut visit as *mut Visit<'_> as *mut c_void) };
}

/// Custom images mapped and unmapped so far (added to glibc's `dlpi_adds`/`dlpi_subs`,
/// which caches of loaded objects such as libgcc's compare).
pub(crate) static ADDS: AtomicU64 = AtomicU64::new(0);
pub(crate) static SUBS: AtomicU64 = AtomicU64::new(0);

type Callback = unsafe extern "C" fn(*mut libc::dl_phdr_info, usize, *mut c_void) -> c_int;

/// `dl_iterate_phdr` for custom-loaded code: the system's objects (as glibc reports
/// them), then the libraries of the caller's namespace in load order, each with its
/// load bias, path, program headers and TLS module id (and the calling thread's TLS
/// block, if it has one already), so that unwinders and backtrace code inside a
/// namespace find its code. Other namespaces' libraries are not reported (a namespace
/// sees its own libraries and the system's). Stops at the first non-zero callback
/// result and returns it.
unsafe extern "C" fn iterate_impl(
    callback: Option<Callback>,
    data: *mut c_void,
    caller: usize,
) -> c_int {
    crate::boundary::guarded(
        "dl_iterate_phdr",
        0,
        |m| eprintln!("elf-loader: {m}"),
        || {
            let ns = crate::namespace::image_containing(caller).and_then(|i| i.ns.upgrade());
            let Some(ns) = ns else {
                // SAFETY: not custom-loaded code: the system's answer, arguments unchanged.
                return unsafe { libc::dl_iterate_phdr(callback, data) };
            };
            let Some(cb) = callback else {
                return 0;
            };
            let adds = ADDS.load(Ordering::Acquire);
            let subs = SUBS.load(Ordering::Acquire);
            // The system's objects, passed on with the counters adjusted.
            struct Forward {
                cb: Callback,
                data: *mut c_void,
                adds: u64,
                subs: u64,
            }
            unsafe extern "C" fn forward(
                info: *mut libc::dl_phdr_info,
                size: usize,
                fwd: *mut c_void,
            ) -> c_int {
                // SAFETY: dl_iterate_phdr passes a valid info, and `fwd` is our Forward.
                let (info, fwd) = unsafe { (&*info, &*(fwd as *const Forward)) };
                let mut copy = libc::dl_phdr_info { ..*info };
                copy.dlpi_adds = copy.dlpi_adds.wrapping_add(fwd.adds);
                copy.dlpi_subs = copy.dlpi_subs.wrapping_add(fwd.subs);
                // SAFETY: the caller's callback with its data, and an info valid for the call.
                unsafe {
                    (fwd.cb)(
                        &mut copy,
                        size.min(std::mem::size_of::<libc::dl_phdr_info>()),
                        fwd.data,
                    )
                }
            }
            let mut fwd = Forward {
                cb,
                data,
                adds,
                subs,
            };
            // SAFETY: `forward` only reads the info and calls the caller's callback.
            let rc = unsafe {
                libc::dl_iterate_phdr(Some(forward), &mut fwd as *mut Forward as *mut c_void)
            };
            if rc != 0 {
                return rc;
            }
            let (sys_adds, sys_subs) = system_counters();
            let images = ns.state.lock().images.clone();
            for img in images {
                let mut info = libc::dl_phdr_info {
                    dlpi_addr: img.map.bias as libc::Elf64_Addr,
                    dlpi_name: img.c_path.as_ptr(),
                    dlpi_phdr: img.raw_phdrs.as_ptr(),
                    dlpi_phnum: img.raw_phdrs.len() as libc::Elf64_Half,
                    dlpi_adds: sys_adds.wrapping_add(adds),
                    dlpi_subs: sys_subs.wrapping_add(subs),
                    dlpi_tls_modid: img.tls_module.unwrap_or(0) as usize,
                    dlpi_tls_data: img
                        .tls_module
                        .and_then(crate::tls::allocated_block)
                        .unwrap_or(0) as *mut c_void,
                };
                // SAFETY: the caller's callback with its data; `info` (and the image it points
                // into, held by `images`) lives for the call.
                let rc = unsafe { cb(&mut info, std::mem::size_of::<libc::dl_phdr_info>(), data) };
                if rc != 0 {
                    return rc;
                }
            }
            0
        },
    )
}

/// glibc's own `dlpi_adds` and `dlpi_subs`.
fn system_counters() -> (u64, u64) {
    let mut counters = (0, 0);
    // SAFETY: plain call; the callback reads the first entry and stops.
    unsafe extern "C" fn first(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        out: *mut c_void,
    ) -> c_int {
        // SAFETY: valid info and our tuple.
        let (info, out) = unsafe { (&*info, &mut *(out as *mut (u64, u64))) };
        *out = (info.dlpi_adds, info.dlpi_subs);
        1
    }
    // SAFETY: the callback only reads the info and writes our tuple.
    unsafe { libc::dl_iterate_phdr(Some(first), &mut counters as *mut (u64, u64) as *mut c_void) };
    counters
}

// The entry custom code calls: passes the caller's return address as a third argument
// (a tail jump, so the stack is exactly as the caller left it).
std::arch::global_asm!(
    ".text",
    ".p2align 4",
    ".globl elf_loader_dl_iterate_phdr",
    ".hidden elf_loader_dl_iterate_phdr",
    "elf_loader_dl_iterate_phdr:",
    "mov rdx, [rsp]",
    "jmp {imp}",
    imp = sym iterate_impl,
);

extern "C" {
    fn elf_loader_dl_iterate_phdr();
}

/// Address of the loader's `dl_iterate_phdr` entry for custom code.
pub(crate) fn iterate_entry() -> usize {
    elf_loader_dl_iterate_phdr as *const () as usize
}
