//! The [`SymbolProvider`] trait and [`SystemLibrary`], the system loader's side: the
//! process's global scope (`RTLD_DEFAULT`) or one library opened with `dlopen`.

use crate::error::{Error, Result};
use crate::symtab::SymTab;
use crate::tls::TlsIndex;
use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::{Arc, OnceLock};

extern "C" {
    fn dlvsym(handle: *mut c_void, symbol: *const c_char, version: *const c_char) -> *mut c_void;
}

/// Something that resolves symbol names to addresses: a system library, a custom-loaded
/// library, or anything else a user wants to put in a library's search list.
///
/// `sym` answers an address, not something callable: to call a function of a library,
/// use the typed lookups [`crate::CustomLibrary::get`], [`crate::Namespace::get`] or
/// [`SystemLibrary::get`], whose [`crate::Symbol`] keeps the library mapped.
///
/// # Safety
/// Loaded code binds its references to what a provider answers and jumps there or
/// reads there without any check: an implementation must answer, for each name, the
/// address of a definition of that name with the type and ABI loaded code expects (a
/// function of the C signature, an object of the layout, a TLS index of a thread-local
/// variable), that stays valid as long as the provider is alive (loaded code that
/// bound to it keeps the provider alive), or `None`. Answering any other address (say
/// `0x10`) makes a library's constructor jump there.
pub unsafe trait SymbolProvider: Send + Sync {
    /// The address of the (non-TLS) symbol `name`, if this provider defines it (an
    /// address: see the typed lookups to call it).
    fn sym(&self, name: &str) -> Option<usize>;
    /// The module and offset of the thread-local symbol `name`, if defined here.
    fn tls_sym(&self, name: &str) -> Option<TlsIndex>;
    /// The address of `name` with the symbol version `version` (`GLIBC_2.2.5`, ...).
    /// The default ignores the version.
    fn sym_versioned(&self, name: &str, version: Option<&str>) -> Option<usize> {
        let _ = version;
        self.sym(name)
    }
    /// A short description for messages and traces.
    fn describe(&self) -> String;
    /// The provider as `Any`, if it is a [`crate::CustomLibrary`]: lets
    /// `add_search_library` see the search libraries behind it and refuse a cycle.
    #[doc(hidden)]
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }
}

/// The one table of the runtime libraries: those that must never be loaded twice in a
/// process (glibc's, the compiler runtimes'). Each is a name prefix; all of them are
/// shared through the system loader by default (`DependencyPolicy::default`), and those
/// marked `in_place` (the C runtime proper) are also refused when a library is loaded
/// by that name, and looked up in place: found among the system loader's objects, or
/// opened with `RTLD_NODELETE`, their symbol tables read where they are.
pub(crate) const RUNTIME_LIBRARIES: &[RuntimeLibrary] = &[
    RuntimeLibrary::in_place("libc.so"),
    RuntimeLibrary::in_place("libm.so"),
    RuntimeLibrary::in_place("libpthread.so"),
    RuntimeLibrary::in_place("libdl.so"),
    RuntimeLibrary::in_place("librt.so"),
    RuntimeLibrary::shared("libutil.so"),
    RuntimeLibrary::shared("libresolv.so"),
    RuntimeLibrary::shared("libanl.so"),
    RuntimeLibrary::shared("ld-linux"),
    RuntimeLibrary::shared("libmvec.so"),
    RuntimeLibrary::in_place("libstdc++.so"),
    RuntimeLibrary::in_place("libgcc_s.so"),
    RuntimeLibrary::shared("libatomic.so"),
    RuntimeLibrary::shared("libgomp.so"),
];

/// One entry of [`RUNTIME_LIBRARIES`].
pub(crate) struct RuntimeLibrary {
    /// The name prefix (`libc.so` matches `libc.so.6`).
    pub prefix: &'static str,
    /// The C runtime proper: refused by name, looked up in place.
    pub in_place: bool,
}

impl RuntimeLibrary {
    const fn in_place(prefix: &'static str) -> RuntimeLibrary {
        RuntimeLibrary {
            prefix,
            in_place: true,
        }
    }
    const fn shared(prefix: &'static str) -> RuntimeLibrary {
        RuntimeLibrary {
            prefix,
            in_place: false,
        }
    }
}

/// Whether `name` (a soname such as `libc.so.6`, not a path) is one of the C runtime's
/// libraries (an `in_place` entry of [`RUNTIME_LIBRARIES`], followed by a version).
pub(crate) fn is_runtime_library(name: &str) -> bool {
    !name.contains('/')
        && RUNTIME_LIBRARIES.iter().any(|l| {
            l.in_place
                && name
                    .strip_prefix(l.prefix)
                    .is_some_and(|rest| rest.starts_with('.'))
        })
}

