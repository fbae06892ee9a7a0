//! The debug mode (HPy's debug mode for the CPython-style API): off by default, and then
//! it costs nothing on the header's fast paths (they never look at it) and one
//! predictable branch on the bridge's slow paths.
//!
//! When on, the bridge records where each native object and each stub was made (a
//! [`Site`]: the Rust call into the bridge, exact in every build through
//! `#[track_caller]`, and a backtrace for context), and:
//! - freed native objects are kept in a **quarantine** instead of being returned to the
//!   allocator: their count is set to 1 and their type to a "freed object" type, so a
//!   `Py_DECREF` of a freed object reaches the slow path at once (reported as use after
//!   free, with where the object was made and freed; so is a second `PyObject_GC_Del`,
//!   a track, untrack, free or `to_managed` of it), and any other change of the count
//!   (an incref) is found by the next check ([`crate::Bridge::debug_check`], each
//!   collection, shutdown). Old entries leave the quarantine after [`QUARANTINE`] more
//!   frees (checked, then really freed);
//! - freed stub slots are not reused for a while either, so a dangling stub pointer does
//!   not alias another managed object;
//! - decref below zero, decref of a stub below the managed count, a stub used after its
//!   managed object died, tracking an object twice, errors raised by deallocators run
//!   from the reference queue ("unraisable"), and at shutdown every leak (live native
//!   objects, stubs still referenced from native code, native bytes not freed) are
//!   reported as [`DebugReport`]s (also logged with `tracing`).
//!
//! GC-a-lot ([`crate::BridgeConfig::gc_a_lot`], GraalPy's `GCALot`): a full collection
//! every N transitions, to shake out objects that are used without being kept alive.

use crate::abi::{PyObject, PyTypeObject, PY_TPFLAGS_READY};
use std::backtrace::Backtrace;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::panic::Location;
use std::sync::Arc;

/// Freed objects kept in quarantine (and freed stub slots kept unused) before reuse.
pub const QUARANTINE: usize = 4096;

/// The kind of a debug report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReportKind {
    /// A freed native object was used (count changed, decref'd, passed to the bridge).
    UseAfterFree,
    /// A count went below zero (decref of an object whose count was 0, or an incref
    /// from -1).
    RefcountBelowZero,
    /// A stub's count went below `MANAGED_REFCNT` while its managed object lives:
    /// native code released a reference it did not own.
    StubDecrefBelowManaged,
    /// A stub was used after its managed object died.
    DeadStubUse,
    /// `PyObject_GC_Track` of an object already tracked (or freed).
    DoubleTrack,
    /// A deallocator run from the reference queue raised an error; it was dropped and
    /// the error pending before was restored.
    UnraisableError,
    /// At shutdown: a native object never freed, a stub still referenced from native
    /// code, or native bytes not freed.
    Leak,
}

/// Where the debug mode saw an object (or stub) made or freed.
///
/// `location` is the place in the program that called the bridge's Rust API (its
/// allocation and free functions and [`crate::Bridge::to_native`] are
/// `#[track_caller]`, and so may a caller's own helpers be): it is exact in every build,
/// release builds included, where the backtrace may have lost inlined functions (and,
/// built with `debug = "line-tables-only"`, their module paths). A C caller reaches the
/// bridge through its C layer, so `location` names that layer's entry and the backtrace
/// names the C caller.
pub struct Site {
    /// The Rust caller of the bridge.
    pub location: &'static Location<'static>,
    /// The thread's stack at that moment.
    pub backtrace: Backtrace,
}

impl Site {
    /// The caller's site (through `#[track_caller]` callers) and the stack now.
    #[track_caller]
    pub(crate) fn here() -> Arc<Site> {
        Arc::new(Site {
            location: Location::caller(),
            backtrace: Backtrace::force_capture(),
        })
    }
}

impl fmt::Debug for Site {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Site({})", self.location)
    }
}

/// One finding of the debug mode.
#[derive(Clone)]
pub struct DebugReport {
    /// What was found.
    pub kind: ReportKind,
    /// The object (untagged address; a stub's tagged pointer for stubs).
    pub object: usize,
    /// Its type's name.
    pub type_name: String,
    /// A one-line description.
    pub message: String,
    /// Where the object (or stub) was made.
    pub made_at: Option<Arc<Site>>,
    /// Where it was freed (or its managed object died).
    pub freed_at: Option<Arc<Site>>,
}

impl fmt::Debug for DebugReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.kind, self.message)
    }
}

impl fmt::Display for DebugReport {
    /// The message, then each site: its location, then its backtrace (only frames
    /// with a file).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "refbridge debug: {:?}: {}", self.kind, self.message)?;
        for (what, site) in [("made at", &self.made_at), ("freed at", &self.freed_at)] {
            if let Some(site) = site {
                writeln!(f, "  {what}: {}", site.location)?;
                for line in short_backtrace(&site.backtrace) {
                    writeln!(f, "    {line}")?;
                }
            }
        }
        Ok(())
    }
}

