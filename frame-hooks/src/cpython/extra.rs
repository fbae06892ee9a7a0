//! Typed per-code data in CPython's code extra (`_PyEval_RequestCodeExtraIndex`,
//! `_PyCode_GetExtra`, `_PyCode_SetExtra`; `PyUnstable_*` from 3.12).
//!
//! Values are `Box<T>`s; the index is registered with a free function monomorphised for
//! `T`, so CPython drops a value when it is replaced and when its code object is
//! deallocated. The free function accepts NULL (CPython calls it for every index of a
//! code object whose extra array exists, set or not: gh-122491), and it is plain code of
//! this binary, so it outlives any libpython copy it is registered with as long as the
//! binary is not unloaded. [`CodeExtra::get`] reads `co_extra` at the checked offset
//! directly: a load, a compare and an index.

use super::api::Api;
use super::hook::CodeRef;
use super::layout::word;
use super::{Error, Python};
use std::ffi::c_void;
use std::marker::PhantomData;

/// A code-extra index holding values of type `T`, for one libpython copy (one index per
/// interpreter, shared by all threads).
pub struct CodeExtra<T> {
    api: &'static Api,
    index: isize,
    co_extra: usize,
    _marker: PhantomData<fn(T) -> T>,
}

impl<T> Clone for CodeExtra<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for CodeExtra<T> {}

unsafe extern "C" fn free_extra<T>(p: *mut c_void) {
    if p.is_null() {
        return;
    }
    // SAFETY: non-null values of this index are Box<T>s made by `CodeExtra::<T>::set`.
    let r = std::panic::catch_unwind(|| drop(unsafe { Box::from_raw(p.cast::<T>()) }));
    if let Err(payload) = r {
        let panic = super::panic_message(&*payload);
        tracing::error!(
            panic,
            "a code extra's Drop panicked inside CPython's free function"
        );
    }
}

impl<T: Send + Sync + 'static> CodeExtra<T> {
    /// Asks the copy for a new index (takes the GIL). CPython gives at most 254 per
    /// interpreter, this crate's layout check uses one: the rest is
    /// [`Error::ExtraIndexExhausted`].
    pub fn request(python: &Python) -> Result<CodeExtra<T>, Error> {
        let api = python.api();
        let index = python.with_gil(|| {
            // SAFETY: GIL held; free_extra::<T> matches the values this index stores.
            let i = unsafe { (api.request_extra_index)(Some(free_extra::<T>)) };
            if i < 0 {
                // SAFETY: GIL held.
                unsafe { (api.err_clear)() };
            }
            i
        });
        if index < 0 {
            return Err(Error::ExtraIndexExhausted {
                version: super::version_string(api.version),
            });
        }
        Ok(CodeExtra {
            api,
            index,
            co_extra: python.layout().co_extra,
            _marker: PhantomData,
        })
    }

    /// The index CPython gave.
    pub fn index(&self) -> isize {
        self.index
    }

    /// Refuses a code object of another libpython copy (its extra array belongs to that
    /// copy's indices).
    #[inline(always)]
    fn check_copy(&self, code: &CodeRef<'_>) {
        // The same handle's table (one compare), else the same copy's evaluator.
        assert!(
            std::ptr::eq(self.api, code.api())
                || self.api.eval_default as usize == code.api().eval_default as usize,
            "code extra index {} used with a code object of another libpython copy",
            self.index
        );
    }

    /// The value stored for `code`, read straight from `co_extra`.
    #[inline]
    pub fn get<'c>(&self, code: CodeRef<'c>) -> Option<&'c T> {
        self.check_copy(&code);
        // A non-null value of our index is a Box<T> freed only by a replace (`set`,
        // unsafe: no `get` reference may be alive) or with the code object (which `'c`
        // outlives).
        // SAFETY: CodeRef is a live code object of this copy whose co_extra offset was
        // checked; co_extra is NULL or {size, extras[size]}; see above for the value.
        unsafe {
            let ce = word(code.as_ptr() as *const c_void, self.co_extra) as *const isize;
            if ce.is_null() || *ce <= self.index {
                return None;
            }
            (*ce.add(1 + self.index as usize) as *const T).as_ref()
        }
    }

    /// The value through the copy's own `_PyCode_GetExtra` (what `get` reads directly).
    pub fn get_via_api<'c>(&self, code: CodeRef<'c>) -> Option<&'c T> {
        self.check_copy(&code);
        let mut out: *mut c_void = std::ptr::null_mut();
        // SAFETY: GIL held (CodeRef's invariant); a valid out-pointer.
        let rc = unsafe { (self.api.code_get_extra)(code.as_ptr(), self.index, &mut out) };
        if rc != 0 {
            // SAFETY: GIL held.
            unsafe { (self.api.err_clear)() };
            return None;
        }
        // SAFETY: as in `get`.
        unsafe { (out as *const T).as_ref() }
    }

    /// The value for `code`, or `init()` stored now (never replaces a value).
    pub fn get_or_init<'c>(&self, code: CodeRef<'c>, init: impl FnOnce() -> T) -> &'c T {
        if let Some(v) = self.get(code) {
            return v;
        }
        let value = init();
        // `init` may have run Python code that set a value meanwhile.
        if let Some(v) = self.get(code) {
            return v;
        }
        // SAFETY: no value is stored, so nothing is replaced and no reference can dangle.
        unsafe { self.set(code, value) };
        self.get(code).expect("the value just stored")
    }

    /// Stores `value` for `code`; CPython frees the value it replaces with `Drop`.
    ///
    /// # Safety
    /// No reference returned by [`get`](Self::get) for this code object is alive (the
    /// replaced value is dropped now). The GIL is held.
    pub unsafe fn set(&self, code: CodeRef<'_>, value: T) {
        self.check_copy(&code);
        let p = Box::into_raw(Box::new(value)).cast::<c_void>();
        // SAFETY: per the caller's guarantee; `code` is a code object of this copy.
        let rc = unsafe { (self.api.code_set_extra)(code.as_ptr(), self.index, p) };
        if rc != 0 {
            // SAFETY: CPython did not take the value (allocation failure): free it here.
            unsafe {
                (self.api.err_clear)();
                free_extra::<T>(p);
            }
        }
    }

    /// Clears the value for `code` (dropping it).
    ///
    /// # Safety
    /// As for [`set`](Self::set).
    pub unsafe fn clear(&self, code: CodeRef<'_>) {
        self.check_copy(&code);
        // SAFETY: per the caller's guarantee.
        let rc =
            unsafe { (self.api.code_set_extra)(code.as_ptr(), self.index, std::ptr::null_mut()) };
        if rc != 0 {
            // SAFETY: GIL held.
            unsafe { (self.api.err_clear)() };
        }
    }
}