/// A library of the system loader (or its whole global scope), as a [`SymbolProvider`].
pub struct SystemLibrary {
    handle: *mut c_void,
    /// The handle as a libloading library when we own it (`dlclose`d on drop).
    _owner: Option<libloading::os::unix::Library>,
    name: String,
    /// The library's own symbol table, read from its dynamic section (not for the
    /// global scope): a fast path that avoids `dlvsym`.
    tab: OnceLock<Option<SymTab>>,
    /// `handle` is a link map found in the main namespace (loaded at start-up, so in
    /// the global scope), not a `dlopen` handle: `dlsym` goes through RTLD_DEFAULT.
    startup_map: bool,
    /// The system loader's TLS module id of the library (`None`: no `PT_TLS`, or not
    /// found), read on first use.
    tls_modid: OnceLock<Option<u64>>,
}

// SAFETY: a dlopen handle may be used from any thread (glibc's dl* functions are
// thread-safe); the struct holds no thread-affine state.
unsafe impl Send for SystemLibrary {}
// SAFETY: as above; all methods take &self and only call thread-safe dl* functions.
unsafe impl Sync for SystemLibrary {}

impl SystemLibrary {
    /// The process's global scope: the program and every library loaded with
    /// `RTLD_GLOBAL` (`dlsym(RTLD_DEFAULT, ...)`).
    pub fn global() -> Arc<SystemLibrary> {
        Arc::new(SystemLibrary {
            handle: libc::RTLD_DEFAULT,
            _owner: None,
            name: "the process's global scope".into(),
            tab: OnceLock::new(),
            startup_map: false,
            tls_modid: OnceLock::new(),
        })
    }

    /// Opens `name` (a path or a soname) with the system loader; `dlclose`d on drop.
    /// `flags` are `dlopen` flags (`RTLD_NOW` is always added).
    ///
    /// # Safety
    /// As libloading's `Library::open`: the system loader runs the library's (and its
    /// dependencies') init functions, which must be safe to run in this process.
    pub unsafe fn open(name: &str, flags: i32) -> Result<Arc<SystemLibrary>> {
        if name.contains('\0') {
            return Err(Error::Usage(format!(
                "library name {name:?} contains a NUL byte"
            )));
        }
        // SAFETY: the caller's contract (the library's initialisers are safe to run).
        let lib =
            unsafe { libloading::os::unix::Library::open(Some(name), flags | libc::RTLD_NOW) }
                .map_err(|e| Error::SystemLoad {
                    name: name.into(),
                    // libloading's error says "dlopen failed"; its source is dlerror's text.
                    message: std::error::Error::source(&e)
                        .map_or_else(|| e.to_string(), |s| s.to_string()),
                })?;
        // The raw handle, for `dlvsym` (which libloading does not offer) and the
        // lookups below; the library is closed by `owner` on drop.
        let h = lib.into_raw();
        Ok(Arc::new(SystemLibrary {
            handle: h,
            // SAFETY: `h` is the live handle just opened, owned by nobody else.
            _owner: Some(unsafe { libloading::os::unix::Library::from_raw(h) }),
            name: name.into(),
            tab: OnceLock::new(),
            startup_map: false,
            tls_modid: OnceLock::new(),
        }))
    }

    /// One of the C runtime's libraries (`libc.so.6`, `libm.so.6`, ...) that the system
    /// loader already has, found by base name with `dl_iterate_phdr` (which holds the
    /// loader's list lock), without a `dlopen` call. Its symbol table is read in place;
    /// `dlsym` fallbacks go through `RTLD_DEFAULT`. Only for libraries that are never
    /// unloaded (loaded at start-up or opened with `RTLD_NODELETE` by
    /// [`SystemLibrary::open_runtime`]).
    pub(crate) fn already_loaded(name: &str) -> Option<Arc<SystemLibrary>> {
        if !is_runtime_library(name) {
            return None;
        }
        let mut found = None;
        crate::phdr::for_each_system_object(|o| {
            let path = o.name.to_bytes();
            let base = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
            if base != name.as_bytes() {
                return false;
            }
            found = o
                .phdrs
                .iter()
                .find(|ph| ph.p_type == crate::elf::consts::PT_DYNAMIC)
                .map(|ph| (o.addr, o.addr + ph.p_vaddr as usize));
            found.is_some()
        });
        let (addr, dynamic) = found?;
        // SAFETY: runtime libraries are never unloaded (see above).
        let tab = unsafe { SymTab::from_dynamic(addr, dynamic as *const u64) }?;
        Some(Arc::new(SystemLibrary {
            handle: libc::RTLD_DEFAULT,
            _owner: None,
            name: name.to_string(),
            tab: OnceLock::from(Some(tab)),
            startup_map: true,
            tls_modid: OnceLock::new(),
        }))
    }

