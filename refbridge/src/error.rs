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
    /// Use of an object the bridge freed (debug mode).
    #[error("native object {addr:#x} was already freed")]
    Freed {
        /// The object.
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
