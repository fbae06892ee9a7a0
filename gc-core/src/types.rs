//! Types of heap objects.
//!
//! A type is itself an internal heap object (of the built-in meta type `DataType`),
//! permanently alive, so that the seed's validity check
//! `jl_gc_internal_obj_base_ptr(jl_typeof(obj)) != NULL` holds for every object. Its
//! payload is a [`TypeDesc`]. Three kinds of object types exist:
//!
//! - **foreign** types (the seed's `jl_new_foreign_type`): a mark function that queues
//!   the object's children and returns how many of them are young, an optional sweep
//!   function, `haspointers` and `large`;
//! - **layout** types: the byte offsets of the reference slots, for the common case,
//!   so that Rust users need no mark function;
//! - the meta type of types.

use crate::heap_id::HeapId;
use crate::marker::Marker;
use crate::object::ObjRef;
use std::ffi::{c_void, CString};

/// A mark function written in Rust: queue every child with [`Marker::queue`] (or an
/// array of them with [`Marker::queue_array`]) and return how many `queue` calls
/// returned `true` (young children). The marker counts those itself too, so a wrong
/// count cannot lose a remembered-set entry.
pub type MarkFn = fn(&mut Marker<'_>, ObjRef) -> usize;
/// A sweep function written in Rust: called once, during the sweep phase, for an object
/// whose sweep was scheduled and which was found dead. It must not touch the heap.
pub type SweepFn = fn(ObjRef);
/// A mark function with the seed's C signature (`jl_markfunc_t`).
pub type CMarkFn = unsafe extern "C" fn(ptls: *mut c_void, obj: *mut c_void) -> usize;
/// A sweep function with the seed's C signature (`jl_sweepfunc_t`).
pub type CSweepFn = unsafe extern "C" fn(obj: *mut c_void);

/// How the collector finds an object's children.
#[derive(Clone, Copy)]
pub enum MarkProc {
    /// The object holds no references.
    None,
    /// A Rust mark function.
    Rust(MarkFn),
    /// A C mark function, called with the collecting thread's `ptls` (made by the
    /// `unsafe` [`MarkProc::c`]: safe code cannot store a C function the collector calls).
    #[non_exhaustive]
    C(CMarkFn),
}

impl MarkProc {
    /// A C mark function (the seed's `jl_markfunc_t`).
    ///
    /// ```compile_fail,E0603
    /// extern "C" fn mark(_: *mut std::ffi::c_void, _: *mut std::ffi::c_void) -> usize { 0 }
    /// let _ = gc_core::MarkProc::C(mark);
    /// ```
    ///
    /// # Safety
    /// For every object of the types it is given to, `f(ptls, obj)` may be called on any
    /// collector thread, concurrently, with that thread's `ptls` and a live object of the
    /// type; calling it so must be sound (it reads only the object's payload and queues
    /// children through the ptls), and it must not unwind.
    pub unsafe fn c(f: CMarkFn) -> MarkProc {
        MarkProc::C(f)
    }
}

/// What runs when a scheduled object dies.
#[derive(Clone, Copy)]
pub enum SweepProc {
    /// Nothing (the type has no sweep function).
    None,
    /// A Rust sweep function.
    Rust(SweepFn),
    /// A C sweep function (made by the `unsafe` [`SweepProc::c`]: safe code cannot store
    /// a C function the collector calls).
    #[non_exhaustive]
    C(CSweepFn),
}

impl SweepProc {
    /// A C sweep function (the seed's `jl_sweepfunc_t`).
    ///
    /// ```compile_fail,E0603
    /// let _ = gc_core::SweepProc::C(libc_free);
    /// extern "C" fn libc_free(_: *mut std::ffi::c_void) {}
    /// ```
    ///
    /// # Safety
    /// `f(obj)` may be called once for each dead object of the types it is given to whose
    /// sweep was scheduled, during the sweep, before the memory is reused; calling it so
    /// must be sound (it must not free the object, touch the heap or unwind).
    pub unsafe fn c(f: CSweepFn) -> SweepProc {
        SweepProc::C(f)
    }
}

/// The kind of a type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TypeKind {
    /// The meta type of all types.
    DataType,
    /// A foreign type with its own mark (and sweep) function.
    Foreign,
    /// A type described by the offsets of its reference slots.
    Layout,
    /// The built-in type of weak-reference objects ([`crate::Heap::weak_ref_type`]).
    WeakRef,
}

