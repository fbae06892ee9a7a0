//! The shared state of one GIL and every transition of its state machine: the lock word
//! and its fast paths, the wait queues, handoff, switch (drop) requests, the convoy-effect
//! fix, blocking regions, safepoint-action delivery and thread invalidation.
//!
//! # The lock word
//! `Shared::lock` holds `owner_id << 1 | WAITERS`, owner 0 meaning free. Without waiters
//! the owner takes and drops the GIL with one compare-and-swap each (no lock, no
//! syscall). Once a thread queues, it sets `WAITERS` (under the state mutex), which makes
//! the owner's fast release fail, so every release with waiters goes through the state
//! mutex and hands the GIL directly to the head of the queue: the new owner is written
//! into the lock word before the releaser returns, which is what makes the handoff fair
//! (the releaser cannot take it straight back). While `WAITERS` is set only holders of
//! the state mutex change the lock word.
//!
//! # Per-thread flags
//! Each thread has one flag word that `poll()` loads with a relaxed load: `DROP` (a
//! waiter asked the holder to let go), `ACTION` (safepoint actions pending), `STOP` (the
//! thread was asked to stop) and `INVALID` (shutdown or detach invalidated it), and the
//! thread's own `IN_ACTION`, `IN_HOOK` and `IN_REGION`, which send its GIL calls to the
//! slow paths that refuse them.

use crate::action::ActionInner;
use crate::config::Config;
use crate::error::GilError;
use crate::hooks::{BlockReason, GilHooks};
use crate::primitive::{
    next_gil_id, spin_hint, yield_now, Arc, AtomicBool, AtomicI64, AtomicU32, AtomicU8,
    AtomicUsize, Counter, Mutex, MutexGuard, Ordering, Parker, StdArc,
};
use crate::thread::{ThreadId, ThreadStatus};
use std::collections::VecDeque;
use std::time::Instant;

/// Lock-word bit: at least one thread is queued for the GIL.
pub(crate) const WAITERS: usize = 1;

/// Flag: a waiter asked the holder to drop the GIL at its next poll.
pub(crate) const F_DROP: u32 = 1;
/// Flag: safepoint actions are pending for this thread.
pub(crate) const F_ACTION: u32 = 2;
/// Flag: the thread was asked to stop.
pub(crate) const F_STOP: u32 = 4;
/// Flag: the thread state was invalidated (shutdown or detach).
pub(crate) const F_INVALID: u32 = 8;
/// Flag: the thread is running safepoint actions (set and cleared by the thread itself;
/// it makes `poll` and `acquire` take their slow paths, which refuse nested GIL calls).
pub(crate) const F_IN_ACTION: u32 = 16;
/// The thread is inside an embedder hook (`on_block` / `on_unblock`): GIL calls from
/// there would call the hook again, without end.
pub(crate) const F_IN_HOOK: u32 = 32;
/// The thread is inside a blocking region (set and cleared by the thread itself): it
/// does not hold the GIL and is reported blocked, so taking the GIL or opening a second
/// region is refused (it makes `acquire` take its slow path, which refuses).
pub(crate) const F_IN_REGION: u32 = 64;

/// Status: attached, not blocked (it may or may not hold the GIL).
pub(crate) const S_RUNNING: u8 = 0;
/// Status: queued for the GIL.
pub(crate) const S_WAITING: u8 = 1;
/// Status: inside a blocking region.
pub(crate) const S_BLOCKING: u8 = 2;
/// Status: detached; the state is dead.
pub(crate) const S_DETACHED: u8 = 3;

/// Interrupts a blocking region so that its thread can run actions or stop.
pub(crate) type Interrupter = StdArc<dyn Fn() + Send + Sync>;

/// One attached thread, shared between the thread itself and everyone who signals it.
pub(crate) struct ThreadState {
    pub(crate) id: u64,
    pub(crate) name: StdArc<str>,
    pub(crate) flags: AtomicU32,
    pub(crate) status: AtomicU8,
    pub(crate) parker: Parker,
    pub(crate) actions: Mutex<Vec<Arc<ActionInner>>>,
    pub(crate) interrupter: Mutex<Option<Interrupter>>,
    /// The thread returned an error because of shutdown or a stop request.
    pub(crate) acknowledged: AtomicBool,
    /// Priority token bucket (nanoseconds, may go negative), owner-thread only.
    prio_budget_ns: AtomicI64,
    prio_refill_ns: AtomicI64,
    /// Start of the current priority hold, or -1.
    prio_hold_start_ns: AtomicI64,
    /// Live guards of this thread (`GilGuard`, `EnsureGuard`); owner-thread only.
    guards: AtomicU32,
    /// A release came while guards were alive: the last guard to go releases the GIL.
    release_deferred: AtomicBool,
    /// Inside a blocking region: the GIL is re-taken when the region ends (it was held
    /// at entry and a guard or acquisition still wants it); owner-thread only.
    region_held: AtomicBool,
}

