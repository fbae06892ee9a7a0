//! Native memory pressure: the managed heap cannot see native allocations, so small
//! managed objects owning big native buffers would never make it collect. Counted
//! allocations ([`crate::mem`]) crossing the bridge's trigger force a full collection
//! (managed, native cycles, queue: [`crate::Bridge::collect`]); if usage stays above the
//! trigger afterwards, the trigger doubles, up to `native_trigger_max` (GraalPy: 256 MiB
//! doubling to 8 GiB). An allocation that would exceed the hard cap `native_cap` first
//! retries up to `pressure_retries` collections (at most
//! [`crate::MAX_PRESSURE_RETRIES`]), then fails with a clear error
//! ([`crate::BridgeError::MemoryCap`], the pending error): never an abort. A request
//! larger than the cap itself fails at once.

use crate::error::BridgeError;
use crate::mem;
use crate::state::Inner;
use std::ptr::NonNull;
use std::sync::atomic::Ordering;

impl Inner {
    /// Allocates `size` counted bytes charged to this bridge, applying the pressure
    /// policy; an error when the cap or the system refuses.
    pub(crate) fn alloc_native(&self, size: usize, zero: bool) -> Result<NonNull<u8>, BridgeError> {
        let cap = self.config.native_cap;
        if size > cap {
            // No collection can make room for it: refused before any runs.
            return Err(self.over_cap(size, 0));
        }
        let l = &self.local.0;
        let busy =
            l.in_pressure.get() || l.collecting.get() || l.draining.get() || l.in_collect.get();
        let used = self.account.bytes();
        if !busy && used.saturating_add(size) > self.trigger.get() {
            self.pressure_collect();
            if self.account.bytes().saturating_add(size) > self.trigger.get() {
                let t = (self.trigger.get().saturating_mul(2)).min(self.config.native_trigger_max);
                if t != self.trigger.get() {
                    tracing::debug!(trigger = t, "native memory trigger raised");
                }
                self.trigger.set(t);
            }
        }
        if self.account.bytes().saturating_add(size) > cap {
            let mut tried = 0;
            if !busy {
                while tried < self.config.pressure_retries
                    && self.account.bytes().saturating_add(size) > cap
                {
                    self.pressure_collect();
                    tried += 1;
                }
            }
            if self.account.bytes().saturating_add(size) > cap {
                return Err(self.over_cap(size, tried));
            }
        }
        // SAFETY: the account lives as long as the bridge, and longer while blocks remain.
        let p = unsafe { mem::alloc(&*self.account, size, zero) };
        match NonNull::new(p) {
            Some(p) => Ok(p),
            None => Err(BridgeError::OutOfMemory { size }),
        }
    }

    /// The error of an allocation of `size` bytes refused by the cap after `tried`
    /// collections.
    #[cold]
    fn over_cap(&self, size: usize, tried: u32) -> BridgeError {
        let e = BridgeError::MemoryCap {
            requested: size,
            in_use: self.account.bytes(),
            cap: self.config.native_cap,
            collections: tried,
        };
        tracing::warn!("{e}");
        e
    }

    /// One collection forced by memory pressure (skipped where none may run).
    fn pressure_collect(&self) {
        let l = &self.local.0;
        let Ok(mut m) = self.heap.current_mutator() else {
            return;
        };
        l.in_pressure.set(true);
        let _ = self.collect(&mut m);
        l.in_pressure.set(false);
        self.counters
            .pressure_collections
            .fetch_add(1, Ordering::Relaxed);
    }
}
