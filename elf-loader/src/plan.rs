//! Relocation plans: how a library's symbol references resolved, kept after its first
//! load and replayed for later copies of the same file loaded with a scope of the same
//! shape (prelink's idea, inside one process and without fixed addresses).
//!
//! Loading a library N times redoes the same symbol resolution N times: the same names
//! hashed and looked up in the same files, with the same answers, only the load
//! addresses differ. A plan records, per symbol index, where the first load found the
//! definition in terms that hold for any copy:
//!
//! - `Own(sym)`: the library's own definition (its new load address + `sym.value`);
//! - `Scope { pos, sym }`: a definition in the custom library at position `pos` of the
//!   scope (that copy's load address + `sym.value`);
//! - `Abs(addr)`: an address of the loader's own `dl*` entries or of a system library
//!   (the same for every copy while that library stays loaded).
//!
//! A plan is replayed only when the new scope matches the recorded one item by item:
//! custom libraries by file (device, inode, size, modification time), system libraries
//! by `dlopen` name, handle and load address (a library unloaded and loaded again
//! elsewhere does not match), the loader's overrides as such. Only answers that cannot
//! change while that holds are recorded: definitions found in the symbol tables of the
//! scope's items, or through `dlvsym` on a specific handle, before any item whose
//! answer could change later (the process's global scope, which a later
//! `dlopen(RTLD_GLOBAL)` extends; a `SymbolProvider`). Weak symbols found nowhere,
//! ifuncs of the library itself and thread-local symbols are resolved again each time.
//! A plan is kept only when the whole relocation succeeded.

use crate::elf::Sym;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// A file's identity and version: a library rewritten in place (same inode) gets a new
/// stamp through its size or modification time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct FileStamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: i64,
    mtime_nsec: i64,
}

impl FileStamp {
    pub(crate) fn of(meta: &std::fs::Metadata) -> FileStamp {
        use std::os::unix::fs::MetadataExt;
        FileStamp {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: meta.mtime(),
            mtime_nsec: meta.mtime_nsec(),
        }
    }
}

/// One scope item as a plan records it (made by the image from its scope, see
/// `ScopeItem::plan_key`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum KeyItem {
    /// The loader's own entries.
    Overrides,
    /// A custom library, by file.
    Custom(FileStamp),
    /// A system library: its `dlopen` name, handle and load address.
    System {
        name: String,
        handle: usize,
        bias: usize,
    },
    /// A `SymbolProvider`: nothing found after one is recorded, so its identity does
    /// not matter.
    Provider,
}

/// Where one symbol reference resolved (see the module comment).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Planned {
    Own(Sym),
    Scope { pos: u32, sym: Sym },
    Abs(usize),
}

/// The resolutions of one load of a file with one scope.
pub(crate) struct Plan {
    key: Vec<KeyItem>,
    /// (symbol index, resolution), in the order the first load resolved them.
    pub(crate) entries: Vec<(u32, Planned)>,
}

/// Plans kept per file: a few scope shapes each (a library loaded by different
/// dependents or into namespaces with different global scopes).
const PER_FILE: usize = 4;

static ENABLED: AtomicBool = AtomicBool::new(true);

fn plans() -> &'static parking_lot::Mutex<HashMap<FileStamp, Vec<Arc<Plan>>>> {
    static PLANS: OnceLock<parking_lot::Mutex<HashMap<FileStamp, Vec<Arc<Plan>>>>> =
        OnceLock::new();
    PLANS.get_or_init(Default::default)
}

/// Whether plans are recorded and replayed (on by default).
pub(crate) fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Turns relocation plans on or off for later loads; turning them off also forgets
/// the plans kept so far. For tests and measurements that compare both ways.
pub fn set_relocation_plans(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
    if !on {
        plans().lock().clear();
    }
}

/// The plan recorded for `stamp` with a scope whose items match `key`, if any.
pub(crate) fn find(stamp: &FileStamp, key: &[KeyItem]) -> Option<Arc<Plan>> {
    plans()
        .lock()
        .get(stamp)?
        .iter()
        .find(|p| p.key == key)
        .cloned()
}

/// Keeps the resolutions of a successful relocation of `stamp` with a scope whose items
/// are `key`.
pub(crate) fn store(stamp: FileStamp, key: Vec<KeyItem>, entries: Vec<(u32, Planned)>) {
    if !enabled() {
        return;
    }
    let plan = Arc::new(Plan { key, entries });
    let mut all = plans().lock();
    let list = all.entry(stamp).or_default();
    if list.iter().any(|p| p.key == plan.key) {
        return;
    }
    if list.len() >= PER_FILE {
        list.remove(0);
    }
    list.push(plan);
}