/// The crate's source folder as it appears in backtrace locations (`refbridge/src/`):
/// the last two components of this file's folder.
fn own_source_dir() -> String {
    let dir = std::path::Path::new(file!())
        .parent()
        .expect("a file has a folder");
    let parts: Vec<_> = dir.components().rev().take(2).collect();
    let mut out: String = parts
        .iter()
        .rev()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/");
    out.push('/');
    out
}

/// The frames of a backtrace worth showing: symbol lines followed by a file location,
/// without the bridge's own frames (its modules, whose C entry points carry CPython's
/// names, found by their source location) and the standard library's.
pub fn short_backtrace(bt: &Backtrace) -> Vec<String> {
    let own_dir = own_source_dir();
    let text = bt.to_string();
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let sym = lines[i].trim();
        let at = lines.get(i + 1).map(|l| l.trim()).unwrap_or("");
        let Some(loc) = at.strip_prefix("at ") else {
            i += 1;
            continue;
        };
        i += 2;
        let name = sym.split_once(": ").map_or(sym, |(_, n)| n);
        let bare = name.trim_start_matches('<');
        let skip = [
            "refbridge::",
            "std::",
            "core::",
            "alloc::",
            "__rust",
            "rust_",
        ]
        .iter()
        .any(|p| bare.starts_with(p))
            || loc.contains(&own_dir)
            || loc.contains("/rustc/");
        if !skip {
            out.push(format!("{name} at {loc}"));
        }
    }
    out.truncate(12);
    out
}

/// What the debug mode knows about a live native object.
struct Live {
    type_name: String,
    made: Arc<Site>,
}

/// A freed native object kept in quarantine.
struct Freed {
    addr: usize,
    type_name: String,
    made: Option<Arc<Site>>,
    freed: Arc<Site>,
    /// The counted block to free when the entry leaves the quarantine.
    block: *mut u8,
}

/// The debug mode's records (under their own lock in the bridge).
#[derive(Default)]
pub(crate) struct DebugState {
    live: HashMap<usize, Live>,
    freed: VecDeque<Freed>,
    freed_at: HashMap<usize, usize>,
    freed_seq: usize,
    /// Stub handle -> where it was made, where its managed object died.
    stubs: HashMap<u32, (Arc<Site>, Option<Arc<Site>>)>,
    pub reports: Vec<DebugReport>,
}

// SAFETY: the raw block pointers are owned by the quarantine, only touched under the lock.
unsafe impl Send for DebugState {}

/// The type freed objects get: its name tells a debugger what it is looking at.
pub(crate) static FREED_TYPE: FreedType = FreedType(PyTypeObject::new(
    c"<refbridge: freed object>",
    std::mem::size_of::<PyObject>(),
    PY_TPFLAGS_READY,
));

/// Wrapper to keep the freed type in a static.
pub(crate) struct FreedType(pub PyTypeObject);
// SAFETY: never written after initialisation; native code only reads it.
unsafe impl Sync for FreedType {}

impl FreedType {
    pub fn ptr(&self) -> *mut PyTypeObject {
        &self.0 as *const PyTypeObject as *mut PyTypeObject
    }
}

impl DebugState {
    pub fn report(&mut self, r: DebugReport) {
        tracing::error!(kind = ?r.kind, "{}", r.message);
        self.reports.push(r);
    }

    /// A native object was made (by the caller's caller: see [`Site`]).
    #[track_caller]
    pub fn object_made(&mut self, op: *mut PyObject, type_name: String) {
        self.live.insert(
            op as usize,
            Live {
                type_name,
                made: Site::here(),
            },
        );
    }

    /// Whether `op` is a freed object in quarantine.
    pub fn is_freed(&self, op: *const PyObject) -> bool {
        self.freed_at.contains_key(&(op as usize))
    }

    /// Reports a use of the quarantined object `op` and restores its poison.
    pub fn use_after_free(&mut self, op: *mut PyObject, what: &str) {
        let Some(&seq) = self.freed_at.get(&(op as usize)) else {
            return;
        };
        let idx = seq - (self.freed_seq - self.freed.len());
        let f = &self.freed[idx];
        let r = DebugReport {
            kind: ReportKind::UseAfterFree,
            object: op as usize,
            type_name: f.type_name.clone(),
            message: format!(
                "{what} of freed object {:#x} (type {})",
                op as usize, f.type_name
            ),
            made_at: f.made.clone(),
            freed_at: Some(f.freed.clone()),
        };
        // SAFETY: quarantined memory is kept allocated.
        unsafe { poison(op) };
        self.report(r);
    }

