//! The system loader's list of loaded objects (`dl_iterate_phdr`) behind a safe
//! iterator (used to find C runtime libraries, TLS module ids and blocks), and the
//! counters of custom images mapped and unmapped. The `dl_iterate_phdr` that
//! custom-loaded code calls is in `iterate_phdr.rs`.

use std::ffi::{c_int, c_void, CStr};
use std::sync::atomic::AtomicU64;

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

/// The address of `name` in the process's global scope (the main program, its
/// dependencies, and libraries opened with `RTLD_GLOBAL`), through libloading's handle on
/// the main program (`dlopen(NULL)`), or `None`. For the system loader's and the C
/// runtime's own entry points the loader calls (`__tls_get_addr`, `__register_frame`,
/// ...); each caller looks its name up once.
pub(crate) fn global_symbol(name: &CStr) -> Option<usize> {
    let this = libloading::os::unix::Library::this();
    // SAFETY: the symbol is only taken as an address (`*mut c_void`), not called or
    // read here; the libraries of the global scope at start-up are never unloaded.
    let sym = unsafe { this.get::<*mut c_void>(name.to_bytes_with_nul()) }.ok()?;
    let p: *mut c_void = *sym;
    (!p.is_null()).then_some(p as usize)
}
