//! The C API functions the backend calls, looked up through a caller-supplied
//! [`Resolver`] in one copy of libpython, with the names of that copy's version.

use super::Error;
use std::ffi::{c_char, c_int, c_long, c_void, CStr};

/// An opaque `PyObject`.
#[repr(C)]
pub struct PyObject {
    _private: [u8; 0],
}
/// An opaque `PyThreadState`.
#[repr(C)]
pub struct PyThreadState {
    _private: [u8; 0],
}
/// An opaque `PyInterpreterState`.
#[repr(C)]
pub struct PyInterpreterState {
    _private: [u8; 0],
}
/// An opaque `_PyInterpreterFrame`.
#[repr(C)]
pub struct InterpreterFrame {
    _private: [u8; 0],
}

/// `_PyFrameEvalFunction` (3.11-3.13).
pub type EvalFrameFn =
    unsafe extern "C" fn(*mut PyThreadState, *mut InterpreterFrame, c_int) -> *mut PyObject;
/// `freefunc`.
pub type FreeFunc = unsafe extern "C" fn(*mut c_void);

/// Finds a symbol's address in one copy of libpython: `dlsym` on the process's copy, or
/// `CustomLibrary::sym` on a copy elf-loader loaded.
pub trait Resolver {
    /// The address of `name`, if that copy exports it.
    fn resolve(&self, name: &CStr) -> Option<usize>;
}

impl<F: Fn(&CStr) -> Option<usize>> Resolver for F {
    fn resolve(&self, name: &CStr) -> Option<usize> {
        self(name)
    }
}

/// A resolver over a `dlopen` handle (or `RTLD_DEFAULT`): `dlsym`. Made by
/// [`Dlsym::process`], [`crate::cpython::Libpython::resolver`] or the `unsafe`
/// [`Dlsym::from_handle`]: `dlsym` on a handle that is not one is undefined behaviour, so
/// safe code cannot make one from any pointer:
///
/// ```compile_fail,E0423
/// let _ = frame_hooks::cpython::Dlsym(0x1234 as *mut std::ffi::c_void);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Dlsym(*mut c_void);

// SAFETY: a dlopen handle may be used from any thread.
unsafe impl Send for Dlsym {}
// SAFETY: as above.
unsafe impl Sync for Dlsym {}

impl Dlsym {
    /// The process's global scope (`RTLD_DEFAULT`): the libpython the process linked or
    /// loaded with `RTLD_GLOBAL`.
    pub fn process() -> Dlsym {
        Dlsym(libc::RTLD_DEFAULT)
    }

    /// A resolver over `handle`.
    ///
    /// # Safety
    /// `handle` is a handle `dlopen` returned (or `RTLD_DEFAULT`/`RTLD_NEXT`), and the
    /// library stays loaded while the resolver (or a copy) is used.
    pub unsafe fn from_handle(handle: *mut c_void) -> Dlsym {
        Dlsym(handle)
    }

    /// The handle this resolver looks symbols up in.
    pub fn handle(&self) -> *mut c_void {
        self.0
    }
}

impl Resolver for Dlsym {
    fn resolve(&self, name: &CStr) -> Option<usize> {
        // SAFETY: dlsym with a valid handle (or RTLD_DEFAULT) and a NUL-terminated name.
        let p = unsafe { libc::dlsym(self.0, name.as_ptr()) };
        (!p.is_null()).then_some(p as usize)
    }
}

