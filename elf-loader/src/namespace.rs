//! A namespace's machinery (`NsInner`) and the dependency policy: loading a library and
//! its `DT_NEEDED` closure into one isolated world, in dependency order (glibc's orders,
//! `order.rs`), with init/fini, and unloading what nothing uses any more. The public handles over it
//! ([`crate::Namespace`], [`crate::CustomLibrary`]) are in `api.rs`; the loader's entries
//! that loaded code calls (`dlfcn.rs`) reach a namespace through [`namespace_containing`].

use crate::error::{Error, Result};
use crate::image::{next_id, Dep, Image, ScopeItem};
use crate::order::{append_closure, fini_order, init_order};
use crate::overrides::Overrides;
use crate::system::{SymbolProvider, SystemLibrary};
use crate::tls;
use parking_lot::{Mutex, ReentrantMutex, RwLock};
use std::collections::{BTreeMap, HashMap};
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};

/// Serialises every load and unload (like glibc's `dl_load_lock`); re-entrant because
/// init functions may call `dlopen`.
static LOAD_LOCK: ReentrantMutex<()> = ReentrantMutex::new(());

/// One mapped image in [`IMAGES`]: its end address, the image and its namespace.
struct Registered {
    end: usize,
    image: Weak<Image>,
    ns: Weak<NsInner>,
}

/// Every mapped image by start address: for `dladdr`, for finding the namespace of a
/// `dlopen` caller, and for debugging.
static IMAGES: RwLock<BTreeMap<usize, Registered>> = RwLock::new(BTreeMap::new());

/// The custom image containing `addr`, if any.
pub(crate) fn image_containing(addr: usize) -> Option<Arc<Image>> {
    let map = IMAGES.read();
    let (_, r) = map.range(..=addr).next_back()?;
    if addr < r.end {
        r.image.upgrade()
    } else {
        None
    }
}

/// The custom image containing `addr` and its namespace, if both are alive.
pub(crate) fn namespace_containing(addr: usize) -> Option<(Arc<Image>, Arc<NsInner>)> {
    let map = IMAGES.read();
    let (_, r) = map.range(..=addr).next_back()?;
    if addr < r.end {
        Some((r.image.upgrade()?, r.ns.upgrade()?))
    } else {
        None
    }
}

/// Number of images currently mapped by this loader (all namespaces).
pub fn loaded_image_count() -> usize {
    IMAGES.read().len()
}

/// Which `DT_NEEDED` dependencies are shared through the system loader and which are
/// loaded again in each namespace.
#[derive(Debug, Clone)]
pub struct DependencyPolicy {
    /// Name prefixes always taken from the system loader (glibc, the C++ runtime, ...).
    pub system_prefixes: Vec<String>,
    /// Name prefixes always loaded per namespace, even from system directories.
    pub private_prefixes: Vec<String>,
    /// Whether other libraries found in the system directories are shared through the
    /// system loader (true by default); libraries found through RPATH/RUNPATH/`$ORIGIN`
    /// or outside the system directories are always loaded per namespace.
    pub share_system_dirs: bool,
}

impl Default for DependencyPolicy {
    fn default() -> Self {
        DependencyPolicy {
            system_prefixes: crate::system::RUNTIME_LIBRARIES
                .iter()
                .map(|l| l.prefix.to_string())
                .collect(),
            private_prefixes: Vec::new(),
            share_system_dirs: true,
        }
    }
}

impl DependencyPolicy {
    fn is_system_name(&self, name: &str) -> bool {
        let base = name.rsplit('/').next().unwrap_or(name);
        if self
            .private_prefixes
            .iter()
            .any(|p| base.starts_with(p.as_str()))
        {
            return false;
        }
        self.system_prefixes
            .iter()
            .any(|p| base.starts_with(p.as_str()))
    }
    fn is_private_name(&self, name: &str) -> bool {
        let base = name.rsplit('/').next().unwrap_or(name);
        self.private_prefixes
            .iter()
            .any(|p| base.starts_with(p.as_str()))
    }
}

/// A file's identity: device and inode numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    /// The identity of the file `meta` describes.
    pub(crate) fn of(meta: &std::fs::Metadata) -> FileId {
        use std::os::unix::fs::MetadataExt;
        FileId {
            dev: meta.dev(),
            ino: meta.ino(),
        }
    }
}

pub(crate) struct NsState {
    /// Every image, in load (= init) order.
    pub images: Vec<Arc<Image>>,
    /// The namespace's global libraries (loaded by `Namespace::load`/`CustomLibrary::load`
    /// or `dlopen(RTLD_GLOBAL)`), in the order they became global.
    pub global: Vec<Arc<Image>>,
    /// The namespace's global scope, which later loads and `dlsym(RTLD_DEFAULT)` see: each
    /// global library followed by the members of its `DT_NEEDED` closure (breadth-first)
    /// not in the scope yet, custom and system libraries alike (see [`NsState::add_global`]).
    pub scope: Vec<ScopeItem>,
    /// Images by file identity and by soname.
    pub by_file: HashMap<FileId, Arc<Image>>,
    pub by_soname: HashMap<String, Arc<Image>>,
    /// System libraries opened for dependencies, by name.
    pub system: HashMap<String, Arc<SystemLibrary>>,
}