    /// A native object is being freed: keep it in quarantine (returns the block to free
    /// now, if one leaves the quarantine, after checking it).
    ///
    /// # Safety
    /// `op` is the object inside the live counted block `block`.
    #[track_caller]
    pub unsafe fn object_freed(&mut self, op: *mut PyObject, block: *mut u8) -> Option<*mut u8> {
        let info = self.live.remove(&(op as usize));
        let type_name = match &info {
            Some(l) => l.type_name.clone(),
            // SAFETY: a live object (caller).
            None => unsafe { type_name_of(op) },
        };
        // SAFETY: the block stays allocated while quarantined; it no longer counts as
        // the program's memory.
        unsafe {
            poison(op);
            crate::mem::quarantine(block);
        }
        self.freed.push_back(Freed {
            addr: op as usize,
            type_name,
            made: info.map(|l| l.made),
            freed: Site::here(),
            block,
        });
        self.freed_at.insert(op as usize, self.freed_seq);
        self.freed_seq += 1;
        if self.freed.len() > QUARANTINE {
            let old = self.freed.pop_front().expect("non-empty");
            self.check_one(&old);
            self.freed_at.remove(&old.addr);
            return Some(old.block);
        }
        None
    }

    fn check_one(&mut self, f: &Freed) {
        let op = f.addr as *mut PyObject;
        // SAFETY: quarantined memory is kept allocated.
        let (count, ty) = unsafe { ((*op).ob_refcnt, (*op).ob_type) };
        if count != 1 || ty != FREED_TYPE.ptr() {
            let r = DebugReport {
                kind: ReportKind::UseAfterFree,
                object: f.addr,
                type_name: f.type_name.clone(),
                message: format!(
                    "freed object {:#x} (type {}) was used after free: count {} (expected the poison 1){}",
                    f.addr,
                    f.type_name,
                    count,
                    if ty != FREED_TYPE.ptr() { ", type overwritten" } else { "" }
                ),
                made_at: f.made.clone(),
                freed_at: Some(f.freed.clone()),
            };
            self.report(r);
            // SAFETY: as above.
            unsafe { poison(op) };
        }
    }

    /// Checks every quarantined object; returns how many reports were added.
    pub fn check_quarantine(&mut self) -> usize {
        let before = self.reports.len();
        let freed = std::mem::take(&mut self.freed);
        for f in &freed {
            self.check_one(f);
        }
        self.freed = freed;
        self.reports.len() - before
    }

    /// Frees every quarantined block (at bridge drop); returns them for freeing.
    pub fn take_quarantine(&mut self) -> Vec<*mut u8> {
        self.freed_at.clear();
        self.freed.drain(..).map(|f| f.block).collect()
    }

    /// A stub was made (handle `idx`).
    #[track_caller]
    pub fn stub_made(&mut self, idx: u32) {
        self.stubs.insert(idx, (Site::here(), None));
    }

    /// The managed object of stub `idx` died.
    #[track_caller]
    pub fn stub_died(&mut self, idx: u32) {
        if let Some(s) = self.stubs.get_mut(&idx) {
            s.1 = Some(Site::here());
        }
    }

    /// Stub `idx` was freed (its history is kept while the slot is quarantined; a new
    /// stub in the slot replaces it).
    pub fn stub_freed(&mut self, idx: u32) {
        let _ = idx;
    }

    /// Where stub `idx` was made and where its managed object died.
    pub fn stub_history(&self, idx: u32) -> (Option<Arc<Site>>, Option<Arc<Site>>) {
        match self.stubs.get(&idx) {
            Some((m, d)) => (Some(m.clone()), d.clone()),
            None => (None, None),
        }
    }

    /// Where the live native object `op` was made.
    pub fn made_at(&self, op: *const PyObject) -> Option<Arc<Site>> {
        self.live.get(&(op as usize)).map(|l| l.made.clone())
    }

    /// Leak reports for the live native objects.
    pub fn live_objects(&self) -> Vec<DebugReport> {
        let mut v: Vec<DebugReport> = self
            .live
            .iter()
            .map(|(&addr, l)| DebugReport {
                kind: ReportKind::Leak,
                object: addr,
                type_name: l.type_name.clone(),
                message: format!(
                    "native object {addr:#x} of type {} was never freed (count {})",
                    l.type_name,
                    // SAFETY: a live object's memory is allocated.
                    unsafe { (*(addr as *const PyObject)).ob_refcnt }
                ),
                made_at: Some(l.made.clone()),
                freed_at: None,
            })
            .collect();
        v.sort_by_key(|r| r.object);
        v
    }
}

/// Marks a freed object: count 1 (a decref reaches the slow path), the freed type.
///
/// # Safety
/// `op` points to at least a `PyObject` of writable memory.
unsafe fn poison(op: *mut PyObject) {
    // SAFETY: forwarded.
    unsafe {
        (*op).ob_refcnt = 1;
        (*op).ob_type = FREED_TYPE.ptr();
    }
}

/// The type name of a (live) object.
///
/// # Safety
/// `op` is a live object with a valid type.
pub unsafe fn type_name_of(op: *const PyObject) -> String {
    // SAFETY: forwarded.
    let ty = unsafe { (*op).ob_type };
    if ty.is_null() {
        return "<no type>".into();
    }
    // SAFETY: a valid type object.
    unsafe { (*ty).name() }
}