/// The resolved functions and objects of one libpython copy, as a [`Python`] holds
/// them ([`Python::api`]): made only by the crate, from a resolver the caller of the
/// `unsafe` [`Python::new`] vouched for, and shared read-only, since its safe methods
/// call these functions. Safe code can neither make one nor change one:
///
/// ```compile_fail,E0624
/// use frame_hooks::cpython::Api;
/// let bogus = |_: &std::ffi::CStr| Some(0x1000usize);
/// let _ = Api::resolve(&bogus); // would read and call whatever is at 0x1000
/// ```
///
/// [`Python`]: crate::cpython::Python
/// [`Python::new`]: crate::cpython::Python::new
/// [`Python::api`]: crate::cpython::Python::api
#[allow(missing_docs)]
#[non_exhaustive]
pub struct Api {
    pub version: u32,
    pub is_initialized: unsafe extern "C" fn() -> c_int,
    pub is_finalizing: unsafe extern "C" fn() -> c_int,
    pub gil_ensure: unsafe extern "C" fn() -> c_int,
    pub gil_release: unsafe extern "C" fn(c_int),
    pub interp_get: unsafe extern "C" fn() -> *mut PyInterpreterState,
    pub get_eval: unsafe extern "C" fn(*mut PyInterpreterState) -> EvalFrameFn,
    pub set_eval: unsafe extern "C" fn(*mut PyInterpreterState, EvalFrameFn),
    pub eval_default: EvalFrameFn,
    pub request_extra_index: unsafe extern "C" fn(Option<FreeFunc>) -> isize,
    pub code_get_extra: unsafe extern "C" fn(*mut PyObject, isize, *mut *mut c_void) -> c_int,
    pub code_set_extra: unsafe extern "C" fn(*mut PyObject, isize, *mut c_void) -> c_int,
    pub err_set_string: unsafe extern "C" fn(*mut PyObject, *const c_char),
    pub err_occurred: unsafe extern "C" fn() -> *mut PyObject,
    pub err_fetch: unsafe extern "C" fn(*mut *mut PyObject, *mut *mut PyObject, *mut *mut PyObject),
    pub err_restore: unsafe extern "C" fn(*mut PyObject, *mut PyObject, *mut PyObject),
    pub err_clear: unsafe extern "C" fn(),
    pub err_print: unsafe extern "C" fn(),
    pub exc_runtime_error: *mut PyObject,
    pub getattr: unsafe extern "C" fn(*mut PyObject, *const c_char) -> *mut PyObject,
    pub unicode_as_utf8: unsafe extern "C" fn(*mut PyObject) -> *const c_char,
    pub long_as_long: unsafe extern "C" fn(*mut PyObject) -> c_long,
    pub long_from_long: unsafe extern "C" fn(c_long) -> *mut PyObject,
    pub repr: unsafe extern "C" fn(*mut PyObject) -> *mut PyObject,
    pub incref: unsafe extern "C" fn(*mut PyObject),
    pub decref: unsafe extern "C" fn(*mut PyObject),
    pub code_type: *mut PyObject,
    pub run_string: unsafe extern "C" fn(
        *const c_char,
        c_int,
        *mut PyObject,
        *mut PyObject,
        *mut c_void,
    ) -> *mut PyObject,
    pub run_simple: unsafe extern "C" fn(*const c_char) -> c_int,
    pub dict_new: unsafe extern "C" fn() -> *mut PyObject,
    pub dict_set_item_string:
        unsafe extern "C" fn(*mut PyObject, *const c_char, *mut PyObject) -> c_int,
    pub dict_get_item_string: unsafe extern "C" fn(*mut PyObject, *const c_char) -> *mut PyObject,
    pub dict_get_item: unsafe extern "C" fn(*mut PyObject, *mut PyObject) -> *mut PyObject,
    pub dict_set_item: unsafe extern "C" fn(*mut PyObject, *mut PyObject, *mut PyObject) -> c_int,
    pub builtins: unsafe extern "C" fn() -> *mut PyObject,
    pub call: unsafe extern "C" fn(*mut PyObject, *mut PyObject, *mut PyObject) -> *mut PyObject,
    pub tuple_new: unsafe extern "C" fn(isize) -> *mut PyObject,
    pub tuple_set_item: unsafe extern "C" fn(*mut PyObject, isize, *mut PyObject) -> c_int,
    pub tuple_get_item: unsafe extern "C" fn(*mut PyObject, isize) -> *mut PyObject,
    pub tuple_size: unsafe extern "C" fn(*mut PyObject) -> isize,
    pub import_add_module: unsafe extern "C" fn(*const c_char) -> *mut PyObject,
    pub module_get_dict: unsafe extern "C" fn(*mut PyObject) -> *mut PyObject,
    pub sys_get_object: unsafe extern "C" fn(*const c_char) -> *mut PyObject,
    pub call_method:
        unsafe extern "C" fn(*mut PyObject, *const c_char, *const c_char, ...) -> *mut PyObject,
}