/// What a namespace tells the callbacks registered with [`crate::Namespace::on_event`].
#[derive(Debug, Clone, Copy)]
pub enum LoadEvent<'a> {
    /// A library was mapped, relocated and initialised in the namespace (a load
    /// through the API, a dependency, or a `dlopen` from loaded code).
    Loaded {
        /// The file it was loaded from.
        path: &'a Path,
        /// Its mapping, `[start, end)`.
        start: usize,
        /// End of the mapping.
        end: usize,
    },
    /// A library that nothing used any more (after a `dlclose` from loaded code) was
    /// finalised and unmapped. Dropping the namespace unloads the rest without events.
    Unloaded {
        /// The file it was loaded from.
        path: &'a Path,
        /// Its former mapping, `[start, end)`.
        start: usize,
        /// End of the former mapping.
        end: usize,
    },
}

/// A callback of [`crate::Namespace::on_event`].
pub(crate) type Observer = Arc<dyn Fn(&LoadEvent<'_>) + Send + Sync>;

/// An event waiting for delivery: (loaded, path, start, end).
type Pending = (bool, PathBuf, usize, usize);

/// A namespace's shared state. Its methods are all in this file; `api.rs` (the public
/// handles) and `dlfcn.rs` (the `dlopen` family of loaded code) call them.
pub(crate) struct NsInner {
    pub id: u64,
    pub name: String,
    pub policy: DependencyPolicy,
    pub state: Mutex<NsState>,
    /// Providers searched by every library of the namespace after its dependencies.
    pub search: RwLock<Vec<Arc<dyn SymbolProvider>>>,
    /// C++ `thread_local` destructors registered by the namespace's code and not run
    /// yet: the namespace's unload waits for them.
    pub pins: Arc<crate::thread_atexit::Pins>,
    /// The loader's entries that loaded code binds to first (first item of every
    /// relocation scope).
    pub overrides: &'static Overrides,
    /// Called with the namespace's id when it is dropped (the `dlopen` family forgets
    /// the handles it gave out for it).
    pub on_drop: fn(u64),
    /// Load-event callbacks.
    observers: RwLock<Vec<Observer>>,
    /// Events not delivered yet: they are delivered outside the loader's locks, by the
    /// outermost load or unload of the thread (see [`NsInner::deliver_events`]).
    events: Mutex<Vec<Pending>>,
}

static NEXT_NS: AtomicU64 = AtomicU64::new(1);

impl NsInner {
    /// A new, empty namespace whose libraries bind to `overrides` first; `on_drop` runs
    /// with its id when it is dropped.
    pub(crate) fn new(
        name: &str,
        policy: DependencyPolicy,
        overrides: &'static Overrides,
        on_drop: fn(u64),
    ) -> Arc<NsInner> {
        Arc::new(NsInner {
            id: NEXT_NS.fetch_add(1, Ordering::Relaxed),
            name: name.to_string(),
            policy,
            state: Mutex::new(NsState {
                images: Vec::new(),
                global: Vec::new(),
                scope: Vec::new(),
                by_file: HashMap::new(),
                by_soname: HashMap::new(),
                system: HashMap::new(),
            }),
            search: RwLock::new(Vec::new()),
            pins: Default::default(),
            overrides,
            on_drop,
            observers: RwLock::new(Vec::new()),
            events: Mutex::new(Vec::new()),
        })
    }

    /// Adds a load-event callback.
    pub(crate) fn observe(&self, f: Observer) {
        self.observers.write().push(f);
    }

    /// Queues an event for the callbacks (nothing when there are none).
    fn note_event(&self, loaded: bool, img: &Image) {
        if self.observers.read().is_empty() {
            return;
        }
        self.events.lock().push((
            loaded,
            img.path.clone(),
            img.map.start,
            img.map.start + img.map.len,
        ));
    }

    /// Delivers the queued events to the callbacks, unless this thread is inside a load
    /// or unload (an init function calling `dlopen`): the outermost one delivers them,
    /// once the loader's locks are released, so a callback may load or look up.
    pub(crate) fn deliver_events(&self) {
        if LOAD_LOCK.is_owned_by_current_thread() {
            return;
        }
        let events = std::mem::take(&mut *self.events.lock());
        if events.is_empty() {
            return;
        }
        let observers = self.observers.read().clone();
        for (loaded, path, start, end) in &events {
            let (path, start, end) = (path.as_path(), *start, *end);
            let e = if *loaded {
                LoadEvent::Loaded { path, start, end }
            } else {
                LoadEvent::Unloaded { path, start, end }
            };
            for o in &observers {
                o(&e);
            }
        }
    }
}

impl NsState {
    /// Makes `img` a global library of the namespace (once), and appends to the global
    /// scope the members of its local search list (itself, then its `DT_NEEDED` closure
    /// breadth-first) that are not in it yet. This is how glibc builds the main map's
    /// search list at start-up (the program's closure) and extends it for each
    /// `dlopen(RTLD_GLOBAL)` (`add_to_global`): every later load, and `dlsym(RTLD_DEFAULT)`,
    /// can bind to a global library's dependencies (CPython 3.12's `_decimal` takes
    /// `ceil` from the `libm` that libpython brought in).
    pub(crate) fn add_global(&mut self, img: &Arc<Image>) {
        if self.global.iter().any(|g| Arc::ptr_eq(g, img)) {
            return;
        }
        self.global.push(img.clone());
        append_closure(&mut self.scope, img);
    }

    /// Removes `img` from the global libraries and rebuilds the global scope without it.
    pub(crate) fn remove_global(&mut self, img: &Arc<Image>) {
        self.global.retain(|g| !Arc::ptr_eq(g, img));
        self.scope.clear();
        for g in &self.global {
            append_closure(&mut self.scope, g);
        }
    }
}

impl NsInner {
    /// The scope used to relocate `img`: the loader's overrides, the image itself and
    /// its dependencies breadth-first (its local search list), then the namespace's
    /// global scope (global libraries and their dependencies), the image's and the
    /// namespace's search providers, and finally the process's global scope.
    fn scope_for(&self, img: &Arc<Image>) -> Vec<ScopeItem> {
        let mut scope = vec![ScopeItem::Overrides(self.overrides)];
        append_closure(&mut scope, img);
        for item in self.state.lock().scope.iter() {
            if !scope.iter().any(|x| x.same(item)) {
                scope.push(item.clone());
            }
        }
        for p in &img.search {
            scope.push(ScopeItem::Provider(p.clone()));
        }
        for p in self.search.read().iter() {
            scope.push(ScopeItem::Provider(p.clone()));
        }
        scope.push(ScopeItem::System(global_scope()));
        scope
    }

    /// Unloads the images that nothing uses any more, as glibc's `dlclose` does: an image
    /// is used if it has opens left (`dlopen` calls not closed, or a load through the
    /// API), is `RTLD_NODELETE`/`DF_1_NODELETE`, has C++ `thread_local` destructors
    /// pending, is still initialising, or is a dependency (`DT_NEEDED`) or a binding
    /// target (relocations, `dlsym(RTLD_DEFAULT)`: glibc's `l_reldeps`) of a used image.
    /// The others are finalised (dependents first), removed from the namespace (and its
    /// global scope) and unmapped.
    pub(crate) fn collect_unused(self: &Arc<Self>) {
        let _guard = LOAD_LOCK.lock();
        crate::thread_atexit::reap();
        let unused: Vec<Arc<Image>> = {
            let st = self.state.lock();
            let imgs: Vec<&Arc<Image>> = st
                .images
                .iter()
                .filter(|i| !i.unloading.load(Ordering::Acquire))
                .collect();
            let index = |p: *const Image| imgs.iter().position(|i| Arc::as_ptr(i) == p);
            let mut used = vec![false; imgs.len()];
            let mut stack = Vec::new();
            for (k, i) in imgs.iter().enumerate() {
                if i.opens.load(Ordering::Acquire) > 0
                    || i.nodelete.load(Ordering::Acquire)
                    || i.tls_dtors.load(Ordering::Acquire) > 0
                    || !i.initialized.load(Ordering::Acquire)
                {
                    used[k] = true;
                    stack.push(k);
                }
            }
            while let Some(k) = stack.pop() {
                let i = imgs[k];
                let deps = i.deps.get().map(|v| v.as_slice()).unwrap_or(&[]);
                let mut refs: Vec<*const Image> = deps
                    .iter()
                    .filter_map(|d| match d {
                        Dep::Custom(w) => Some(w.as_ptr()),
                        Dep::System(_) => None,
                    })
                    .collect();
                refs.extend(i.reldeps.lock().iter().map(|w| w.as_ptr()));
                for p in refs {
                    if let Some(j) = index(p) {
                        if !used[j] {
                            used[j] = true;
                            stack.push(j);
                        }
                    }
                }
            }
            imgs.iter()
                .enumerate()
                .filter(|(k, i)| !used[*k] && !i.unloading.swap(true, Ordering::AcqRel))
                .map(|(_, i)| (*i).clone())
                .collect()
        };
        if unused.is_empty() {
            return;
        }
        for img in fini_order(&unused) {
            img.run_fini();
        }
        {
            let mut st = self.state.lock();
            let gone = |i: &Arc<Image>| unused.iter().any(|u| Arc::ptr_eq(u, i));
            st.images.retain(|i| !gone(i));
            st.by_file.retain(|_, i| !gone(i));
            st.by_soname.retain(|_, i| !gone(i));
            if st.global.iter().any(gone) {
                let globals: Vec<Arc<Image>> =
                    st.global.iter().filter(|i| gone(i)).cloned().collect();
                for g in &globals {
                    st.remove_global(g);
                }
            }
        }
        for img in unused.iter().rev() {
            tracing::debug!(library = %img.path.display(), namespace = %self.name, "unloaded (no references left)");
            forget_image(img);
            self.note_event(false, img);
        }
    }

    /// Finds a loaded image by path or soname.
    fn find_loaded(&self, key: &str, file: Option<FileId>) -> Option<Arc<Image>> {
        let st = self.state.lock();
        if let Some(f) = file {
            if let Some(i) = st.by_file.get(&f) {
                return Some(i.clone());
            }
        }
        st.by_soname.get(key).cloned()
    }

    /// Finds or maps `name` for `requester` (a `DT_NEEDED` entry or, with `dlopen`, the
    /// argument of a `dlopen` from `requester`'s code): a system library as the policy
    /// says, an image of the namespace already loaded (by soname, or by file after the
    /// search), or a new image, mapped and appended to `new` (not relocated or
    /// initialised: see [`NsInner::load`]). A new dependency's loader is `requester`; a
    /// `dlopen`ed object has none (glibc searches along the caller's path for the name
    /// itself, but the chain of loaders of the object's own dependencies starts at it).
    fn resolve(
        self: &Arc<Self>,
        name: &str,
        requester: Option<&Arc<Image>>,
        dlopen: bool,
        new: &mut Vec<Arc<Image>>,
    ) -> Result<Dep> {
        if self.policy.is_system_name(name) {
            return Ok(Dep::System(self.system_library(name)?));
        }
        let path = if name.contains('/') {
            expand_path_name(name, requester)?
        } else {
            if let Some(img) = self.find_loaded(name, None) {
                return Ok(Dep::Custom(Arc::downgrade(&img)));
            }
            match search_paths(name, requester) {
                (Some((p, in_system_dir)), _) => {
                    if in_system_dir
                        && self.policy.share_system_dirs
                        && !self.policy.is_private_name(name)
                    {
                        return Ok(Dep::System(self.system_library(&p.to_string_lossy())?));
                    }
                    p
                }
                (None, searched) => {
                    return Err(Error::MissingDependency {
                        path: requester.map(|r| r.path.clone()).unwrap_or_default(),
                        name: name.to_string(),
                        searched,
                    })
                }
            }
        };
        let loader = if dlopen { None } else { requester };
        let img = self.map_image(&path, Vec::new(), loader, new)?;
        Ok(Dep::Custom(Arc::downgrade(&img)))
    }

    /// Whether `name`'s file name starts with one of the policy's system prefixes (the
    /// private prefixes are not consulted): a `dlopen` from loaded code of such a name
    /// goes to the system loader (`dlfcn.rs`).
    pub(crate) fn policy_is_system(&self, name: &str) -> bool {
        let base = name.rsplit('/').next().unwrap_or(name);
        self.policy
            .system_prefixes
            .iter()
            .any(|p| base.starts_with(p.as_str()))
    }

    /// Makes `img`, already loaded, a global library of the namespace (`dlopen` with
    /// `RTLD_NOLOAD | RTLD_GLOBAL`).
    pub(crate) fn make_global(&self, img: &Arc<Image>) {
        self.state.lock().add_global(img);
    }

    fn system_library(&self, name: &str) -> Result<Arc<SystemLibrary>> {
        if let Some(s) = self.state.lock().system.get(name) {
            return Ok(s.clone());
        }
        let lib = if crate::system::is_runtime_library(name) {
            match SystemLibrary::already_loaded(name) {
                Some(l) => l,
                None => SystemLibrary::open_runtime(name)?,
            }
        } else {
            // SAFETY: a dependency of a library being loaded: the caller of the public
            // load (`Namespace::load`, `CustomLibrary::load`, or the C API) vouched for
            // its initialisers with the library's.
            unsafe { SystemLibrary::open(name, libc::RTLD_LOCAL)? }
        };
        self.state
            .lock()
            .system
            .insert(name.to_string(), lib.clone());
        Ok(lib)
    }

    /// Loads `path` (a load through the API, or a `dlopen` by path) and what it needs
    /// into this namespace. The object has no loader (glibc's `dlopen` leaves
    /// `l_loader` empty: its dependencies' search starts at it).
    pub(crate) fn load_image(
        self: &Arc<Self>,
        path: &Path,
        search: Vec<Arc<dyn SymbolProvider>>,
        open: Open,
    ) -> Result<Arc<Image>> {
        let dep = self.load(open, |ns, new| {
            ns.map_image(path, search, None, new)
                .map(|i| Dep::Custom(Arc::downgrade(&i)))
        })?;
        match dep {
            Dep::Custom(w) => w
                .upgrade()
                .ok_or_else(|| Error::Usage(format!("{}: unloaded while loading", path.display()))),
            Dep::System(_) => unreachable!("map_image gives a custom image"),
        }
    }

    /// `dlopen` of `name` (found as a dependency of `requester` would be: a system
    /// library, an image already loaded, or a new one) from loaded code.
    pub(crate) fn open_dependency(
        self: &Arc<Self>,
        name: &str,
        requester: Option<&Arc<Image>>,
        open: Open,
    ) -> Result<Dep> {
        self.load(open, |ns, new| ns.resolve(name, requester, true, new))
    }

    /// One load, in glibc's phases (`elf/dl-open.c`, `dl_open_worker`): `first` finds or
    /// maps the object asked for; then its dependencies are mapped breadth-first (each
    /// object's `DT_NEEDED` entries in order, as `_dl_map_object_deps`), every new
    /// object is relocated in the reverse of that order (dependencies first), the open
    /// is counted (before any initialiser runs: a constructor that `dlopen`s and
    /// `dlclose`s its own library does not unload it), the initialisers run in glibc's
    /// order ([`init_order`]), and only then does an `RTLD_GLOBAL` open join the
    /// namespace's global scope. If anything fails before the initialisers, every
    /// object this load mapped is unmapped again and no initialiser has run.
    fn load(
        self: &Arc<Self>,
        open: Open,
        first: impl FnOnce(&Arc<Self>, &mut Vec<Arc<Image>>) -> Result<Dep>,
    ) -> Result<Dep> {
        let _guard = LOAD_LOCK.lock();
        crate::thread_atexit::reap();
        crate::tls::reap_exited_threads();
        let started = std::time::Instant::now();
        let mut new = Vec::new();
        let result = first(self, &mut new).and_then(|dep| {
            self.map_dependencies(&mut new)?;
            self.relocate_new(&new)?;
            Ok(dep)
        });
        let dep = match result {
            Ok(dep) => dep,
            Err(e) => {
                self.undo(&new);
                return Err(e);
            }
        };
        let root = match &dep {
            Dep::Custom(w) => w.upgrade(),
            Dep::System(_) => None,
        };
        if let Some(root) = &root {
            if open.count {
                root.opens.fetch_add(1, Ordering::AcqRel);
            }
            if open.nodelete {
                root.nodelete.store(true, Ordering::Release);
            }
        }
        let order = init_order(&new);
        self.state.lock().images.extend(order.iter().cloned());
        if !new.is_empty() {
            fini_at_exit_registered();
        }
        // The objects to initialise: the new ones, and any of the root's dependency
        // closure loaded by an outer load whose initialisers have not run yet (a
        // constructor `dlopen`ing a library its own load mapped: glibc's `_dl_init`
        // initialises it then).
        let mut pending = new.clone();
        if let Some(root) = &root {
            let mut closure = Vec::new();
            append_closure(&mut closure, root);
            for item in closure {
                if let ScopeItem::Custom(i) = item {
                    if !i.initialized.load(Ordering::Acquire)
                        && !pending.iter().any(|p| Arc::ptr_eq(p, &i))
                    {
                        pending.push(i);
                    }
                }
            }
        }
        pending.sort_by_key(|i| i.id);
        for img in init_order(&pending) {
            img.run_init();
        }
        if let (true, Some(root)) = (open.global, &root) {
            self.state.lock().add_global(root);
        }
        // Reported in the order they were initialised (a dependency first).
        for img in &order {
            self.note_event(true, img);
        }
        if !new.is_empty() {
            tracing::debug!(
                objects = new.len(),
                micros = started.elapsed().as_micros() as u64,
                namespace = %self.name,
                "load complete"
            );
        }
        Ok(dep)
    }

    /// Maps `path` into the namespace (registered, not yet relocated) and appends it to
    /// `new`, or returns the image already loaded from that file.
    fn map_image(
        self: &Arc<Self>,
        path: &Path,
        search: Vec<Arc<dyn SymbolProvider>>,
        loader: Option<&Arc<Image>>,
        new: &mut Vec<Arc<Image>>,
    ) -> Result<Arc<Image>> {
        // Only a regular file: opening a FIFO would block (glibc's dlopen blocks there),
        // and a device or directory is no library.
        match std::fs::metadata(path) {
            Ok(m) if !m.is_file() => {
                return Err(Error::malformed(
                    path,
                    "not a regular file (a FIFO, device or directory is no shared object)",
                ))
            }
            _ => {}
        }
        // The file's identity is its device and inode (as glibc compares): a path, a
        // symlink to it and a hard link are one library.
        let file = std::fs::File::open(path).map_err(|e| Error::Io {
            path: path.to_path_buf(),
            what: "open",
            source: e,
        })?;
        let meta = file.metadata().map_err(|e| Error::Io {
            path: path.to_path_buf(),
            what: "stat",
            source: e,
        })?;
        let id = FileId::of(&meta);
        let stamp = crate::plan::FileStamp::of(&meta);
        if let Some(img) = self.find_loaded("", Some(id)) {
            return Ok(img);
        }
        let (info, map) = crate::map::parse_and_map(path, &file, meta.len())?;
        drop(file);
        if info
            .soname
            .as_deref()
            .is_some_and(|s| s.starts_with("ld-linux"))
        {
            // A second dynamic loader in the process: glibc's, which every thread and
            // every system library depends on, exists once.
            return Err(Error::Usage(format!(
                "{}: the system's dynamic loader cannot be loaded a second time",
                path.display()
            )));
        }
        let tab = crate::symtab::SymTab::from_info(&info, map.bias);
        // Resolvers of exported ifuncs are called by relocations, `sym` and `dlsym`:
        // each must be code of the library (checked once here, before anything runs).
        for i in 1..tab.nsyms {
            let s = tab.sym(i);
            info.check_ifunc_symbol(path, i, &s, || tab.str_at(s.name).map(<[u8]>::to_vec))?;
        }
        let tls_module = info.tls.map(|t| {
            tls::register(tls::Template {
                image: map.bias.wrapping_add(t.vaddr as usize),
                filesz: t.filesz as usize,
                memsz: t.memsz as usize,
                align: t.align.max(1) as usize,
                static_tls: info.static_tls,
            })
        });
        let writable = info.reloc_ranges();
        let raw_phdrs = info
            .phdrs
            .iter()
            .map(|p| libc::Elf64_Phdr {
                p_type: p.kind,
                p_flags: p.flags,
                p_offset: p.offset,
                p_vaddr: p.vaddr,
                p_paddr: p.vaddr,
                p_filesz: p.filesz,
                p_memsz: p.memsz,
                p_align: p.align,
            })
            .collect();
        // glibc marks an object nodelete once a lookup finds one of its
        // `STB_GNU_UNIQUE` definitions (`elf/dl-lookup.c`, `do_lookup_unique`): C++
        // inline statics and template statics, which the object's own relocations look
        // up, so such a library stays loaded after its last `dlclose` (LLVM's does).
        let defines_unique = (1..tab.nsyms).any(|i| {
            let s = tab.sym(i);
            s.is_defined() && s.bind() == crate::elf::consts::STB_GNU_UNIQUE
        });
        let nodelete = info.nodelete || defines_unique;
        let img = Arc::new(Image {
            raw_phdrs,
            id: next_id(),
            tab,
            writable,
            path: path.to_path_buf(),
            stamp,
            c_path: CString::new(path.as_os_str().as_encoded_bytes()).unwrap_or_default(),
            info,
            map,
            tls_module,
            deps: OnceLock::new(),
            loader: loader.map(Arc::downgrade),
            search,
            initialized: Default::default(),
            finalized: Default::default(),
            tls_dtors: Default::default(),
            opens: Default::default(),
            nodelete: AtomicBool::new(nodelete),
            unloading: Default::default(),
            reldeps: Default::default(),
            eh_frame: Default::default(),
            tlsdesc_args: Default::default(),
        });
        IMAGES.write().insert(
            img.map.start,
            Registered {
                end: img.map.start + img.map.len,
                image: Arc::downgrade(&img),
                ns: Arc::downgrade(self),
            },
        );
        crate::phdr::ADDS.fetch_add(1, Ordering::AcqRel);
        {
            let mut st = self.state.lock();
            st.by_file.insert(id, img.clone());
            if let Some(s) = &img.info.soname {
                st.by_soname.insert(s.clone(), img.clone());
            }
        }
        new.push(img.clone());
        Ok(img)
    }

    /// Maps the dependencies of the images in `new` breadth-first, appending the new
    /// ones to `new` (glibc's `_dl_map_object_deps`), and checks their versions.
    fn map_dependencies(self: &Arc<Self>, new: &mut Vec<Arc<Image>>) -> Result<()> {
        let mut next = 0;
        while next < new.len() {
            let img = new[next].clone();
            next += 1;
            let mut deps = Vec::new();
            for name in &img.info.needed {
                deps.push(self.resolve(name, Some(&img), false, new)?);
            }
            check_versions(&img, &deps)?;
            let _ = img.deps.set(deps);
        }
        Ok(())
    }

    /// Relocates the new images, last mapped first (glibc relocates a load's objects in
    /// the reverse of their search-list order, so dependencies are relocated, and their
    /// ifunc resolvers can run, before the objects that use them); then each one's
    /// initialised initial-exec TLS, init/fini checks, `RELRO` and debugger entry.
    fn relocate_new(self: &Arc<Self>, new: &[Arc<Image>]) -> Result<()> {
        for img in new.iter().rev() {
            let span =
                tracing::info_span!("load", library = %img.path.display(), namespace = %self.name);
            let _e = span.enter();
            let started = std::time::Instant::now();
            let scope = self.scope_for(img);
            let stats = img.relocate(&scope)?;
            if let Some(module) = img.tls_module {
                // Initialised initial-exec TLS: its image into the static pool's copies.
                tls::publish_static(module).map_err(|why| Error::unsupported(&img.path, why))?;
            }
            img.check_init_fini()?;
            img.map.protect_relro(&img.info)?;
            crate::debug::register(img);
            tracing::info!(
                relative = stats.relative,
                symbolic = stats.symbolic,
                irelative = stats.irelative,
                tls = stats.tls,
                self_bound = stats.self_bound,
                weak_zero = stats.weak_zero,
                planned = stats.planned,
                prefaulted_pages = stats.prefaulted_pages,
                micros = started.elapsed().as_micros() as u64,
                "loaded"
            );
        }
        Ok(())
    }

    /// Forgets and unmaps the images a failed load mapped (none was initialised).
    fn undo(&self, new: &[Arc<Image>]) {
        let mut st = self.state.lock();
        for img in new {
            st.by_file.retain(|_, i| !Arc::ptr_eq(i, img));
            if let Some(s) = &img.info.soname {
                if st.by_soname.get(s).is_some_and(|i| Arc::ptr_eq(i, img)) {
                    st.by_soname.remove(s);
                }
            }
        }
        drop(st);
        for img in new.iter().rev() {
            forget_image(img);
        }
    }
}

/// How a load counts: the namespace's global scope (`RTLD_GLOBAL`, a load through the
/// API), an open that a `dlclose` will close (or, for the API, that lasts as long as the
/// namespace), `RTLD_NODELETE`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Open {
    pub global: bool,
    pub count: bool,
    pub nodelete: bool,
}

