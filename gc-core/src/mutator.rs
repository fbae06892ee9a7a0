//! Mutator threads: attaching, the allocation fast path, safepoints, GC-safe regions and
//! the write barrier.
//!
//! Each attached thread owns, per size class, the page it allocates from: a free list
//! threaded through the cell headers and, on a fresh page, a bump range of zeroed
//! cells. The fast path takes a cell from one of them with plain loads and stores (no
//! lock, no atomic read-modify-write), zeroes the payload and writes the header. Only
//! when the page is exhausted does the thread take the heap's page lock for another.
//!
//! Stopping the world is a Dekker handshake on two SeqCst variables: the collector sets
//! the heap's `gc_flag`, then reads every thread's `state`; a thread leaving a GC-safe
//! region sets its `state` to RUNNING, then reads `gc_flag`. One of the two always sees
//! the other, so no thread runs managed code during a collection.
//!
//! Layering: the [`Mutator`] and [`MutatorShared`] types are in `state.rs` (they refer
//! to the heap's state and it to them), with the one-thread half of the stop-the-world
//! handshake (`MutatorShared::park`); their methods here sit above `collect` (an
//! allocation may collect) and `weak` (finalizers run at safepoints), below `heap`.

use crate::big::{self, BigHeader};
use crate::callbacks::CallbackKind;
use crate::error::GcError;
use crate::object::{back_barrier_fires, barrier_fires, Header, ObjRef, FREE_END};
use crate::page::Sweeper;
use crate::sizeclass::{class_of, CELL_SIZES, MAX_INTERNAL_OBJ_SIZE};
use crate::state::{Heap, Mutator, MutatorShared, DETACHED, RUNNING, SAFE};
use crate::stats::CollectionInfo;
use crate::task::{current_thread_stack, Task};
use crate::tlab::{CachedType, Local, Pool};
use crate::tls::{save_registers, thread_id, TlsHead, MUTATOR_DEAD, MUTATOR_MAGIC, SAVED_REGS};
use crate::types::{TypeKind, TypeRef};
use crate::CollectionKind;
use std::cell::{Cell, UnsafeCell};
use std::ffi::c_void;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

/// Detached mutators, kept for reuse so that their memory stays a mutator.
static SPARE: parking_lot::Mutex<Vec<Arc<MutatorShared>>> = parking_lot::Mutex::new(Vec::new());

thread_local! {
    /// The mutator the calling thread is attached as (null if none).
    static CURRENT: Cell<*const MutatorShared> = const { Cell::new(std::ptr::null()) };
    /// The calling thread's attachment, detached when the thread exits if it still is
    /// then: a `Mutator` leaked with `mem::forget` (safe) would otherwise stay registered
    /// after its thread is gone, and every later collection would wait for that thread.
    static EXIT_DETACH: ExitDetach = const { ExitDetach(std::cell::RefCell::new(None)) };
}

struct ExitDetach(std::cell::RefCell<Option<Arc<MutatorShared>>>);

impl Drop for ExitDetach {
    fn drop(&mut self) {
        if let Some(shared) = self.0.get_mut().take() {
            if still_attached_here(&shared) {
                tracing::debug!("a thread exited attached (its Mutator leaked): detached");
                detach(&shared);
            }
        }
    }
}

/// Whether `shared` is attached, by the calling thread (not detached, and not recycled
/// for another thread since).
fn still_attached_here(shared: &MutatorShared) -> bool {
    shared.state.load(Ordering::SeqCst) != DETACHED
        && shared.head.thread.load(Ordering::SeqCst) == thread_id()
}

/// The calling thread's mutator, if it is attached (the C API's `jl_get_ptls_states`).
#[inline]
pub(crate) fn current() -> *const MutatorShared {
    CURRENT.with(|c| c.get())
}

/// Whether the calling thread is running a collection: the collecting mutator (callbacks,
/// root scanners, sweep functions) or a collector helper thread (mark functions).
pub(crate) fn on_collector_thread() -> bool {
    let me = current();
    // SAFETY: the current thread's mutator is alive while attached.
    (!me.is_null() && unsafe { &*me }.in_collection.load(Ordering::Relaxed))
        || !crate::tls::helper_ptls().is_null()
}

/// The task (own stack) of the calling thread, if it is attached to a heap.
pub fn current_thread_task() -> Option<Arc<Task>> {
    let m = current();
    // SAFETY: the current thread's mutator is alive while attached.
    (!m.is_null()).then(|| unsafe { &*m }.task.clone())
}

impl MutatorShared {
    /// The part of this record C code reads (`gc_tls_head_t`): magic, owning thread,
    /// marker, verify flag, saved registers.
    ///
    /// # Safety
    /// The fields are atomics that gc-core's C layer trusts (a `ptls` whose magic and
    /// thread match is used as the calling thread's mutator): the caller only reads
    /// them.
    #[inline(always)]
    pub unsafe fn head(&self) -> &TlsHead {
        &self.head
    }

    /// Points the head's `alloc` at this mutator's allocation state (the compat
    /// header's inline `jl_gc_alloc_typed` then allocates on the owning thread without
    /// a call), or at nothing in verify mode, where every allocation is checked.
    pub(crate) fn publish_alloc_state(&self) {
        let state = if self.head.checked.load(Ordering::Relaxed) {
            std::ptr::null_mut()
        } else {
            self.local.get().cast::<c_void>()
        };
        self.head.alloc.store(state, Ordering::Release);
    }