impl ThreadState {
    /// "#id \"name\"" for messages.
    pub(crate) fn label(&self) -> String {
        format!("#{} \"{}\"", self.id, self.name)
    }

    pub(crate) fn thread_id(&self) -> ThreadId {
        ThreadId(self.id)
    }

    /// What the thread is doing, as seen from outside.
    pub(crate) fn status(&self) -> ThreadStatus {
        match self.status.load(Ordering::SeqCst) {
            S_WAITING => ThreadStatus::WaitingForGil,
            S_BLOCKING => ThreadStatus::Blocking,
            S_DETACHED => ThreadStatus::Detached,
            _ => ThreadStatus::Running,
        }
    }

    /// Whether a priority hold is in progress (forces releases onto the slow path so the
    /// hold is charged).
    #[inline]
    pub(crate) fn in_priority_hold(&self) -> bool {
        self.prio_hold_start_ns.load(Ordering::Relaxed) >= 0
    }
}

/// Counters kept for [`GilStats`](crate::GilStats).
#[derive(Default)]
pub(crate) struct Stats {
    pub(crate) handoffs: Counter,
    pub(crate) switch_requests: Counter,
    pub(crate) priority_grants: Counter,
    pub(crate) actions_run: Counter,
}

/// What the state mutex protects.
pub(crate) struct State {
    pub(crate) threads: Vec<Arc<ThreadState>>,
    priority: VecDeque<Arc<ThreadState>>,
    normal: VecDeque<Arc<ThreadState>>,
    /// Bumped at every change of owner made under the mutex.
    switch_number: u64,
    next_thread_id: u64,
    pub(crate) next_action_id: u64,
}

impl State {
    pub(crate) fn find(&self, id: u64) -> Option<&Arc<ThreadState>> {
        self.threads.iter().find(|t| t.id == id)
    }

    fn pop_next(&mut self) -> Option<Arc<ThreadState>> {
        self.priority
            .pop_front()
            .or_else(|| self.normal.pop_front())
    }

    fn has_waiters(&self) -> bool {
        !(self.priority.is_empty() && self.normal.is_empty())
    }

    fn remove_waiter(&mut self, id: u64) {
        self.priority.retain(|t| t.id != id);
        self.normal.retain(|t| t.id != id);
    }

    /// Number of queued threads.
    pub(crate) fn waiters(&self) -> usize {
        self.priority.len() + self.normal.len()
    }
}

/// How a thread queues when the GIL is taken.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum WaitKind {
    /// Wait a switch interval before asking the holder to drop.
    Normal,
    /// Returning from a blocking region: ask at once if the priority budget allows.
    Priority,
}

/// One GIL.
pub(crate) struct Shared {
    /// Process-unique id (keys the per-thread registry).
    pub(crate) id: u64,
    pub(crate) label: String,
    pub(crate) lock: AtomicUsize,
    pub(crate) state: Mutex<State>,
    pub(crate) config: Config,
    epoch: Instant,
    hooks: Mutex<Option<StdArc<dyn GilHooks>>>,
    has_hooks: AtomicBool,
    pub(crate) shut_down: AtomicBool,
    pub(crate) stats: Stats,
}

impl Shared {
    pub(crate) fn new(config: Config) -> Self {
        Shared {
            id: next_gil_id(),
            label: config.name.clone(),
            lock: AtomicUsize::new(0),
            state: Mutex::new(State {
                threads: Vec::new(),
                priority: VecDeque::new(),
                normal: VecDeque::new(),
                switch_number: 0,
                next_thread_id: 1,
                next_action_id: 1,
            }),
            config,
            epoch: Instant::now(),
            hooks: Mutex::new(None),
            has_hooks: AtomicBool::new(false),
            shut_down: AtomicBool::new(false),
            stats: Stats::default(),
        }
    }

    fn now_ns(&self) -> i64 {
        i64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(i64::MAX)
    }

