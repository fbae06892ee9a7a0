//! The C ABI (`include/elf_loader.h`): a thin layer over the Rust API.
//!
//! Handles are opaque pointers checked against a registry of live handles, so a NULL,
//! stale or doubly deleted handle gives `ELF_LOADER_ERR_ARG` with a message instead of
//! undefined behaviour. Every function returns a status code (or NULL) and leaves a
//! message for `elf_loader_last_error()` (per thread) on failure; a panic is caught at
//! the boundary and becomes `ELF_LOADER_ERR_PANIC` (or NULL) with a message naming it.

#![allow(non_camel_case_types)]

use crate::api::{CustomLibrary, Namespace};
use crate::system::{SymbolProvider, SystemLibrary};
use crate::tls::TlsIndex;
use parking_lot::Mutex;
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::Arc;

/// Success.
pub const ELF_LOADER_OK: c_int = 0;
/// A NULL, unknown or already deleted handle, or an invalid string.
pub const ELF_LOADER_ERR_ARG: c_int = -1;
/// Loading failed (malformed file, missing dependency, undefined symbol, ...).
pub const ELF_LOADER_ERR_LOAD: c_int = -2;
/// The call is not allowed in the library's current state (e.g. load twice).
pub const ELF_LOADER_ERR_STATE: c_int = -3;
/// The symbol was not found.
pub const ELF_LOADER_ERR_NOT_FOUND: c_int = -4;
/// A panic inside the loader was caught at the boundary (the message names it). The
/// handles involved may be left half-changed: delete them.
pub const ELF_LOADER_ERR_PANIC: c_int = -5;

/// A namespace handle (opaque to C).
pub struct elf_loader_namespace {
    ns: Namespace,
}

/// A custom library handle (opaque to C).
pub struct elf_loader_library {
    lib: Arc<CustomLibrary>,
}

/// `tls_index` as returned by `elf_loader_library_tls_sym`.
#[repr(C)]
pub struct elf_loader_tls_index {
    /// Module id.
    pub module: u64,
    /// Offset in the module's block.
    pub offset: u64,
}

/// What a registered handle is: a namespace handle passed where a library handle is
/// expected (or the reverse) is refused like an unknown one.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum HandleKind {
    Namespace,
    Library,
}

impl HandleKind {
    fn name(self) -> &'static str {
        match self {
            HandleKind::Namespace => "namespace",
            HandleKind::Library => "library",
        }
    }
}

/// A type handed to C as a handle, with its kind in the registry.
trait Handle {
    const KIND: HandleKind;
}

impl Handle for elf_loader_namespace {
    const KIND: HandleKind = HandleKind::Namespace;
}

impl Handle for elf_loader_library {
    const KIND: HandleKind = HandleKind::Library;
}

/// Live handles: address -> kind.
static LIVE: Mutex<Option<HashMap<usize, HandleKind>>> = Mutex::new(None);

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_error(msg: impl Into<String>) {
    let c = CString::new(msg.into().replace('\0', " ")).unwrap_or_default();
    let _ = LAST_ERROR.try_with(|e| *e.borrow_mut() = c);
}

/// Runs the body of the C entry `name`: a panic becomes `on_panic` (`ELF_LOADER_ERR_PANIC`
/// or NULL) and a message naming it for `elf_loader_last_error()`.
fn entry<T>(name: &str, on_panic: T, f: impl FnOnce() -> T) -> T {
    crate::boundary::guarded(name, on_panic, set_error, f)
}

/// Hands a library made with the Rust API (search libraries of any
/// [`SymbolProvider`], a [`Namespace`] of the host's) to C code as a handle, to be
/// released with `elf_loader_library_delete`.
pub fn library_handle(lib: CustomLibrary) -> *mut elf_loader_library {
    register(Box::new(elf_loader_library { lib: Arc::new(lib) }))
}

fn register<T: Handle>(b: Box<T>) -> *mut T {
    let p = Box::into_raw(b);
    LIVE.lock()
        .get_or_insert_with(HashMap::new)
        .insert(p as usize, T::KIND);
    p
}

/// Why `p` is not a live handle of `T`'s kind in `live` ("NULL", "unknown or deleted",
/// or "a <kind> handle where ..."), or `None` when it is one.
fn why_not<T: Handle>(live: Option<&HashMap<usize, HandleKind>>, p: *const T) -> Option<String> {
    if p.is_null() {
        return Some("NULL".into());
    }
    match live.and_then(|s| s.get(&(p as usize))) {
        None => Some("unknown or deleted".into()),
        Some(&k) if k == T::KIND => None,
        Some(&k) => Some(format!(
            "a {} handle where a {} handle is expected",
            k.name(),
            T::KIND.name()
        )),
    }
}