    /// `Ok` if the owning thread runs managed code; otherwise why not: detached
    /// ([`GcError::NotAttached`], as through a borrowed handle after the owning
    /// [`Mutator`] was dropped) or inside a GC-safe region.
    #[inline]
    pub(crate) fn check_running(&self) -> Result<(), GcError> {
        match self.state.load(Ordering::Relaxed) {
            RUNNING => Ok(()),
            DETACHED => Err(GcError::NotAttached),
            _ => Err(GcError::InGcSafeRegion),
        }
    }

    /// Whether the owning thread runs managed code: not stopped at a safepoint, not in
    /// a GC-safe region, not detached (one relaxed load; the C allocation fast path's
    /// test before it touches the thread's current page).
    #[inline(always)]
    pub fn is_running(&self) -> bool {
        self.state.load(Ordering::Relaxed) == RUNNING
    }

    /// Whether the owning thread is inside a collection (running its callbacks, mark
    /// functions or sweep functions), where allocation and most heap calls are refused.
    #[inline]
    pub fn in_collection(&self) -> bool {
        self.in_collection.load(Ordering::Relaxed)
    }

    /// The registers saved when the thread last stopped (at a safepoint, in a GC-safe
    /// region or collecting): the copy its task keeps ([`Task::saved_registers`]), which
    /// any thread may read at any time (atomically; while the thread runs it is the
    /// previous stop's). The buffer the thread saves them into (`gc_tls_head_t`'s
    /// `regs`, written by the thread itself, by the C ABI's assembly too) is never read
    /// by another thread.
    pub fn saved_registers(&self) -> [usize; SAVED_REGS] {
        self.task.saved_registers()
    }

    /// The thread's own stack.
    pub fn task(&self) -> &Arc<Task> {
        &self.task
    }

    /// Whether the thread currently counts as stopped (at a safepoint or GC-safe).
    pub fn is_stopped(&self) -> bool {
        self.state.load(Ordering::Acquire) != RUNNING
    }

    /// The slow part of a safepoint poll: a collection was requested.
    #[cold]
    #[inline(never)]
    pub(crate) fn safepoint_slow(&self) {
        if self.in_collection.load(Ordering::Relaxed) {
            return;
        }
        let heap = self.heap();
        let mut w = heap.world.lock();
        if w.collecting {
            self.park(&mut w);
        }
        drop(w);
        crate::weak::after_resume(self);
    }

    /// Enters a GC-safe region without a guard, for code that cannot hold a [`GcSafe`]
    /// across the region (a C ABI's `gc_safe_enter`/`gc_safe_leave`): records `regs` (the
    /// callee-saved registers and, last, the stack pointer of the frame that stays live
    /// during the region, as [`save_registers`] gives them) as where the thread stopped,
    /// and from then on collections may run without waiting for the thread. Returns the
    /// state to give [`MutatorShared::leave_gc_safe`].
    ///
    /// # Safety
    /// Called on the thread this mutator belongs to, which touches no object of the heap
    /// (allocation is refused: [`GcError::InGcSafeRegion`]) until the matching
    /// `leave_gc_safe`; `regs`' stack pointer is in the live part of the thread's stack
    /// for the whole region.
    #[inline]
    pub unsafe fn enter_gc_safe(&self, regs: &[usize; SAVED_REGS]) -> SafeState {
        // SAFETY: the calling thread's own register buffer (caller); nothing else reads
        // it.
        unsafe { *self.head.regs.get() = *regs };
        match self.enter_safe_saved() {
            RUNNING => SafeState::Running,
            _ => SafeState::Safe,
        }
    }

    /// [`MutatorShared::enter_gc_safe`] saving the caller's own registers, with `sp` as
    /// the lowest stack address in use during the region instead of the caller's stack
    /// pointer: for a callback called deeper than the frame that stays live while the
    /// thread blocks (a GIL's block hook). Refused ([`GcError::BadStackPointer`]) unless
    /// `sp` is in the live part of the thread's stack, at or above the caller's frame.
    ///
    /// # Safety
    /// As for `enter_gc_safe`; the frame at `sp` has spilled the callee-saved registers
    /// that may hold references into itself and does not return before the matching
    /// `leave_gc_safe`.
    #[inline(always)]
    pub unsafe fn enter_gc_safe_at(&self, sp: usize) -> Result<SafeState, GcError> {
        let mut regs = [0; SAVED_REGS];
        save_registers(&mut regs);
        let here = regs[SAVED_REGS - 1];
        let (lo, hi) = self.task.stack_bounds();
        if sp < here || sp < lo || sp >= hi {
            return Err(GcError::BadStackPointer { sp, lo: here, hi });
        }
        regs[SAVED_REGS - 1] = sp;
        // SAFETY: forwarded from the caller.
        Ok(unsafe { self.enter_gc_safe(&regs) })
    }

    /// Leaves a GC-safe region entered with [`MutatorShared::enter_gc_safe`] (`state` is
    /// what it returned), waiting for a running collection to finish first.
    ///
    /// # Safety
    /// Called on the thread this mutator belongs to, with the state its matching
    /// `enter_gc_safe` returned.
    #[inline]
    pub unsafe fn leave_gc_safe(&self, state: SafeState) {
        self.leave_safe(match state {
            SafeState::Running => RUNNING,
            SafeState::Safe => SAFE,
        });
    }

