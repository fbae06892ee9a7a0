//! Handles handed to C: a [`HandleRegistry`] owns each object behind an `Arc` and gives
//! C its address, an opaque pointer. Every use looks the pointer up: a NULL, unknown,
//! deleted or wrong-kind handle is a [`HandleError`] (a clear `RT_ERR_ARG` for C),
//! never a dereference, and a handle deleted by one thread while another is inside a
//! call with it stays alive until that call returns (the call holds its own `Arc`).
//!
//! A stale handle is recognised as long as its address was not reused by a new handle
//! of the same kind (the registry cannot tell two lives of one address apart).

use crate::Status;
use std::any::{Any, TypeId};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, RwLock};

/// A type handed to C as a handle.
pub trait Handle: Any + Send + Sync {
    /// What C calls it in messages ("GIL", "namespace", "library").
    const KIND: &'static str;
}

/// Why a pointer is not a live handle of the expected kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandleError {
    /// NULL.
    Null {
        /// The expected kind.
        expected: &'static str,
    },
    /// Not a live handle: never registered, or deleted.
    Unknown {
        /// The expected kind.
        expected: &'static str,
        /// The pointer.
        addr: usize,
    },
    /// A live handle of another kind.
    WrongKind {
        /// The expected kind.
        expected: &'static str,
        /// The kind it is.
        found: &'static str,
        /// The pointer.
        addr: usize,
    },
}

impl HandleError {
    /// The status C gets for it: always [`Status::Arg`].
    pub fn status(&self) -> Status {
        Status::Arg
    }

    /// The message for the parameter `param` of a C function: "`param` is NULL", or
    /// "`param`: " and the reason.
    pub fn for_param(&self, param: &str) -> String {
        match self {
            HandleError::Null { .. } => format!("{param} is NULL"),
            other => format!("{param}: {other}"),
        }
    }
}

impl fmt::Display for HandleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HandleError::Null { expected } => write!(f, "the {expected} handle is NULL"),
            HandleError::Unknown { expected, addr } => write!(
                f,
                "{addr:#x} is not a live {expected} handle (unknown or already deleted)"
            ),
            HandleError::WrongKind {
                expected,
                found,
                addr,
            } => write!(
                f,
                "{addr:#x} is a {found} handle where a {expected} handle is expected"
            ),
        }
    }
}

impl std::error::Error for HandleError {}

struct Entry {
    kind: &'static str,
    type_id: TypeId,
    value: Arc<dyn Any + Send + Sync>,
}

/// The live handles of one C layer (a `static` of its `capi` crate): address -> object.
///
/// ```
/// use ffi_support::{Handle, HandleRegistry};
/// #[derive(Debug)]
/// struct Counter(u32);
/// impl Handle for Counter { const KIND: &'static str = "counter"; }
/// #[derive(Debug)]
/// struct Timer;
/// impl Handle for Timer { const KIND: &'static str = "timer"; }
///
/// static HANDLES: HandleRegistry = HandleRegistry::new();
/// let p = HANDLES.register(Counter(7)); // what C gets
/// assert_eq!(HANDLES.get(p).unwrap().0, 7);
/// let wrong = p.cast::<Timer>();
/// let err = HANDLES.get(wrong).unwrap_err(); // refused, never read
/// assert!(err.to_string().contains("is a counter handle where a timer handle"), "{err}");
/// assert!(HANDLES.remove(p).is_ok());
/// assert!(HANDLES.get(p).is_err()); // deleted: an error, not a dereference
/// assert!(HANDLES.remove(p).is_err()); // deleted twice: the same
/// ```
pub struct HandleRegistry {
    live: RwLock<BTreeMap<usize, Entry>>,
}

impl Default for HandleRegistry {
    fn default() -> Self {
        HandleRegistry::new()
    }
}

impl HandleRegistry {
    /// An empty registry (usable as a `static`).
    pub const fn new() -> Self {
        HandleRegistry {
            live: RwLock::new(BTreeMap::new()),
        }
    }

    /// Registers `value` and returns its handle, the pointer C gets.
    pub fn register<T: Handle>(&self, value: T) -> *mut T {
        self.register_arc(Arc::new(value))
    }

    /// Registers an object the caller already shares and returns its handle.
    pub fn register_arc<T: Handle>(&self, value: Arc<T>) -> *mut T {
        let p = Arc::as_ptr(&value) as *mut T;
        let entry = Entry {
            kind: T::KIND,
            type_id: TypeId::of::<T>(),
            value,
        };
        self.write().insert(p as usize, entry);
        p
    }

    /// The object behind `p` if it is a live handle of `T`'s kind; the caller's `Arc`
    /// keeps it alive while it is used, even if another thread deletes the handle.
    pub fn get<T: Handle>(&self, p: *const T) -> Result<Arc<T>, HandleError> {
        let live = self.read();
        let entry = Self::entry::<T>(&live, p)?;
        let value = Arc::clone(&entry.value);
        drop(live);
        Ok(Self::downcast(value))
    }

