//! The memory layouts native code sees, with CPython 3.11's names and field types
//! (`include/refbridge_python.h` declares the same structs; `capi/tests/it/header_drift.rs`
//! checks sizes, offsets and constants against this file).
//!
//! # Stub tagging
//! A pointer to a native stub of a managed object has bit 63 set ([`STUB_TAG`]); native
//! objects' pointers never do (user-space addresses on x86_64 Linux are below 2^47). So
//! "is this a stub" is one test on the pointer (`(intptr_t)op < 0`), without touching
//! memory, and the header macros untag (`op & ~STUB_TAG`) before dereferencing. A tagged
//! pointer that native code dereferences without the macros faults at once instead of
//! corrupting memory. This is GraalPy's scheme (its `HANDLE_BASE`).

use std::ffi::{c_char, c_int, c_ulong, c_void};

/// `Py_ssize_t`.
pub type PySsizeT = isize;

/// The count a stub starts with and the part of a mirrored native object's count that
/// stands for all managed references (GraalPy's `MANAGED_REFCNT`). Larger than 1 because
/// some extensions special-case small counts (e.g. "count 1: I own the only reference").
pub const MANAGED_REFCNT: PySsizeT = 10;

/// The count of immortal objects (GraalPy's and CPython 3.12's `0xFFFFFFFF`). Their
/// handle-table entries are strong for ever and they are never freed; the fast paths do
/// not special-case them (balanced increfs and decrefs move the count around this value,
/// far from 0 and from `MANAGED_REFCNT`); [`is_immortal_count`] tests `>= 2^31`.
pub const IMMORTAL_REFCNT: PySsizeT = 0xFFFF_FFFF;

/// Counts at or above this are immortal.
pub const IMMORTAL_MIN: PySsizeT = 1 << 31;

/// Bit 63 of a pointer marks a stub.
pub const STUB_TAG: usize = 1 << 63;

/// `Py_TPFLAGS_READY` (CPython's value).
pub const PY_TPFLAGS_READY: c_ulong = 1 << 12;
/// `Py_TPFLAGS_HAVE_GC` (CPython's value).
pub const PY_TPFLAGS_HAVE_GC: c_ulong = 1 << 14;
/// `Py_TPFLAGS_DEFAULT` (CPython 3.11's value: `Py_TPFLAGS_HAVE_VERSION_TAG`).
pub const PY_TPFLAGS_DEFAULT: c_ulong = 1 << 18;

/// `PyObject`: the header of every object.
#[repr(C)]
#[derive(Debug)]
pub struct PyObject {
    /// Reference count.
    pub ob_refcnt: PySsizeT,
    /// Type.
    pub ob_type: *mut PyTypeObject,
}

/// `PyVarObject`: the header of variable-size objects.
#[repr(C)]
#[derive(Debug)]
pub struct PyVarObject {
    /// The object header.
    pub ob_base: PyObject,
    /// Number of items.
    pub ob_size: PySsizeT,
}

/// `visitproc`.
pub type VisitProc = Option<unsafe extern "C" fn(*mut PyObject, *mut c_void) -> c_int>;
/// `traverseproc`.
pub type TraverseProc =
    Option<unsafe extern "C" fn(*mut PyObject, VisitProc, *mut c_void) -> c_int>;
/// `inquiry`.
pub type Inquiry = Option<unsafe extern "C" fn(*mut PyObject) -> c_int>;
/// `destructor`.
pub type Destructor = Option<unsafe extern "C" fn(*mut PyObject)>;
/// `freefunc`.
pub type FreeFunc = Option<unsafe extern "C" fn(*mut c_void)>;

/// `PyTypeObject`: the memory-management subset of CPython's type object, with its
/// field names and types (C code initialises it with designated initializers, as
/// CPython extension types do), followed by fields of the bridge's own.
#[repr(C)]
#[derive(Debug)]
pub struct PyTypeObject {
    /// `PyObject_VAR_HEAD`.
    pub ob_base: PyVarObject,
    /// `tp_name`.
    pub tp_name: *const c_char,
    /// `tp_basicsize`.
    pub tp_basicsize: PySsizeT,
    /// `tp_itemsize`.
    pub tp_itemsize: PySsizeT,
    /// `tp_dealloc`.
    pub tp_dealloc: Destructor,
    /// `tp_flags`.
    pub tp_flags: c_ulong,
    /// `tp_traverse`.
    pub tp_traverse: TraverseProc,
    /// `tp_clear`.
    pub tp_clear: Inquiry,
    /// `tp_free`.
    pub tp_free: FreeFunc,
    /// Reserved for the bridge (zero in static initialisers).
    pub rb_reserved: [*mut c_void; 4],
}