    /// Marks the thread GC-safe; the caller (the thread itself) has saved the registers
    /// of the frame that stays live during the region.
    pub(crate) fn enter_safe_saved(&self) -> u8 {
        if self.in_collection.load(Ordering::Relaxed) {
            // The collecting thread itself, in a callback (a root scanner waiting for a
            // lock): nothing else runs, so the region changes nothing; the returned
            // state makes the matching leave a no-op too (it would otherwise wait for
            // the end of the collection this thread is running).
            return SAFE;
        }
        self.record_stop();
        if self.state.load(Ordering::Relaxed) == RUNNING {
            // SAFETY: the owning thread, still running (no collection touches its local
            // state): allocation goes to the slow path, which refuses it, until leave.
            let local = unsafe { &mut *self.local.get() };
            local.countdown_before_safe = std::mem::replace(&mut local.countdown, 0);
        }
        let old = self.state.swap(SAFE, Ordering::SeqCst);
        let heap = self.heap();
        if heap.gc_flag.load(Ordering::SeqCst) != 0 {
            let _w = heap.world.lock();
            heap.cv_stopped.notify_all();
        }
        old
    }

    /// Leaves a GC-safe region, waiting for a running collection to end first.
    pub(crate) fn leave_safe(&self, old: u8) {
        if old != RUNNING {
            return;
        }
        self.state.store(RUNNING, Ordering::SeqCst);
        let heap = self.heap();
        if heap.gc_flag.load(Ordering::SeqCst) != 0 {
            let mut w = heap.world.lock();
            if w.collecting {
                self.state.store(SAFE, Ordering::SeqCst);
                heap.cv_stopped.notify_all();
                while w.collecting {
                    heap.cv_resume.wait(&mut w);
                }
                self.state.store(RUNNING, Ordering::SeqCst);
            }
        }
        // SAFETY: the owning thread, running again (no collection touches its local
        // state).
        let local = unsafe { &mut *self.local.get() };
        local.countdown = local.countdown_before_safe;
        if heap.fin_pending.load(Ordering::Relaxed) != 0 {
            crate::weak::after_resume(self);
        }
    }

    /// The type of this mutator's heap at `addr` (a C caller's type pointer): O(1), a
    /// pool object of the heap whose own type is the meta type; `NotAType` otherwise.
    /// Called by the owning thread while it runs managed code (no collection frees an
    /// object meanwhile, and types are permanent).
    pub(crate) fn type_at(&self, addr: usize) -> Result<TypeRef, GcError> {
        let heap = self.heap();
        let not_a_type = GcError::NotAType { addr };
        if !crate::lookup::is_internal_object(heap.id(), addr) {
            return Err(not_a_type);
        }
        let obj = ObjRef::from_addr(addr).ok_or(not_a_type.clone())?;
        // SAFETY: an allocated, live object of this heap (the lookup above; nothing is
        // freed while the owning thread runs managed code).
        let h = unsafe { obj.header_bits() };
        if h.type_addr() != heap.datatype().as_obj().addr() {
            return Err(not_a_type);
        }
        Ok(TypeRef::new(obj, heap.id()))
    }

    /// A type of this mutator's heap that the thread allocated with recently, by its
    /// address (the C ABI's allocation: the last four types, kept by
    /// [`Self::type_at_cached`]; types live as long as their heap).
    ///
    /// # Safety
    /// Called on the thread that owns this mutator.
    #[inline(always)]
    pub unsafe fn cached_type(&self, addr: usize) -> Option<TypeRef> {
        // SAFETY: the owning thread's local state (caller).
        let local = unsafe { &*self.local.get() };
        if addr == 0 || !local.type_cache.iter().any(|t| t.addr == addr) {
            return None;
        }
        // SAFETY: a cached address was a type of this heap, and stays one.
        let obj = unsafe { ObjRef::from_addr(addr).unwrap_unchecked() };
        Some(TypeRef::new(obj, self.heap().id()))
    }

    /// [`Self::cached_type`], or else the checked lookup of a type of this heap at
    /// `addr`, whose type then joins the cache.
    ///
    /// # Safety
    /// Called on the thread that owns this mutator, running managed code.
    pub unsafe fn type_at_cached(&self, addr: usize) -> Result<TypeRef, GcError> {
        // SAFETY: forwarded.
        if let Some(t) = unsafe { self.cached_type(addr) } {
            return Ok(t);
        }
        let t = self.type_at(addr)?;
        // SAFETY: the owning thread's local state (caller).
        let local = unsafe { &mut *self.local.get() };
        let desc = t.desc();
        local.type_cache.rotate_right(1);
        local.type_cache[0] = CachedType {
            addr,
            min_size: desc.min_size,
            max_small: desc.max_small,
        };
        Ok(t)
    }

    /// Safepoint poll: one relaxed load when no collection is requested.
    ///
    /// # Safety
    /// Called on the thread that owns this mutator.
    #[inline(always)]
    pub unsafe fn safepoint(&self) {
        if self.heap().gc_flag.load(Ordering::Relaxed) != 0 {
            self.safepoint_slow();
        }
    }

    /// The allocation fast path (`jl_gc_alloc_typed`).
    ///
    /// # Safety
    /// Called on the thread that owns this mutator.
    #[inline(always)]
    pub unsafe fn alloc(&self, size: usize, ty: TypeRef) -> Result<ObjRef, GcError> {
        // SAFETY: forwarded.
        unsafe { self.alloc_impl::<false>(size, ty) }
    }