/// Checks, as glibc's `_dl_check_map_versions` does, that every version `img` needs
/// (`DT_VERNEED`, not weak) is defined by the dependency it names (`deps[i]` is the
/// library of `img.info.needed[i]`); a dependency not among them is not checked.
fn check_versions(img: &Image, deps: &[Dep]) -> Result<()> {
    for v in img.info.versions.iter().flatten() {
        let Some(file) = &v.file else { continue };
        if v.weak {
            continue;
        }
        let Some(k) = img.info.needed.iter().position(|n| n == file) else {
            continue;
        };
        let defined = match deps.get(k) {
            Some(Dep::Custom(w)) => match w.upgrade() {
                Some(d) => d
                    .info
                    .versions
                    .iter()
                    .flatten()
                    .any(|d| d.file.is_none() && d.name == v.name),
                None => true,
            },
            Some(Dep::System(lib)) => lib.symtab().is_none_or(|t| t.defines_version(&v.name)),
            None => true,
        };
        if !defined {
            return Err(Error::VersionNotFound {
                path: img.path.clone(),
                version: v.name.clone(),
                file: file.clone(),
            });
        }
    }
    Ok(())
}

/// Registers, once, the process-exit handler that runs the fini functions of every
/// custom-loaded library still initialised (as glibc's `_dl_fini` does for `dlopen`ed
/// libraries): a destructor that flushes a buffer or writes a file is not lost because
/// its namespace was never dropped. Called when the first library is initialised.
pub(crate) fn fini_at_exit_registered() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a plain function with no arguments to run at exit.
        if unsafe { libc::atexit(fini_at_exit) } != 0 {
            tracing::warn!("atexit refused the loader's exit handler: fini functions of libraries still loaded at exit will not run");
        }
    });
}

