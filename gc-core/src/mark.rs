//! Marking: mark stacks, `queue` (the seed's `jl_gc_mark_queue_obj`), `queue_array`
//! (`jl_gc_mark_queue_objarray`), and the drain loop of each collector thread.
//!
//! Nothing recurses on the native stack: scanning an object only pushes its unmarked
//! children, so a linked list of any length needs one stack slot at a time. An array of
//! references takes one entry of a separate array stack, processed [`ARRAY_CHUNK`]
//! elements at a time.
//!
//! # One marker per collector thread
//! Every thread that marks (the collecting thread, and the heap's helper threads when
//! `mark_threads > 1`) has its own [`Marker`]: its own mark stack (plain words, pushed
//! without atomics, also by the inline C fast path of `jl_gc_mark_queue_obj` through
//! [`MarkFast`], the marker's first field), its own remembered-set buffer and counters.
//! For sharing, each marker owns a work-stealing deque (`crossbeam-deque`): while some
//! collector thread is idle and what it shared before has been taken (its deque is
//! empty), a busy one moves the older half of its stack (at most 4,096 entries, in
//! batches of 64 per deque item, and halves of long arrays) to its deque, where idle
//! threads steal them. It looks every 32 objects it scans, and every 256 entries pushed
//! within one scan (a mark function queuing millions of objects in one call). `par.rs`
//! has the termination protocol. Mark functions therefore run on any collector thread, possibly
//! at the same time on several; each gets the `ptls` of the thread it runs on, and
//! `queue` pushes to that thread's own stack.
//!
//! Marking a header is a plain load and store: two threads racing on one object may
//! both push it, which only scans it twice (its children are queued twice, which is
//! idempotent, and the remembered set is deduplicated).
//!
//! # Generations
//! `queue` returns whether the child is young after this collection, which is what a
//! foreign mark function counts and returns. A young object marked a second time (it
//! survived the previous collection: `AGE` set) is promoted right there. After an
//! object is scanned, if it is old and has young children, it goes into the remembered
//! set for the next collection (header bit `REMEMBERED`): partial collections rescan it
//! instead of the whole old generation.
//!
//! Verify mode reuses the same machinery with marking turned off: scanning an old object
//! then only counts its young children, which must be zero unless the object is in the
//! remembered set (otherwise a write barrier was missed).
//!
//! Layering: the [`Marker`] struct and its work items are `marker.rs` (below the type
//! descriptors, whose mark functions take a `&mut Marker`); the marking here reads type
//! descriptors (`types`), pages (`lookup`, `big`) and the helper threads' records
//! (`tls`, `par`), never the heap's state: a marker knows its heap by id.

use crate::big::BigHeader;
use crate::heap_id::HeapId;
use crate::marker::{ArrayWork, MarkFast, Marker, Mode, ParJob, ScanTask, Team, Work};
use crate::object::{prefetch, Header, ObjRef, HEADER_SIZE};
use crate::par::Termination;
use crate::task::Task;
use crate::types::{MarkProc, TypeDesc, TypeKind};
use crossbeam_deque::{Steal, Stealer, Worker};
use std::collections::HashSet;
use std::ffi::c_void;
use std::marker::PhantomData;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// How far ahead array scanning prefetches.
const PREFETCH_AHEAD: usize = 8;

/// Elements of an object array processed per step.
pub const ARRAY_CHUNK: usize = 2048;

/// Objects scanned between two looks at whether another collector thread is idle.
const SHARE_EVERY: u32 = 32;

/// Most entries moved from a mark stack to its deque at once (1,024 and 4,096 gave GAP's
/// bigheap the same longest pause within its spread, 4,096 slightly less).
const SHARE_MAX: usize = 4096;

/// Entries per deque item when sharing ([`Work::Objs`]). One at a time, the pushes
/// cost more than the work they share: each reads the deque's `front`, which a
/// stealing thread keeps writing (GAP's bigheap with two mark threads: a quarter of
/// the collecting thread's time in `share`).
const SHARE_BATCH: usize = 64;

/// Pushes between two looks at whether another collector thread is idle, inside one
/// object's scan: a mark function that queues millions of objects in one call (GAP's
/// for a list of millions of bags) would otherwise keep them all from the other
/// threads until it returns. The look costs nothing on the push path: while a parallel
/// drain runs, the stack's `limit` is set this many entries above `top`, so the push
/// that reaches it goes out of line (`grow`), shares, and sets the next one.
const SHARE_PUSHES: usize = 256;

/// A new mark stack's capacity, in entries.
const STACK_MIN: usize = 4096;

impl<'h> Marker<'h> {
    pub(crate) fn new(
        heap_id: HeapId,
        full: bool,
        parity: usize,
        young_parity: usize,
        ptls: *mut c_void,
        stack: Vec<usize>,
    ) -> Self {
        let mut buf = stack;
        buf.clear();
        if buf.capacity() < STACK_MIN {
            buf = Vec::with_capacity(STACK_MIN);
        }
        let base = buf.as_mut_ptr();
        let (old_mask, old_want) = Header::old_mark_test(full, parity);
        Marker {
            fast: MarkFast {
                slow: 0,
                top: base,
                // SAFETY: one past the end of buf's allocation.
                limit: unsafe { base.add(buf.capacity()) },
                old_mask,
                old_want,
                young_marked: Header::young_marked(young_parity),
                marked: 0,
                young: 0,
            },
            base,
            buf,
            arrays: Vec::new(),
            tasks: Vec::new(),
            task_scan: None,
            team_drains: 0,
            helper_marked: 0,
            heap_id,
            _heap: PhantomData,
            full,
            parity,
            next_remset: Vec::new(),
            ptls,
            mode: Mode::Mark,
            big_set: None,
            errors: Vec::new(),
            verify_first_young: None,
            kept_for_finalizers: 0,
            deque: Worker::new_lifo(),
            index: 0,
            job: std::ptr::null(),
            since_share: 0,
            team: std::ptr::null(),
            solo_first: 0,
            #[cfg(test)]
            words_moved: 0,
        }
    }

