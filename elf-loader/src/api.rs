//! The public handles: [`Namespace`] (an isolated world of custom-loaded libraries) and
//! [`CustomLibrary`] (one library loaded by this loader, the seed's API). They wire a
//! namespace's machinery (`namespace.rs`) to the loader's entries for loaded code
//! (`dlfcn.rs`) and answer typed lookups ([`Symbol`]).

use crate::dlfcn;
use crate::error::{Error, Result};
use crate::image::{Image, ScopeItem};
use crate::namespace::{search_paths, DependencyPolicy, LoadEvent, NsInner};
use crate::symbol::Symbol;
use crate::system::SymbolProvider;
use crate::tls::TlsIndex;
use parking_lot::Mutex;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// An isolated world of custom-loaded libraries: each library it loads (and each
/// dependency that the policy does not share) exists once per namespace, and a
/// `dlopen` from inside the namespace loads into it.
///
/// Dropping the last handle to a namespace (the `Namespace` values and every
/// [`CustomLibrary`] of it) runs the fini functions of its libraries, dependents first,
/// and unmaps them.
#[derive(Clone)]
pub struct Namespace {
    pub(crate) inner: Arc<NsInner>,
}

impl Namespace {
    /// A new, empty namespace with the default dependency policy.
    pub fn new(name: &str) -> Namespace {
        Self::with_policy(name, DependencyPolicy::default())
    }