    /// The owner's id, 0 if free.
    #[inline]
    pub(crate) fn owner(&self) -> u64 {
        (self.lock.load(Ordering::Relaxed) >> 1) as u64
    }

    #[inline]
    pub(crate) fn holds(&self, ts: &ThreadState) -> bool {
        self.owner() == ts.id
    }

    fn holder_label(&self) -> String {
        match self.owner() {
            0 => "nobody".into(),
            id => format!("#{id}"),
        }
    }

    // ----- attach / detach -------------------------------------------------------------

    pub(crate) fn attach(&self, name: String) -> Result<Arc<ThreadState>, GilError> {
        let mut st = self.state.lock();
        if self.shut_down.load(Ordering::Acquire) {
            return Err(GilError::ShutDown {
                gil: self.label.clone(),
                thread: format!("\"{name}\""),
            });
        }
        let id = st.next_thread_id;
        st.next_thread_id += 1;
        let burst = i64::try_from(self.config.priority_burst.as_nanos()).unwrap_or(i64::MAX);
        let ts = Arc::new(ThreadState {
            id,
            name: name.into(),
            flags: AtomicU32::new(0),
            status: AtomicU8::new(S_RUNNING),
            parker: Parker::new(),
            actions: Mutex::new(Vec::new()),
            interrupter: Mutex::new(None),
            acknowledged: AtomicBool::new(false),
            prio_budget_ns: AtomicI64::new(burst),
            prio_refill_ns: AtomicI64::new(self.now_ns()),
            prio_hold_start_ns: AtomicI64::new(-1),
            guards: AtomicU32::new(0),
            release_deferred: AtomicBool::new(false),
            region_held: AtomicBool::new(false),
        });
        st.threads.push(ts.clone());
        drop(st);
        tracing::debug!(gil = %self.label, thread = %ts.label(), "thread attached");
        Ok(ts)
    }

    /// Detaches `ts`: releases the GIL if it holds it, removes it, invalidates it and
    /// marks its pending actions as skipped. Idempotent.
    pub(crate) fn detach(&self, ts: &Arc<ThreadState>) {
        if ts.status.load(Ordering::SeqCst) == S_DETACHED {
            return;
        }
        if self.holds(ts) {
            let _ = self.release_unchecked(ts);
        }
        let mut st = self.state.lock();
        st.threads.retain(|t| t.id != ts.id);
        st.remove_waiter(ts.id);
        if !st.has_waiters() && self.lock.load(Ordering::Relaxed) & WAITERS != 0 {
            self.lock.fetch_and(!WAITERS, Ordering::Release);
        }
        ts.flags.fetch_or(F_INVALID, Ordering::AcqRel);
        ts.status.store(S_DETACHED, Ordering::SeqCst);
        let pending = std::mem::take(&mut *ts.actions.lock());
        drop(st);
        for action in pending {
            action.skip(ts.thread_id());
        }
        tracing::debug!(gil = %self.label, thread = %ts.label(), "thread detached");
    }

    // ----- acquire / release -----------------------------------------------------------

    /// The error a thread gets once it is stopped or invalidated; records that it saw it.
    pub(crate) fn refusal(&self, ts: &ThreadState, flags: u32) -> GilError {
        ts.acknowledged.store(true, Ordering::Release);
        if flags & F_INVALID != 0 && self.shut_down.load(Ordering::Acquire) {
            GilError::ShutDown {
                gil: self.label.clone(),
                thread: ts.label(),
            }
        } else if flags & F_STOP != 0 {
            GilError::Stopped {
                gil: self.label.clone(),
                thread: ts.label(),
            }
        } else {
            GilError::NotAttached {
                gil: self.label.clone(),
                thread: ts.label(),
            }
        }
    }

    /// Refuses `call` while the thread runs a safepoint action.
    fn check_not_in_action(&self, ts: &ThreadState, call: &'static str) -> Result<(), GilError> {
        let f = ts.flags.load(Ordering::Relaxed);
        if f & F_IN_ACTION != 0 {
            return Err(GilError::InsideAction {
                gil: self.label.clone(),
                thread: ts.label(),
                call,
            });
        }
        if f & F_IN_HOOK != 0 {
            return Err(GilError::InsideHook {
                gil: self.label.clone(),
                thread: ts.label(),
                call,
            });
        }
        Ok(())
    }

