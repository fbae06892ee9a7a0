//! The collections' drivers, above the cycle collector and the reference counts: a full
//! collection (native cycles with replication, a full managed collection, the queue,
//! repeated while replicated cycles leave native remains), the native cycle collection
//! alone, the automatic one, and CPython's `PyGC_Collect`. The bridge hands the first
//! and the automatic one to the allocation paths below as its `Collectors`.

use crate::cycle::{self, CycleReport};
use crate::error::BridgeError;
use crate::object::deallocs;
use crate::state::{current, Inner};
use gc_core::{CollectionKind, Mutator};
use std::sync::atomic::Ordering;

/// What [`Bridge::collect`](crate::Bridge::collect) did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CollectReport {
    /// Native objects found in unreachable cycles and cleared.
    pub native_garbage: usize,
    /// Objects replicated into the managed heap (native objects and stubs of cycles that
    /// reach managed objects).
    pub replicated: usize,
    /// Full managed collections run.
    pub managed_collections: usize,
    /// Reference-queue tokens processed.
    pub tokens: usize,
    /// Native objects deallocated during the call (any cause).
    pub native_freed: usize,
    /// Stubs freed during the call.
    pub stubs_freed: usize,
}

impl Inner {
    /// A full collection (see [`Bridge::collect`](crate::Bridge::collect)).
    pub(crate) fn collect_full(&self, m: &mut Mutator) -> Result<CollectReport, BridgeError> {
        let l = &self.local.0;
        if l.collecting.get() || l.in_collect.get() {
            return Ok(CollectReport::default());
        }
        l.in_collect.set(true);
        let _span = tracing::debug_span!("refbridge_collect").entered();
        let before = (
            self.counters.tokens.load(Ordering::Relaxed),
            self.counters.stubs_freed.load(Ordering::Relaxed),
            deallocs(),
        );
        let mut report = CollectReport::default();
        self.drain();
        l.collecting.set(true);
        let result = (|| {
            // Each round: the cycle collection (replicating what crosses into the
            // managed heap), a full managed collection, the queue. Another round only
            // for native remains of replicated cycles (objects whose mirror died but
            // that other dead native objects still reference).
            for _round in 0..4 {
                l.cycle_pending.set(false);
                let r = cycle::collect_cycles(self, Some(m));
                report.native_garbage += r.garbage;
                report.replicated += r.replicated;
                // Nothing runs between the replication and this collection, nor
                // between it and the settling of the replication (deallocations wait
                // while `collecting`): the replicated edges are exact for it.
                let gc = m.collect(CollectionKind::Full);
                report.managed_collections += 1;
                self.drain(); // bookkeeping only
                cycle::settle(self);
                l.collecting.set(false);
                self.drain(); // the deallocations
                gc?;
                l.collecting.set(true);
                if !l.cycle_pending.get() {
                    break;
                }
            }
            Ok::<(), BridgeError>(())
        })();
        l.collecting.set(false);
        self.drain();
        l.in_collect.set(false);
        self.debug_check();
        result?;
        report.tokens = (self.counters.tokens.load(Ordering::Relaxed) - before.0) as usize;
        report.stubs_freed =
            (self.counters.stubs_freed.load(Ordering::Relaxed) - before.1) as usize;
        report.native_freed = (deallocs() - before.2) as usize;
        tracing::debug!(?report, "refbridge collection");
        Ok(report)
    }

    /// Only the native cycle collection (with replication when `m` is given), the queue
    /// drained before and after (see [`crate::Bridge::collect_cycles`]).
    pub(crate) fn collect_cycles(&self, m: Option<&mut Mutator>) -> CycleReport {
        self.drain();
        let l = &self.local.0;
        if l.collecting.get() {
            return CycleReport::default();
        }
        l.collecting.set(true);
        let r = cycle::collect_cycles(self, m);
        cycle::settle(self);
        l.collecting.set(false);
        self.drain();
        r
    }
}

/// The automatic native cycle collection ([`Inner::maybe_auto_collect`] checked its
/// threshold): with the thread's mutator if it has one.
pub(crate) fn auto_cycles(inner: &Inner) {
    let l = &inner.local.0;
    inner.drain();
    l.collecting.set(true);
    let mut m = inner.heap.current_mutator().ok();
    cycle::collect_cycles(inner, m.as_mut());
    cycle::settle(inner);
    l.collecting.set(false);
    inner.drain();
}

/// CPython's `PyGC_Collect`: a full collection of the entered bridge
/// ([`crate::Bridge::collect`]), or only the native cycle collection when the thread is
/// not attached to the heap (or is in a GC-safe region). Returns the number of native
/// objects deallocated.
pub fn collect() -> Result<usize, BridgeError> {
    let Some(inner) = current() else {
        return Err(BridgeError::NoneEntered {
            what: "PyGC_Collect",
        });
    };
    match inner.heap.current_mutator() {
        Ok(mut m) => inner.collect_full(&mut m).map(|r| r.native_freed),
        Err(_) => {
            let before = deallocs();
            inner.drain();
            cycle::collect_cycles(inner, None);
            inner.drain();
            Ok((deallocs() - before) as usize)
        }
    }
}
