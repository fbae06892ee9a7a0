//! The calling thread's attachments: which GILs it is attached to (a thread may be
//! attached to several, one per interpreter). At thread exit the registry detaches the
//! thread from every GIL, releasing one it still holds, so a thread that dies without
//! detaching never leaves the GIL taken.

use crate::primitive::Arc;
use crate::state::{Shared, ThreadState};
use std::cell::RefCell;

struct Entry {
    shared: Arc<Shared>,
    ts: Arc<ThreadState>,
}

struct Registry(RefCell<Vec<Entry>>);

impl Drop for Registry {
    fn drop(&mut self) {
        let entries = std::mem::take(&mut *self.0.borrow_mut());
        for e in entries {
            if e.shared.holds(&e.ts) {
                tracing::warn!(gil = %e.shared.label, thread = %e.ts.label(),
                    "thread exited holding the GIL; releasing it");
            }
            e.shared.detach(&e.ts);
        }
    }
}

#[cfg(not(loom))]
thread_local! {
    static CURRENT: Registry = const { Registry(RefCell::new(Vec::new())) };
}
#[cfg(loom)]
loom::thread_local! {
    static CURRENT: Registry = Registry(RefCell::new(Vec::new()));
}

/// The calling thread's state for `shared`, if attached.
pub(crate) fn lookup(shared: &Shared) -> Option<Arc<ThreadState>> {
    CURRENT
        .try_with(|r| {
            r.0.borrow()
                .iter()
                .find(|e| e.shared.id == shared.id)
                .map(|e| e.ts.clone())
        })
        .ok()
        .flatten()
}

/// Records that the calling thread is attached to `shared` as `ts`.
pub(crate) fn insert(shared: &Arc<Shared>, ts: &Arc<ThreadState>) {
    let _ = CURRENT.try_with(|r| {
        r.0.borrow_mut().push(Entry {
            shared: shared.clone(),
            ts: ts.clone(),
        })
    });
}

/// Forgets the calling thread's attachment to `shared`.
pub(crate) fn remove(shared: &Shared) {
    let _ = CURRENT.try_with(|r| r.0.borrow_mut().retain(|e| e.shared.id != shared.id));
}