    /// Opens a C runtime library with `RTLD_NODELETE` (it then stays loaded, so that
    /// [`SystemLibrary::already_loaded`] can find it safely later).
    pub(crate) fn open_runtime(name: &str) -> Result<Arc<SystemLibrary>> {
        // SAFETY: the C runtime's libraries (checked by the callers): their
        // initialisers already ran or are the ones every program runs.
        unsafe { Self::open(name, libc::RTLD_LOCAL | libc::RTLD_NODELETE) }
    }

    /// Wraps an existing `dlopen` handle; if `steal`, it is `dlclose`d on drop.
    ///
    /// # Safety
    /// `handle` must be `RTLD_DEFAULT` or a live handle returned by `dlopen`, and if
    /// `steal` is true nobody else may `dlclose` it.
    pub unsafe fn from_handle(handle: *mut c_void, steal: bool) -> Arc<SystemLibrary> {
        Arc::new(SystemLibrary {
            handle,
            // SAFETY: the caller's contract: a live handle nobody else closes.
            _owner: (steal && !handle.is_null())
                .then(|| unsafe { libloading::os::unix::Library::from_raw(handle) }),
            name: format!("system handle {handle:p}"),
            tab: OnceLock::new(),
            startup_map: false,
            tls_modid: OnceLock::new(),
        })
    }

    /// The raw handle.
    pub fn handle(&self) -> *mut c_void {
        self.handle
    }

    /// The symbol `name` (`dlsym` on this library) as an `F` (a function pointer or raw
    /// pointer type) borrowing this library, so that it cannot be used after the
    /// library is dropped (`dlclose`d).
    ///
    /// # Safety
    /// `F` must be the symbol's type (the function's exact signature, or a pointer to
    /// the object's type), as with libloading's `Library::get`. A wrong `F` is refused
    /// only when its size is not an address's.
    pub unsafe fn get<F: Copy>(&self, name: &str) -> Result<crate::Symbol<'_, F>> {
        // SAFETY: the handle stays open while `self` is borrowed; the type is the
        // caller's contract.
        unsafe { crate::symbol::lookup(name, || self.name.clone(), |n| self.sym(n)) }
    }

    /// The library's own symbol table (`None` for the global scope or when it cannot
    /// be read; callers then use `dlvsym`).
    pub(crate) fn symtab(&self) -> Option<&SymTab> {
        if let Some(t) = self.tab.get() {
            return t.as_ref();
        }
        if self.handle.is_null() {
            return None;
        }
        self.tab
            // SAFETY: our handle stays open as long as `self` (and so the view) lives.
            .get_or_init(|| unsafe { SymTab::from_system(self.handle) })
            .as_ref()
    }

    /// What identifies this library for a relocation plan (see `plan.rs`): its name
    /// and load address when its own symbol table is read (lookups that a plan records
    /// only read that table: whether the library came through a `dlopen` handle or was
    /// found among the start-up libraries does not change it), else its name and handle
    /// (`dlvsym` through the handle).
    pub(crate) fn plan_identity(&self) -> (&str, usize, usize) {
        match self.symtab() {
            Some(t) => (&self.name, 0, t.bias),
            None => (&self.name, self.handle as usize, 0),
        }
    }

    /// The handle `dlsym`/`dlvsym` lookups of this library go through.
    pub(crate) fn dl_handle(&self) -> *mut c_void {
        if self.startup_map {
            libc::RTLD_DEFAULT
        } else {
            self.handle
        }
    }

    /// `dlsym`/`dlvsym` through [`SystemLibrary::dl_handle`]. By hand rather than
    /// through libloading: libloading has no `dlvsym` and no `RTLD_DEFAULT` handle, and
    /// this is the relocation fallback for every symbol a system library's own table
    /// does not answer.
    pub(crate) fn lookup_c(&self, name: &CStr, version: Option<&CStr>) -> Option<usize> {
        let handle = self.dl_handle();
        // SAFETY: valid handle (constructor contract) and NUL-terminated strings.
        let p = unsafe {
            match version {
                Some(v) => dlvsym(handle, name.as_ptr(), v.as_ptr()),
                None => libc::dlsym(handle, name.as_ptr()),
            }
        };
        if p.is_null() {
            // dlsym leaves an error string behind; consume it so that it cannot be
            // mistaken for a later failure.
            // SAFETY: plain call.
            unsafe { libc::dlerror() };
            None
        } else {
            Some(p as usize)
        }
    }

    /// The TLS index of `name` (module id and offset in the system loader's terms),
    /// found through the address it has in the calling thread (`dlvsym`).
    pub(crate) fn tls_lookup_c(&self, name: &CStr, version: Option<&CStr>) -> Option<TlsIndex> {
        let addr = self.lookup_c(name, version)?;
        system_tls_index(addr)
    }

    /// Whether `other` is the same library of the system loader.
    pub(crate) fn same_library(&self, other: &SystemLibrary) -> bool {
        if std::ptr::eq(self, other) {
            return true;
        }
        if self.startup_map || other.startup_map {
            return self.startup_map && other.startup_map && self.name == other.name;
        }
        self.handle == other.handle
    }

    /// The system loader's TLS module id for this library, if it has thread-local
    /// storage: the `dl_iterate_phdr` entry whose load address is the library's.
    pub(crate) fn tls_module(&self) -> Option<u64> {
        *self.tls_modid.get_or_init(|| {
            let bias = self.symtab()?.bias;
            let mut found = None;
            crate::phdr::for_each_system_object(|o| {
                if o.addr == bias {
                    found = (o.tls_modid != 0).then_some(o.tls_modid as u64);
                    return true;
                }
                false
            });
            found
        })
    }

    /// A symbol of this library's own table: `Some(Ok(address))` for a non-TLS
    /// definition, `Some(Err(index))` for a thread-local one (module id and offset in
    /// the system loader's terms; versioned names included), `None` if the table does
    /// not define it (or cannot be read).
    pub(crate) fn lookup_own(
        &self,
        name: &[u8],
        hash: u32,
        version: Option<&str>,
    ) -> Option<std::result::Result<usize, TlsIndex>> {
        let tab = self.symtab()?;
        let s = tab.lookup(name, hash, version)?;
        if s.kind() == crate::elf::consts::STT_TLS {
            return Some(Err(TlsIndex {
                module: self.tls_module()?,
                offset: s.value,
            }));
        }
        Some(Ok(tab.address(&s)))
    }

    /// What `dlsym` gives for `name` from this library's own table: the address, or for a
    /// thread-local symbol its address in the calling thread. `None` if the table does
    /// not define it.
    pub(crate) fn lookup_in_table(
        &self,
        name: &[u8],
        hash: u32,
        version: Option<&str>,
    ) -> Option<usize> {
        match self.lookup_own(name, hash, version)? {
            Ok(a) => Some(a),
            Err(ti) => Some(crate::tls::address_in_thread(&ti)),
        }
    }
}

