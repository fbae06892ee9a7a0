//! `elf-loader-capi`: the C ABI of the `elf-loader` crate (`elf-loader/include/elf_loader.h`),
//! a thin layer over elf-loader's public Rust API in the workspace's one C convention
//! (`ffi-support`).
//!
//! Handles (`elf_loader_namespace`, `elf_loader_library`) live in a registry that checks
//! each pointer it is given, so a NULL, stale, doubly deleted or wrong-kind handle gives
//! `ELF_LOADER_ERR_ARG` with a message instead of undefined behaviour. Every function
//! returns a status code (`ELF_LOADER_OK`/`ELF_LOADER_ERR_*`, aliases of the shared
//! `RT_*` codes) or NULL, and leaves a message for `elf_loader_last_error()` (per
//! thread) on failure; every entry runs through the shared panic guard, so a panic
//! becomes `ELF_LOADER_ERR_PANIC` (or NULL) with a message naming it.
//!
//! This crate is an rlib (Rust programs with C parts link it); `artifact/` builds it as
//! `libelf_loader.so`. The header is checked against this file by `tests/it/header.rs`.

#![cfg_attr(not(test), warn(unused_crate_dependencies))]
#![allow(non_camel_case_types)]

use elf_loader::{CustomLibrary, Namespace, SymbolProvider, SystemLibrary, TlsIndex};
use ffi_support::{fail, guard_with, Handle, HandleError, HandleRegistry, Status};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::Arc;

/// Success (`RT_OK`).
pub const ELF_LOADER_OK: c_int = Status::Ok.code();
/// A NULL, unknown or already deleted handle, or an invalid string (`RT_ERR_ARG`).
pub const ELF_LOADER_ERR_ARG: c_int = Status::Arg.code();
/// Loading failed (malformed file, missing dependency, undefined symbol, ...)
/// (`RT_ERR_LOAD`).
pub const ELF_LOADER_ERR_LOAD: c_int = Status::Load.code();
/// The call is not allowed in the library's current state (e.g. load twice)
/// (`RT_ERR_STATE`).
pub const ELF_LOADER_ERR_STATE: c_int = Status::State.code();
/// The symbol was not found (`RT_ERR_NOT_FOUND`).
pub const ELF_LOADER_ERR_NOT_FOUND: c_int = Status::NotFound.code();
/// A panic inside the loader was caught at the boundary (the message names it). The
/// handles involved may be left half-changed: delete them (`RT_ERR_PANIC`).
pub const ELF_LOADER_ERR_PANIC: c_int = Status::Panic.code();

/// The live namespace and library handles.
static HANDLES: HandleRegistry = HandleRegistry::new();

/// A namespace handle (opaque to C).
pub struct elf_loader_namespace {
    ns: Namespace,
}

impl Handle for elf_loader_namespace {
    const KIND: &'static str = "namespace";
}

/// A custom library handle (opaque to C).
pub struct elf_loader_library {
    lib: Arc<CustomLibrary>,
}

impl Handle for elf_loader_library {
    const KIND: &'static str = "library";
}

/// `tls_index` as returned by `elf_loader_library_tls_sym`.
#[repr(C)]
pub struct elf_loader_tls_index {
    /// Module id.
    pub module: u64,
    /// Offset in the module's block.
    pub offset: u64,
}

/// Runs the body of the C entry `name` through the shared panic guard: a panic becomes
/// `on_panic` (`ELF_LOADER_ERR_PANIC` or NULL) and `ELF_LOADER_ERR_PANIC` with a message
/// naming it for `elf_loader_last_error()`, also logged (as the loader logs its events).
fn guard<T>(name: &str, on_panic: T, body: impl FnOnce() -> T) -> T {
    guard_with(
        name,
        on_panic,
        |msg| tracing::error!(%msg, "panic at a C entry of elf-loader"),
        body,
    )
}

/// Records the failure `status` with `msg` and returns NULL (for the entries that
/// return a pointer).
fn fail_null<T>(status: Status, msg: &str) -> *mut T {
    ffi_support::set_error(status, msg);
    std::ptr::null_mut()
}