// SAFETY: the table holds function pointers and addresses of immortal/static objects of
// one libpython copy; calling them is governed by the GIL, not by the table.
unsafe impl Send for Api {}
// SAFETY: as above.
unsafe impl Sync for Api {}

/// Looks a symbol up and casts it to the function type `T` (or reads a data address).
fn sym<T: Copy>(r: &dyn Resolver, name: &CStr) -> Result<T, Error> {
    let addr = r.resolve(name).ok_or_else(|| Error::MissingSymbol {
        name: name.to_string_lossy().into_owned(),
    })?;
    assert_eq!(std::mem::size_of::<T>(), std::mem::size_of::<usize>());
    // SAFETY: T is a pointer-sized function-pointer type whose C signature is the one the
    // named symbol has in CPython 3.11-3.13 (see the table above); the address is non-null.
    Ok(unsafe { std::mem::transmute_copy::<usize, T>(&addr) })
}

/// The version a copy without `Py_Version` reports through `Py_GetVersion()` (every
/// CPython 3 has it, and it only formats constants, so it may be called before the
/// interpreter is initialised): `3.10.13`.
///
/// # Safety
/// As for [`Api::resolve`].
unsafe fn reported_version(r: &dyn Resolver) -> Option<String> {
    let get: unsafe extern "C" fn() -> *const c_char = sym(r, c"Py_GetVersion").ok()?;
    // SAFETY: the resolver gives libpython's `const char *Py_GetVersion(void)` (the
    // caller's contract), which returns a NUL-terminated static string.
    let text = unsafe { CStr::from_ptr(get()) }.to_string_lossy();
    let version = text.split_whitespace().next()?;
    let numeric = version.starts_with(|c: char| c.is_ascii_digit()) && version.contains('.');
    numeric.then(|| version.to_string())
}

impl Api {
    /// Resolves everything for the copy behind `r`; the version is read from the copy's
    /// exported `Py_Version` first and gates the names used.
    ///
    /// # Safety
    /// As for [`crate::cpython::Python::new`]: every address `r` returns is that of the
    /// named symbol in one loaded libpython.
    pub(crate) unsafe fn resolve(r: &dyn Resolver) -> Result<Api, Error> {
        let Some(version_addr) = r.resolve(c"Py_Version") else {
            // CPython 3.10 and older: named by the version they report.
            // SAFETY: the caller's contract on `r`.
            return Err(match unsafe { reported_version(r) } {
                Some(version) => Error::UnsupportedVersion { version },
                None => Error::MissingSymbol {
                    name: "Py_Version (exported from CPython 3.11 on)".into(),
                },
            });
        };
        // SAFETY: `Py_Version` is a `const unsigned long` in the library's data (the
        // caller's contract on `r`).
        let version = unsafe { *(version_addr as *const std::ffi::c_ulong) } as u32;
        let minor = (version >> 16) & 0xff;
        if version >> 24 != 3 || !(11..=13).contains(&minor) {
            return Err(Error::UnsupportedVersion {
                version: super::version_string(version),
            });
        }
        let (req, get, set) = if minor == 11 {
            (
                c"_PyEval_RequestCodeExtraIndex",
                c"_PyCode_GetExtra",
                c"_PyCode_SetExtra",
            )
        } else {
            (
                c"PyUnstable_Eval_RequestCodeExtraIndex",
                c"PyUnstable_Code_GetExtra",
                c"PyUnstable_Code_SetExtra",
            )
        };
        let finalizing = if minor >= 13 {
            c"Py_IsFinalizing"
        } else {
            c"_Py_IsFinalizing"
        };
        let exc_addr: usize = sym(r, c"PyExc_RuntimeError")?;
        Ok(Api {
            version,
            is_initialized: sym(r, c"Py_IsInitialized")?,
            is_finalizing: sym(r, finalizing)?,
            gil_ensure: sym(r, c"PyGILState_Ensure")?,
            gil_release: sym(r, c"PyGILState_Release")?,
            interp_get: sym(r, c"PyInterpreterState_Get")?,
            get_eval: sym(r, c"_PyInterpreterState_GetEvalFrameFunc")?,
            set_eval: sym(r, c"_PyInterpreterState_SetEvalFrameFunc")?,
            eval_default: sym(r, c"_PyEval_EvalFrameDefault")?,
            request_extra_index: sym(r, req)?,
            code_get_extra: sym(r, get)?,
            code_set_extra: sym(r, set)?,
            err_set_string: sym(r, c"PyErr_SetString")?,
            err_occurred: sym(r, c"PyErr_Occurred")?,
            err_fetch: sym(r, c"PyErr_Fetch")?,
            err_restore: sym(r, c"PyErr_Restore")?,
            err_clear: sym(r, c"PyErr_Clear")?,
            err_print: sym(r, c"PyErr_Print")?,
            // SAFETY: `PyExc_RuntimeError` is a `PyObject *` variable of the library.
            exc_runtime_error: unsafe { *(exc_addr as *const *mut PyObject) },
            getattr: sym(r, c"PyObject_GetAttrString")?,
            unicode_as_utf8: sym(r, c"PyUnicode_AsUTF8")?,
            long_as_long: sym(r, c"PyLong_AsLong")?,
            long_from_long: sym(r, c"PyLong_FromLong")?,
            repr: sym(r, c"PyObject_Repr")?,
            incref: sym(r, c"Py_IncRef")?,
            decref: sym(r, c"Py_DecRef")?,
            code_type: sym::<usize>(r, c"PyCode_Type")? as *mut PyObject,
            run_string: sym(r, c"PyRun_StringFlags")?,
            run_simple: sym(r, c"PyRun_SimpleString")?,
            dict_new: sym(r, c"PyDict_New")?,
            dict_set_item_string: sym(r, c"PyDict_SetItemString")?,
            dict_get_item_string: sym(r, c"PyDict_GetItemString")?,
            dict_get_item: sym(r, c"PyDict_GetItem")?,
            dict_set_item: sym(r, c"PyDict_SetItem")?,
            builtins: sym(r, c"PyEval_GetBuiltins")?,
            call: sym(r, c"PyObject_Call")?,
            tuple_new: sym(r, c"PyTuple_New")?,
            tuple_set_item: sym(r, c"PyTuple_SetItem")?,
            tuple_get_item: sym(r, c"PyTuple_GetItem")?,
            tuple_size: sym(r, c"PyTuple_Size")?,
            import_add_module: sym(r, c"PyImport_AddModule")?,
            module_get_dict: sym(r, c"PyModule_GetDict")?,
            sys_get_object: sym(r, c"PySys_GetObject")?,
            call_method: sym(r, c"PyObject_CallMethod")?,
        })
    }