/// At process exit, as glibc's `_dl_fini` (registered with `atexit` as glibc registers
/// it, so exit handlers registered later, such as the libraries' own static
/// destructors, run first): the fini functions of the initialised custom images not yet
/// finalised, namespace by namespace from the newest (images of namespaces already
/// dropped but kept for pending `thread_local` destructors first), each namespace's in
/// glibc's fini order ([`fini_order`]). The memory stays mapped (other exit handlers and
/// threads may still run their code), and a namespace dropped later finds them
/// finalised (each runs once). Skipped, with nothing run, if another thread holds the
/// load lock for more than a second (it is loading or unloading right now; glibc's
/// `_dl_fini` would wait for it).
extern "C" fn fini_at_exit() {
    let Some(_guard) = LOAD_LOCK.try_lock_for(std::time::Duration::from_secs(1)) else {
        return;
    };
    let Some(map) = IMAGES.try_read_for(std::time::Duration::from_secs(1)) else {
        return;
    };
    let mut groups: BTreeMap<std::cmp::Reverse<u64>, Vec<Arc<Image>>> = BTreeMap::new();
    for r in map.values() {
        if let Some(img) = r.image.upgrade() {
            let ns = r.ns.upgrade().map_or(u64::MAX, |n| n.id);
            groups.entry(std::cmp::Reverse(ns)).or_default().push(img);
        }
    }
    drop(map);
    for images in groups.into_values() {
        for img in fini_order(&images) {
            // A panic must not unwind out of an exit handler.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| img.run_fini()));
        }
    }
}

