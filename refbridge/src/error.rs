//! Errors of the bridge's API: each names the offending object, type or size.

use thiserror::Error;

/// What went wrong in a call to the bridge.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BridgeError {
    /// The call needs the bridge entered on this thread (`Bridge::enter`).
    #[error("the bridge is not entered on this thread (call Bridge::enter first)")]
    NotEntered,
    /// Another thread has entered the bridge.
    #[error("the bridge is entered on another thread; a bridge serves one thread at a time")]
    EnteredElsewhere,
    /// A managed object's type has no native type registered.
    #[error("managed type {type_name} has no native type: register it with Bridge::register_managed_type")]
    UnregisteredType {
        /// Name of the managed type.
        type_name: String,
    },
    /// A managed type was registered twice.
    #[error("managed type {type_name} is already registered")]
    TypeAlreadyRegistered {
        /// Name of the managed type.
        type_name: String,
    },
    /// A native type is unusable.
    #[error("native type {type_name}: {reason}")]
    BadNativeType {
        /// `tp_name` of the type.
        type_name: String,
        /// What is wrong.
        reason: String,
    },
    /// `to_managed` of an object whose count reached 0 (it is being deallocated).
    #[error("native object {addr:#x} of type {type_name} is being deallocated (count {count}); it cannot be handed to managed code")]
    BeingDeallocated {
        /// The object.
        addr: usize,
        /// Its type.
        type_name: String,
        /// Its count.
        count: isize,
    },
    /// A stub whose managed object already died was used.
    #[error("stub {addr:#x} (handle {handle}) is used after its managed object died")]
    DeadStub {
        /// The (tagged) stub pointer.
        addr: usize,
        /// Its handle index.
        handle: u32,
    },
    /// A tagged pointer that is not a stub of this bridge.
    #[error("{addr:#x} is tagged as a stub but is not a stub of this bridge")]
    NotAStub {
        /// The pointer.
        addr: usize,
    },
    /// A null pointer was passed.
    #[error("null object pointer passed to {what}")]
    Null {
        /// The refusing function.
        what: &'static str,
    },
    /// A function acting on the bridge entered on the calling thread was called where
    /// none is (`Bridge::enter`, `rb_init`).
    #[error("{what}: no refbridge is entered on this thread (Bridge::enter or rb_init)")]
    NoneEntered {
        /// The refusing function (CPython's name).
        what: &'static str,
    },
    /// A NULL type was passed.
    #[error("{what}: NULL type")]
    NullType {
        /// The refusing function (CPython's name).
        what: &'static str,
    },
    /// A type cannot be used for this call (not ready, the wrong GC flag) or cannot be
    /// made ready (no name, a size too small, a GC type without `tp_traverse`).
    #[error("{what}: type {type_name} {reason}")]
    InvalidType {
        /// The refusing function (CPython's name).
        what: &'static str,
        /// `tp_name` of the type.
        type_name: String,
        /// What is wrong.
        reason: String,
    },
    /// A GC entry point (`PyObject_GC_Track`, `_UnTrack`, `_Del`) was given a NULL
    /// object.
    #[error("{what}: NULL object")]
    NullObject {
        /// The refusing function (CPython's name).
        what: &'static str,
    },
    /// A GC entry point was given a stub (a managed object's handle).
    #[error("{what}: {addr:#x} is a handle of a managed object, not a native GC object")]
    StubNotAllowed {
        /// The refusing function (CPython's name).
        what: &'static str,
        /// The tagged pointer.
        addr: usize,
    },
    /// A GC entry point was given an object whose type is not a GC type.
    #[error(
        "{what}: object {addr:#x} of type {type_name} is not of a GC type (Py_TPFLAGS_HAVE_GC)"
    )]
    NotGcObject {
        /// The refusing function (CPython's name).
        what: &'static str,
        /// The object.
        addr: usize,
        /// Its type.
        type_name: String,
    },
    /// A GC entry point was given an object another bridge (or none) allocated: its
    /// list and counts are not the entered bridge's, so it is left alone.
    #[error("{what}: object {addr:#x} of type {type_name} was allocated by another bridge than the one entered on this thread (left alone)")]
    OtherBridge {
        /// The refusing function (CPython's name).
        what: &'static str,
        /// The object.
        addr: usize,
        /// Its type.
        type_name: String,
    },
    /// The size of a variable-size object overflows (`PyObject_GC_NewVar`).
    #[error("{what}: bad item count {count}")]
    BadItemCount {
        /// The refusing function (CPython's name).
        what: &'static str,
        /// The item count asked for.
        count: isize,
    },
    /// A mutator of another heap than the bridge's was passed.
    #[error(
        "{what}: the mutator belongs to heap {mutator_heap}, the bridge to heap {bridge_heap}"
    )]
    WrongHeap {
        /// The refusing method.
        what: &'static str,
        /// The mutator's heap (serial number).
        mutator_heap: u64,
        /// The bridge's heap (serial number).
        bridge_heap: u64,
    },
    /// Use of an object or block the bridge freed: found by the debug mode's
    /// quarantine, or by the mark a free leaves in the block's header while its memory
    /// is not reused (a second `PyObject_GC_Del` or `PyMem_Free`). Left alone.
    #[error("{what}: {addr:#x} was already freed (left alone)")]
    Freed {
        /// The refusing function (CPython's name, or the method).
        what: &'static str,
        /// The object or block.
        addr: usize,
    },
    /// A pointer that is not a live block of the bridge's allocators (`PyMem_Malloc`,
    /// `PyObject_Malloc`, `PyObject_New`, `PyObject_GC_New`), found by its header:
    /// memory of `malloc` or another allocator, or a block freed already whose memory
    /// the system allocator has taken back. Left alone (CPython's `PyMem_Free` would
    /// pass a `malloc`'d block on to `free()`; refbridge cannot tell one from any other
    /// pointer, and `free()` of those crashes).
    #[error("{what}: {addr:#x} is not a live block of PyMem_Malloc / PyObject_Malloc / PyObject_New / PyObject_GC_New (memory from malloc goes to free(); or it was freed already); left alone")]
    NotABlock {
        /// The refusing function (CPython's name, or the method).
        what: &'static str,
        /// The pointer.
        addr: usize,
    },
    /// A native allocation would take the bridge over its hard cap, after collections.
    #[error("native memory cap exceeded: {requested} bytes requested with {in_use} in use, cap {cap} bytes ({collections} collections tried)")]
    MemoryCap {
        /// Bytes asked for.
        requested: usize,
        /// Bytes in use.
        in_use: usize,
        /// The cap.
        cap: usize,
        /// Collections run before giving up.
        collections: u32,
    },
    /// The system allocator failed.
    #[error("out of memory allocating {size} bytes")]
    OutOfMemory {
        /// Bytes asked for.
        size: usize,
    },
    /// A configuration value is out of range.
    #[error("invalid bridge configuration: {0}")]
    BadConfig(String),
    /// The managed heap refused an operation.
    #[error("managed heap: {0}")]
    Heap(#[from] gc_core::GcError),
}

impl BridgeError {
    /// The CPython exception type the C API reports this error as (the pending error's
    /// text is `"<exception>: <message>"`): `MemoryError` for memory, `RuntimeError`
    /// for the managed heap and the thread discipline, `SystemError` for misuse.
    pub fn exception(&self) -> &'static str {
        match self {
            BridgeError::MemoryCap { .. } | BridgeError::OutOfMemory { .. } => "MemoryError",
            BridgeError::Heap(_)
            | BridgeError::NotEntered
            | BridgeError::EnteredElsewhere
            | BridgeError::WrongHeap { .. } => "RuntimeError",
            _ => "SystemError",
        }
    }
}
