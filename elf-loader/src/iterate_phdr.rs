//! The `dl_iterate_phdr` that custom-loaded code calls: the system's objects, then the
//! libraries of the caller's namespace, so that unwinders and backtrace code inside a
//! namespace find its code.

use crate::phdr::{ADDS, SUBS};
use std::ffi::{c_int, c_void};
use std::sync::atomic::Ordering;

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
            let ns = crate::namespace::namespace_containing(caller).map(|(_, ns)| ns);
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