    /// The allocation fast path; `INTERNAL`: the heap allocates an object of one of its
    /// own types (weak references), whose `max_small` of 0 keeps everyone else off the
    /// fast path (and the slow path refuses them).
    ///
    /// # Safety
    /// Called on the thread that owns this mutator.
    #[inline(always)]
    unsafe fn alloc_impl<const INTERNAL: bool>(
        &self,
        size: usize,
        ty: TypeRef,
    ) -> Result<ObjRef, GcError> {
        // SAFETY: forwarded.
        match unsafe { self.alloc_fast::<INTERNAL>(size, ty) } {
            Some(obj) => Ok(obj),
            // SAFETY: forwarded.
            None => unsafe { self.alloc_slow(size, ty, INTERNAL) },
        }
    }

    /// The allocation fast path alone: a cell of the thread's current page for `ty`, or
    /// `None` when the slow path has to decide (validation, safepoint, stress
    /// mode, a big object, a page refill). Calls nothing, so that a caller inlining it
    /// needs no stack frame on its way to a cell.
    ///
    /// # Safety
    /// Called on the thread that owns this mutator.
    #[inline(always)]
    pub unsafe fn alloc_fast<const INTERNAL: bool>(
        &self,
        size: usize,
        ty: TypeRef,
    ) -> Option<ObjRef> {
        // The type's heap first: a type of another heap (or of a dropped one, whose
        // object may be gone) is not read.
        if ty.heap != self.heap().id() {
            return None;
        }
        // SAFETY: a type of this thread's heap, which is alive (the mutator holds it).
        let desc = ty.desc();
        // SAFETY: we are the owning thread (caller's contract).
        let local = unsafe { &mut *self.local.get() };
        let small = if INTERNAL {
            size.wrapping_sub(1) < MAX_INTERNAL_OBJ_SIZE
        } else {
            size.wrapping_sub(1) < desc.max_small
        };
        if small
            && size >= desc.min_size
            && local.countdown > 1
            && self.heap().gc_flag.load(Ordering::Relaxed) == 0
        {
            let class = class_of(size);
            let cell_size = CELL_SIZES[class] as usize;
            let pool = &mut local.pools[class];
            // SAFETY: the thread's own pool of `class`.
            let cell = unsafe { pool.take::<true>(cell_size) }?;
            // SAFETY: just taken from this pool.
            let obj = unsafe { pool.commit(cell, Header::new_young(ty.obj.addr()), class) };
            local.objects += 1;
            local.bytes += cell_size as u64;
            local.countdown -= 1;
            return Some(obj);
        }
        None
    }

    /// Allocates an object of a type only the heap itself makes objects of (weak
    /// references).
    ///
    /// # Safety
    /// Called on the thread that owns this mutator.
    #[inline]
    pub(crate) unsafe fn alloc_internal(
        &self,
        size: usize,
        ty: TypeRef,
    ) -> Result<ObjRef, GcError> {
        // SAFETY: forwarded.
        unsafe { self.alloc_impl::<true>(size, ty) }
    }

    /// Everything the fast path does not handle: validation, safepoints, stress mode,
    /// big objects and page refills. `internal`: the heap allocates an object of one of
    /// its own types (refused otherwise).
    ///
    /// # Safety
    /// Called on the thread that owns this mutator.
    #[cold]
    #[inline(never)]
    unsafe fn alloc_slow(
        &self,
        size: usize,
        ty: TypeRef,
        internal: bool,
    ) -> Result<ObjRef, GcError> {
        let heap = self.heap();
        if ty.heap != heap.id() {
            return Err(GcError::NotAType {
                addr: ty.obj.addr(),
            });
        }
        let desc = ty.desc();
        let name = || desc.name().to_string();
        if size == 0 {
            return Err(GcError::ZeroSize { type_name: name() });
        }
        if desc.kind.is_internal() && !internal {
            return Err(GcError::InvalidType {
                name: name(),
                reason: if desc.kind == TypeKind::DataType {
                    "types are created with new_foreign_type, not allocated".into()
                } else {
                    "weak-reference objects are made by new_weak_object (jl_gc_new_weakref)".into()
                },
            });
        }
        if size < desc.min_size {
            return Err(GcError::InvalidType {
                name: name(),
                reason: format!("size {size} is below the layout's size {}", desc.min_size),
            });
        }
        let big = desc.large || size > MAX_INTERNAL_OBJ_SIZE;
        if big && !desc.large && desc.kind == TypeKind::Foreign {
            return Err(GcError::TooLargeForSmallType {
                size,
                max: MAX_INTERNAL_OBJ_SIZE,
                type_name: name(),
            });
        }
        if self.in_collection.load(Ordering::Relaxed) {
            return Err(GcError::DuringCollection { what: "allocation" });
        }
        self.check_running()?;
        // SAFETY: owning thread (this function's contract).
        unsafe { self.safepoint() };
        // SAFETY: owning thread.
        let local = unsafe { &mut *self.local.get() };
        let stress = heap.stress_every.load(Ordering::Relaxed);
        // Stress mode: the fast path runs while countdown > 1, so a cycle of N
        // allocations is this one (N + 1 -> N) and N - 1 fast ones (N -> 1).
        if stress == 0 {
            local.countdown = u64::MAX;
        } else if local.countdown > stress + 1 {
            local.countdown = stress + 1;
        } else if local.countdown <= 1 {
            crate::collect::collect(self, CollectionKind::Auto)?;
            // SAFETY: owning thread.
            unsafe { &mut *self.local.get() }.countdown = stress + 1;
        }
        if big {
            // SAFETY: forwarded.
            return unsafe { self.alloc_big(size, ty) };
        }
        let class = class_of(size);
        let cell_size = CELL_SIZES[class] as usize;
        loop {
            // SAFETY: owning thread.
            let local = unsafe { &mut *self.local.get() };
            let pool = &mut local.pools[class];
            // SAFETY: the thread's own pool of `class`.
            if let Some(cell) = unsafe { pool.take::<false>(cell_size) } {
                // SAFETY: just taken from this pool.
                let obj = unsafe { pool.commit(cell, Header::new_young(ty.obj.addr()), class) };
                local.objects += 1;
                local.bytes += cell_size as u64;
                local.countdown = local.countdown.saturating_sub(1).max(1);
                return Ok(obj);
            }
            self.refill(class, size)?;
        }
    }