/// Describes a foreign type for [`crate::Heap::new_foreign_type`].
#[derive(Clone, Copy)]
pub struct ForeignTypeSpec<'a> {
    /// Type name (for errors, statistics and debugging).
    pub name: &'a str,
    /// How to find the children.
    pub mark: MarkProc,
    /// What to run when a scheduled object dies.
    pub sweep: SweepProc,
    /// Whether objects may contain references (if not, the mark function is never called).
    pub has_pointers: bool,
    /// Whether objects are external (big) objects: `true` for sizes above
    /// `max_internal_obj_size()`, `false` for sizes up to it.
    pub large: bool,
}

/// The payload of a type object.
#[repr(C)]
pub struct TypeDesc {
    pub(crate) magic: u64,
    pub(crate) heap_id: HeapId,
    pub(crate) kind: TypeKind,
    pub(crate) has_pointers: bool,
    pub(crate) large: bool,
    /// Allocation fast-path bound: sizes `1..=max_small` go to the pools (0 for large
    /// types and the meta type, which always take the checked slow path).
    pub(crate) max_small: usize,
    /// Smallest allowed instance size (layout types: the layout's size).
    pub(crate) min_size: usize,
    pub(crate) mark: MarkProc,
    pub(crate) sweep: SweepProc,
    pub(crate) name: *mut std::ffi::c_char,
    /// Layout types: byte offsets of the reference slots (owned, from `Box<[u32]>`).
    pub(crate) offsets: *mut u32,
    pub(crate) noffsets: usize,
}

/// Value of `TypeDesc::magic`.
pub(crate) const TYPE_MAGIC: u64 = 0x5459_5045_4445_5343; // "TYPEDESC"

impl TypeDesc {
    pub(crate) fn new(heap_id: HeapId, kind: TypeKind, name: &str) -> TypeDesc {
        let name = CString::new(name.replace('\0', "?")).expect("NULs were replaced");
        TypeDesc {
            magic: TYPE_MAGIC,
            heap_id,
            kind,
            has_pointers: false,
            large: false,
            max_small: 0,
            min_size: 0,
            mark: MarkProc::None,
            sweep: SweepProc::None,
            name: name.into_raw(),
            offsets: std::ptr::null_mut(),
            noffsets: 0,
        }
    }

    /// The reference offsets of a layout type.
    pub(crate) fn offsets(&self) -> &[u32] {
        if self.offsets.is_null() {
            &[]
        } else {
            // SAFETY: offsets/noffsets come from a leaked Box<[u32]> owned by this type.
            unsafe { std::slice::from_raw_parts(self.offsets, self.noffsets) }
        }
    }

    pub(crate) fn name(&self) -> &str {
        // SAFETY: `name` is the CString created in `new`, alive until `free_owned`.
        unsafe { std::ffi::CStr::from_ptr(self.name) }
            .to_str()
            .unwrap_or("<non-utf8>")
    }

    /// Frees what the descriptor owns (name and offsets); called when the heap drops.
    ///
    /// # Safety
    /// Called once, when the type is no longer used.
    pub(crate) unsafe fn free_owned(&mut self) {
        if !self.name.is_null() {
            // SAFETY: created by CString::into_raw in `new`.
            drop(unsafe { CString::from_raw(self.name) });
            self.name = std::ptr::null_mut();
        }
        if !self.offsets.is_null() {
            // SAFETY: created from a Box<[u32]> of length noffsets.
            drop(unsafe {
                Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                    self.offsets,
                    self.noffsets,
                ))
            });
            self.offsets = std::ptr::null_mut();
        }
    }
}