    /// A new, empty namespace with `policy`.
    pub fn with_policy(name: &str, policy: DependencyPolicy) -> Namespace {
        Namespace {
            inner: NsInner::new(name, policy, dlfcn::overrides(), dlfcn::forget_namespace),
        }
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Adds a provider searched by every library loaded afterwards (after its own
    /// dependencies and the namespace's global libraries).
    pub fn add_search_library(&self, provider: Arc<dyn SymbolProvider>) {
        self.inner.search.write().push(provider);
    }

    /// Loads `path` (and its dependencies) into this namespace, as a global library of
    /// the namespace, and runs its init functions.
    ///
    /// # Safety
    /// As libloading's `Library::new`: loading runs foreign code (the init functions of
    /// the library and of its dependencies, and ifunc resolvers) and binds it to the
    /// namespace's search libraries. The caller vouches that the library's (and its
    /// dependencies') initialisers are safe to run in this process, that what they
    /// need from the process is there (no conflicting global state, threads they do not
    /// expect, ...), and that the namespace's [`SymbolProvider`]s answer with the
    /// definitions the library expects.
    pub unsafe fn load(&self, path: impl AsRef<Path>) -> Result<CustomLibrary> {
        let lib = CustomLibrary::create_in(self, path.as_ref());
        // SAFETY: the caller's contract (this function's).
        unsafe { lib.load()? };
        Ok(lib)
    }

    /// Calls `f` for each library the namespace loads or unloads from now on (loads
    /// through the API, their dependencies, `dlopen`s and `dlclose`s from loaded code),
    /// in order, on the thread that loaded or unloaded it, after the loader's locks are
    /// released (so `f` may load or look up). A load made while the thread is inside
    /// another load (a `dlopen` from an init function) is reported when the outer load
    /// of the same namespace finishes; one into another namespace from there, at that
    /// namespace's next load or unload.
    pub fn on_event(&self, f: impl Fn(&LoadEvent<'_>) + Send + Sync + 'static) {
        self.inner.observe(Arc::new(f));
    }

    /// Number of libraries this namespace has mapped.
    pub fn library_count(&self) -> usize {
        self.inner.state.lock().images.len()
    }

    /// Paths of this namespace's libraries, in load order.
    pub fn library_paths(&self) -> Vec<PathBuf> {
        self.inner
            .state
            .lock()
            .images
            .iter()
            .map(|i| i.path.clone())
            .collect()
    }

    /// Looks `name` up in the namespace's global scope (its global libraries and their
    /// dependencies: each global library, in the order it became global, followed by
    /// the libraries of its `DT_NEEDED` closure, breadth-first, not seen yet).
    ///
    /// The answer is an address only: to call a function or read an object, use
    /// [`Namespace::get`], whose [`Symbol`] keeps the namespace alive.
    pub fn sym(&self, name: &str) -> Option<usize> {
        let scope = self.inner.state.lock().scope.clone();
        scope.iter().find_map(|item| match item {
            ScopeItem::Custom(l) => l.export(name, None),
            ScopeItem::System(s) => s.sym(name),
            _ => None,
        })
    }

    /// The symbol `name` of the namespace's global scope (as [`Namespace::sym`]) as an
    /// `F` (a function pointer or raw pointer type) borrowing this namespace, so that
    /// it cannot be used after the namespace is dropped. (A library that loaded code
    /// itself opened with `dlopen(RTLD_GLOBAL)` leaves when that code `dlclose`s it, as
    /// under glibc: that is the loaded code's doing, which `load` vouched for.)
    ///
    /// # Safety
    /// `F` must be the symbol's type (the function's exact signature, or a pointer to
    /// the object's type), as with libloading's `Library::get`. A wrong `F` is refused
    /// only when its size is not an address's.
    pub unsafe fn get<F: Copy>(&self, name: &str) -> Result<Symbol<'_, F>> {
        // SAFETY: the namespace's global libraries stay mapped while `self` (a handle on
        // the namespace) is borrowed; the type is the caller's contract.
        unsafe {
            crate::symbol::lookup(
                name,
                || format!("namespace {}", self.name()),
                |n| self.sym(n),
            )
        }
    }
}

/// One custom-loaded library (the seed's `CustomLibrary`): create it, add search
/// libraries, load it, look symbols up. Symbols resolve in the library first, then its
/// dependencies, its namespace's global libraries, its search libraries in order, and
/// the process's global scope.
pub struct CustomLibrary {
    ns: Namespace,
    path: PathBuf,
    /// Search libraries added before `load`.
    pending: Mutex<Vec<Arc<dyn SymbolProvider>>>,
    /// The loaded image (set once; lookups read it without a lock).
    loaded: OnceLock<Arc<Image>>,
}

impl CustomLibrary {
    /// A library to be loaded from `path` into a new namespace of its own.
    pub fn create(path: impl AsRef<Path>) -> CustomLibrary {
        let path = path.as_ref();
        let ns = Namespace::new(&path.display().to_string());
        Self::create_in(&ns, path)
    }

    /// A library to be loaded from `path` into `ns`.
    pub fn create_in(ns: &Namespace, path: impl AsRef<Path>) -> CustomLibrary {
        CustomLibrary {
            ns: ns.clone(),
            path: path.as_ref().to_path_buf(),
            pending: Mutex::new(Vec::new()),
            loaded: OnceLock::new(),
        }
    }

    /// Adds a provider searched (in the order added) for symbols the library needs.
    /// Must be called before [`CustomLibrary::load`]. A provider that is this library,
    /// or a custom library whose search libraries lead back to it, is refused (a lookup
    /// would go round the cycle for ever).
    pub fn add_search_library(&self, provider: Arc<dyn SymbolProvider>) -> Result<()> {
        // One adder at a time, so two threads cannot close a cycle between them (each
        // walk below sees the other's addition). The walk takes other libraries'
        // `pending` locks one at a time, never while holding ours.
        static ADDING: Mutex<()> = Mutex::new(());
        let _adding = ADDING.lock();
        if self.loaded.get().is_some() {
            return Err(Error::Usage(format!(
                "{}: add_search_library after load()",
                self.path.display()
            )));
        }
        if let Some(mut chain) = Self::reaches(&provider, self) {
            let why = if chain.is_empty() {
                "a library cannot be its own search library".to_string()
            } else {
                chain.push(self.path.display().to_string());
                format!("{} already", chain.join(" searches "))
            };
            return Err(Error::Usage(format!(
                "{}: add_search_library({}) would make a cycle of search libraries ({why})",
                self.path.display(),
                provider.describe(),
            )));
        }
        let mut pending = self.pending.lock();
        if self.loaded.get().is_some() {
            return Err(Error::Usage(format!(
                "{}: add_search_library after load()",
                self.path.display()
            )));
        }
        pending.push(provider);
        Ok(())
    }

    /// The search libraries lookups go through after this library's own symbols: the
    /// loaded image's, or those added so far.
    fn search_providers(&self) -> Vec<Arc<dyn SymbolProvider>> {
        match self.image() {
            Some(img) => img.search.clone(),
            None => self.pending.lock().clone(),
        }
    }

    /// Whether a lookup in `start` reaches the custom library `target` (`start` being
    /// `target` included): `Some(names)` of the custom libraries in between, or `None`.
    fn reaches(start: &Arc<dyn SymbolProvider>, target: &CustomLibrary) -> Option<Vec<String>> {
        let mut seen: HashSet<*const CustomLibrary> = HashSet::new();
        // Depth-first, each library once; each entry with the libraries before it.
        let mut stack: Vec<(Arc<dyn SymbolProvider>, Vec<String>)> =
            vec![(start.clone(), Vec::new())];
        while let Some((p, path)) = stack.pop() {
            let Some(lib) = p.as_any().and_then(|a| a.downcast_ref::<CustomLibrary>()) else {
                continue;
            };
            if std::ptr::eq(lib, target) {
                return Some(path);
            }
            if !seen.insert(lib) {
                continue;
            }
            for next in lib.search_providers() {
                let mut path = path.clone();
                path.push(lib.path.display().to_string());
                stack.push((next, path));
            }
        }
        None
    }

    /// Maps, relocates and initialises the library (and its dependencies). Loading an
    /// already loaded library is an error.
    ///
    /// # Safety
    /// As [`Namespace::load`]: loading runs the library's and its dependencies' init
    /// functions and binds them to the search libraries, which must answer with the
    /// definitions the library expects.
    pub unsafe fn load(&self) -> Result<()> {
        let pending = self.pending.lock();
        if self.loaded.get().is_some() {
            return Err(Error::Usage(format!(
                "{}: load() called twice",
                self.path.display()
            )));
        }
        let path = self.resolve_path()?;
        // A load through the API is an open that is never closed (counted before the
        // initialisers run): the library leaves with its namespace.
        let open = crate::namespace::Open {
            global: true,
            count: true,
            nodelete: false,
        };
        let loaded = self.ns.inner.load_image(&path, pending.clone(), open);
        self.ns.inner.deliver_events();
        let img = loaded?;
        let _ = self.loaded.set(img);
        Ok(())
    }

    /// The file to load: the path as given, or for a bare name (no `/`) the file
    /// glibc's `dlopen` from the program would open (the executable's `DT_RPATH`,
    /// `LD_LIBRARY_PATH`, its `DT_RUNPATH`, `/etc/ld.so.cache`, the default
    /// directories). A name not found is an error listing what was searched; the C
    /// runtime's own libraries (`libc.so.6`, `ld-linux`, ...), which cannot exist twice
    /// in a process, are refused by name.
    fn resolve_path(&self) -> Result<PathBuf> {
        let Some(name) = self.path.to_str().filter(|n| !n.contains('/')) else {
            return Ok(self.path.clone());
        };
        if crate::system::is_runtime_library(name) {
            return Err(Error::Usage(format!(
                "{name}: the C runtime's libraries cannot be loaded a second time (use SystemLibrary for the process's own)"
            )));
        }
        match search_paths(name, None) {
            (Some((p, _)), _) => Ok(p),
            (None, searched) => Err(Error::NotFound {
                name: name.to_string(),
                searched,
            }),
        }
    }

    fn image(&self) -> Option<&Arc<Image>> {
        self.loaded.get()
    }

    /// The library's namespace.
    pub fn namespace(&self) -> &Namespace {
        &self.ns
    }

    /// The file it is loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether `load` has succeeded.
    pub fn is_loaded(&self) -> bool {
        self.loaded.get().is_some()
    }

    /// The address of a symbol defined by this library itself (no search libraries).
    /// An address only: to call a function or read an object, use
    /// [`CustomLibrary::get_own`] (or [`CustomLibrary::get`]).
    pub fn own_sym(&self, name: &str) -> Option<usize> {
        self.image()?.export(name, None)
    }

    /// The symbol `name` (the library, then its search libraries, as
    /// [`SymbolProvider::sym`]) as an `F` (a function pointer or raw pointer type)
    /// borrowing this library, so that it cannot be used after the library is dropped.
    /// An error if the library is not loaded or does not define `name`.
    ///
    /// # Safety
    /// `F` must be the symbol's type (the function's exact signature, or a pointer to
    /// the object's type), as with libloading's `Library::get`. A wrong `F` is refused
    /// only when its size is not an address's.
    pub unsafe fn get<F: Copy>(&self, name: &str) -> Result<Symbol<'_, F>> {
        self.check_loaded(name)?;
        // SAFETY: the library and its search libraries stay loaded while `self` is
        // borrowed (a library loaded through the API is never closed before its
        // namespace, which `self` holds); the type is the caller's contract.
        unsafe { crate::symbol::lookup(name, || self.describe(), |n| self.sym(n)) }
    }

    /// As [`CustomLibrary::get`], but only the library's own definitions (as
    /// [`CustomLibrary::own_sym`]).
    ///
    /// # Safety
    /// As [`CustomLibrary::get`].
    pub unsafe fn get_own<F: Copy>(&self, name: &str) -> Result<Symbol<'_, F>> {
        self.check_loaded(name)?;
        // SAFETY: as in `get`.
        unsafe { crate::symbol::lookup(name, || self.describe(), |n| self.own_sym(n)) }
    }