    /// Whether the bytes allocated since the last collection (plus `extra`) reached the
    /// heap's trigger. While the last collection's lazy sweep is unfinished the trigger is
    /// an estimate (the sweep sets the final one when it completes): the sweep is then
    /// finished here, on this thread, and the final trigger decides. So a program
    /// collects at the same points every run, whether the background sweep was quick or
    /// not (GCBench collected 33 or 35 times from run to run), and the pause does not
    /// sweep what is left.
    fn trigger_reached(&self, extra: usize) -> bool {
        let heap = self.heap();
        let over =
            || heap.allocd.load(Ordering::Relaxed) + extra >= heap.trigger.load(Ordering::Relaxed);
        if !over() {
            return false;
        }
        {
            let pages = heap.pages.lock();
            if pages.unswept_pages() > 0 && !pages.hold {
                // SAFETY: no collection marks while this thread runs managed code (it
                // would be stopped).
                drop(unsafe { heap.finish_sweep(pages, Sweeper::Allocation) });
            }
        }
        over()
    }

    /// Gives the exhausted page of `class` back and takes another (collecting first if
    /// the heap's trigger was reached).
    fn refill(&self, class: usize, size: usize) -> Result<(), GcError> {
        let heap = self.heap();
        if self.trigger_reached(0) {
            crate::collect::collect(self, CollectionKind::Auto)?;
        }
        // SAFETY: owning thread.
        let local = unsafe { &mut *self.local.get() };
        let pool = &mut local.pools[class];
        let grant = {
            // Contended, the wait is counted (`GcStats::page_lock_wait_time`).
            let mut pages = match heap.pages.try_lock() {
                Some(p) => p,
                None => {
                    let t0 = std::time::Instant::now();
                    let mut p = heap.pages.lock();
                    p.counters.lock_waits += 1;
                    p.counters.lock_wait_ns += t0.elapsed().as_nanos() as u64;
                    p
                }
            };
            if let Some(page) = pool.release() {
                pages.give_back(page, class, pool.free, pool.bump, pool.bump_end);
            }
            pages
                .grant(class, &heap.trigger)
                .map_err(|e| GcError::OutOfMemory {
                    size,
                    reason: e.to_string(),
                })?
        };
        heap.allocd.fetch_add(grant.bytes, Ordering::Relaxed);
        pool.hold(grant.page, grant.free, grant.bump, grant.bump_end);
        Ok(())
    }

    /// Allocates an external (big) object.
    ///
    /// # Safety
    /// Called on the thread that owns this mutator.
    unsafe fn alloc_big(&self, size: usize, ty: TypeRef) -> Result<ObjRef, GcError> {
        let heap = self.heap();
        heap.allocd.fetch_add(size, Ordering::Relaxed);
        if self.trigger_reached(0) {
            crate::collect::collect(self, CollectionKind::Auto)?;
            heap.allocd.fetch_add(size, Ordering::Relaxed);
        }
        let obj = big::alloc(size, ty.obj.addr(), self.heap().id()).ok_or_else(|| {
            GcError::OutOfMemory {
                size,
                reason: "the system allocator returned null".into(),
            }
        })?;
        {
            let mut lists = heap.big.lock();
            lists.young.push(obj);
            // SAFETY: obj was just allocated.
            lists.live += unsafe { big::size(obj) } + big::BIG_HEADER;
        }
        // SAFETY: owning thread.
        let local = unsafe { &mut *self.local.get() };
        local.objects += 1;
        local.countdown = local.countdown.saturating_sub(1).max(1);
        // SAFETY: obj was just allocated.
        let bytes = unsafe { big::size(obj) } as u64;
        local.bytes += bytes;
        local.big_objects += 1;
        local.big_bytes += bytes;
        if heap.callbacks.any(CallbackKind::ExternalAlloc) {
            for (_, cb) in heap.callbacks.snapshot(CallbackKind::ExternalAlloc).iter() {
                match &**cb {
                    crate::Callback::ExternalAlloc(f) => f(obj, size),
                    // SAFETY: a C callback of the seed's signature, given the new object
                    // (`Callback::c_external_alloc`'s contract).
                    crate::Callback::CExternalAlloc(f) => unsafe { f(obj.as_ptr().cast(), size) },
                    _ => {}
                }
            }
        }
        Ok(obj)
    }

    /// The write barrier (`jl_gc_wb`): call after storing `child` into `parent`.
    ///
    /// # Safety
    /// Owning thread; both objects live.
    #[inline(always)]
    pub unsafe fn wb(&self, parent: ObjRef, child: ObjRef) {
        // SAFETY: live objects (caller).
        if let Some(h) = unsafe { barrier_fires(parent, child) } {
            // SAFETY: forwarded.
            unsafe { self.remember(parent, h) };
        }
    }