/// Unregisters an image from the global tables (address index, TLS, unwinder, debugger).
fn forget_image(img: &Arc<Image>) {
    IMAGES.write().remove(&img.map.start);
    crate::phdr::SUBS.fetch_add(1, Ordering::AcqRel);
    crate::debug::unregister(img);
    if let Some(m) = img.tls_module {
        tls::unregister(m);
    }
}

impl Drop for NsInner {
    fn drop(&mut self) {
        {
            let _guard = LOAD_LOCK.lock();
            crate::thread_atexit::reap();
        }
        let st = self.state.get_mut();
        let images = std::mem::take(&mut st.images);
        let system = std::mem::take(&mut st.system);
        st.global.clear();
        st.scope.clear();
        st.by_file.clear();
        st.by_soname.clear();
        let (on_drop, id) = (self.on_drop, self.id);
        let name = std::mem::take(&mut self.name);
        // C++ thread_local destructors still registered by the namespace's code (in
        // threads that have not exited yet) need its code and TLS blocks: the namespace
        // stays loaded until they have run, as glibc keeps such a library loaded.
        self.pins.unload_when_unpinned(Box::new(move || {
            let _guard = LOAD_LOCK.lock();
            for img in fini_order(&images) {
                img.run_fini();
            }
            // The handles given out stay valid through the fini functions (LLVM's
            // `~Globals` `dlclose`s its handles from a static destructor); then they are
            // closed, before the images go.
            on_drop(id);
            for img in images.iter().rev() {
                forget_image(img);
            }
            drop(images);
            drop(system);
            tracing::debug!(namespace = %name, "namespace unloaded");
        }));
    }
}