/// The message of an invalid handle of kind `T` passed to `entry`: "`entry`: invalid
/// `kind` handle: `why`" (`why` names NULL, unknown or deleted, or "a namespace handle
/// where a library handle is expected").
fn bad_handle<T: Handle>(entry: &str, e: &HandleError) -> String {
    format!("{entry}: invalid {} handle: {e}", T::KIND)
}

/// Hands a library made with the Rust API (search libraries of any
/// [`SymbolProvider`], a [`Namespace`] of the host's) to C code as a handle, to be
/// released with `elf_loader_library_delete`.
pub fn library_handle(lib: CustomLibrary) -> *mut elf_loader_library {
    HANDLES.register(elf_loader_library { lib: Arc::new(lib) })
}

/// Removes the handle `p` from the registry (its object is dropped once no call holds
/// it): `ELF_LOADER_OK`, or `ELF_LOADER_ERR_ARG` with a message for a NULL, unknown,
/// deleted or wrong-kind handle.
fn delete_handle<T: Handle>(p: *mut T, entry: &str) -> c_int {
    match HANDLES.remove(p) {
        Ok(_) => ELF_LOADER_OK,
        Err(e) => fail(e.status(), &bad_handle::<T>(entry, &e)),
    }
}

/// Reads a C string argument, or records an error (`ELF_LOADER_ERR_ARG`).
///
/// # Safety
/// `s` must be NULL or a NUL-terminated string.
unsafe fn arg_str<'a>(s: *const c_char, what: &str) -> Option<&'a str> {
    if s.is_null() {
        ffi_support::set_error(Status::Arg, &format!("{what} is NULL"));
        return None;
    }
    // SAFETY: caller's contract.
    match unsafe { CStr::from_ptr(s) }.to_str() {
        Ok(v) => Some(v),
        Err(_) => {
            ffi_support::set_error(Status::Arg, &format!("{what} is not UTF-8"));
            None
        }
    }
}

/// The library behind `lib`, or `None` with a message naming `what` (`ELF_LOADER_ERR_ARG`).
fn lib_ref(lib: *const elf_loader_library, what: &str) -> Option<Arc<elf_loader_library>> {
    match HANDLES.get(lib) {
        Ok(l) => Some(l),
        Err(e) => {
            ffi_support::set_error(e.status(), &bad_handle::<elf_loader_library>(what, &e));
            None
        }
    }
}

/// The message of the last failure on this thread ("" if none). Valid until the next
/// failure on this thread.
#[no_mangle]
pub extern "C" fn elf_loader_last_error() -> *const c_char {
    ffi_support::last_error_ptr()
}

/// A new, empty namespace. Returns NULL on failure.
///
/// # Safety
/// `name` must be NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn elf_loader_namespace_new(
    name: *const c_char,
) -> *mut elf_loader_namespace {
    guard("elf_loader_namespace_new", std::ptr::null_mut(), || {
        // SAFETY: caller's contract.
        let Some(name) = (unsafe { arg_str(name, "namespace name") }) else {
            return std::ptr::null_mut();
        };
        HANDLES.register(elf_loader_namespace {
            ns: Namespace::new(name),
        })
    })
}