/// For the address of a system TLS variable in the calling thread: its module id and
/// offset in the system loader's terms.
pub(crate) fn system_tls_index(addr: usize) -> Option<TlsIndex> {
    // The address lies in some module's TLS block for this thread (not in its image, so
    // dladdr cannot tell): find the module whose block contains it.
    let mut found = None;
    crate::phdr::for_each_system_object(|o| {
        if o.tls_modid == 0 || o.tls_data == 0 {
            return false;
        }
        let Some(tls) = o
            .phdrs
            .iter()
            .find(|ph| ph.p_type == crate::elf::consts::PT_TLS)
        else {
            return false;
        };
        if addr >= o.tls_data && addr < o.tls_data + tls.p_memsz as usize {
            found = Some(TlsIndex {
                module: o.tls_modid as u64,
                offset: (addr - o.tls_data) as u64,
            });
            return true;
        }
        false
    });
    found
}

// SAFETY: the answers are the system loader's (`dlsym`/`dlvsym`, or the library's own
// symbol table read in place), valid while the handle is open, i.e. while `self` lives.
unsafe impl SymbolProvider for SystemLibrary {
    fn sym(&self, name: &str) -> Option<usize> {
        self.sym_versioned(name, None)
    }
    fn tls_sym(&self, name: &str) -> Option<TlsIndex> {
        let n = name.as_bytes();
        if let Some(Err(ti)) = self.lookup_own(n, crate::elf::gnu_hash(n), None) {
            return Some(ti);
        }
        let c = CString::new(name).ok()?;
        self.tls_lookup_c(&c, None)
    }
    fn sym_versioned(&self, name: &str, version: Option<&str>) -> Option<usize> {
        let c = CString::new(name).ok()?;
        let v = match version {
            Some(v) => Some(CString::new(v).ok()?),
            None => None,
        };
        self.lookup_c(&c, v.as_deref())
    }
    fn describe(&self) -> String {
        self.name.clone()
    }
}
