//! The [`SymbolProvider`] trait and [`SystemLibrary`], the system loader's side: the
//! process's global scope (`RTLD_DEFAULT`) or one library opened with `dlopen`.

use crate::error::{Error, Result};
use crate::symtab::SymTab;
use crate::tls::TlsIndex;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::{Arc, OnceLock};

extern "C" {
    fn dlvsym(handle: *mut c_void, symbol: *const c_char, version: *const c_char) -> *mut c_void;
    fn dlinfo(handle: *mut c_void, request: c_int, arg: *mut c_void) -> c_int;
    fn dladdr1(
        addr: *const c_void,
        info: *mut libc::Dl_info,
        extra: *mut *mut c_void,
        flags: c_int,
    ) -> c_int;
}
const RTLD_DI_TLS_MODID: c_int = 9;
const RTLD_DI_TLS_DATA: c_int = 10;
const RTLD_DL_LINKMAP: c_int = 2;

/// Something that resolves symbol names to addresses: a system library, a custom-loaded
/// library, or anything else a user wants to put in a library's search list.
pub trait SymbolProvider: Send + Sync {
    /// The address of the (non-TLS) symbol `name`, if this provider defines it.
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
}

/// Libraries that, once loaded, stay loaded for the life of the process.
const ALWAYS_LOADED: &[&str] = &[
    "libc.so",
    "libm.so",
    "libpthread.so",
    "libdl.so",
    "librt.so",
    "libgcc_s.so",
    "libstdc++.so",
];

/// A library of the system loader (or its whole global scope), as a [`SymbolProvider`].
pub struct SystemLibrary {
    handle: *mut c_void,
    owned: bool,
    name: String,
    /// The library's own symbol table, read from its dynamic section (not for the
    /// global scope): a fast path that avoids `dlvsym`.
    tab: OnceLock<Option<SymTab>>,
    /// `handle` is a link map found in the main namespace (loaded at start-up, so in
    /// the global scope), not a `dlopen` handle: `dlsym` goes through RTLD_DEFAULT.
    startup_map: bool,
}

// SAFETY: a dlopen handle may be used from any thread (glibc's dl* functions are
// thread-safe); the struct holds no thread-affine state.
unsafe impl Send for SystemLibrary {}
// SAFETY: as above; all methods take &self and only call thread-safe dl* functions.
unsafe impl Sync for SystemLibrary {}