    /// Whether `p` is a live handle of `T`'s kind.
    pub fn check<T: Handle>(&self, p: *const T) -> Result<(), HandleError> {
        Self::entry::<T>(&self.read(), p).map(|_| ())
    }

    /// Unregisters `p` if it is a live handle of `T`'s kind and returns the registry's
    /// reference (the object is dropped when the last call using it returns). Two
    /// threads deleting one handle: one succeeds, the other gets an error.
    pub fn remove<T: Handle>(&self, p: *mut T) -> Result<Arc<T>, HandleError> {
        let mut live = self.write();
        Self::entry::<T>(&live, p)?;
        let entry = live.remove(&(p as usize)).expect("checked above");
        drop(live);
        Ok(Self::downcast(entry.value))
    }

    /// Live handles of every kind.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether no handle is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn entry<T: Handle>(live: &BTreeMap<usize, Entry>, p: *const T) -> Result<&Entry, HandleError> {
        if p.is_null() {
            return Err(HandleError::Null { expected: T::KIND });
        }
        let addr = p as usize;
        match live.get(&addr) {
            None => Err(HandleError::Unknown {
                expected: T::KIND,
                addr,
            }),
            Some(e) if e.type_id == TypeId::of::<T>() => Ok(e),
            Some(e) => Err(HandleError::WrongKind {
                expected: T::KIND,
                found: e.kind,
                addr,
            }),
        }
    }

    fn downcast<T: Handle>(value: Arc<dyn Any + Send + Sync>) -> Arc<T> {
        value
            .downcast::<T>()
            .unwrap_or_else(|_| unreachable!("the registry recorded the type id"))
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<usize, Entry>> {
        // A panic while the lock was held cannot leave the map half-changed (each
        // change is one insert or remove): go on with it.
        self.live.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<usize, Entry>> {
        // As in `read`.
        self.live.write().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    static DROPS: AtomicUsize = AtomicUsize::new(0);

    #[derive(Debug)]
    struct A(u32);
    impl Handle for A {
        const KIND: &'static str = "A";
    }
    impl Drop for A {
        fn drop(&mut self) {
            DROPS.fetch_add(1, Ordering::SeqCst);
        }
    }
    #[derive(Debug)]
    struct B;
    impl Handle for B {
        const KIND: &'static str = "B";
    }

    #[test]
    fn kinds_nulls_and_deleted_handles_are_refused() {
        let reg = HandleRegistry::new();
        let a = reg.register(A(5));
        let b = reg.register(B);
        assert_eq!(reg.len(), 2);
        assert_eq!(reg.get(a).unwrap().0, 5);
        assert!(reg.check(b).is_ok());
        assert_eq!(
            reg.get::<A>(std::ptr::null()).unwrap_err(),
            HandleError::Null { expected: "A" }
        );
        let err = reg.get(b.cast::<A>()).unwrap_err();
        assert_eq!(
            err,
            HandleError::WrongKind {
                expected: "A",
                found: "B",
                addr: b as usize
            }
        );
        assert!(
            err.to_string().contains("is a B handle where a A handle"),
            "{err}"
        );
        assert_eq!(err.status(), Status::Arg);
        assert!(err.for_param("h").starts_with("h: 0x"), "{err}");
        assert_eq!(
            HandleError::Null { expected: "A" }.for_param("h"),
            "h is NULL"
        );
        let bogus = 0x1000 as *const A;
        assert!(matches!(
            reg.get(bogus).unwrap_err(),
            HandleError::Unknown { addr: 0x1000, .. }
        ));

        // Deleted while a call holds it: alive until that call's reference goes.
        let before = DROPS.load(Ordering::SeqCst);
        let in_call = reg.get(a).unwrap();
        drop(reg.remove(a).unwrap());
        assert_eq!(DROPS.load(Ordering::SeqCst), before);
        assert_eq!(in_call.0, 5);
        drop(in_call);
        assert_eq!(DROPS.load(Ordering::SeqCst), before + 1);
        assert!(matches!(
            reg.get(a).unwrap_err(),
            HandleError::Unknown { .. }
        ));
        assert!(reg.remove(a).is_err(), "deleted twice");
        assert!(
            reg.remove(b.cast::<A>()).is_err(),
            "deleted as the wrong kind"
        );
        assert!(reg.remove(b).is_ok());
        assert!(reg.is_empty());
    }

    #[test]
    fn one_of_two_racing_deletes_wins() {
        static REG: HandleRegistry = HandleRegistry::new();
        for _ in 0..100 {
            let p = REG.register(B) as usize;
            let wins: usize = (0..2)
                .map(|_| std::thread::spawn(move || REG.remove(p as *mut B).is_ok()))
                .collect::<Vec<_>>()
                .into_iter()
                .map(|t| usize::from(t.join().unwrap()))
                .sum();
            assert_eq!(wins, 1);
        }
    }
}