/// `None` if `p` is a live handle of `T`'s kind, else the reason it is not.
fn check_handle<T: Handle>(p: *const T) -> Option<String> {
    why_not(LIVE.lock().as_ref(), p)
}

/// Removes `p` from the registry if it is a live handle of `T`'s kind (one lock, so two
/// threads deleting the same handle cannot both succeed); otherwise the reason it is not.
fn unregister<T: Handle>(p: *mut T) -> Result<(), String> {
    let mut live = LIVE.lock();
    if let Some(why) = why_not(live.as_ref(), p) {
        return Err(why);
    }
    if let Some(s) = live.as_mut() {
        s.remove(&(p as usize));
    }
    Ok(())
}

/// Unregisters and drops the handle `p` (a NULL, unknown or deleted one is
/// `ELF_LOADER_ERR_ARG` with a message).
///
/// # Safety
/// `p` is NULL or a pointer; only a registered one (a live box of `T`) is dropped.
unsafe fn delete_handle<T: Handle>(p: *mut T, entry: &str) -> c_int {
    if let Err(why) = unregister(p) {
        set_error(format!(
            "{entry}: invalid {} handle {p:p} ({why})",
            T::KIND.name()
        ));
        return ELF_LOADER_ERR_ARG;
    }
    // SAFETY: it was a registered live box of `T` (the registry records the kind); we
    // just removed it from the registry, so nobody else drops it.
    drop(unsafe { Box::from_raw(p) });
    ELF_LOADER_OK
}

/// Reads a C string argument, or records an error.
///
/// # Safety
/// `s` must be NULL or a NUL-terminated string.
unsafe fn arg_str<'a>(s: *const c_char, what: &str) -> Option<&'a str> {
    if s.is_null() {
        set_error(format!("{what} is NULL"));
        return None;
    }
    // SAFETY: caller's contract.
    match unsafe { CStr::from_ptr(s) }.to_str() {
        Ok(v) => Some(v),
        Err(_) => {
            set_error(format!("{what} is not UTF-8"));
            None
        }
    }
}

fn lib_ref<'a>(lib: *const elf_loader_library, what: &str) -> Option<&'a elf_loader_library> {
    if let Some(why) = check_handle(lib) {
        set_error(format!("{what}: invalid library handle {lib:p} ({why})"));
        return None;
    }
    // SAFETY: registered library handles are live boxes of `elf_loader_library` until
    // deleted.
    Some(unsafe { &*lib })
}

/// The message of the last failure on this thread ("" if none). Valid until the next
/// call on this thread.
#[no_mangle]
pub extern "C" fn elf_loader_last_error() -> *const c_char {
    LAST_ERROR
        .try_with(|e| e.borrow().as_ptr())
        .unwrap_or(c"".as_ptr())
}

/// A new, empty namespace. Returns NULL on failure.
///
/// # Safety
/// `name` must be NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn elf_loader_namespace_new(
    name: *const c_char,
) -> *mut elf_loader_namespace {
    entry("elf_loader_namespace_new", std::ptr::null_mut(), || {
        // SAFETY: caller's contract.
        let Some(name) = (unsafe { arg_str(name, "namespace name") }) else {
            return std::ptr::null_mut();
        };
        register(Box::new(elf_loader_namespace {
            ns: Namespace::new(name),
        }))
    })
}

/// Releases a namespace handle; its libraries are unloaded (fini, unmap) once no
/// library handle of it remains either.
///
/// # Safety
/// `ns` must be NULL or a handle from `elf_loader_namespace_new` (checked).
#[no_mangle]
pub unsafe extern "C" fn elf_loader_namespace_delete(ns: *mut elf_loader_namespace) -> c_int {
    entry("elf_loader_namespace_delete", ELF_LOADER_ERR_PANIC, || {
        // SAFETY: caller's contract (checked against the registry).
        unsafe { delete_handle(ns, "elf_loader_namespace_delete") }
    })
}