    /// The backward write barrier (`jl_gc_wb_back`): call after storing references to
    /// possibly young objects into `parent` (in bulk).
    ///
    /// # Safety
    /// Owning thread; the object is live.
    #[inline(always)]
    pub unsafe fn wb_back(&self, parent: ObjRef) {
        // SAFETY: live object (caller).
        if let Some(h) = unsafe { back_barrier_fires(parent) } {
            // SAFETY: forwarded.
            unsafe { self.remember(parent, h) };
        }
    }

    #[cold]
    #[inline(never)]
    pub(crate) unsafe fn remember(&self, parent: ObjRef, h: Header) {
        // SAFETY: live object (caller); only the REMEMBERED bit changes.
        unsafe { parent.header() }.store(h.with_remembered().raw(), Ordering::Relaxed);
        // SAFETY: owning thread.
        let local = unsafe { &mut *self.local.get() };
        local.remset.push(parent);
        local.barrier_fires += 1;
    }

    /// `jl_gc_schedule_foreign_sweepfunc`: the object's sweep function will run once,
    /// when a sweep finds it dead.
    ///
    /// # Safety
    /// Owning thread; `obj` is a live object of this heap.
    pub unsafe fn schedule_sweep(&self, obj: ObjRef) -> Result<(), GcError> {
        let heap = self.heap();
        if !crate::lookup::is_object(heap.id(), obj.addr()) {
            return Err(GcError::NotAnObject {
                what: "schedule_sweep",
                addr: obj.addr(),
            });
        }
        // SAFETY: live object.
        let ty = TypeRef::new(
            ObjRef::from_addr(unsafe { obj.header_bits() }.type_addr()).expect("typed"),
            heap.id(),
        );
        let desc = ty.desc();
        if !desc.sweep.is_some() || desc.kind != TypeKind::Foreign {
            return Err(GcError::NoSweepFunction {
                addr: obj.addr(),
                type_name: desc.name().into(),
            });
        }
        let first = match crate::lookup::page_of(obj.addr()) {
            Some(page) if page.is_owned_by(heap.id()) && page.cell_layout().is_some() => {
                page.schedule_sweep(obj.addr())
            }
            // SAFETY: a live object of ours outside the pools is a big object.
            _ => !unsafe { BigHeader::of(obj) }
                .sched
                .swap(true, Ordering::AcqRel),
        };
        if !first {
            return Err(GcError::SweepAlreadyScheduled {
                addr: obj.addr(),
                type_name: desc.name().into(),
            });
        }
        // SAFETY: owning thread.
        unsafe { &mut *self.local.get() }.sweep_list.push(obj);
        Ok(())
    }
}

impl Mutator {
    pub(crate) fn attach(heap: &Heap) -> Result<Mutator, GcError> {
        if !current().is_null() {
            return Err(GcError::AlreadyAttached);
        }
        if on_collector_thread() {
            // A collector helper thread (a mark function's) would wait for its own
            // collection to end.
            return Err(GcError::DuringCollection { what: "attach" });
        }
        let (lo, hi) = current_thread_stack().ok_or(GcError::BadStackBounds { lo: 0, hi: 0 })?;
        let task = Arc::new(Task::new(lo, hi, true));
        let stress = heap.0.stress_every.load(Ordering::Relaxed);
        let fresh = MutatorShared {
            head: TlsHead {
                regs: UnsafeCell::new([0; SAVED_REGS]),
                magic: AtomicU64::new(MUTATOR_MAGIC),
                thread: AtomicUsize::new(thread_id()),
                marker: AtomicPtr::new(std::ptr::null_mut()),
                checked: AtomicBool::new(heap.0.verify.load(Ordering::Relaxed)),
                // Set below, once the record is in place.
                alloc: AtomicPtr::new(std::ptr::null_mut()),
            },
            heap: Arc::as_ptr(&heap.0),
            state: AtomicU8::new(RUNNING),
            local: UnsafeCell::new(Local {
                countdown: if stress == 0 { u64::MAX } else { stress + 1 },
                objects: 0,
                bytes: 0,
                gc_flag: &heap.0.gc_flag,
                class_of: crate::sizeclass::class_table_ptr(),
                type_cache: [CachedType::NONE; 4],
                pools: std::array::from_fn(|class| Pool::empty(Some(class))),
                remset: Vec::new(),
                sweep_list: Vec::new(),
                barrier_fires: 0,
                big_objects: 0,
                big_bytes: 0,
                countdown_before_safe: 0,
                weak_objs: Vec::new(),
                weak_dirty: false,
                fin_at_safepoints: false,
            }),
            task: task.clone(),
            in_collection: AtomicBool::new(false),
            name: {
                let t = std::thread::current();
                // SAFETY: gettid has no arguments and cannot fail.
                let tid = unsafe { libc::syscall(libc::SYS_gettid) };
                format!("thread '{}' (tid {tid})", t.name().unwrap_or("unnamed"))
            },
        };
        let shared = {
            let mut spare = SPARE.lock();
            let reusable = spare.iter().position(|s| Arc::strong_count(s) == 1);
            match reusable {
                Some(i) => {
                    let mut s = spare.swap_remove(i);
                    *Arc::get_mut(&mut s).expect("only the spare list holds it") = fresh;
                    s
                }
                None => Arc::new(fresh),
            }
        };
        shared.publish_alloc_state();
        {
            let mut w = heap.0.quiescent_world();
            heap.0.tasks.lock().push(task);
            w.mutators.push(shared.clone());
        }
        CURRENT.with(|c| c.set(Arc::as_ptr(&shared)));
        EXIT_DETACH.with(|g| *g.0.borrow_mut() = Some(shared.clone()));
        tracing::trace!(heap = %heap.0.id(), "thread attached");
        Ok(Mutator {
            shared,
            heap: heap.clone(),
            owned: true,
            _not_send: PhantomData,
        })
    }