    fn check_loaded(&self, name: &str) -> Result<()> {
        if self.is_loaded() {
            Ok(())
        } else {
            Err(Error::Usage(format!(
                "{}: not loaded yet (load() first): no symbol {name}",
                self.path.display()
            )))
        }
    }

    /// The runtime address range `[start, end)` of the library's mapping.
    pub fn address_range(&self) -> Option<(usize, usize)> {
        self.image().map(|i| (i.map.start, i.map.start + i.map.len))
    }

    /// The load bias (runtime address minus link-time address).
    pub fn load_bias(&self) -> Option<usize> {
        self.image().map(|i| i.map.bias)
    }

    /// Our TLS module id, if the library has thread-local storage.
    pub fn tls_module(&self) -> Option<u64> {
        self.image()?.tls_module
    }
}

// SAFETY: the addresses are the library's own definitions (checked at load to lie in
// the mapping, ifunc resolvers in its code) or its search libraries' answers, which
// are `SymbolProvider`s themselves.
unsafe impl SymbolProvider for CustomLibrary {
    fn sym(&self, name: &str) -> Option<usize> {
        self.sym_versioned(name, None)
    }
    fn tls_sym(&self, name: &str) -> Option<TlsIndex> {
        self.image()?.export_tls(name)
    }
    fn sym_versioned(&self, name: &str, version: Option<&str>) -> Option<usize> {
        let img = self.image()?;
        if let Some(a) = img.export(name, version) {
            return Some(a);
        }
        img.search
            .iter()
            .find_map(|p| p.sym_versioned(name, version))
    }
    fn describe(&self) -> String {
        format!("{} (namespace {})", self.path.display(), self.ns.name())
    }
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}