/// Loads `path` and its dependencies into `ns`; stores a new library handle in `*out`.
///
/// # Safety
/// `ns` must be a live namespace handle (checked), `path` a NUL-terminated string and
/// `out` NULL or writable. As with `dlopen`, the library's (and its dependencies')
/// init functions run: they must be safe to run in this process.
#[no_mangle]
pub unsafe extern "C" fn elf_loader_namespace_load(
    ns: *mut elf_loader_namespace,
    path: *const c_char,
    out: *mut *mut elf_loader_library,
) -> c_int {
    entry("elf_loader_namespace_load", ELF_LOADER_ERR_PANIC, || {
        if let Some(why) = check_handle(ns) {
            set_error(format!(
                "elf_loader_namespace_load: invalid namespace handle {ns:p} ({why})"
            ));
            return ELF_LOADER_ERR_ARG;
        }
        if out.is_null() {
            set_error("elf_loader_namespace_load: out is NULL");
            return ELF_LOADER_ERR_ARG;
        }
        // SAFETY: caller's contract.
        let Some(path) = (unsafe { arg_str(path, "path") }) else {
            return ELF_LOADER_ERR_ARG;
        };
        // SAFETY: checked to be a live namespace handle (a box of `elf_loader_namespace`).
        let ns = unsafe { &*ns };
        // SAFETY: the caller's contract: the library's initialisers are safe to run.
        match unsafe { ns.ns.load(path) } {
            Ok(lib) => {
                let h = library_handle(lib);
                // SAFETY: checked non-NULL; caller's contract says writable.
                unsafe { *out = h };
                ELF_LOADER_OK
            }
            Err(e) => {
                set_error(e.to_string());
                ELF_LOADER_ERR_LOAD
            }
        }
    })
}

/// A library to be loaded from `path` into a namespace of its own (the seed's
/// `CustomLibrary::create`). Returns NULL on failure.
///
/// # Safety
/// `path` must be NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn elf_loader_library_create(path: *const c_char) -> *mut elf_loader_library {
    entry("elf_loader_library_create", std::ptr::null_mut(), || {
        // SAFETY: caller's contract.
        let Some(path) = (unsafe { arg_str(path, "path") }) else {
            return std::ptr::null_mut();
        };
        library_handle(CustomLibrary::create(path))
    })
}

/// Adds another custom library as a search library of `lib` (before `load`).
///
/// # Safety
/// Both must be live library handles (checked).
#[no_mangle]
pub unsafe extern "C" fn elf_loader_library_add_search_library(
    lib: *mut elf_loader_library,
    provider: *const elf_loader_library,
) -> c_int {
    entry(
        "elf_loader_library_add_search_library",
        ELF_LOADER_ERR_PANIC,
        || {
            let (Some(l), Some(p)) = (lib_ref(lib, "library"), lib_ref(provider, "search library"))
            else {
                return ELF_LOADER_ERR_ARG;
            };
            match l
                .lib
                .add_search_library(p.lib.clone() as Arc<dyn SymbolProvider>)
            {
                Ok(()) => ELF_LOADER_OK,
                Err(e) => {
                    set_error(e.to_string());
                    ELF_LOADER_ERR_STATE
                }
            }
        },
    )
}

/// Adds a system loader handle (`dlopen` result, or NULL for `RTLD_DEFAULT`) as a search
/// library of `lib` (before `load`). The handle is not closed by the loader.
///
/// # Safety
/// `lib` must be a live library handle (checked); `handle` NULL or a live `dlopen`
/// handle that outlives `lib`.
#[no_mangle]
pub unsafe extern "C" fn elf_loader_library_add_search_system(
    lib: *mut elf_loader_library,
    handle: *mut c_void,
) -> c_int {
    entry(
        "elf_loader_library_add_search_system",
        ELF_LOADER_ERR_PANIC,
        || {
            let Some(l) = lib_ref(lib, "library") else {
                return ELF_LOADER_ERR_ARG;
            };
            let sys = if handle.is_null() {
                SystemLibrary::global()
            } else {
                // SAFETY: caller's contract: a live dlopen handle, not stolen.
                unsafe { SystemLibrary::from_handle(handle, false) }
            };
            match l.lib.add_search_library(sys) {
                Ok(()) => ELF_LOADER_OK,
                Err(e) => {
                    set_error(e.to_string());
                    ELF_LOADER_ERR_STATE
                }
            }
        },
    )
}

/// Maps, relocates and initialises `lib`.
///
/// # Safety
/// `lib` must be a live library handle (checked). As with `dlopen`, the library's (and
/// its dependencies') init functions run: they must be safe to run in this process.
#[no_mangle]
pub unsafe extern "C" fn elf_loader_library_load(lib: *mut elf_loader_library) -> c_int {
    entry("elf_loader_library_load", ELF_LOADER_ERR_PANIC, || {
        let Some(l) = lib_ref(lib, "library") else {
            return ELF_LOADER_ERR_ARG;
        };
        // SAFETY: the caller's contract: the library's initialisers are safe to run.
        match unsafe { l.lib.load() } {
            Ok(()) => ELF_LOADER_OK,
            Err(e @ crate::Error::Usage(_)) => {
                set_error(e.to_string());
                ELF_LOADER_ERR_STATE
            }
            Err(e) => {
                set_error(e.to_string());
                ELF_LOADER_ERR_LOAD
            }
        }
    })
}

