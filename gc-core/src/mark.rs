//! Marking: an explicit mark stack, `queue` (the seed's `jl_gc_mark_queue_obj`) and
//! `queue_array` (`jl_gc_mark_queue_objarray`).
//!
//! Nothing recurses on the native stack: scanning an object only pushes its unmarked
//! children, so a linked list of any length needs one stack slot at a time. An array of
//! references takes one stack entry, processed [`ARRAY_CHUNK`] elements at a time.
//!
//! Generations. `queue` returns whether the child is young (not yet promoted), which is
//! what a foreign mark function counts and returns. After an object is scanned, if it
//! will be old after this collection (it is old, or young and about to be promoted) and
//! it has young children, it goes into the remembered set for the next collection
//! (header bit `REMEMBERED`): partial collections then rescan it instead of the whole
//! old generation.
//!
//! Verify mode reuses the same machinery with marking turned off: scanning an old object
//! then only counts its young children, which must be zero unless the object is in the
//! remembered set (otherwise a write barrier was missed).

use crate::big::BigHeader;
use crate::heap::HeapInner;
use crate::object::{header_is_allocated, ObjRef, HEADER_SIZE, MARK, OLD, REMEMBERED, TAG_BITS};
use crate::pagetable;
use crate::types::{MarkProc, TypeDesc, TypeKind};
use std::collections::HashSet;
use std::ffi::c_void;
use std::sync::atomic::Ordering;

/// Asks the CPU to start loading the line at `addr` (an object's header) early.
#[inline(always)]
fn prefetch(addr: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(addr as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}

/// How far ahead array scanning prefetches.
const PREFETCH_AHEAD: usize = 8;

/// Elements of an object array processed per step.
pub const ARRAY_CHUNK: usize = 2048;

enum Work {
    Obj(ObjRef),
    Array {
        parent: ObjRef,
        cur: *const usize,
        end: *const usize,
        young: usize,
    },
}

#[derive(PartialEq, Eq, Clone, Copy)]
enum Mode {
    Mark,
    /// Count young children only; mark nothing.
    Verify,
    /// Mark, but young objects marked now are not promoted by this collection: what only
    /// finalizable objects reach dies young once the finalizers ran (see `weak.rs`).
    MarkKeepYoung,
}

/// The marking state of one collection, handed to mark functions, root scanners and
/// task scanners. Only exists during the mark phase, on the collecting thread.
pub struct Marker<'h> {
    pub(crate) heap: &'h HeapInner,
    pub(crate) full: bool,
    /// For old objects, the value of the MARK bit that means "marked" in this collection.
    pub(crate) parity: usize,
    stack: Vec<Work>,
    pub(crate) next_remset: Vec<ObjRef>,
    /// The collecting thread's `ptls`, passed to C mark functions.
    pub(crate) ptls: *mut c_void,
    mode: Mode,
    pub(crate) objects_marked: u64,
    /// Verify mode: addresses of the heap's big objects, to validate queued pointers.
    pub(crate) big_set: Option<HashSet<usize>>,
    pub(crate) errors: Vec<String>,
    verify_first_young: Option<ObjRef>,
    /// Bytes of young objects marked in keep-young mode (kept only for finalizers).
    pub(crate) kept_for_finalizers: usize,
}

impl<'h> Marker<'h> {
    pub(crate) fn new(heap: &'h HeapInner, full: bool, parity: usize, ptls: *mut c_void) -> Self {
        Marker {
            heap,
            full,
            parity,
            stack: Vec::with_capacity(4096),
            next_remset: Vec::new(),
            ptls,
            mode: Mode::Mark,
            objects_marked: 0,
            big_set: None,
            errors: Vec::new(),
            verify_first_young: None,
            kept_for_finalizers: 0,
        }
    }