    /// The mark stack's storage (empty, its capacity kept), for the next collection's
    /// marker ([`Marker::new`]): a stack that grew to millions of entries would
    /// otherwise be allocated, faulted in and copied at every doubling again in every
    /// collection (GAP's bigheap: a tenth of both threads' marking time).
    pub(crate) fn take_stack(&mut self) -> Vec<usize> {
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        self.base = std::ptr::null_mut();
        self.fast.top = std::ptr::null_mut();
        self.fast.limit = std::ptr::null_mut();
        buf
    }

    /// From now on, this (the collecting thread's) marker drains with `team`, alone for
    /// the first `solo_first` objects of each drain.
    pub(crate) fn set_team(&mut self, team: &Team<'_, '_>, solo_first: usize) {
        self.team = (team as *const Team<'_, '_>).cast::<Team<'static, 'static>>();
        self.solo_first = solo_first;
    }

    /// Back to draining alone (before the team goes away).
    pub(crate) fn clear_team(&mut self) {
        self.team = std::ptr::null();
    }

    /// A stealer of this marker's deque, for the other participants.
    pub(crate) fn stealer(&self) -> Stealer<Work> {
        self.deque.stealer()
    }

    /// Objects marked by this marker so far.
    pub(crate) fn objects_marked(&self) -> u64 {
        self.fast.marked
    }

    /// The id of the heap being collected ([`crate::Heap::id`]).
    pub fn heap_id(&self) -> HeapId {
        self.heap_id
    }

    /// Bytes available in the payload of a live object of the heap being collected
    /// (see [`crate::Heap::object_capacity`]).
    ///
    /// # Safety
    /// `obj` is a live object of this heap.
    pub unsafe fn object_capacity(&self, obj: ObjRef) -> usize {
        // SAFETY: forwarded from the caller.
        unsafe { crate::big::object_capacity(obj) }
    }

    /// Whether this is a full collection (old objects are traced too).
    pub fn is_full(&self) -> bool {
        self.full
    }

    /// Whether `obj` (a live object of the heap being collected) is marked so far: it
    /// survives this collection if so. In a partial collection every old object counts
    /// as marked (only the young generation is collected).
    ///
    /// # Safety
    /// `obj` is an allocated object of this heap (its header is read): an `ObjRef` is
    /// only an address, and the marker cannot check one cheaply.
    #[inline]
    pub unsafe fn is_marked(&self, obj: ObjRef) -> bool {
        // SAFETY: the caller hands us an allocated object of this heap.
        let h = unsafe { obj.header_bits() };
        if h.is_old() {
            h.old_mark_is(self.fast.old_mask, self.fast.old_want)
        } else {
            h.is_young_marked(self.fast.young_marked)
        }
    }

    /// Pushes a marked object to scan.
    #[inline(always)]
    fn push(&mut self, obj: usize) {
        if self.fast.top == self.fast.limit {
            self.grow();
        }
        // SAFETY: top is below limit, inside buf's allocation.
        unsafe {
            self.fast.top.write(obj);
            self.fast.top = self.fast.top.add(1);
        }
    }

    #[inline(always)]
    fn pop(&mut self) -> Option<usize> {
        if self.fast.top == self.base {
            self.rewind();
            return None;
        }
        // SAFETY: top is above base: the slot below it holds a pushed object.
        unsafe {
            self.fast.top = self.fast.top.sub(1);
            Some(self.fast.top.read())
        }
    }

    /// Starts loading what the objects a few pops ahead will need: the header line of
    /// the one `FAR` entries down the stack, and for the one `NEAR` down (whose line the
    /// first prefetch fetched `FAR - NEAR` pops ago), the header line of what its first
    /// payload word points at, if that word looks like an address: a reference in an
    /// object's first word is common (GAP's master pointers hold nothing else), and the
    /// mark function reads that target's header. Measured on GAP 4.12.1's heap (100 full
    /// collections of its start-up heap, alternated): 6.5-7.7 s against 7.3-8.6 s
    /// without (about 15% less marking); a word that is no address costs one useless
    /// prefetch, which never faults.
    #[inline(always)]
    fn prefetch_ahead(&self) {
        const FAR: usize = 8;
        const NEAR: usize = 4;
        let depth = self.len();
        if depth > FAR {
            // SAFETY: the slot FAR below top holds a pushed object.
            let far = unsafe { self.fast.top.sub(FAR).read() };
            prefetch(far.wrapping_sub(HEADER_SIZE));
        }
        if depth > NEAR {
            // SAFETY: as above.
            let near = unsafe { self.fast.top.sub(NEAR).read() };
            // SAFETY: a pushed object is live, and every object's cell has at least one
            // payload word.
            let w0 = unsafe { (near as *const usize).read() };
            if w0 & 7 == 0 && w0 > 4096 {
                prefetch(w0.wrapping_sub(HEADER_SIZE));
            }
        }
    }

    fn len(&self) -> usize {
        (self.fast.top as usize - self.base as usize) / 8
    }

    /// An empty stack starts again at the bottom of its storage (sharing may have moved
    /// its bottom up).
    #[inline(always)]
    fn rewind(&mut self) {
        let start = self.buf.as_mut_ptr();
        if self.base != start {
            self.base = start;
            self.fast.top = start;
        }
    }