/// The address of `name` (the library, then its search libraries), or NULL.
///
/// # Safety
/// `lib` must be a live library handle (checked); `name` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn elf_loader_library_sym(
    lib: *const elf_loader_library,
    name: *const c_char,
) -> *mut c_void {
    entry("elf_loader_library_sym", std::ptr::null_mut(), || {
        let Some(l) = lib_ref(lib, "library") else {
            return std::ptr::null_mut();
        };
        // SAFETY: caller's contract.
        let Some(name) = (unsafe { arg_str(name, "symbol name") }) else {
            return std::ptr::null_mut();
        };
        match l.lib.sym(name) {
            Some(a) => a as *mut c_void,
            None => {
                let path = l.lib.path().display();
                set_error(if !l.lib.is_loaded() {
                    format!(
                        "{path}: not loaded yet (elf_loader_library_load first): no symbol {name}"
                    )
                } else if l.lib.tls_sym(name).is_some() {
                    format!("{path}: {name} is a thread-local variable: its address is per thread (elf_loader_library_tls_sym)")
                } else {
                    format!("{path}: symbol {name} not found")
                });
                std::ptr::null_mut()
            }
        }
    })
}

/// The TLS index of the thread-local symbol `name`, stored in `*out`.
///
/// # Safety
/// `lib` must be a live library handle (checked); `name` a NUL-terminated string;
/// `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn elf_loader_library_tls_sym(
    lib: *const elf_loader_library,
    name: *const c_char,
    out: *mut elf_loader_tls_index,
) -> c_int {
    entry("elf_loader_library_tls_sym", ELF_LOADER_ERR_PANIC, || {
        let Some(l) = lib_ref(lib, "library") else {
            return ELF_LOADER_ERR_ARG;
        };
        // SAFETY: caller's contract.
        let Some(name) = (unsafe { arg_str(name, "symbol name") }) else {
            return ELF_LOADER_ERR_ARG;
        };
        if out.is_null() {
            set_error("elf_loader_library_tls_sym: out is NULL");
            return ELF_LOADER_ERR_ARG;
        }
        match l.lib.tls_sym(name) {
            Some(TlsIndex { module, offset }) => {
                // SAFETY: checked non-NULL, caller's contract says writable.
                unsafe { *out = elf_loader_tls_index { module, offset } };
                ELF_LOADER_OK
            }
            None => {
                set_error(format!(
                    "{}: TLS symbol {name} not found",
                    l.lib.path().display()
                ));
                ELF_LOADER_ERR_NOT_FOUND
            }
        }
    })
}

/// The calling thread's address of the thread-local variable that `ti` (from
/// `elf_loader_library_tls_sym`) names: what the library's own code reaches through
/// `__tls_get_addr` (the thread's block is allocated on its first access). NULL, with a
/// message, for NULL or for a variable of a library that is no longer loaded.
///
/// # Safety
/// `ti` must be NULL or point to a readable `elf_loader_tls_index` that
/// `elf_loader_library_tls_sym` filled in.
#[no_mangle]
pub unsafe extern "C" fn elf_loader_tls_get_addr(ti: *const elf_loader_tls_index) -> *mut c_void {
    entry("elf_loader_tls_get_addr", std::ptr::null_mut(), || {
        if ti.is_null() {
            set_error("elf_loader_tls_get_addr: ti is NULL");
            return std::ptr::null_mut();
        }
        // SAFETY: checked non-NULL; caller's contract says readable.
        let elf_loader_tls_index { module, offset } = unsafe { std::ptr::read(ti) };
        let a = crate::tls::address_in_thread(&TlsIndex { module, offset });
        if a == 0 {
            set_error(format!(
                "elf_loader_tls_get_addr: module {module:#x} is not loaded"
            ));
        }
        a as *mut c_void
    })
}

/// Releases a library handle (its namespace unloads once no handle remains).
///
/// # Safety
/// `lib` must be NULL or a handle from this API (checked).
#[no_mangle]
pub unsafe extern "C" fn elf_loader_library_delete(lib: *mut elf_loader_library) -> c_int {
    entry("elf_loader_library_delete", ELF_LOADER_ERR_PANIC, || {
        // SAFETY: caller's contract (checked against the registry).
        unsafe { delete_handle(lib, "elf_loader_library_delete") }
    })
}

/// Number of TLS blocks currently allocated for custom-loaded modules.
#[no_mangle]
pub extern "C" fn elf_loader_tls_live_blocks() -> usize {
    entry("elf_loader_tls_live_blocks", 0, || {
        crate::tls::live_blocks()
    })
}