/// A type of a heap (an object of the meta type). Copyable; it names its heap, so a
/// type of a dropped heap is never mistaken for a type of a later one (heap ids are
/// never reused).
///
/// The accessors ([`TypeRef::name`], [`TypeRef::kind`], ...) read the type object: they
/// panic, with a message saying so, for a type whose heap was dropped (the object's
/// memory belongs to no heap then, or to another one). Allocating with such a type is an
/// error ([`crate::GcError::NotAType`]), as is allocating with another heap's type.
/// Checking costs the allocation path one comparison of the type's heap id with the
/// mutator's (which it made before too, then by reading the type object); the
/// accessors, which are not on hot paths, take a shared lock of the live-heap registry.
#[derive(Copy, Clone, PartialEq, Eq, Hash)]
pub struct TypeRef {
    pub(crate) obj: ObjRef,
    pub(crate) heap: HeapId,
}

impl TypeRef {
    /// The type object `obj` of heap `heap`.
    pub(crate) fn new(obj: ObjRef, heap: HeapId) -> TypeRef {
        TypeRef { obj, heap }
    }

    /// The type object itself.
    pub fn as_obj(self) -> ObjRef {
        self.obj
    }

    /// The heap the type belongs to.
    pub fn heap_id(self) -> HeapId {
        self.heap
    }

    /// The descriptor, for code that holds the type's heap (a mutator, the heap, the
    /// collector) and has checked that the type is that heap's.
    pub(crate) fn desc<'a>(self) -> &'a TypeDesc {
        // SAFETY: a TypeRef is only created for type objects, which stay alive (they are
        // permanent roots) as long as the heap, and the caller holds the heap.
        unsafe { &*(self.obj.as_ptr() as *const TypeDesc) }
    }

    /// Runs `f` on the descriptor while the type's heap is registered as live (its
    /// drop waits for `f`); panics if the heap was dropped.
    #[track_caller]
    fn with_desc<R>(self, f: impl FnOnce(&TypeDesc) -> R) -> R {
        match crate::heap_id::with_live(self.heap, || f(self.desc())) {
            Some(r) => r,
            None => panic!(
                "TypeRef {:#x} used after its heap ({}) was dropped",
                self.obj.addr(),
                self.heap
            ),
        }
    }

    /// The type's name.
    ///
    /// # Panics
    /// If the type's heap was dropped.
    #[track_caller]
    pub fn name(self) -> String {
        self.with_desc(|d| d.name().to_string())
    }

    /// The type's kind.
    ///
    /// # Panics
    /// If the type's heap was dropped.
    #[track_caller]
    pub fn kind(self) -> TypeKind {
        self.with_desc(|d| d.kind)
    }

    /// Whether instances may hold references.
    ///
    /// # Panics
    /// If the type's heap was dropped.
    #[track_caller]
    pub fn has_pointers(self) -> bool {
        self.with_desc(|d| d.has_pointers)
    }

    /// Whether instances are external (big) objects.
    ///
    /// # Panics
    /// If the type's heap was dropped.
    #[track_caller]
    pub fn is_large(self) -> bool {
        self.with_desc(|d| d.large)
    }

    /// Byte offsets of the reference slots of a layout type (empty for other kinds).
    ///
    /// # Panics
    /// If the type's heap was dropped.
    #[track_caller]
    pub fn ref_offsets(self) -> Vec<u32> {
        self.with_desc(|d| d.offsets().to_vec())
    }
}

impl std::fmt::Debug for TypeRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match crate::heap_id::with_live(self.heap, || self.desc().name().to_string()) {
            Some(name) => write!(f, "TypeRef({name}@{:#x})", self.obj.addr()),
            None => write!(
                f,
                "TypeRef(<type of dropped heap {}>@{:#x})",
                self.heap,
                self.obj.addr()
            ),
        }
    }
}

impl SweepProc {
    /// Whether there is a sweep function.
    pub fn is_some(&self) -> bool {
        !matches!(self, SweepProc::None)
    }
}

impl SweepProc {
    /// Runs the sweep function on `obj`.
    pub(crate) fn run(&self, obj: ObjRef) {
        match self {
            SweepProc::None => {}
            SweepProc::Rust(f) => f(obj),
            // SAFETY: a C sweep function (`SweepProc::c`'s contract), given its dead object
            // before the memory is reused.
            SweepProc::C(f) => unsafe { f(obj.as_ptr().cast()) },
        }
    }
}

impl TypeKind {
    /// Whether objects of this kind may only be made by the heap itself.
    pub(crate) fn is_internal(self) -> bool {
        matches!(self, TypeKind::DataType | TypeKind::WeakRef)
    }
}