    /// The id of the heap being collected ([`crate::Heap::id`]).
    pub fn heap_id(&self) -> usize {
        self.heap.id()
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
    #[inline]
    pub fn is_marked(&self, obj: ObjRef) -> bool {
        // SAFETY: the caller hands us an allocated object of this heap.
        let h = unsafe { obj.header_bits() };
        if h & OLD != 0 {
            !self.full || h & MARK == self.parity
        } else {
            h & MARK != 0
        }
    }

    /// Queues `obj` for marking (the seed's `jl_gc_mark_queue_obj`) and returns whether
    /// it is young. A mark function counts the `true` results and returns the count.
    #[inline]
    pub fn queue(&mut self, obj: ObjRef) -> bool {
        if self.big_set.is_some() && !self.valid_object(obj) {
            return false;
        }
        // SAFETY: the caller hands us a reference to a live object of this heap (the
        // verify mode checked it above when enabled).
        let hdr = unsafe { obj.header() };
        let h = hdr.load(Ordering::Relaxed);
        if self.mode != Mode::Mark {
            return self.queue_other_mode(obj, h);
        }
        if h & OLD != 0 {
            if self.full && h & MARK != self.parity {
                hdr.store(h ^ MARK, Ordering::Relaxed);
                self.push_if_scannable(obj, h);
            }
            false
        } else {
            if h & MARK == 0 {
                hdr.store(h | MARK, Ordering::Relaxed);
                self.push_if_scannable(obj, h);
            }
            true
        }
    }

    #[cold]
    #[inline(never)]
    fn queue_other_mode(&mut self, obj: ObjRef, h: usize) -> bool {
        let young = h & OLD == 0;
        match self.mode {
            Mode::Verify => {
                if young && self.verify_first_young.is_none() {
                    self.verify_first_young = Some(obj);
                }
            }
            Mode::MarkKeepYoung => {
                if !young {
                    // Old objects are marked as usual (only in full collections can one
                    // be unmarked here).
                    self.mode = Mode::Mark;
                    let r = self.queue(obj);
                    self.mode = Mode::MarkKeepYoung;
                    return r;
                }
                if h & MARK == 0 {
                    // SAFETY: a live object of this heap (queue's contract).
                    unsafe { obj.header() }.store(h | MARK, Ordering::Relaxed);
                    match pagetable::lookup(obj.addr()) {
                        Some(page) if page.owner() == self.heap.id() => {
                            if let Some((cell, _)) = page.cell_layout() {
                                self.kept_for_finalizers += cell;
                                // SAFETY: we are the collector and the world is stopped.
                                unsafe { page.clear_age(obj.addr()) }
                            }
                        }
                        _ => {
                            let bh = (obj.addr() - crate::big::BIG_HEADER) as *mut BigHeader;
                            // SAFETY: not in a pool page of ours: a live big object, whose
                            // bookkeeping only the collector touches while it runs.
                            unsafe {
                                (*bh).age = false;
                                self.kept_for_finalizers += (*bh).size + crate::big::BIG_HEADER;
                            }
                        }
                    }
                    self.push_if_scannable(obj, h);
                }
            }
            Mode::Mark => unreachable!("handled by queue"),
        }
        young
    }

    /// Turns keep-young marking on or off: young objects marked while it is on are not
    /// promoted by this collection.
    pub(crate) fn keep_young(&mut self, on: bool) {
        self.mode = if on { Mode::MarkKeepYoung } else { Mode::Mark };
    }

    /// Queues an optional reference; `None` (a null slot) is ignored.
    #[inline]
    pub fn queue_opt(&mut self, obj: Option<ObjRef>) -> bool {
        obj.is_some_and(|o| self.queue(o))
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
        self.stack.push(Work::Array {
            parent,
            cur,
            end,
            young: 0,
        });
    }

    fn push_if_scannable(&mut self, obj: ObjRef, h: usize) {
        self.objects_marked += 1;
        // SAFETY: h is the header of a live object: its type pointer is a live type.
        let desc = unsafe { &*((h & !TAG_BITS) as *const TypeDesc) };
        if desc.has_pointers {
            self.stack.push(Work::Obj(obj));
        }
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
                young += self.queue(child) as usize;
            }
            // SAFETY: still within or one past the caller's range.
            cur = unsafe { cur.add(1) };
        }
        young
    }

    /// Whether `obj` will be old after this collection: it is old, or young with its age
    /// bit set (it survived one collection already and is promoted by this one).
    fn will_be_old(&self, obj: ObjRef, h: usize) -> bool {
        if h & OLD != 0 {
            return true;
        }
        match pagetable::lookup(obj.addr()) {
            Some(page) if page.owner() == self.heap.id() && page.cell_layout().is_some() => {
                // SAFETY: we are the collector and the world is stopped.
                unsafe { page.age(obj.addr()) }
            }
            // SAFETY: not in a pool page of ours: a live big object.
            _ => unsafe { BigHeader::of(obj) }.age,
        }
    }

    /// Records the outcome of scanning `obj`: with young children and old after this
    /// collection, it joins the next remembered set.
    fn after_scan(&mut self, obj: ObjRef, young: usize) {
        // SAFETY: obj is a live object being scanned.
        let hdr = unsafe { obj.header() };
        let h = hdr.load(Ordering::Relaxed);
        if self.mode != Mode::Mark {
            self.after_scan_other_mode(obj, young, h);
            return;
        }
        if young > 0 && h & REMEMBERED == 0 && self.will_be_old(obj, h) {
            hdr.store(h | REMEMBERED, Ordering::Relaxed);
            self.next_remset.push(obj);
        }
    }

    #[cold]
    #[inline(never)]
    fn after_scan_other_mode(&mut self, obj: ObjRef, young: usize, h: usize) {
        if self.mode == Mode::MarkKeepYoung {
            // Objects scanned now were just marked: young ones stay young (their age was
            // cleared), so only old ones can join the remembered set.
            if young > 0 && h & (OLD | REMEMBERED) == OLD {
                // SAFETY: obj is a live object being scanned.
                unsafe { obj.header() }.store(h | REMEMBERED, Ordering::Relaxed);
                self.next_remset.push(obj);
            }
            return;
        }
        // Verify mode.
        if young > 0 && h & OLD != 0 && h & REMEMBERED == 0 {
            let child = self.verify_first_young.map_or(0, |c| c.addr());
            // SAFETY: h is a live object's header.
            let ty = unsafe { &*((h & !TAG_BITS) as *const TypeDesc) }
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
    unsafe fn scan(m: *mut Marker<'_>, obj: ObjRef) {
        // SAFETY: obj is a marked, live object; its header holds its type.
        let hdr = unsafe { obj.header() };
        let h = hdr.load(Ordering::Relaxed);
        if h & REMEMBERED != 0 {
            hdr.store(h & !REMEMBERED, Ordering::Relaxed);
        }
        // SAFETY: the type pointer of a live object is a live type object.
        let desc = unsafe { &*((h & !TAG_BITS) as *const TypeDesc) };
        let young = match desc.kind {
            TypeKind::Layout => {
                let mut young = 0;
                // Start loading every child's header first, so that the misses overlap.
                for &off in desc.offsets() {
                    // SAFETY: as below.
                    let v = unsafe { obj.read_slot(off as usize) };
                    if v != 0 {
                        prefetch(v.wrapping_sub(HEADER_SIZE));
                    }
                }
                for &off in desc.offsets() {
                    // SAFETY: layout offsets were validated against the type's size... the
                    // object has at least that size (allocation checks it).
                    let v = unsafe { obj.read_slot(off as usize) };
                    if let Some(child) = ObjRef::from_addr(v) {
                        // SAFETY: m is valid (caller) and no other borrow is alive.
                        young += unsafe { (*m).queue(child) } as usize;
                    }
                }
                young
            }
            _ => match desc.mark {
                MarkProc::None => 0,
                // SAFETY: m is valid and unaliased during the call (caller's contract).
                MarkProc::Rust(f) => f(unsafe { &mut *m }, obj),
                MarkProc::C(f) => {
                    // SAFETY: reading the ptls field; no borrow is kept across the call.
                    let ptls = unsafe { (*m).ptls };
                    // SAFETY: a C mark function of the seed's signature, called with the
                    // collecting thread's ptls and a live object of its type.
                    unsafe { f(ptls, obj.as_ptr().cast()) }
                }
            },
        };
        // SAFETY: as above; the C call has returned.
        unsafe { (*m).after_scan(obj, young) };
    }

    /// Scans an object that is a root of its own (a remembered old object).
    ///
    /// # Safety
    /// As for `scan`; `obj` is live.
    pub(crate) unsafe fn scan_object(m: *mut Marker<'_>, obj: ObjRef) {
        // SAFETY: forwarded.
        unsafe { Self::scan(m, obj) }
    }

    /// Processes the mark stack until empty.
    ///
    /// # Safety
    /// As for `scan`.
    pub(crate) unsafe fn drain(m: *mut Marker<'_>) {
        loop {
            // SAFETY: m is valid; the borrow ends with this statement.
            let work = unsafe { (*m).stack.pop() };
            match work {
                None => break,
                // SAFETY: forwarded.
                Some(Work::Obj(obj)) => unsafe { Self::scan(m, obj) },
                Some(Work::Array {
                    parent,
                    cur,
                    end,
                    young,
                }) => {
                    let chunk_end = if (end as usize - cur as usize) / 8 > ARRAY_CHUNK {
                        // SAFETY: cur..end lies in the parent's payload (queue_array's
                        // contract) and holds more than ARRAY_CHUNK words.
                        unsafe { cur.add(ARRAY_CHUNK) }
                    } else {
                        end
                    };
                    // SAFETY: m is valid; the range is inside the live parent.
                    let found = unsafe { (*m).scan_range(cur, chunk_end) };
                    let young = young + found;
                    // SAFETY: m is valid.
                    let marker = unsafe { &mut *m };
                    if chunk_end < end {
                        marker.stack.push(Work::Array {
                            parent,
                            cur: chunk_end,
                            end,
                            young,
                        });
                    } else {
                        marker.after_scan(parent, young);
                    }
                }
            }
        }
    }

    /// Verify mode: counts the young children of old object `obj` not in the remembered
    /// set and records an error for each such object.
    ///
    /// # Safety
    /// As for `scan`; `obj` is a live old object.
    pub(crate) unsafe fn verify_object(m: *mut Marker<'_>, obj: ObjRef) {
        // SAFETY: m is valid.
        unsafe {
            (*m).mode = Mode::Verify;
            (*m).verify_first_young = None;
        }
        // SAFETY: obj is live.
        let h = unsafe { obj.header_bits() };
        // SAFETY: type of a live object.
        let desc = unsafe { &*((h & !TAG_BITS) as *const TypeDesc) };
        if desc.has_pointers && h & REMEMBERED == 0 {
            // Scanning in verify mode never clears REMEMBERED (the bit is clear here).
            // SAFETY: forwarded.
            unsafe { Self::scan(m, obj) };
        }
        // SAFETY: m is valid.
        unsafe { (*m).mode = Mode::Mark };
    }

    /// Verify mode: whether `obj` is an allocated object of this heap; records an error
    /// otherwise.
    fn valid_object(&mut self, obj: ObjRef) -> bool {
        let a = obj.addr();
        let ok = if a % 16 != 0 {
            false
        } else if let Some(page) = pagetable::lookup(a) {
            match page.cell_layout() {
                Some((cell, class)) if page.owner() == self.heap.id() => {
                    page.cell_index(a, cell, class)
                        .is_some_and(|i| page.object_at(i, cell) == a)
                        && page.is_allocated(a)
                }
                _ => false,
            }
        } else {
            self.big_set.as_ref().is_some_and(|s| s.contains(&a)) && {
                // SAFETY: a registered big object of this heap is live.
                header_is_allocated(unsafe { BigHeader::of(obj) }.tag.load(Ordering::Relaxed))
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