/// Releases a namespace handle; its libraries are unloaded (fini, unmap) once no
/// library handle of it remains either.
///
/// # Safety
/// `ns` must be NULL or a handle from `elf_loader_namespace_new` (checked).
#[no_mangle]
pub unsafe extern "C" fn elf_loader_namespace_delete(ns: *mut elf_loader_namespace) -> c_int {
    guard("elf_loader_namespace_delete", ELF_LOADER_ERR_PANIC, || {
        delete_handle(ns, "elf_loader_namespace_delete")
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
    const ENTRY: &str = "elf_loader_namespace_load";
    guard(ENTRY, ELF_LOADER_ERR_PANIC, || {
        let ns = match HANDLES.get(ns) {
            Ok(ns) => ns,
            Err(e) => return fail(e.status(), &bad_handle::<elf_loader_namespace>(ENTRY, &e)),
        };
        if out.is_null() {
            return fail(Status::Arg, "elf_loader_namespace_load: out is NULL");
        }
        // SAFETY: caller's contract.
        let Some(path) = (unsafe { arg_str(path, "path") }) else {
            return ELF_LOADER_ERR_ARG;
        };
        // SAFETY: the caller's contract: the library's initialisers are safe to run.
        match unsafe { ns.ns.load(path) } {
            Ok(lib) => {
                let h = library_handle(lib);
                // SAFETY: checked non-NULL; caller's contract says writable.
                unsafe { *out = h };
                ELF_LOADER_OK
            }
            Err(e) => fail(Status::Load, &e.to_string()),
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
    guard("elf_loader_library_create", std::ptr::null_mut(), || {
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
    guard(
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
                Err(e) => fail(Status::State, &e.to_string()),
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
    guard(
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
                Err(e) => fail(Status::State, &e.to_string()),
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
    guard("elf_loader_library_load", ELF_LOADER_ERR_PANIC, || {
        let Some(l) = lib_ref(lib, "library") else {
            return ELF_LOADER_ERR_ARG;
        };
        // SAFETY: the caller's contract: the library's initialisers are safe to run.
        match unsafe { l.lib.load() } {
            Ok(()) => ELF_LOADER_OK,
            Err(e @ elf_loader::Error::Usage(_)) => fail(Status::State, &e.to_string()),
            Err(e) => fail(Status::Load, &e.to_string()),
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
    guard("elf_loader_library_sym", std::ptr::null_mut(), || {
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
                let msg = if !l.lib.is_loaded() {
                    format!(
                        "{path}: not loaded yet (elf_loader_library_load first): no symbol {name}"
                    )
                } else if l.lib.tls_sym(name).is_some() {
                    format!("{path}: {name} is a thread-local variable: its address is per thread (elf_loader_library_tls_sym)")
                } else {
                    format!("{path}: symbol {name} not found")
                };
                fail_null(Status::NotFound, &msg)
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
    guard("elf_loader_library_tls_sym", ELF_LOADER_ERR_PANIC, || {
        let Some(l) = lib_ref(lib, "library") else {
            return ELF_LOADER_ERR_ARG;
        };
        // SAFETY: caller's contract.
        let Some(name) = (unsafe { arg_str(name, "symbol name") }) else {
            return ELF_LOADER_ERR_ARG;
        };
        if out.is_null() {
            return fail(Status::Arg, "elf_loader_library_tls_sym: out is NULL");
        }
        match l.lib.tls_sym(name) {
            Some(TlsIndex { module, offset }) => {
                // SAFETY: checked non-NULL, caller's contract says writable.
                unsafe { *out = elf_loader_tls_index { module, offset } };
                ELF_LOADER_OK
            }
            None => fail(
                Status::NotFound,
                &format!("{}: TLS symbol {name} not found", l.lib.path().display()),
            ),
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
    guard("elf_loader_tls_get_addr", std::ptr::null_mut(), || {
        if ti.is_null() {
            return fail_null(Status::Arg, "elf_loader_tls_get_addr: ti is NULL");
        }
        // SAFETY: checked non-NULL; caller's contract says readable.
        let elf_loader_tls_index { module, offset } = unsafe { std::ptr::read(ti) };
        // SAFETY: the caller's contract: an index `elf_loader_library_tls_sym` gave, so a
        // module of ours (checked) or one the system loader has loaded.
        match unsafe { TlsIndex { module, offset }.address_in_thread() } {
            Some(a) => a.as_ptr().cast(),
            None => fail_null(
                Status::NotFound,
                &format!(
                    "elf_loader_tls_get_addr: module {module:#x} is not loaded, or offset \
                     {offset:#x} is outside its TLS block"
                ),
            ),
        }
    })
}

/// Releases a library handle (its namespace unloads once no handle remains).
///
/// # Safety
/// `lib` must be NULL or a handle from this API (checked).
#[no_mangle]
pub unsafe extern "C" fn elf_loader_library_delete(lib: *mut elf_loader_library) -> c_int {
    guard("elf_loader_library_delete", ELF_LOADER_ERR_PANIC, || {
        delete_handle(lib, "elf_loader_library_delete")
    })
}

/// Number of TLS blocks currently allocated for custom-loaded modules.
#[no_mangle]
pub extern "C" fn elf_loader_tls_live_blocks() -> usize {
    guard("elf_loader_tls_live_blocks", 0, elf_loader::tls_live_blocks)
}