impl PyTypeObject {
    /// A zeroed type object with a name, basic size and flags; `PyType_Ready` fills in
    /// the defaults. For types defined from Rust.
    pub const fn new(name: &'static std::ffi::CStr, basicsize: usize, flags: c_ulong) -> Self {
        PyTypeObject {
            ob_base: PyVarObject {
                ob_base: PyObject {
                    ob_refcnt: IMMORTAL_REFCNT,
                    ob_type: std::ptr::null_mut(),
                },
                ob_size: 0,
            },
            tp_name: name.as_ptr(),
            tp_basicsize: basicsize as PySsizeT,
            tp_itemsize: 0,
            tp_dealloc: None,
            tp_flags: flags,
            tp_traverse: None,
            tp_clear: None,
            tp_free: None,
            rb_reserved: [std::ptr::null_mut(); 4],
        }
    }

    /// The type's name (`tp_name`), or `"<unnamed>"` when it is NULL.
    ///
    /// Unsafe because `tp_name` is a public raw pointer: safe code can set it to any
    /// address, which reading it as a string would then trust.
    ///
    /// ```compile_fail,E0133
    /// use refbridge::PyTypeObject;
    /// let mut t = PyTypeObject::new(c"Pair", 24, 0);
    /// t.tp_name = 0x10 as *const std::ffi::c_char; // safe code, any address
    /// let _ = t.name(); // error: call to unsafe function requires an unsafe block
    /// ```
    ///
    /// # Safety
    /// `tp_name` is NULL or points to a NUL-terminated string that lives across the call.
    pub unsafe fn name(&self) -> String {
        if self.tp_name.is_null() {
            return "<unnamed>".into();
        }
        // SAFETY: tp_name is a NUL-terminated string (caller).
        unsafe { std::ffi::CStr::from_ptr(self.tp_name) }
            .to_string_lossy()
            .into_owned()
    }

    /// Whether instances carry a GC header (`Py_TPFLAGS_HAVE_GC`).
    pub fn is_gc(&self) -> bool {
        self.tp_flags & PY_TPFLAGS_HAVE_GC != 0
    }
}

/// `PyGC_Head`: two words before every object of a GC type. `gc_next` is 0 while the
/// object is not tracked; the low 4 bits of `gc_prev` hold flags (pointers are 16-byte
/// aligned: the bridge's own, such as "has a live mirror"). Aligned to 16 on the Rust side too, so that heads the
/// bridge makes itself (the tracked list's sentinel, the garbage list's head on the
/// stack) keep those bits free; the size stays CPython's 16 bytes.
#[repr(C, align(16))]
#[derive(Debug)]
pub struct PyGCHead {
    /// Next tracked object's head (0: not tracked).
    pub gc_next: usize,
    /// Previous tracked object's head, with flags in the low 4 bits.
    pub gc_prev: usize,
}

// The flag bits need 16-byte aligned heads; the size is CPython's.
const _: () =
    assert!(std::mem::align_of::<PyGCHead>() == 16 && std::mem::size_of::<PyGCHead>() == 16);

/// `gc_prev` flag: the object has a live managed mirror (its count includes
/// `MANAGED_REFCNT` for it).
pub const GC_MIRRORED: usize = 1;
/// `gc_prev` flag: the object is a candidate of the running cycle collection.
pub const GC_COLLECTING: usize = 2;
/// Mask of the flag bits of `gc_prev`.
pub const GC_FLAGS: usize = 15;

/// The native stub of a managed object: what native code sees behind a (tagged)
/// `PyObject *`. 24 bytes, allocated in chunks that never move; slot `i` of the chunks
/// belongs to handle-table entry `i`.
#[repr(C)]
#[derive(Debug)]
pub struct Stub {
    /// The object header: count and type.
    pub ob_base: PyObject,
    /// Index of the handle-table entry (never 0).
    pub handle: u32,
    /// Reserved.
    pub flags: u32,
}

/// Whether a `PyObject *` is a (tagged) stub pointer.
#[inline(always)]
pub fn is_stub(op: *const PyObject) -> bool {
    (op as isize) < 0
}

/// The dereferenceable address behind a possibly tagged pointer.
#[inline(always)]
pub fn untag(op: *const PyObject) -> *mut PyObject {
    (op as usize & !STUB_TAG) as *mut PyObject
}

/// Whether a count marks an immortal object.
#[inline(always)]
pub fn is_immortal_count(c: PySsizeT) -> bool {
    c >= IMMORTAL_MIN
}

/// The GC header of an object of a GC type.
///
/// # Safety
/// `op` is an untagged pointer to an object allocated by `PyObject_GC_New(Var)`.
#[inline(always)]
pub unsafe fn gc_head(op: *mut PyObject) -> *mut PyGCHead {
    (op as usize - std::mem::size_of::<PyGCHead>()) as *mut PyGCHead
}

/// The object after a GC header.
#[inline(always)]
pub fn from_gc_head(g: *mut PyGCHead) -> *mut PyObject {
    (g as usize + std::mem::size_of::<PyGCHead>()) as *mut PyObject
}