    /// Makes room for one more entry (`top == limit`): slides the live entries back to
    /// the start of the storage when sharing freed at least half of it below them,
    /// otherwise moves them to storage twice as large. Either way each entry moved is
    /// paid for by at least as many pushes or shared entries since the last move, so
    /// the cost per entry stays constant however deep the stack.
    ///
    /// While a parallel drain runs, `limit` may lie below the end of the storage
    /// ([`SHARE_PUSHES`]): reaching it offers the oldest entries to an idle thread.
    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        let len = self.len();
        let start = self.buf.as_mut_ptr();
        let cap = self.buf.capacity();
        // SAFETY: one past the end of the storage.
        let end = unsafe { start.add(cap) };
        if self.fast.top < end {
            if !self.job.is_null() {
                self.share();
            }
            self.set_limit();
            return;
        }
        // SAFETY: base lies inside buf's allocation, at or above its start.
        let below = unsafe { self.base.offset_from(start) } as usize;
        if below >= cap / 2 {
            // SAFETY: [base, base + len) is initialised and inside the storage; the
            // ranges may overlap (copy is memmove).
            unsafe { std::ptr::copy(self.base, start, len) };
            self.base = start;
        } else {
            let mut bigger: Vec<usize> = Vec::with_capacity(cap * 2);
            // SAFETY: the len words from base are initialised; the new storage has room
            // for them.
            unsafe { std::ptr::copy_nonoverlapping(self.base, bigger.as_mut_ptr(), len) };
            self.buf = bigger;
            self.base = self.buf.as_mut_ptr();
        }
        #[cfg(test)]
        {
            self.words_moved += len;
        }
        // SAFETY: len <= capacity of the storage, which starts at base.
        self.fast.top = unsafe { self.base.add(len) };
        self.set_limit();
    }

    /// Sets where the next push goes out of line: the end of the storage, or inside a
    /// parallel drain [`SHARE_PUSHES`] entries above `top` if that comes first.
    fn set_limit(&mut self) {
        let start = self.buf.as_mut_ptr();
        // SAFETY: top lies inside the storage (at most one past its end).
        let room = self.buf.capacity() - unsafe { self.fast.top.offset_from(start) } as usize;
        let room = if self.job.is_null() {
            room
        } else {
            room.min(SHARE_PUSHES)
        };
        // SAFETY: at most one past the end of the storage.
        self.fast.limit = unsafe { self.fast.top.add(room) };
    }

    /// Queues `obj` for marking (the seed's `jl_gc_mark_queue_obj`) and returns whether
    /// it is young (after this collection). A mark function counts the `true` results
    /// and returns the count.
    ///
    /// # Safety
    /// `obj` is an allocated object of this heap (a reference read from a live object's
    /// reference slot, a root): its header is read and written. An `ObjRef` is only an
    /// address, and checking one on this hot path would cost a page-table lookup per
    /// reference (verify mode does check every queued reference). Safe code cannot
    /// queue an arbitrary address:
    ///
    /// ```compile_fail,E0133
    /// fn mark(m: &mut gc_core::Marker<'_>, obj: gc_core::ObjRef) -> usize {
    ///     m.queue(obj) as usize
    /// }
    /// ```
    #[inline]
    pub unsafe fn queue(&mut self, obj: ObjRef) -> bool {
        if self.fast.slow != 0 {
            // SAFETY: forwarded from the caller.
            return unsafe { self.queue_slow(obj) };
        }
        // SAFETY: the caller hands us a reference to a live object of this heap.
        let hdr = unsafe { obj.header() };
        let h = Header::from_raw(hdr.load(Ordering::Relaxed));
        if h.is_old() {
            if !h.old_mark_is(self.fast.old_mask, self.fast.old_want) {
                hdr.store(h.mark_flipped().raw(), Ordering::Relaxed);
                self.fast.marked += 1;
                self.push_if_scannable(obj, h);
            }
            false
        } else if h.is_young_marked(self.fast.young_marked) {
            self.fast.young += 1;
            true
        } else if h.has_age() {
            self.promote(obj, h)
        } else {
            hdr.store(
                h.first_marked(self.fast.young_marked).raw(),
                Ordering::Relaxed,
            );
            self.fast.marked += 1;
            self.fast.young += 1;
            self.push_if_scannable(obj, h);
            true
        }
    }

    /// Marks a young object that survived the previous collection: it is promoted now.
    #[cold]
    #[inline(never)]
    fn promote(&mut self, obj: ObjRef, h: Header) -> bool {
        // SAFETY: a live object (queue's contract).
        let hdr = unsafe { obj.header() };
        hdr.store(h.promoted(self.parity).raw(), Ordering::Relaxed);
        self.fast.marked += 1;
        self.push_if_scannable(obj, h);
        false
    }

    /// The out-of-line queue: verify and keep-young modes.
    ///
    /// # Safety
    /// As for [`Marker::queue`] (verify mode checks `obj` first).
    #[cold]
    #[inline(never)]
    pub(crate) unsafe fn queue_slow(&mut self, obj: ObjRef) -> bool {
        if self.big_set.is_some() && !self.valid_object(obj) {
            return false;
        }
        // SAFETY: a live object (queue's contract; checked above in verify mode).
        let hdr = unsafe { obj.header() };
        let h = Header::from_raw(hdr.load(Ordering::Relaxed));
        let young = h.is_young();
        match self.mode {
            Mode::Mark => {
                self.fast.slow = 0;
                // SAFETY: queue_slow's caller guarantees a live object of this heap.
                let r = unsafe { self.queue(obj) };
                self.fast.slow = 1;
                r
            }
            Mode::Verify => {
                if young && self.verify_first_young.is_none() {
                    self.verify_first_young = Some(obj);
                }
                self.fast.young += young as u64;
                young
            }
            Mode::MarkKeepYoung => {
                if !young {
                    // Old objects are marked as usual (only in full collections can one
                    // be unmarked here).
                    self.fast.slow = 0;
                    // SAFETY: as above.
                    let r = unsafe { self.queue(obj) };
                    self.fast.slow = 1;
                    return r;
                }
                if !h.is_young_marked(self.fast.young_marked) {
                    hdr.store(
                        h.marked_young(self.fast.young_marked).raw(),
                        Ordering::Relaxed,
                    );
                    self.fast.marked += 1;
                    self.kept_for_finalizers += match crate::lookup::page_of(obj.addr()) {
                        Some(page) if page.is_owned_by(self.heap_id) => {
                            page.cell_layout().map_or(0, |(cell, _)| cell)
                        }
                        // SAFETY: not in a pool page of ours: a live big object.
                        _ => (unsafe { crate::big::size(obj) }) + crate::big::BIG_HEADER,
                    };
                    self.push_if_scannable(obj, h);
                }
                self.fast.young += 1;
                true
            }
        }
    }

    /// Turns keep-young marking on or off: young objects marked while it is on are not
    /// promoted by this collection.
    pub(crate) fn keep_young(&mut self, on: bool) {
        self.set_mode(if on { Mode::MarkKeepYoung } else { Mode::Mark });
    }

    pub(crate) fn set_mode(&mut self, mode: Mode) {
        self.mode = mode;
        self.fast.slow = (mode != Mode::Mark || self.big_set.is_some()) as usize;
    }

    /// Verify mode: validate every queued reference from now on.
    pub(crate) fn set_big_set(&mut self, set: Arc<HashSet<usize>>) {
        self.big_set = Some(set);
        self.fast.slow = 1;
    }

    /// Queues an optional reference; `None` (a null slot) is ignored.
    ///
    /// # Safety
    /// As for [`Marker::queue`].
    #[inline]
    pub unsafe fn queue_opt(&mut self, obj: Option<ObjRef>) -> bool {
        // SAFETY: forwarded from the caller.
        obj.is_some_and(|o| unsafe { self.queue(o) })
    }

    /// Queues the `n` references at `objs` that belong to `parent` (the seed's
    /// `jl_gc_mark_queue_objarray`): one mark-stack entry for the whole array,
    /// processed in chunks; null entries are skipped. Young children found put `parent`
    /// into the remembered set if it is old, so this returns nothing.
    ///
    /// # Safety
    /// `objs..objs+n` must be inside `parent`'s payload (not on a stack or in static
    /// memory: it is read later in this mark phase) and hold null or valid references.
    pub unsafe fn queue_array(&mut self, parent: ObjRef, objs: *const Option<ObjRef>, n: usize) {
        if n == 0 {
            return;
        }
        let cur = objs as *const usize;
        // SAFETY: the caller guarantees the range is inside the parent's payload.
        let end = unsafe { cur.add(n) };
        if self.mode == Mode::Verify {
            // SAFETY: forwarded from the caller.
            let young = unsafe { self.scan_range(cur, end) };
            self.after_scan(parent, young);
            return;
        }
        self.arrays.push(ArrayWork {
            parent,
            cur,
            end,
            young: 0,
        });
    }

    #[inline(always)]
    fn push_if_scannable(&mut self, obj: ObjRef, h: Header) {
        // SAFETY: h is the header of a live object: its type pointer is a live type.
        let desc = unsafe { &*(h.type_addr() as *const TypeDesc) };
        if desc.has_pointers {
            self.push(obj.addr());
        }
    }

    /// Pushes an object to scan without marking it (remembered objects, work taken from
    /// a deque).
    pub(crate) fn push_to_scan(&mut self, obj: ObjRef) {
        self.push(obj.addr());
    }

    /// Queues every non-null word of `[cur, end)`; returns the young count.
    ///
    /// # Safety
    /// The range is readable and holds null or valid references.
    unsafe fn scan_range(&mut self, mut cur: *const usize, end: *const usize) -> usize {
        let mut young = 0;
        while cur < end {
            // SAFETY: inside the caller's range.
            let v = unsafe { cur.read() };
            // SAFETY: pointer arithmetic only; the read below stays inside the range.
            let ahead = unsafe { cur.add(PREFETCH_AHEAD) };
            if ahead < end {
                // SAFETY: inside the caller's range.
                let w = unsafe { ahead.read() };
                if w != 0 {
                    prefetch(w.wrapping_sub(HEADER_SIZE));
                }
            }
            if let Some(child) = ObjRef::from_addr(v) {
                // SAFETY: a non-null reference of a live object's reference array (the
                // caller's contract), so a live object of this heap.
                young += unsafe { self.queue(child) } as usize;
            }
            // SAFETY: still within or one past the caller's range.
            cur = unsafe { cur.add(1) };
        }
        young
    }

    /// Records the outcome of scanning `obj`: with young children and old, it joins the
    /// next remembered set.
    #[inline]
    fn after_scan(&mut self, obj: ObjRef, young: usize) {
        if young == 0 && self.mode != Mode::Verify {
            return;
        }
        // SAFETY: obj is a live object being scanned.
        let hdr = unsafe { obj.header() };
        let h = Header::from_raw(hdr.load(Ordering::Relaxed));
        if self.mode == Mode::Verify {
            self.after_scan_verify(obj, young, h);
            return;
        }
        if h.is_old_unremembered() {
            hdr.store(h.with_remembered().raw(), Ordering::Relaxed);
            self.next_remset.push(obj);
        }
    }

    #[cold]
    #[inline(never)]
    fn after_scan_verify(&mut self, obj: ObjRef, young: usize, h: Header) {
        if young > 0 && h.is_old_unremembered() {
            let child = self.verify_first_young.map_or(0, |c| c.addr());
            // SAFETY: h is a live object's header.
            let ty = unsafe { &*(h.type_addr() as *const TypeDesc) }
                .name()
                .to_string();
            self.errors.push(format!(
                "old object {:#x} (type {ty}) references young object {child:#x} but is not in the remembered set: a write barrier (gc_wb) is missing",
                obj.addr()
            ));
        }
    }

    /// Scans one object: calls its type's marking procedure.
    ///
    /// # Safety
    /// `m` points to the live marker of the running collection and no reference to it
    /// is alive (a C mark function reaches it again through `ptls`).
    #[inline(always)]
    unsafe fn scan(m: *mut Marker<'_>, obj: ObjRef) {
        // SAFETY: obj is a marked, live object; its header holds its type.
        let hdr = unsafe { obj.header() };
        let h = Header::from_raw(hdr.load(Ordering::Relaxed));
        if h.is_old_remembered() {
            hdr.store(h.without_remembered().raw(), Ordering::Relaxed);
        }
        // SAFETY: the type pointer of a live object is a live type object.
        let desc = unsafe { &*(h.type_addr() as *const TypeDesc) };
        if !desc.has_pointers {
            return;
        }
        let young = match desc.kind {
            TypeKind::Layout => {
                let mut young = 0;
                let offsets = desc.offsets();
                if offsets.len() > 1 {
                    // Start loading every child's header first, so that the misses overlap.
                    for &off in offsets {
                        // SAFETY: as below.
                        let v = unsafe { obj.read_slot(off as usize) };
                        if v != 0 {
                            prefetch(v.wrapping_sub(HEADER_SIZE));
                        }
                    }
                }
                for &off in offsets {
                    // SAFETY: layout offsets were validated against the type's size, and
                    // the object has at least that size (allocation checks it).
                    let v = unsafe { obj.read_slot(off as usize) };
                    if let Some(child) = ObjRef::from_addr(v) {
                        // SAFETY: m is valid (caller) and no other borrow is alive.
                        young += unsafe { (*m).queue(child) } as usize;
                    }
                }
                young
            }
            _ => {
                // The young children are counted here as the mark function queues them
                // (`MarkFast::young`); its own count only adds to that.
                // SAFETY: m is valid (caller); no borrow is kept across the calls.
                unsafe { (*m).fast.young = 0 };
                let returned = match desc.mark {
                    MarkProc::None => 0,
                    // SAFETY: m is valid and unaliased during the call (caller's contract).
                    MarkProc::Rust(f) => f(unsafe { &mut *m }, obj),
                    MarkProc::C(f) => {
                        // SAFETY: reading the ptls field; no borrow is kept across the call.
                        let ptls = unsafe { (*m).ptls };
                        // SAFETY: a C mark function (`MarkProc::c`'s contract), called with
                        // this collector thread's ptls and a live object of its type.
                        unsafe { f(ptls, obj.as_ptr().cast()) }
                    }
                };
                // SAFETY: as above; the call has returned.
                returned.max(unsafe { (*m).fast.young } as usize)
            }
        };
        // SAFETY: as above; the call has returned.
        unsafe { (*m).after_scan(obj, young) };
    }

    /// Processes one step of the array work on top of the array stack.
    ///
    /// # Safety
    /// As for `scan`.
    unsafe fn step_array(m: *mut Marker<'_>, a: ArrayWork) {
        let ArrayWork {
            parent,
            cur,
            end,
            young,
        } = a;
        let chunk_end = if (end as usize - cur as usize) / 8 > ARRAY_CHUNK {
            // SAFETY: cur..end lies in the parent's payload (queue_array's contract) and
            // holds more than ARRAY_CHUNK words.
            unsafe { cur.add(ARRAY_CHUNK) }
        } else {
            end
        };
        // SAFETY: m is valid.
        let marker = unsafe { &mut *m };
        if chunk_end < end && !marker.job.is_null() {
            // SAFETY: job is the running parallel drain.
            let job = unsafe { &*marker.job };
            let rest = (end as usize - chunk_end as usize) / 8;
            if rest > 2 * ARRAY_CHUNK && job.term.someone_idle() {
                // Give half of the rest away.
                // SAFETY: inside the range.
                let mid = unsafe { chunk_end.add(rest / 2) };
                marker.deque.push(Work::Array(ArrayWork {
                    parent,
                    cur: mid,
                    end,
                    young: 0,
                }));
                // SAFETY: m is valid; the range is inside the live parent.
                let found = unsafe { (*m).scan_range(cur, chunk_end) };
                // SAFETY: as above.
                unsafe { &mut *m }.arrays.push(ArrayWork {
                    parent,
                    cur: chunk_end,
                    end: mid,
                    young: young + found,
                });
                return;
            }
        }
        // SAFETY: m is valid; the range is inside the live parent.
        let found = unsafe { (*m).scan_range(cur, chunk_end) };
        let young = young + found;
        // SAFETY: m is valid.
        let marker = unsafe { &mut *m };
        if chunk_end < end {
            marker.arrays.push(ArrayWork {
                parent,
                cur: chunk_end,
                end,
                young,
            });
        } else {
            marker.after_scan(parent, young);
        }
    }

    /// Processes this marker's own stacks until empty.
    ///
    /// # Safety
    /// As for `scan`.
    unsafe fn drain_local(m: *mut Marker<'_>) {
        // SAFETY: forwarded.
        unsafe { Self::drain_local_for(m, usize::MAX) };
    }

    /// Processes this marker's own stacks until empty or `budget` objects and array
    /// steps were processed; returns whether they are empty.
    ///
    /// # Safety
    /// As for `scan`.
    unsafe fn drain_local_for(m: *mut Marker<'_>, mut budget: usize) -> bool {
        loop {
            if budget == 0 {
                // SAFETY: m is valid.
                return unsafe { (*m).is_empty() };
            }
            budget -= 1;
            // SAFETY: m is valid; the borrow ends with the statement.
            unsafe { (*m).prefetch_ahead() };
            // SAFETY: m is valid; the borrow ends with the statement.
            let next = unsafe { (*m).pop() };
            if let Some(obj) = next {
                // SAFETY: forwarded; pushed objects are live.
                unsafe { Self::scan(m, ObjRef::from_addr(obj).unwrap_unchecked()) };
                // SAFETY: m is valid.
                let marker = unsafe { &mut *m };
                if !marker.job.is_null() {
                    marker.since_share += 1;
                    if marker.since_share >= SHARE_EVERY {
                        marker.since_share = 0;
                        marker.share();
                    }
                }
                continue;
            }
            // SAFETY: m is valid.
            let array = unsafe { (*m).arrays.pop() };
            if let Some(a) = array {
                // SAFETY: forwarded.
                unsafe { Self::step_array(m, a) };
                continue;
            }
            // SAFETY: m is valid.
            let task = unsafe { (*m).tasks.pop() };
            match task {
                // SAFETY: forwarded; a pending task is held by the collection.
                Some(t) => unsafe { Self::scan_task(m, t) },
                None => return true,
            }
        }
    }

    /// Whether this marker's own stacks (objects, arrays, tasks) are empty.
    fn is_empty(&self) -> bool {
        self.len() == 0 && self.arrays.is_empty() && self.tasks.is_empty()
    }

    /// Queues `task`'s scan as mark work: scanned by whichever collector thread takes
    /// it ([`crate::TaskScan::WhileMarking`]).
    pub(crate) fn push_task(&mut self, task: *const Task) {
        self.tasks.push(task);
    }

    /// Runs the task scanners for `task` on this collector thread, then offers the
    /// other pending tasks to idle threads.
    ///
    /// # Safety
    /// As for `scan`; `task` is held by the collection until marking ends.
    unsafe fn scan_task(m: *mut Marker<'_>, task: *const Task) {
        // SAFETY: m is valid; the reference is copied out before the call.
        let job: Option<&dyn ScanTask> = unsafe { (*m).task_scan };
        if let Some(job) = job {
            // SAFETY: forwarded (m unaliased: no borrow of it is alive here); the task
            // is alive (caller).
            unsafe { job.scan(m, &*task) };
        }
        // SAFETY: m is valid.
        let marker = unsafe { &mut *m };
        if !marker.job.is_null() {
            marker.share();
        }
    }

    /// While another collector thread is idle and this marker's deque is empty, moves
    /// the older half of the mark stack (up to `SHARE_MAX` entries) and the other
    /// pending arrays to the deque.
    /// Sharing again before the last batch was taken only costs the sharer: a thief that
    /// drains cheap work at once would otherwise keep it moving entries all the time.
    /// The entries go from the bottom of the stack, which then starts above them: the
    /// rest of the stack stays where it is. (It used to be moved down after every share:
    /// with a few million entries, as after GAP's mark function of a list of 4 million
    /// strings, each share of 1024 entries moved 32 MB, and pauses of 0.3 s took 3 s.)
    fn share(&mut self) {
        // SAFETY: called only while a parallel drain runs (job non-null).
        let job = unsafe { &*self.job };
        if !job.term.someone_idle() || !self.deque.is_empty() {
            return;
        }
        let len = self.len();
        if len >= 2 {
            let n = (len / 2).min(SHARE_MAX);
            let mut i = 0;
            while i < n {
                let k = (n - i).min(SHARE_BATCH);
                // SAFETY: i + k <= n < len: initialised stack slots.
                let entries = unsafe { std::slice::from_raw_parts(self.base.add(i), k) };
                let batch: Box<[ObjRef]> = entries
                    .iter()
                    // SAFETY: stack entries are live objects (non-null).
                    .map(|&obj| unsafe { ObjRef::from_addr(obj).unwrap_unchecked() })
                    .collect();
                self.deque.push(Work::Objs(batch));
                i += k;
            }
            // SAFETY: n < len: the new bottom is still inside the initialised part.
            self.base = unsafe { self.base.add(n) };
        }
        while self.arrays.len() > 1 {
            let a = self.arrays.remove(0);
            self.deque.push(Work::Array(a));
        }
        // Pending tasks too, all but one (a task's scan may queue much).
        while self.tasks.len() > 1 {
            let t = self.tasks.remove(0);
            self.deque.push(Work::Task(t));
        }
    }

    fn take(&mut self, w: Work) {
        match w {
            Work::Objs(batch) => {
                for o in batch.iter() {
                    self.push(o.addr());
                }
            }
            Work::Array(a) => self.arrays.push(a),
            Work::Task(t) => self.tasks.push(t),
        }
    }

    /// Tries to steal work from the other participants into this marker.
    fn steal(&mut self, job: &ParJob) -> bool {
        let n = job.stealers.len();
        loop {
            let mut retry = false;
            for k in 1..n {
                let i = (self.index + k) % n;
                match job.stealers[i].steal_batch_and_pop(&self.deque) {
                    Steal::Success(w) => {
                        self.take(w);
                        return true;
                    }
                    Steal::Retry => retry = true,
                    Steal::Empty => {}
                }
            }
            if !retry {
                return false;
            }
        }
    }

    /// Processes the mark stack until empty: alone, or, inside a parallel drain
    /// ([`Marker::drain_parallel`]), until no participant has work left.
    ///
    /// # Safety
    /// As for `scan`.
    pub(crate) unsafe fn drain(m: *mut Marker<'_>) {
        // SAFETY: m is valid.
        let marker = unsafe { &mut *m };
        if marker.job.is_null() && !marker.team.is_null() {
            // Small drains (most of a partial collection's) end before waking a helper
            // would pay off: start alone, call the team only if work remains.
            // SAFETY: forwarded.
            if unsafe { Self::drain_local_for(m, marker.solo_first) } {
                return;
            }
            // SAFETY: forwarded; the team outlives every drain (cleared before it goes).
            unsafe { Self::drain_team(m) };
            return;
        }
        loop {
            // SAFETY: forwarded.
            unsafe { Self::drain_local(m) };
            // SAFETY: m is valid.
            let marker = unsafe { &mut *m };
            if marker.job.is_null() {
                return;
            }
            if let Some(w) = marker.deque.pop() {
                marker.take(w);
                continue;
            }
            // SAFETY: the job outlives the drain.
            let job = unsafe { &*marker.job };
            if marker.steal(job) {
                continue;
            }
            let me = marker.index;
            let others = || {
                job.stealers
                    .iter()
                    .enumerate()
                    .any(|(i, s)| i != me && !s.is_empty())
            };
            if !crate::par::idle_loop(&job.term, others) {
                return;
            }
        }
    }

    /// The collecting thread's drain with its team: a parallel job over the pool.
    ///
    /// # Safety
    /// As for `scan`; `m`'s team is alive and its helper markers are not in use.
    unsafe fn drain_team(m: *mut Marker<'_>) {
        // SAFETY: m is valid.
        let m0 = unsafe { &mut *m };
        if m0.is_empty() {
            return;
        }
        m0.team_drains += 1;
        // SAFETY: the team outlives the drain (caller).
        let team = unsafe { &*m0.team };
        for &h in &team.helpers {
            // SAFETY: helper markers are only used inside jobs, none of which runs.
            unsafe { (*h).set_mode(m0.mode) };
        }
        let job = ParJob {
            term: Termination::new(1),
            stealers: team.stealers.clone(),
        };
        struct Ctx<'a, 'h> {
            m0: *mut Marker<'h>,
            helpers: &'a [*mut Marker<'h>],
            job: &'a ParJob,
            ptls0: *mut c_void,
        }
        // SAFETY: each participant only touches its own marker (m0 by participant 0,
        // helpers[i - 1] by participant i); the job is shared through atomics and
        // crossbeam's Sync stealers.
        unsafe impl Sync for Ctx<'_, '_> {}
        let ctx = Ctx {
            m0: m.cast::<Marker<'static>>(),
            helpers: &team.helpers,
            job: &job,
            ptls0: m0.ptls,
        };
        let ctx = &ctx;
        let work = move |i: usize| {
            if i == 0 {
                // SAFETY: participant 0 is the collecting thread with its own marker.
                unsafe { Self::drain_parallel(ctx.m0, ctx.job, 0, ctx.ptls0) };
            } else if let Some(&h) = ctx.helpers.get(i - 1) {
                if ctx.job.term.join() {
                    let head = crate::tls::helper_ptls();
                    // SAFETY: a helper thread's record lives as long as the thread; its
                    // marker pointer is read only by C code on this thread.
                    unsafe { (*head).marker.store(h as *mut c_void, Ordering::Release) };
                    // SAFETY: helper i alone uses marker h during this job.
                    unsafe { Self::drain_parallel(h, ctx.job, i, head as *mut c_void) };
                    // SAFETY: as above.
                    unsafe {
                        (*head)
                            .marker
                            .store(std::ptr::null_mut(), Ordering::Release)
                    };
                }
            }
        };
        team.pool.run(&work);
        for &h in &team.helpers {
            // SAFETY: the job is over: no helper uses its marker any more.
            m0.absorb(unsafe { &mut *h });
        }
    }

    /// One participant's part of a parallel drain `job`, as participant `index`, on
    /// the thread whose `ptls` is `ptls`. Returns when the job is over.
    ///
    /// # Safety
    /// As for `scan`; `job` outlives the call and every participant's stealer is in it.
    pub(crate) unsafe fn drain_parallel(
        m: *mut Marker<'_>,
        job: &ParJob,
        index: usize,
        ptls: *mut c_void,
    ) {
        // SAFETY: m is valid.
        let marker = unsafe { &mut *m };
        marker.job = job;
        marker.index = index;
        marker.ptls = ptls;
        marker.set_limit();
        // SAFETY: forwarded.
        unsafe { Self::drain(m) };
        // SAFETY: m is valid.
        let marker = unsafe { &mut *m };
        marker.job = std::ptr::null();
        marker.set_limit();
        debug_assert!(marker.is_empty());
    }

    /// Merges what a helper's marker found into this one (after a parallel drain).
    pub(crate) fn absorb(&mut self, other: &mut Marker<'_>) {
        self.next_remset.append(&mut other.next_remset);
        let theirs = std::mem::take(&mut other.fast.marked);
        self.fast.marked += theirs;
        self.helper_marked += theirs;
        self.kept_for_finalizers += std::mem::take(&mut other.kept_for_finalizers);
        self.errors.append(&mut other.errors);
    }

    /// Verify mode: counts the young children of old object `obj` not in the remembered
    /// set and records an error for each such object.
    ///
    /// # Safety
    /// As for `scan`; `obj` is a live old object.
    pub(crate) unsafe fn verify_object(m: *mut Marker<'_>, obj: ObjRef) {
        // SAFETY: m is valid.
        unsafe {
            (*m).set_mode(Mode::Verify);
            (*m).verify_first_young = None;
        }
        // SAFETY: obj is live.
        let h = unsafe { obj.header_bits() };
        // SAFETY: type of a live object.
        let desc = unsafe { &*(h.type_addr() as *const TypeDesc) };
        if desc.has_pointers && !h.is_remembered() {
            // Scanning in verify mode never clears REMEMBERED (the bit is clear here).
            // SAFETY: forwarded.
            unsafe { Self::scan(m, obj) };
        }
        // SAFETY: m is valid.
        unsafe { (*m).set_mode(Mode::Mark) };
    }

    /// Verify mode: whether `obj` is an allocated object of this heap; records an error
    /// otherwise.
    fn valid_object(&mut self, obj: ObjRef) -> bool {
        let a = obj.addr();
        let ok = if a % 16 != 0 {
            false
        } else if crate::lookup::page_of(a).is_some() {
            crate::lookup::is_internal_object(self.heap_id, a)
        } else {
            self.big_set.as_ref().is_some_and(|s| s.contains(&a)) && {
                // SAFETY: a registered big object of this heap is live.
                Header::from_raw(unsafe { BigHeader::of(obj) }.tag.load(Ordering::Relaxed))
                    .is_allocated()
            }
        };
        if !ok {
            self.errors.push(format!(
                "invalid reference {a:#x} queued for marking: not an allocated object of this heap (header would be at {:#x})",
                a.wrapping_sub(HEADER_SIZE)
            ));
        }
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::marker::ParJob;
    use crate::par::Termination;
    use crossbeam_deque::{Steal, Stealer};

    /// A marker with `n` entries on its stack (addresses never dereferenced: sharing
    /// only moves entries), inside a job where another participant is idle.
    fn deep_marker(n: usize) -> Marker<'static> {
        let mut m = Marker::new(HeapId::next(), true, 0, 0, std::ptr::null_mut(), Vec::new());
        for i in 0..n {
            m.push(0x1000_0000 + 16 * i);
        }
        m
    }

    /// A parallel job over `m`'s deque in which the other participant is idle.
    fn job_with_an_idle_thief(m: &Marker<'_>) -> ParJob {
        let job = ParJob {
            term: Termination::new(2),
            stealers: vec![m.stealer()],
        };
        job.term.go_idle();
        job
    }

    /// The entries `thief` can take now, in batches of at most `SHARE_BATCH`.
    fn steal_all(thief: &Stealer<Work>) -> Vec<usize> {
        let mut out = Vec::new();
        while let Steal::Success(w) = thief.steal() {
            let Work::Objs(batch) = w else {
                panic!("only objects were pushed")
            };
            assert!(batch.len() <= SHARE_BATCH);
            out.extend(batch.iter().map(|o| o.addr()));
        }
        out
    }

    /// Regression (issue 34): sharing the bottom of a deep mark stack moved every entry
    /// above it down, once per share of at most `SHARE_MAX` entries, so a stack of
    /// millions of entries (GAP's mark function of a 4-million-element list pushes one
    /// per element) cost a quadratic amount of copying and 3 s pauses with two mark
    /// threads where one thread paused 0.3 s. The entries that stay must stay put.
    #[test]
    fn sharing_leaves_the_rest_of_a_deep_stack_where_it_is() {
        let n = 1 << 20;
        let mut m = deep_marker(n);
        let job = job_with_an_idle_thief(&m);
        m.job = &job;
        let thief = m.stealer();
        let mut shared = 0;
        while m.len() >= 2 {
            let top = m.fast.top;
            let before = m.len();
            m.share();
            let moved_out = before - m.len();
            assert!((1..=SHARE_MAX).contains(&moved_out));
            assert_eq!(m.fast.top, top, "the entries left on the stack moved");
            // The top entry is still the last one pushed.
            // SAFETY: the stack holds at least one entry below top.
            let last = unsafe { m.fast.top.sub(1).read() };
            assert_eq!(last, 0x1000_0000 + 16 * (n - 1));
            shared += steal_all(&thief).len();
        }
        assert_eq!(shared + m.len(), n);
        m.job = std::ptr::null();
    }

    /// A scan that pushes many entries in one call (GAP's mark function of a list of
    /// millions of bags) offers some to an idle thread while it pushes, every
    /// `SHARE_PUSHES` entries, and every entry ends up in one place exactly once.
    #[test]
    fn a_long_scan_shares_while_it_pushes() {
        let mut m = deep_marker(0);
        let job = job_with_an_idle_thief(&m);
        m.job = &job;
        m.set_limit();
        let thief = m.stealer();
        let mut seen = std::collections::HashSet::new();
        let n = 100 * SHARE_PUSHES;
        let mut shares = 0;
        for i in 0..n {
            m.push(0x1000_0000 + 16 * i);
            let taken = steal_all(&thief);
            shares += !taken.is_empty() as usize;
            for e in taken {
                assert!(seen.insert(e), "an entry was shared twice");
            }
        }
        assert!(shares >= 50, "{shares} shares during {n} pushes");
        while let Some(e) = m.pop() {
            assert!(seen.insert(e), "an entry was on the stack and shared");
        }
        assert_eq!(seen.len(), n);
        m.job = std::ptr::null();
    }

    /// Growing and compacting a stack that is shared from its bottom and pushed on top
    /// copies each entry a bounded number of times, and loses or repeats none.
    #[test]
    fn a_stack_shared_from_below_and_pushed_on_top_copies_little() {
        let mut m = deep_marker(0);
        let job = job_with_an_idle_thief(&m);
        m.job = &job;
        let thief = m.stealer();
        let mut seen = std::collections::HashSet::new();
        let mut pushed = 0usize;
        for round in 0..2000 {
            for _ in 0..(700 + round % 300) {
                m.push(0x1000_0000 + 16 * pushed);
                pushed += 1;
            }
            m.share();
            for e in steal_all(&thief) {
                assert!(seen.insert(e), "an entry was shared twice");
            }
        }
        while let Some(e) = m.pop() {
            assert!(seen.insert(e), "an entry was on the stack and shared");
        }
        assert_eq!(seen.len(), pushed);
        assert!(
            m.words_moved <= 3 * pushed,
            "{} words moved for {pushed} pushes",
            m.words_moved
        );
        m.job = std::ptr::null();
    }

    /// A stack's storage handed to the next marker (`take_stack`, as the next
    /// collection gets it) takes the same depth again without growing: nothing is
    /// copied, and the entries come back in order.
    #[test]
    fn a_reused_stack_takes_the_same_depth_without_growing() {
        let n = 1 << 18;
        let mut m = deep_marker(n);
        assert!(m.words_moved > 0, "a new stack grows");
        while m.pop().is_some() {}
        let stack = m.take_stack();
        assert!(stack.capacity() >= n);
        let mut again = Marker::new(HeapId::next(), true, 0, 0, std::ptr::null_mut(), stack);
        for i in 0..n {
            again.push(0x2000_0000 + 16 * i);
        }
        assert_eq!(again.words_moved, 0, "the reused stack grew");
        for i in (0..n).rev() {
            assert_eq!(again.pop(), Some(0x2000_0000 + 16 * i));
        }
        assert_eq!(again.pop(), None);
    }
}