    /// The C API's `ptls` for this thread.
    pub fn ptls(&self) -> *mut c_void {
        Arc::as_ptr(&self.shared) as *mut c_void
    }

    /// The shared per-thread state (registers saved at the last stop, stack).
    pub fn shared(&self) -> &MutatorShared {
        &self.shared
    }

    /// Allocates an object of `size` payload bytes of type `ty`, zeroed (the seed's
    /// `jl_gc_alloc_typed`). A safepoint: may run a collection.
    #[inline(always)]
    pub fn alloc_typed(&mut self, size: usize, ty: TypeRef) -> Result<ObjRef, GcError> {
        // SAFETY: a Mutator is !Send, so we are its owning thread.
        unsafe { self.shared.alloc(size, ty) }
    }

    /// Runs a collection (`Full`, `Partial`, or `Auto` to let the policy decide) and
    /// reports what it did; `None` if another thread's collection ran meanwhile and
    /// satisfied the request.
    pub fn collect(&mut self, kind: CollectionKind) -> Result<Option<CollectionInfo>, GcError> {
        crate::collect::collect(&self.shared, kind)
    }

    /// A safepoint poll: stops here if a collection is requested.
    #[inline(always)]
    pub fn safepoint(&mut self) {
        // SAFETY: a Mutator is !Send, so we are its owning thread.
        unsafe { self.shared.safepoint() };
    }

    /// Runs `f` in a GC-safe region: collections may run meanwhile and this thread does
    /// not hold them up. `f` cannot touch the heap (it cannot reach this mutator).
    /// [`Mutator::enter_gc_safe`] is the same region as a guard.
    #[inline(always)]
    pub fn gc_safe<R>(&mut self, f: impl FnOnce() -> R) -> R {
        let region = self.enter_gc_safe();
        let r = f();
        drop(region);
        r
    }

    /// Enters a GC-safe region (a blocking call, a wait for a lock): collections may run
    /// until the returned guard is dropped, and this thread does not hold them up. The
    /// guard borrows the mutator, so the thread cannot touch the heap through it
    /// meanwhile (another handle from [`Heap::current_mutator`] is refused too).
    /// Dropping it leaves the region, waiting for a running collection to finish first.
    ///
    /// The registers and the stack pointer recorded are this call's (it is inlined):
    /// references the region must keep alive are those the calling frame (or its
    /// callers) holds.
    ///
    /// ```
    /// use gc_core::Heap;
    ///
    /// let heap = Heap::default();
    /// let mut m = heap.attach().unwrap();
    /// let region = m.enter_gc_safe();
    /// std::thread::sleep(std::time::Duration::from_millis(1)); // others may collect
    /// drop(region); // leaves; `m` may allocate again
    /// ```
    ///
    /// Forgetting the guard (`mem::forget`) leaves the thread in the region: allocation
    /// and collection through the mutator are then refused ([`GcError::InGcSafeRegion`]).
    #[inline(always)]
    pub fn enter_gc_safe(&mut self) -> GcSafe<'_> {
        let mut regs = [0; SAVED_REGS];
        save_registers(&mut regs);
        // SAFETY: a Mutator is !Send, so this is its own thread; the guard borrows the
        // mutator for the region, so the thread cannot touch the heap through it; the
        // registers are this frame's, which outlives the guard.
        let state = unsafe { self.shared.enter_gc_safe(&regs) };
        GcSafe {
            shared: &self.shared,
            state,
            _not_send: PhantomData,
        }
    }

    /// The write barrier: call after storing a reference to `child` into `parent`.
    ///
    /// # Safety
    /// Both objects are live objects of this heap.
    #[inline(always)]
    pub unsafe fn wb(&mut self, parent: ObjRef, child: ObjRef) {
        // SAFETY: forwarded; owning thread.
        unsafe { self.shared.wb(parent, child) }
    }

    /// The backward write barrier: call after storing references to possibly young
    /// objects into `parent`.
    ///
    /// # Safety
    /// `parent` is a live object of this heap.
    #[inline(always)]
    pub unsafe fn wb_back(&mut self, parent: ObjRef) {
        // SAFETY: forwarded; owning thread.
        unsafe { self.shared.wb_back(parent) }
    }

    /// Stores `value` into the reference slot at byte `offset` of `parent` and applies
    /// the write barrier.
    ///
    /// # Safety
    /// `parent` is a live object with a reference slot at `offset`; `value` is null or
    /// a live object of this heap.
    #[inline(always)]
    pub unsafe fn store_ref(&mut self, parent: ObjRef, offset: usize, value: Option<ObjRef>) {
        // SAFETY: forwarded.
        unsafe {
            parent.write_slot(offset, value.map_or(0, |v| v.addr()));
            if let Some(v) = value {
                self.shared.wb(parent, v);
            }
        }
    }

    /// Loads the reference slot at byte `offset` of `obj`.
    ///
    /// # Safety
    /// `obj` is a live object with a reference slot at `offset`.
    #[inline(always)]
    pub unsafe fn load_ref(&self, obj: ObjRef, offset: usize) -> Option<ObjRef> {
        // SAFETY: forwarded.
        ObjRef::from_addr(unsafe { obj.read_slot(offset) })
    }

    /// Schedules the sweep function of foreign object `obj` (once; a second call is an
    /// error and never causes a second sweep).
    ///
    /// # Safety
    /// `obj` is a live object of this heap.
    pub unsafe fn schedule_foreign_sweepfunc(&mut self, obj: ObjRef) -> Result<(), GcError> {
        // SAFETY: forwarded; owning thread.
        unsafe { self.shared.schedule_sweep(obj) }
    }

    /// The thread's own stack, registered as a task.
    pub fn task(&self) -> &Arc<Task> {
        &self.shared.task
    }
}

