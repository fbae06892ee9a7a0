//! Errors of the heap API. Each names the offending object, type, size or callback.

use thiserror::Error;

/// What went wrong in a call to the heap.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum GcError {
    /// A zero-byte allocation was requested.
    #[error("cannot allocate an object of size 0 (type {type_name})")]
    ZeroSize {
        /// Name of the type asked for.
        type_name: String,
    },
    /// A small foreign type was asked for an object above the pool limit.
    #[error("size {size} exceeds max_internal_obj_size() = {max} for small foreign type {type_name}; create the type with large = true")]
    TooLargeForSmallType {
        /// Requested payload size.
        size: usize,
        /// The limit.
        max: usize,
        /// Name of the type.
        type_name: String,
    },
    /// The allocation request cannot be satisfied by the system.
    #[error("out of memory allocating {size} bytes: {reason}")]
    OutOfMemory {
        /// Requested size.
        size: usize,
        /// What the system said.
        reason: String,
    },
    /// A null or foreign pointer was passed where a type of this heap was expected.
    #[error("{addr:#x} is not a type of this heap")]
    NotAType {
        /// The address passed.
        addr: usize,
    },
    /// A foreign type was declared inconsistently.
    #[error("invalid type {name}: {reason}")]
    InvalidType {
        /// Type name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// `schedule_foreign_sweepfunc` on an object whose sweep function is already scheduled.
    #[error(
        "sweep function already scheduled for object {addr:#x} (type {type_name}); it runs once"
    )]
    SweepAlreadyScheduled {
        /// The object.
        addr: usize,
        /// Its type.
        type_name: String,
    },
    /// `schedule_foreign_sweepfunc` on an object whose type has no sweep function.
    #[error("object {addr:#x} of type {type_name} has no sweep function to schedule")]
    NoSweepFunction {
        /// The object.
        addr: usize,
        /// Its type.
        type_name: String,
    },
    /// A callback was registered twice.
    #[error("{kind} callback {id} is already registered")]
    CallbackAlreadyRegistered {
        /// Callback kind (pre_gc, post_gc, ...).
        kind: &'static str,
        /// Identity of the callback (function address or id).
        id: String,
    },
    /// A callback to remove was not registered.
    #[error("{kind} callback {id} is not registered")]
    CallbackNotRegistered {
        /// Callback kind.
        kind: &'static str,
        /// Identity of the callback.
        id: String,
    },
    /// The calling thread is already attached to a heap.
    #[error("this thread is already attached to a heap")]
    AlreadyAttached,
    /// The calling thread is not attached to a heap.
    #[error("this thread is not attached to a heap (call jl_init or gc_thread_attach first)")]
    NotAttached,
    /// The call needs the thread to run managed code, but it is inside a GC-safe region.
    #[error("this thread is inside a GC-safe region and may not touch the heap")]
    InGcSafeRegion,
    /// A pointer given as an object is not an allocated object of the heap (memory of
    /// the system allocator, a static, an interior pointer, a freed cell).
    #[error("{what}: {addr:#x} is not an allocated object of this heap (another heap's, freed, interior, or not an object; an object pointer points just past its header)")]
    NotAnObject {
        /// The operation.
        what: &'static str,
        /// The address given.
        addr: usize,
    },
    /// The call is not allowed while a collection is running on this thread (for example
    /// allocating from a sweep function or callback).
    #[error("{what} is not allowed during a collection")]
    DuringCollection {
        /// The refused operation.
        what: &'static str,
    },
    /// Marking functions were called outside a collection's mark phase.
    #[error("{what} called outside the mark phase of a collection")]
    NotMarking {
        /// The function called.
        what: &'static str,
    },
    /// A task was unknown or registered twice.
    #[error("task {addr:#x}: {reason}")]
    BadTask {
        /// The task pointer.
        addr: usize,
        /// What is wrong.
        reason: &'static str,
    },
    /// The stack bounds given for a task are not a valid range.
    #[error("invalid stack bounds [{lo:#x}, {hi:#x})")]
    BadStackBounds {
        /// Low end.
        lo: usize,
        /// High end.
        hi: usize,
    },
    /// An object passed as a weak-reference object is not one.
    #[error("{addr:#x} is not a weak-reference object (make them with new_weak_object / jl_gc_new_weakref)")]
    NotAWeakRef {
        /// The object.
        addr: usize,
    },
    /// A GC-safe region's recorded stack pointer is outside the live part of the
    /// thread's stack.
    #[error("{sp:#x} is not a live address of this thread's stack [{lo:#x}, {hi:#x})")]
    BadStackPointer {
        /// The stack pointer given.
        sp: usize,
        /// The lowest live address (the caller's own stack pointer).
        lo: usize,
        /// The stack's base.
        hi: usize,
    },
    /// `enable_finalizers` without a matching `disable_finalizers` on this thread.
    #[error("finalizers are already enabled on this thread")]
    FinalizersNotDisabled,
    /// The calling thread is attached to another heap than the one asked to act.
    #[error("this thread is attached to another heap")]
    AttachedElsewhere,
    /// A configuration value is out of range.
    #[error("invalid heap configuration: {0}")]
    BadConfig(String),
}
