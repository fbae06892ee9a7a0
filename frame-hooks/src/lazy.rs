//! Lazy frames, GraalPy's `PFrame.Reference` design, for interpreters written in Rust.
//!
//! Every call gets a [`FrameRef`] on the native stack: a reference to its caller's
//! `FrameRef` (passed implicitly, so callers never build anything) and to the live
//! activation ([`LiveFrame`]). No heap frame exists until someone asks: [`FrameRef::stack`]
//! (a `current_frames()` / `sys._getframe()`-style call) or [`FrameRef::materialize`]
//! (an escaping traceback) builds a [`PFrame`] for the reference and each caller, marking
//! them escaped. When the call of an escaped reference returns (the `FrameRef` is dropped)
//! its frame is filled in with the activation's final state, so a traceback kept after the
//! frames returned still shows every frame's locals.

use std::cell::{Cell, OnceCell};
use std::sync::{Arc, Mutex, MutexGuard};

/// A live activation that can describe itself.
pub trait LiveFrame {
    /// What a materialised frame holds (code name, line, locals, ...).
    type Data;
    /// The activation's state now.
    fn snapshot(&self) -> Self::Data;
}

/// A frame materialised on the heap.
pub struct PFrame<D> {
    data: Mutex<D>,
    back: Option<Arc<PFrame<D>>>,
    returned: std::sync::atomic::AtomicBool,
}

impl<D> PFrame<D> {
    /// The frame's data: its state when last synchronised (when materialised, when asked
    /// again while live, and when its call returned).
    pub fn data(&self) -> MutexGuard<'_, D> {
        self.data.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The caller's frame.
    pub fn back(&self) -> Option<&Arc<PFrame<D>>> {
        self.back.as_ref()
    }

    /// Whether the frame's call has returned (its data is final).
    pub fn returned(&self) -> bool {
        self.returned.load(std::sync::atomic::Ordering::Acquire)
    }
}

impl<D: std::fmt::Debug> std::fmt::Debug for PFrame<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PFrame")
            .field("data", &*self.data())
            .field("returned", &self.returned())
            .finish()
    }
}

/// The reference a call passes implicitly to its callees.
pub struct FrameRef<'a, D> {
    caller: Option<&'a FrameRef<'a, D>>,
    live: &'a dyn LiveFrame<Data = D>,
    frame: OnceCell<Arc<PFrame<D>>>,
    escaped: Cell<bool>,
}

impl<'a, D> FrameRef<'a, D> {
    /// The reference of an outermost call.
    pub fn root(live: &'a dyn LiveFrame<Data = D>) -> Self {
        FrameRef {
            caller: None,
            live,
            frame: OnceCell::new(),
            escaped: Cell::new(false),
        }
    }

    /// The reference of a call made by this one's activation.
    pub fn callee(&'a self, live: &'a dyn LiveFrame<Data = D>) -> FrameRef<'a, D> {
        FrameRef {
            caller: Some(self),
            live,
            frame: OnceCell::new(),
            escaped: Cell::new(false),
        }
    }

    /// The caller's reference.
    pub fn caller(&self) -> Option<&'a FrameRef<'a, D>> {
        self.caller
    }

    /// Whether a heap frame exists for this reference.
    pub fn is_materialized(&self) -> bool {
        self.frame.get().is_some()
    }

    /// Whether this reference escaped (its frame will be filled in on return).
    pub fn is_escaped(&self) -> bool {
        self.escaped.get()
    }

    /// The heap frame of this call, built now (with the callers' frames) if needed, its
    /// data synchronised with the live activation; the reference and its callers are
    /// marked escaped.
    pub fn materialize(&self) -> Arc<PFrame<D>> {
        self.escaped.set(true);
        if let Some(f) = self.frame.get() {
            *f.data() = self.live.snapshot();
            if let Some(c) = self.caller {
                c.materialize();
            }
            return f.clone();
        }
        let back = self.caller.map(|c| c.materialize());
        let f = Arc::new(PFrame {
            data: Mutex::new(self.live.snapshot()),
            back,
            returned: std::sync::atomic::AtomicBool::new(false),
        });
        let _ = self.frame.set(f.clone());
        f
    }

    /// The frames of this call and its callers, innermost first, materialised.
    pub fn stack(&self) -> Vec<Arc<PFrame<D>>> {
        let mut out = Vec::new();
        let mut f = Some(self.materialize());
        while let Some(frame) = f {
            f = frame.back().cloned();
            out.push(frame);
        }
        out
    }

    /// How many calls deep this reference is (1 for a root), without materialising.
    pub fn depth(&self) -> usize {
        let mut n = 1;
        let mut c = self.caller;
        while let Some(r) = c {
            n += 1;
            c = r.caller;
        }
        n
    }
}

impl<D> Drop for FrameRef<'_, D> {
    fn drop(&mut self) {
        if self.escaped.get() {
            if let Some(f) = self.frame.get() {
                *f.data() = self.live.snapshot();
                f.returned.store(true, std::sync::atomic::Ordering::Release);
            }
        }
    }
}