/// Finds `name` (no `/`) as glibc's `_dl_map_object` does for `requester` (see
/// `search.rs`): the `DT_RPATH`s of `requester` and of its chain of loaders, ...; from the
/// main program when `requester` is `None`. Returns the path and whether it was found in
/// the cache or a default directory, or the list of places searched.
pub(crate) fn search_paths(
    name: &str,
    requester: Option<&Arc<Image>>,
) -> (Option<(PathBuf, bool)>, String) {
    let sp = match requester {
        Some(r) => {
            let chain = loader_chain(r);
            let links: Vec<crate::search::Link<'_>> = chain
                .iter()
                .map(|i| crate::search::Link {
                    rpath: i.info.rpath.as_deref(),
                    runpath: i.info.runpath.as_deref(),
                    origin: i.path.parent().unwrap_or(Path::new(".")),
                })
                .collect();
            crate::search::SearchPath::of_chain(&links, r.info.nodeflib)
        }
        None => crate::search::SearchPath::of_program(),
    };
    match sp.find(name) {
        Ok(f) => (Some((f.path, f.system)), String::new()),
        Err(searched) => (None, searched),
    }
}

/// A name with a `/` (a `DT_NEEDED` entry or a `dlopen` argument) with its dynamic
/// string tokens expanded for `requester` (`$ORIGIN` is its directory), as glibc's
/// `_dl_map_object` does before opening it; an error if a token cannot be expanded.
pub(crate) fn expand_path_name(name: &str, requester: Option<&Arc<Image>>) -> Result<PathBuf> {
    let origin = match requester {
        Some(r) => r.path.parent().map(Path::to_path_buf),
        None => crate::search::program_origin(),
    };
    crate::search::expand_dst(name, origin.as_deref())
        .map(PathBuf::from)
        .ok_or_else(|| Error::NotFound {
            name: name.to_string(),
            searched: "($ORIGIN unknown: the name cannot be expanded)".into(),
        })
}

/// `img`, the image that loaded it (glibc's `l_loader`: the library that needed it, or
/// the caller of the `dlopen` that loaded it), that one's loader, and so on, up to an
/// image loaded through the API (whose loader is the program). An image unloaded since
/// ends the chain.
fn loader_chain(img: &Arc<Image>) -> Vec<Arc<Image>> {
    let mut chain = vec![img.clone()];
    while let Some(next) = chain.last().and_then(|i| i.loader.as_ref()?.upgrade()) {
        if chain.iter().any(|c| Arc::ptr_eq(c, &next)) {
            break;
        }
        chain.push(next);
    }
    chain
}

fn global_scope() -> Arc<SystemLibrary> {
    static G: OnceLock<Arc<SystemLibrary>> = OnceLock::new();
    G.get_or_init(SystemLibrary::global).clone()
}