    /// The minor version (11, 12 or 13).
    pub fn minor(&self) -> u32 {
        (self.version >> 16) & 0xff
    }

    /// Holds this copy's GIL while `f` runs (`PyGILState_Ensure`/`Release`, reentrant).
    /// Panics (rather than touching freed state) if the interpreter is not initialised.
    pub fn with_gil<R>(&self, f: impl FnOnce() -> R) -> R {
        // SAFETY: Py_IsInitialized may be called at any time.
        let initialized = unsafe { (self.is_initialized)() } != 0;
        assert!(
            initialized,
            "the interpreter of this libpython is not initialised (finalised?)"
        );
        struct Release<'a>(&'a Api, c_int);
        impl Drop for Release<'_> {
            fn drop(&mut self) {
                // SAFETY: pairs the Ensure below on the same thread.
                unsafe { (self.0.gil_release)(self.1) }
            }
        }
        // SAFETY: PyGILState_Ensure may be called from any thread of an initialised
        // interpreter; it nests.
        let _g = Release(self, unsafe { (self.gil_ensure)() });
        f()
    }

    /// The `str` of a Python string object as Rust text (`None` for non-strings; the
    /// exception is cleared).
    ///
    /// # Safety
    /// The GIL is held and `s` is a live object of this copy.
    pub unsafe fn str_of(&self, s: *mut PyObject) -> Option<String> {
        // SAFETY: per the caller's guarantee.
        let p = unsafe { (self.unicode_as_utf8)(s) };
        if p.is_null() {
            // SAFETY: GIL held.
            unsafe { (self.err_clear)() };
            return None;
        }
        // SAFETY: PyUnicode_AsUTF8 returns a NUL-terminated buffer owned by `s`.
        Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }

    /// Attribute `name` of `obj` converted by `convert` (which gets a new reference it
    /// must not release), with any pending exception kept intact and errors cleared.
    ///
    /// # Safety
    /// The GIL is held and `obj` is a live object of this copy.
    unsafe fn attr_with<R>(
        &self,
        obj: *mut PyObject,
        name: &CStr,
        convert: impl FnOnce(*mut PyObject) -> Option<R>,
    ) -> Option<R> {
        // SAFETY: per the caller's guarantee; the pending exception is saved and restored.
        unsafe {
            let saved = self.save_error();
            let a = (self.getattr)(obj, name.as_ptr());
            let out = if a.is_null() {
                None
            } else {
                let v = convert(a);
                (self.decref)(a);
                v
            };
            (self.err_clear)();
            self.restore_error(saved);
            out
        }
    }

    /// Attribute `name` of `obj` as text, with any pending exception kept intact.
    ///
    /// # Safety
    /// The GIL is held and `obj` is a live object of this copy.
    pub unsafe fn attr_string(&self, obj: *mut PyObject, name: &CStr) -> Option<String> {
        // SAFETY: per the caller's guarantee; `a` is a live attribute value.
        unsafe { self.attr_with(obj, name, |a| self.str_of(a)) }
    }

    /// Attribute `name` of `obj` as an integer, with any pending exception kept intact.
    ///
    /// # Safety
    /// The GIL is held and `obj` is a live object of this copy.
    pub unsafe fn attr_long(&self, obj: *mut PyObject, name: &CStr) -> Option<i64> {
        // SAFETY: per the caller's guarantee; `a` is a live attribute value.
        unsafe {
            self.attr_with(obj, name, |a| {
                let v = (self.long_as_long)(a);
                if v == -1 && !(self.err_occurred)().is_null() {
                    None
                } else {
                    #[allow(clippy::useless_conversion)] // c_long is i32 on some targets
                    Some(i64::from(v))
                }
            })
        }
    }

    /// `repr(obj)` as text, with any pending exception kept intact.
    ///
    /// # Safety
    /// The GIL is held and `obj` is a live object of this copy.
    pub unsafe fn repr_of(&self, obj: *mut PyObject) -> String {
        // SAFETY: per the caller's guarantee; the pending exception is saved and restored.
        unsafe {
            let saved = self.save_error();
            let r = (self.repr)(obj);
            let out = if r.is_null() {
                (self.err_clear)();
                "<repr failed>".to_string()
            } else {
                let s = self.str_of(r).unwrap_or_default();
                (self.decref)(r);
                s
            };
            self.restore_error(saved);
            out
        }
    }

    /// Flushes Python's `sys.stdout` and `sys.stderr` (so text printed from Rust comes
    /// after what Python printed), keeping any pending exception.
    ///
    /// # Safety
    /// The GIL is held.
    pub unsafe fn flush_std_streams(&self) {
        // SAFETY: GIL held; PySys_GetObject returns borrowed references (or NULL).
        unsafe {
            let saved = self.save_error();
            for name in [c"stdout", c"stderr"] {
                let stream = (self.sys_get_object)(name.as_ptr());
                if stream.is_null() {
                    continue;
                }
                let r = (self.call_method)(stream, c"flush".as_ptr(), std::ptr::null::<c_char>());
                if r.is_null() {
                    (self.err_clear)();
                } else {
                    (self.decref)(r);
                }
            }
            self.restore_error(saved);
        }
    }

    /// Takes the pending exception out (to run code with a clean error state).
    ///
    /// # Safety
    /// The GIL is held.
    pub unsafe fn save_error(&self) -> [*mut PyObject; 3] {
        let mut e = [std::ptr::null_mut(); 3];
        let [a, b, c] = &mut e;
        // SAFETY: GIL held; the three out-pointers are valid.
        unsafe { (self.err_fetch)(a, b, c) };
        e
    }

    /// Puts an exception taken by [`save_error`](Self::save_error) back.
    ///
    /// # Safety
    /// The GIL is held; `e` came from `save_error` and is restored once.
    pub unsafe fn restore_error(&self, e: [*mut PyObject; 3]) {
        // SAFETY: per the caller's guarantee (PyErr_Restore steals the references).
        unsafe { (self.err_restore)(e[0], e[1], e[2]) }
    }
}