fn dl_error() -> String {
    // SAFETY: dlerror returns a thread-local string or null.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: non-null dlerror results are NUL-terminated strings.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

impl SystemLibrary {
    /// The process's global scope: the program and every library loaded with
    /// `RTLD_GLOBAL` (`dlsym(RTLD_DEFAULT, ...)`).
    pub fn global() -> Arc<SystemLibrary> {
        Arc::new(SystemLibrary {
            handle: libc::RTLD_DEFAULT,
            owned: false,
            name: "the process's global scope".into(),
            tab: OnceLock::new(),
            startup_map: false,
        })
    }

    /// Opens `name` (a path or a soname) with the system loader; `dlclose`d on drop.
    /// `flags` are `dlopen` flags (`RTLD_NOW` is always added).
    pub fn open(name: &str, flags: i32) -> Result<Arc<SystemLibrary>> {
        let c = CString::new(name)
            .map_err(|_| Error::Usage(format!("library name {name:?} contains a NUL byte")))?;
        // SAFETY: dlopen with a NUL-terminated name; the handle is checked.
        let h = unsafe { libc::dlopen(c.as_ptr(), flags | libc::RTLD_NOW) };
        if h.is_null() {
            return Err(Error::SystemLoad {
                name: name.into(),
                message: dl_error(),
            });
        }
        Ok(Arc::new(SystemLibrary {
            handle: h,
            owned: true,
            name: name.into(),
            tab: OnceLock::new(),
            startup_map: false,
        }))
    }

    /// A library the system loader already has in its main namespace, found by the
    /// base name of its path (`libc.so.6`) in the `r_debug` link map, without a
    /// `dlopen` call. Only for libraries that are never unloaded (the C runtime): the
    /// returned handle is not reference-counted.
    pub(crate) fn already_loaded(name: &str) -> Option<Arc<SystemLibrary>> {
        if name.contains('/') || !ALWAYS_LOADED.iter().any(|p| name.starts_with(p)) {
            return None;
        }
        #[repr(C)]
        struct LinkMap {
            l_addr: usize,
            l_name: *const c_char,
            l_ld: *const c_void,
            l_next: *const LinkMap,
        }
        #[repr(C)]
        struct RDebug {
            r_version: c_int,
            r_map: *const LinkMap,
        }
        extern "C" {
            static _r_debug: RDebug;
        }
        // SAFETY: glibc's r_debug and the public head of its link maps; the main
        // namespace's list only changes under the loader lock, and entries for the C
        // runtime are never removed.
        let mut lm = unsafe { _r_debug.r_map };
        while !lm.is_null() {
            // SAFETY: as above.
            let (n, next) = unsafe { ((*lm).l_name, (*lm).l_next) };
            if !n.is_null() {
                // SAFETY: l_name is a NUL-terminated path.
                let path = unsafe { CStr::from_ptr(n) }.to_bytes();
                let base = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
                if base == name.as_bytes() {
                    return Some(Arc::new(SystemLibrary {
                        handle: lm as *mut c_void,
                        owned: false,
                        name: name.to_string(),
                        tab: OnceLock::new(),
                        startup_map: true,
                    }));
                }
            }
            lm = next;
        }
        None
    }

    /// Wraps an existing `dlopen` handle; if `steal`, it is `dlclose`d on drop.
    ///
    /// # Safety
    /// `handle` must be `RTLD_DEFAULT` or a live handle returned by `dlopen`, and if
    /// `steal` is true nobody else may `dlclose` it.
    pub unsafe fn from_handle(handle: *mut c_void, steal: bool) -> Arc<SystemLibrary> {
        Arc::new(SystemLibrary {
            handle,
            owned: steal,
            name: format!("system handle {handle:p}"),
            tab: OnceLock::new(),
            startup_map: false,
        })
    }

    /// The raw handle.
    pub fn handle(&self) -> *mut c_void {
        self.handle
    }

    /// The library's own symbol table (`None` for the global scope or when it cannot
    /// be read; callers then use `dlvsym`).
    pub(crate) fn symtab(&self) -> Option<&SymTab> {
        if self.handle.is_null() {
            return None;
        }
        self.tab
            // SAFETY: our handle stays open as long as `self` (and so the view) lives.
            .get_or_init(|| unsafe { SymTab::from_system(self.handle) })
            .as_ref()
    }

    pub(crate) fn lookup_c(&self, name: &CStr, version: Option<&CStr>) -> Option<usize> {
        let handle = if self.startup_map {
            libc::RTLD_DEFAULT
        } else {
            self.handle
        };
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
    /// found through the address it has in the calling thread.
    pub(crate) fn tls_lookup_c(
        &self,
        name: &CStr,
        version: Option<&CStr>,
    ) -> Option<(TlsIndex, usize)> {
        let addr = self.lookup_c(name, version)?;
        system_tls_index(addr).map(|ti| (ti, addr))
    }
}

/// For the address of a system TLS variable in the calling thread: its module id and
/// offset in the system loader's terms.
pub(crate) fn system_tls_index(addr: usize) -> Option<TlsIndex> {
    // SAFETY: Dl_info is plain data; dladdr1 fills it or returns 0.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    let mut map: *mut c_void = std::ptr::null_mut();
    // SAFETY: valid out-pointers; RTLD_DL_LINKMAP stores a struct link_map* in `map`.
    let ok = unsafe { dladdr1(addr as *const c_void, &mut info, &mut map, RTLD_DL_LINKMAP) };
    if ok == 0 || map.is_null() {
        return None;
    }
    let mut modid: usize = 0;
    // SAFETY: a link_map pointer is a valid dlinfo handle in glibc.
    if unsafe {
        dlinfo(
            map,
            RTLD_DI_TLS_MODID,
            &mut modid as *mut usize as *mut c_void,
        )
    } != 0
        || modid == 0
    {
        return None;
    }
    let mut block: *mut c_void = std::ptr::null_mut();
    // SAFETY: as above; RTLD_DI_TLS_DATA stores this thread's block pointer (or null).
    unsafe {
        dlinfo(
            map,
            RTLD_DI_TLS_DATA,
            &mut block as *mut *mut c_void as *mut c_void,
        )
    };
    if block.is_null() {
        return None;
    }
    let base = block as usize;
    (addr >= base).then(|| TlsIndex {
        module: modid as u64,
        offset: (addr - base) as u64,
    })
}

impl Drop for SystemLibrary {
    fn drop(&mut self) {
        if self.owned && !self.handle.is_null() {
            // SAFETY: we own this handle (constructor contract).
            unsafe { libc::dlclose(self.handle) };
        }
    }
}

impl SymbolProvider for SystemLibrary {
    fn sym(&self, name: &str) -> Option<usize> {
        self.sym_versioned(name, None)
    }
    fn tls_sym(&self, name: &str) -> Option<TlsIndex> {
        let c = CString::new(name).ok()?;
        self.tls_lookup_c(&c, None).map(|(ti, _)| ti)
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