/// The state of a thread before it entered a GC-safe region
/// ([`MutatorShared::enter_gc_safe`]), to give back when it leaves; the C ABI's
/// `gc_safe_enter` returns it as an integer.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(i8)]
pub enum SafeState {
    /// Running managed code (leaving waits out a collection, then runs again).
    Running = 0,
    /// Already counted as stopped (a nested region, or the collecting thread itself in
    /// a callback): leaving changes nothing.
    Safe = 1,
}

impl SafeState {
    /// The state from its integer form (`gc_safe_enter`'s result); `None` for others.
    pub fn from_raw(raw: i8) -> Option<SafeState> {
        match raw {
            0 => Some(SafeState::Running),
            1 => Some(SafeState::Safe),
            _ => None,
        }
    }
}

/// A GC-safe region of the calling thread ([`Mutator::enter_gc_safe`]); dropping it
/// leaves the region. Not `Send`: it stands for the thread that entered it.
#[must_use = "the region ends when the guard is dropped"]
pub struct GcSafe<'m> {
    shared: &'m MutatorShared,
    state: SafeState,
    _not_send: PhantomData<*mut ()>,
}

impl Drop for GcSafe<'_> {
    fn drop(&mut self) {
        // SAFETY: the guard lives on the thread that entered the region (it is !Send),
        // with the state that entry returned.
        unsafe { self.shared.leave_gc_safe(self.state) };
    }
}

impl Drop for Mutator {
    fn drop(&mut self) {
        // Not if the thread-exit guard detached it already (a Mutator kept in a
        // thread-local that is destroyed after the guard).
        if self.owned && still_attached_here(&self.shared) {
            detach(&self.shared);
        }
    }
}

/// Detaches `shared` from its heap: waits out a running collection, hands the thread's
/// pages, big objects, remembered set and scheduled sweeps to the heap.
pub(crate) fn detach(shared: &Arc<MutatorShared>) {
    let heap = shared.heap();
    assert!(
        !shared.in_collection.load(Ordering::Relaxed),
        "a mutator cannot detach from inside a collection it is running"
    );
    let mut w = heap.world.lock();
    while w.collecting {
        shared.park(&mut w);
    }
    {
        // SAFETY: we are the owning thread and no collection runs (world lock held).
        let local = unsafe { &mut *shared.local.get() };
        let mut pages = heap.pages.lock();
        for (class, pool) in local.pools.iter_mut().enumerate() {
            if let Some(page) = pool.release() {
                pages.give_back(page, class, pool.free, pool.bump, pool.bump_end);
            }
            pool.free = FREE_END;
            pool.bump = 0;
            pool.bump_end = 0;
        }
        drop(pages);
        let mut gc = heap.gc.lock();
        gc.stats.barrier_fires += std::mem::take(&mut local.barrier_fires);
        gc.stats.big_objects_allocated += std::mem::take(&mut local.big_objects);
        gc.stats.big_bytes_allocated += std::mem::take(&mut local.big_bytes);
        gc.remset.append(&mut local.remset);
        gc.sweep_list.append(&mut local.sweep_list);
        drop(gc);
        if !local.weak_objs.is_empty() {
            let mut ws = heap.weak.lock();
            ws.objs_young.append(&mut local.weak_objs);
            ws.objs_dirty |= std::mem::take(&mut local.weak_dirty);
        }
        heap.detached_objects
            .fetch_add(local.objects, Ordering::Relaxed);
        heap.detached_bytes
            .fetch_add(local.bytes, Ordering::Relaxed);
        local.objects = 0;
        local.bytes = 0;
    }
    w.mutators.retain(|m| !Arc::ptr_eq(m, shared));
    heap.tasks.lock().retain(|t| !Arc::ptr_eq(t, &shared.task));
    shared.state.store(DETACHED, Ordering::SeqCst);
    shared.head.magic.store(MUTATOR_DEAD, Ordering::SeqCst);
    shared
        .head
        .alloc
        .store(std::ptr::null_mut(), Ordering::SeqCst);
    // The compat header's cached jl_get_ptls_states compares this field alone.
    shared.head.thread.store(0, Ordering::SeqCst);
    SPARE.lock().push(shared.clone());
    drop(w);
    CURRENT.with(|c| {
        if c.get() == Arc::as_ptr(shared) {
            c.set(std::ptr::null());
        }
    });
    // The exit guard's reference, unless the guard is being destroyed (it took it).
    let _ = EXIT_DETACH.try_with(|g| {
        if let Ok(mut held) = g.0.try_borrow_mut() {
            if held.as_ref().is_some_and(|h| Arc::ptr_eq(h, shared)) {
                *held = None;
            }
        }
    });
    tracing::trace!(heap = %heap.id(), "thread detached");
}
