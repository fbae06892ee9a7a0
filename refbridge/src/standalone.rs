//! [`Standalone`]: a heap, the calling thread attached to it and a bridge entered on it,
//! in one value, for programs that have no runtime of their own around the bridge (C
//! programs through `rb_init`/`rb_fini`, tests, tools).

use crate::bridge::Bridge;
use crate::debug::DebugReport;
use crate::error::BridgeError;
use crate::state::{BridgeConfig, EnterGuard};
use gc_core::{Heap, HeapConfig, Mutator};

/// A heap of its own, this thread's attachment and a bridge entered on this thread
/// (what `rb_init` makes for C programs). Not `Send`: it belongs to the thread that made
/// it. [`Standalone::finish`] collects everything and returns the debug mode's leak
/// reports; dropping it without `finish` leaves the bridge without the final collection.
///
/// ```
/// use refbridge::{BridgeConfig, Standalone};
///
/// let mut s = Standalone::new(BridgeConfig { debug: true, ..BridgeConfig::default() })?;
/// let p = refbridge::mem_alloc(100)?; // charged to the entered bridge
/// assert_eq!(s.bridge().memory().bytes(), 100);
/// // SAFETY: a block of mem_alloc, not used afterwards.
/// unsafe { refbridge::mem_free(p.as_ptr())? };
/// assert!(s.finish().is_empty(), "no leaks");
/// # Ok::<(), refbridge::BridgeError>(())
/// ```
pub struct Standalone {
    // Dropped in this order: the guard first (the thread leaves the bridge), the
    // bridge, the thread's attachment, the heap handle.
    guard: Option<EnterGuard>,
    bridge: Bridge,
    mutator: Option<Mutator>,
    heap: Heap,
}

impl Standalone {
    /// Makes a heap (default configuration), attaches the calling thread, makes a bridge
    /// with `config` and enters it.
    pub fn new(config: BridgeConfig) -> Result<Standalone, BridgeError> {
        let heap = Heap::new(HeapConfig::default())?;
        let mutator = heap.attach()?;
        let bridge = Bridge::new(&heap, config)?;
        let guard = bridge.enter()?;
        Ok(Standalone {
            guard: Some(guard),
            bridge,
            mutator: Some(mutator),
            heap,
        })
    }

    /// The bridge (entered on this thread while `self` lives).
    pub fn bridge(&self) -> &Bridge {
        &self.bridge
    }

    /// The heap.
    pub fn heap(&self) -> &Heap {
        &self.heap
    }

    /// This thread's attachment to the heap.
    pub fn mutator(&mut self) -> &mut Mutator {
        self.mutator.as_mut().expect("present until finish")
    }

    /// Ends it: a full collection ([`Bridge::shutdown`]: then, in debug mode, the leak
    /// check), the thread leaves the bridge and everything is dropped. Returns the leak
    /// reports (empty when the debug mode is off; also empty if the collection failed).
    pub fn finish(mut self) -> Vec<DebugReport> {
        let mut m = self.mutator.take().expect("present until finish");
        let leaks = self.bridge.shutdown(&mut m).unwrap_or_default();
        drop(self.guard.take());
        drop(self);
        drop(m);
        leaks
    }
}