    /// Refuses `call` inside a blocking region.
    fn check_not_in_region(&self, ts: &ThreadState, call: &'static str) -> Result<(), GilError> {
        if ts.flags.load(Ordering::Relaxed) & F_IN_REGION != 0 {
            return Err(GilError::InsideRegion {
                gil: self.label.clone(),
                thread: ts.label(),
                call,
            });
        }
        Ok(())
    }

    /// `acquire()`: `Ok(true)` if this call took the GIL, `Ok(false)` if the thread
    /// already held it.
    #[inline]
    pub(crate) fn acquire(&self, ts: &Arc<ThreadState>) -> Result<bool, GilError> {
        let me = (ts.id as usize) << 1;
        let v = self.lock.load(Ordering::Relaxed);
        if v & !WAITERS == me {
            // Inside a hook the answer must not depend on timing: a thread in `on_block`
            // may already have been handed the GIL by its releaser, and refusing there
            // but saying "held" a moment later gave `ensure` Ok where `acquire` failed.
            if ts.flags.load(Ordering::Relaxed) & F_IN_HOOK != 0 {
                return Err(GilError::InsideHook {
                    gil: self.label.clone(),
                    thread: ts.label(),
                    call: "acquire",
                });
            }
            return Ok(false);
        }
        let f = ts.flags.load(Ordering::Relaxed);
        if f & (F_STOP | F_INVALID) != 0 {
            return Err(self.refusal(ts, f));
        }
        if v == 0
            && f == 0
            && self
                .lock
                .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            return Ok(true);
        }
        self.acquire_slow(ts, WaitKind::Normal, false)?;
        // Taking the GIL is a safepoint: a thread that was outside the GIL (not in a
        // declared region) runs the actions submitted meanwhile now.
        if ts.flags.load(Ordering::Acquire) & F_ACTION != 0 {
            self.run_actions(ts, true);
        }
        Ok(true)
    }

    /// `release(acquired)`: releases only if `acquired` (the value `acquire` returned).
    /// While a guard of the thread is alive the release is deferred to the last guard
    /// (a live guard means the GIL is held).
    #[inline]
    pub(crate) fn release(&self, ts: &Arc<ThreadState>, acquired: bool) -> Result<(), GilError> {
        if !acquired {
            return Ok(());
        }
        if ts.guards.load(Ordering::Relaxed) != 0 && self.holds(ts) {
            self.check_not_in_action(ts, "release")?;
            ts.release_deferred.store(true, Ordering::Relaxed);
            return Ok(());
        }
        self.release_now(ts)
    }

    /// A guard of `ts`'s thread is made (after its `acquire`).
    #[inline]
    pub(crate) fn guard_enter(&self, ts: &ThreadState) {
        let n = ts.guards.load(Ordering::Relaxed);
        ts.guards.store(n.saturating_add(1), Ordering::Relaxed);
    }

    /// A guard of `ts`'s thread goes; `acquired`: its `acquire` took the GIL. The last
    /// guard releases the GIL if any release was deferred to it; an earlier one that took
    /// the GIL defers its release to the last.
    pub(crate) fn guard_exit(&self, ts: &Arc<ThreadState>, acquired: bool) -> Result<(), GilError> {
        let n = ts.guards.load(Ordering::Relaxed).saturating_sub(1);
        ts.guards.store(n, Ordering::Relaxed);
        if n != 0 {
            if acquired {
                ts.release_deferred.store(true, Ordering::Relaxed);
            }
            return Ok(());
        }
        let deferred = ts.release_deferred.load(Ordering::Relaxed);
        if deferred {
            ts.release_deferred.store(false, Ordering::Relaxed);
        }
        if !(acquired || deferred) {
            return Ok(());
        }
        if ts.flags.load(Ordering::Relaxed) & F_IN_REGION != 0 {
            // The last guard goes inside a blocking region, which released the GIL for
            // it: the region no longer re-takes it.
            ts.region_held.store(false, Ordering::Relaxed);
            return Ok(());
        }
        self.release_now(ts)
    }

    /// Releases the GIL `ts` took, now (guards or not).
    #[inline]
    fn release_now(&self, ts: &Arc<ThreadState>) -> Result<(), GilError> {
        let me = (ts.id as usize) << 1;
        if ts.flags.load(Ordering::Relaxed) == 0
            && !ts.in_priority_hold()
            && self
                .lock
                .compare_exchange(me, 0, Ordering::Release, Ordering::Relaxed)
                .is_ok()
        {
            return Ok(());
        }
        self.release_slow(ts)
    }

    /// Takes the GIL, queueing if needed. `already_blocked`: the caller already reported
    /// this thread as blocked to the hooks (it comes from a blocking region).
    pub(crate) fn acquire_slow(
        &self,
        ts: &Arc<ThreadState>,
        kind: WaitKind,
        already_blocked: bool,
    ) -> Result<(), GilError> {
        self.check_not_in_action(ts, "acquire")?;
        self.check_not_in_region(ts, "acquire")?;
        let me = (ts.id as usize) << 1;
        let mut st = self.state.lock();
        let f = ts.flags.load(Ordering::Acquire);
        if f & (F_STOP | F_INVALID) != 0 {
            drop(st);
            return Err(self.refusal(ts, f));
        }
        loop {
            let v = self.lock.load(Ordering::Relaxed);
            if v >> 1 == 0 {
                if self
                    .lock
                    .compare_exchange(v, me | (v & WAITERS), Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
                {
                    st.switch_number += 1;
                    return Ok(());
                }
                continue;
            }
            if v & WAITERS != 0
                || self
                    .lock
                    .compare_exchange(v, v | WAITERS, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
            {
                break;
            }
        }
        let priority = kind == WaitKind::Priority && self.priority_eligible(ts);
        if priority {
            st.priority.push_back(ts.clone());
            let holder = self.owner();
            if let Some(h) = st.find(holder) {
                h.flags.fetch_or(F_DROP, Ordering::Release);
                self.stats.switch_requests.bump();
            }
            tracing::trace!(gil = %self.label, thread = %ts.label(), holder,
                "priority switch request (returning from a blocking region)");
        } else {
            st.normal.push_back(ts.clone());
        }
        ts.status.store(S_WAITING, Ordering::SeqCst);
        let seen = st.switch_number;
        drop(st);
        if !already_blocked {
            self.hook_block(ts, BlockReason::WaitingForGil);
        }
        let result = self.wait_for_grant(ts, seen);
        ts.status.store(S_RUNNING, Ordering::SeqCst);
        if result.is_ok() && priority {
            ts.prio_hold_start_ns
                .store(self.now_ns(), Ordering::Relaxed);
            self.stats.priority_grants.bump();
        }
        if !already_blocked {
            self.hook_unblock(ts, BlockReason::WaitingForGil);
        }
        result
    }

    /// Releases with the state mutex: hands the GIL to the next waiter, or frees it.
    pub(crate) fn release_slow(&self, ts: &Arc<ThreadState>) -> Result<(), GilError> {
        self.check_not_in_action(ts, "release")?;
        self.release_unchecked(ts)
    }

    /// `release_slow` without the inside-an-action check, for detach and shutdown, which
    /// must never leave the GIL owned by a thread that is gone.
    pub(crate) fn release_unchecked(&self, ts: &Arc<ThreadState>) -> Result<(), GilError> {
        let st = self.state.lock();
        if !self.holds(ts) {
            drop(st);
            let f = ts.flags.load(Ordering::Acquire);
            if f & (F_STOP | F_INVALID) != 0 {
                // It lost the GIL on the way out (stopped while re-queued); nothing to do.
                return Ok(());
            }
            return Err(GilError::NotHolder {
                gil: self.label.clone(),
                thread: ts.label(),
                holder: self.holder_label(),
            });
        }
        self.charge_priority(ts);
        ts.flags.fetch_and(!F_DROP, Ordering::AcqRel);
        self.pass_on(st, ts, "release");
        Ok(())
    }

    /// With the state mutex held by a thread that owns the GIL: hands it to the next
    /// waiter (writing the new owner into the lock word) or frees it.
    fn pass_on(&self, mut st: MutexGuard<'_, State>, from: &ThreadState, reason: &'static str) {
        match st.pop_next() {
            Some(next) => {
                let more = if st.has_waiters() { WAITERS } else { 0 };
                self.lock
                    .store(((next.id as usize) << 1) | more, Ordering::Release);
                st.switch_number += 1;
                drop(st);
                next.parker.unpark();
                self.stats.handoffs.bump();
                tracing::trace!(gil = %self.label, from = from.id, to = next.id, reason, "GIL handoff");
            }
            None => {
                self.lock.store(0, Ordering::Release);
                drop(st);
            }
        }
    }

    /// Waits until a releaser hands this (queued) thread the GIL. Runs actions while
    /// waiting, asks the holder to drop after each switch interval, and leaves with an
    /// error if the thread is stopped or invalidated.
    fn wait_for_grant(&self, ts: &Arc<ThreadState>, mut seen: u64) -> Result<(), GilError> {
        let interval = self.config.switch_interval;
        let start = Instant::now();
        let spin_until = start + self.config.spin;
        let yield_after = start + self.config.spin / 8;
        let mut spinning = !self.config.spin.is_zero();
        let mut spins: u32 = 0;
        let mut timer = interval.map(|i| start + i);
        loop {
            // A stopped or invalidated thread leaves even if it was just handed the GIL
            // (abandon_wait passes it on).
            let f = ts.flags.load(Ordering::Acquire);
            if f & (F_STOP | F_INVALID) != 0 {
                return Err(self.abandon_wait(ts, f));
            }
            // The releaser wrote this thread's id into the lock word (Release).
            if self.lock.load(Ordering::Acquire) >> 1 == ts.id as usize {
                return Ok(());
            }
            if f & F_ACTION != 0 {
                self.run_actions(ts, false);
                continue;
            }
            if spinning {
                // Busy-spin briefly (the releaser is usually running on another core),
                // then yield the core between checks: if the thread we wait for shares
                // this core, spinning would only delay it.
                spins = spins.wrapping_add(1);
                if spins % 64 == 0 {
                    let now = Instant::now();
                    if now >= spin_until {
                        spinning = false;
                        continue;
                    }
                    if now >= yield_after {
                        yield_now();
                        continue;
                    }
                }
                spin_hint();
                continue;
            }
            if let Some(t) = timer {
                let now = Instant::now();
                if now >= t {
                    self.request_drop(ts, &mut seen);
                    timer = interval.map(|i| now + i);
                    continue;
                }
            }
            ts.parker.park(timer);
        }
    }

    /// A waiter's switch interval ran out: if the same holder has had the GIL all that
    /// time, ask it to drop at its next poll (CPython's rule).
    fn request_drop(&self, ts: &ThreadState, seen: &mut u64) {
        let st = self.state.lock();
        if self.holds(ts) {
            return;
        }
        if st.switch_number != *seen {
            *seen = st.switch_number;
            return;
        }
        let holder = self.owner();
        if let Some(h) = st.find(holder) {
            h.flags.fetch_or(F_DROP, Ordering::Release);
            self.stats.switch_requests.bump();
            tracing::debug!(gil = %self.label, waiter = ts.id, holder, "switch request after the interval");
        }
    }

    /// A waiter that must leave (stop, shutdown): out of the queue, or, if it was handed
    /// the GIL meanwhile, passes it on.
    fn abandon_wait(&self, ts: &Arc<ThreadState>, f: u32) -> GilError {
        let mut st = self.state.lock();
        if self.holds(ts) {
            self.pass_on(st, ts, "waiter left");
        } else {
            st.remove_waiter(ts.id);
            if !st.has_waiters() {
                self.lock.fetch_and(!WAITERS, Ordering::Release);
            }
            drop(st);
        }
        self.refusal(ts, f)
    }

    // ----- poll ------------------------------------------------------------------------

    /// Everything `poll()` does once the flag word is non-zero.
    #[cold]
    pub(crate) fn poll_slow(&self, ts: &Arc<ThreadState>) -> Result<(), GilError> {
        loop {
            let f = ts.flags.load(Ordering::Acquire);
            if f & F_IN_ACTION != 0 {
                // A poll inside an action: actions do not nest, switches wait.
                return Ok(());
            }
            if f & (F_STOP | F_INVALID) != 0 {
                return Err(self.refusal(ts, f));
            }
            if f & F_ACTION != 0 {
                self.run_actions(ts, self.holds(ts));
                continue;
            }
            if f & F_DROP != 0 {
                ts.flags.fetch_and(!F_DROP, Ordering::AcqRel);
                if self.holds(ts) {
                    self.yield_gil(ts)?;
                }
                continue;
            }
            return Ok(());
        }
    }

    /// Hands the GIL to the next waiter and queues behind everyone already waiting.
    /// Without waiters it keeps the GIL.
    pub(crate) fn yield_gil(&self, ts: &Arc<ThreadState>) -> Result<(), GilError> {
        self.check_not_in_action(ts, "yield")?;
        let mut st = self.state.lock();
        if !self.holds(ts) {
            return Ok(());
        }
        let Some(next) = st.pop_next() else {
            return Ok(());
        };
        self.charge_priority(ts);
        st.normal.push_back(ts.clone());
        st.switch_number += 1;
        let seen = st.switch_number;
        self.lock
            .store(((next.id as usize) << 1) | WAITERS, Ordering::Release);
        ts.status.store(S_WAITING, Ordering::SeqCst);
        drop(st);
        next.parker.unpark();
        self.stats.handoffs.bump();
        tracing::trace!(gil = %self.label, from = ts.id, to = next.id, reason = "switch", "GIL handoff");
        self.hook_block(ts, BlockReason::WaitingForGil);
        let result = self.wait_for_grant(ts, seen);
        ts.status.store(S_RUNNING, Ordering::SeqCst);
        self.hook_unblock(ts, BlockReason::WaitingForGil);
        result
    }

    // ----- blocking regions ------------------------------------------------------------

    /// Enters a blocking region: releases the GIL if held (to be re-taken by
    /// `leave_blocking`); returns whether it was held. Refused inside a region or action.
    pub(crate) fn enter_blocking(
        &self,
        ts: &Arc<ThreadState>,
        interrupter: Option<Interrupter>,
    ) -> Result<bool, GilError> {
        self.check_not_in_action(ts, "a blocking region")?;
        self.check_not_in_region(ts, "a blocking region")?;
        let f = ts.flags.load(Ordering::Acquire);
        if f & (F_STOP | F_INVALID) != 0 {
            return Err(self.refusal(ts, f));
        }
        let held = self.holds(ts);
        if held {
            self.release_now(ts)?;
        }
        {
            // Published under the interrupter's mutex, which `wake` takes too.
            let mut slot = ts.interrupter.lock();
            *slot = interrupter;
            ts.region_held.store(held, Ordering::Relaxed);
            ts.flags.fetch_or(F_IN_REGION, Ordering::Relaxed);
            ts.status.store(S_BLOCKING, Ordering::SeqCst);
        }
        self.hook_block(ts, BlockReason::BlockingRegion);
        // An action whose `wake` took the mutex before the region was published did
        // not call the interrupter, and its flag is visible here (set before that
        // `wake`): run it now, at the start of the region (without the GIL).
        if ts.flags.load(Ordering::Acquire) & F_ACTION != 0 {
            self.run_actions(ts, false);
        }
        Ok(held)
    }

    /// Whether the thread is inside a blocking region and, if so, whether leaving it
    /// re-takes the GIL.
    pub(crate) fn region_state(&self, ts: &ThreadState) -> Result<bool, GilError> {
        if ts.flags.load(Ordering::Relaxed) & F_IN_REGION == 0 {
            return Err(GilError::NotInRegion {
                gil: self.label.clone(),
                thread: ts.label(),
            });
        }
        Ok(ts.region_held.load(Ordering::Relaxed))
    }

    /// Leaves the blocking region the thread is in: runs pending actions (without the
    /// GIL), then re-takes the GIL if it was held at entry (and is still wanted), with
    /// priority (the convoy-effect fix).
    pub(crate) fn leave_blocking(&self, ts: &Arc<ThreadState>) -> Result<(), GilError> {
        let held = self.region_state(ts)?;
        *ts.interrupter.lock() = None;
        if ts.flags.load(Ordering::Acquire) & F_ACTION != 0 {
            self.run_actions(ts, false);
        }
        ts.flags.fetch_and(!F_IN_REGION, Ordering::Relaxed);
        let f = ts.flags.load(Ordering::Acquire);
        let result = if f & (F_STOP | F_INVALID) != 0 {
            Err(self.refusal(ts, f))
        } else if held {
            self.acquire_slow(ts, WaitKind::Priority, true)
        } else {
            Ok(())
        };
        ts.status.store(S_RUNNING, Ordering::SeqCst);
        self.hook_unblock(ts, BlockReason::BlockingRegion);
        result
    }

    // ----- convoy-effect fix -----------------------------------------------------------

    /// Token bucket: refills at `priority_share` of wall time up to `priority_burst`;
    /// priority is granted while the budget is positive.
    fn priority_eligible(&self, ts: &ThreadState) -> bool {
        let share = self.config.priority_share;
        if share <= 0.0 {
            return false;
        }
        let now = self.now_ns();
        let last = ts.prio_refill_ns.swap(now, Ordering::Relaxed);
        let cap = i64::try_from(self.config.priority_burst.as_nanos()).unwrap_or(i64::MAX);
        let refill = ((now - last).max(0) as f64 * share) as i64;
        let budget = ts
            .prio_budget_ns
            .load(Ordering::Relaxed)
            .saturating_add(refill)
            .min(cap);
        ts.prio_budget_ns.store(budget, Ordering::Relaxed);
        budget > 0
    }

    /// Charges the time of a priority hold that ends now.
    fn charge_priority(&self, ts: &ThreadState) {
        let start = ts.prio_hold_start_ns.swap(-1, Ordering::Relaxed);
        if start >= 0 {
            let held = (self.now_ns() - start).max(0);
            ts.prio_budget_ns.fetch_sub(held, Ordering::Relaxed);
        }
    }

    // ----- actions ---------------------------------------------------------------------

    /// Runs the actions pending for `ts` on the calling thread (which is `ts`'s thread).
    pub(crate) fn run_actions(&self, ts: &Arc<ThreadState>, holds_gil: bool) {
        if ts.flags.load(Ordering::Relaxed) & F_IN_ACTION != 0 {
            return; // actions do not nest
        }
        ts.flags.fetch_and(!F_ACTION, Ordering::AcqRel);
        let pending = std::mem::take(&mut *ts.actions.lock());
        if pending.is_empty() {
            return;
        }
        ts.flags.fetch_or(F_IN_ACTION, Ordering::Relaxed);
        for action in pending {
            action.run_on(ts.thread_id(), &ts.name, holds_gil);
            self.stats.actions_run.bump();
        }
        ts.flags.fetch_and(!F_IN_ACTION, Ordering::Relaxed);
    }

    /// Wakes `ts` wherever it is blocked: unparks a waiter, interrupts a blocking region.
    ///
    /// Callers set the thread's flag (under the state mutex) before calling this. A
    /// running thread needs no wake-up: it sees the flag at its next poll. A thread that
    /// starts waiting does so under the state mutex and checks its flags before parking;
    /// one entering a region publishes its status and interrupter under the
    /// interrupter's mutex, which this takes, and checks its flags after: either this
    /// sees the region and interrupts it, or the entry sees the flag. So no wake-up is
    /// lost, by mutexes alone (no store-load ordering between two atomics, which the
    /// loom models could not check: loom treats SeqCst accesses as AcqRel).
    pub(crate) fn wake(&self, ts: &ThreadState) {
        let (status, interrupter) = {
            let slot = ts.interrupter.lock();
            let status = ts.status.load(Ordering::SeqCst);
            let interrupter = if status == S_BLOCKING {
                slot.clone()
            } else {
                None
            };
            (status, interrupter)
        };
        if status != S_RUNNING {
            ts.parker.unpark();
        }
        if let Some(interrupt) = interrupter {
            interrupt();
        }
    }

    // ----- hooks -----------------------------------------------------------------------

    pub(crate) fn set_hooks(&self, hooks: Option<StdArc<dyn GilHooks>>) {
        let present = hooks.is_some();
        *self.hooks.lock() = hooks;
        self.has_hooks.store(present, Ordering::Release);
    }

    fn hook(&self) -> Option<StdArc<dyn GilHooks>> {
        if self.has_hooks.load(Ordering::Acquire) {
            self.hooks.lock().clone()
        } else {
            None
        }
    }

    fn hook_block(&self, ts: &ThreadState, reason: BlockReason) {
        if let Some(h) = self.hook() {
            let id = ts.thread_id();
            ts.flags.fetch_or(F_IN_HOOK, Ordering::Relaxed);
            let r =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h.on_block(id, reason)));
            ts.flags.fetch_and(!F_IN_HOOK, Ordering::Relaxed);
            if r.is_err() {
                tracing::error!(gil = %self.label, thread = %ts.label(), "on_block hook panicked; ignored");
            }
        }
    }

    fn hook_unblock(&self, ts: &ThreadState, reason: BlockReason) {
        if let Some(h) = self.hook() {
            let id = ts.thread_id();
            ts.flags.fetch_or(F_IN_HOOK, Ordering::Relaxed);
            let r =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h.on_unblock(id, reason)));
            ts.flags.fetch_and(!F_IN_HOOK, Ordering::Relaxed);
            if r.is_err() {
                tracing::error!(gil = %self.label, thread = %ts.label(), "on_unblock hook panicked; ignored");
            }
        }
    }
}
