//! The `dlopen` family as custom-loaded libraries see it.
//!
//! Custom libraries' references to `dlopen`, `dlsym`, `dlvsym`, `dlerror`, `dladdr`,
//! `dlclose` and `__tls_get_addr` bind to the entries here. Each entry learns its caller
//! from the return address (as glibc's own `dlopen` does), finds the caller's image and so
//! its namespace: a `dlopen` from a library in a namespace loads into that namespace
//! (binding the new library to the namespace first), `dlsym(RTLD_DEFAULT)` searches the
//! namespace before the process, and `dladdr` knows custom-loaded code. Calls from
//! outside any namespace are forwarded to the system loader unchanged: by hand
//! (`libc::dlopen`, `dlsym`, `dlvsym`, `dlclose`), not through libloading, because they
//! are the caller's own calls with the caller's handles (the caller closes what it
//! opened; libloading would own and close them), and libloading has no `dlvsym`.

use crate::boundary::guarded;
use crate::image::{Dep, Image, ScopeItem};
use crate::namespace::{image_containing, namespace_containing, NsInner};
use crate::overrides::Overrides;
use parking_lot::Mutex;
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock, Weak};

/// What one of our handles stands for.
enum Target {
    /// A custom image (dlsym searches it and its dependencies).
    Image(Weak<Image>),
    /// A system library (dlsym forwards to the system's dlsym).
    System(*mut c_void),
    /// `dlopen(NULL)` from inside a namespace: the namespace's global scope.
    Scope,
    /// A handle of a namespace that has been unloaded (its memory is kept for the next
    /// handle, so that the address is never the system loader's).
    Closed,
}

struct Handle {
    ns_id: u64,
    ns: Weak<NsInner>,
    target: Target,
}

/// Our handles, by address. A handle is a `Box<Handle>` that is never freed: when its
/// namespace is gone it becomes [`Target::Closed`] and its memory serves a later
/// handle, so an address we handed out never becomes one of the system loader's (a
/// stale `dlclose` or `dlsym` gets an error from us, never a forward to glibc with a
/// pointer glibc did not make). Like glibc's, a stale handle may name a later library
/// once its memory is reused.
struct Handles {
    by_addr: HashMap<usize, Box<Handle>>,
    /// (namespace id, image id or 0 for the scope) -> handle address, for identity.
    by_key: HashMap<(u64, u64), usize>,
    /// Addresses of closed handles, for reuse.
    free: Vec<usize>,
}

// SAFETY: the raw system handle inside is only passed to thread-safe dl* functions.
unsafe impl Send for Handles {}

static HANDLES: Mutex<Option<Handles>> = Mutex::new(None);

fn with_handles<R>(f: impl FnOnce(&mut Handles) -> R) -> R {
    let mut g = HANDLES.lock();
    let h = g.get_or_insert_with(|| Handles {
        by_addr: HashMap::new(),
        by_key: HashMap::new(),
        free: Vec::new(),
    });
    f(h)
}

fn make_handle(ns: &Arc<NsInner>, key: u64, target: Target) -> *mut c_void {
    with_handles(|h| {
        if let Some(&a) = h.by_key.get(&(ns.id, key)) {
            return a as *mut c_void;
        }
        let handle = Handle {
            ns_id: ns.id,
            ns: Arc::downgrade(ns),
            target,
        };
        let a = match h.free.pop() {
            Some(a) => {
                **h.by_addr
                    .get_mut(&a)
                    .expect("a closed handle stays in by_addr") = handle;
                a
            }
            None => {
                let b = Box::new(handle);
                let a = &*b as *const Handle as usize;
                h.by_addr.insert(a, b);
                a
            }
        };
        h.by_key.insert((ns.id, key), a);
        a as *mut c_void
    })
}

/// Closes every handle of a namespace that has been unloaded.
pub(crate) fn forget_namespace(ns_id: u64) {
    with_handles(|h| {
        h.by_key.retain(|k, _| k.0 != ns_id);
        for (&a, hd) in h.by_addr.iter_mut() {
            if hd.ns_id == ns_id && !matches!(hd.target, Target::Closed) {
                hd.target = Target::Closed;
                h.free.push(a);
            }
        }
    });
}

thread_local! {
    static LAST_ERROR: RefCell<Option<CString>> = const { RefCell::new(None) };
    static RETURNED_ERROR: RefCell<Option<CString>> = const { RefCell::new(None) };
}

fn set_error(msg: String) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    let _ = LAST_ERROR.try_with(|e| *e.borrow_mut() = Some(c));
}

/// Starts a `dlopen`/`dlsym`/`dlvsym`/`dlclose` from loaded code: as with glibc, each
/// call clears the error a previous one left (ours, and the system loader's, which our
/// own internal lookups or a forwarded call may have left behind).
fn reset_errors() {
    let _ = LAST_ERROR.try_with(|e| e.borrow_mut().take());
    clear_system_error();
}

/// Consumes the system loader's error string (after an internal `dlsym` that failed, or
/// to start a call afresh), so that our `dlerror` does not report it later.
fn clear_system_error() {
    // SAFETY: plain call; the string it returns is not used.
    unsafe { libc::dlerror() };
}

fn namespace_of(caller: usize) -> Option<(Arc<Image>, Arc<NsInner>)> {
    let (img, ns) = namespace_containing(caller)?;
    Some((img, ns))
}

unsafe extern "C" fn dlopen_impl(file: *const c_char, flags: c_int, caller: usize) -> *mut c_void {
    guarded("dlopen", std::ptr::null_mut(), set_error, || {
        reset_errors();
        let Some((_img, ns)) = namespace_of(caller) else {
            if let Some(img) = image_containing(caller) {
                // Custom code whose namespace is being unloaded (a destructor or exit
                // handler of one of its libraries): it loads nothing more.
                set_error(format!(
                    "dlopen from {}: its namespace is being unloaded",
                    img.path.display()
                ));
                return std::ptr::null_mut();
            }
            // SAFETY: forwarding the caller's arguments unchanged.
            return unsafe { libc::dlopen(file, flags) };
        };
        // SAFETY: the caller's arguments (dlopen's contract).
        let handle = unsafe { dlopen_in(&ns, file, flags, caller) };
        ns.deliver_events();
        handle
    })
}

/// `dlopen` from loaded code of the namespace `ns`.
///
/// # Safety
/// `file` is NULL or a NUL-terminated string.
unsafe fn dlopen_in(
    ns: &Arc<NsInner>,
    file: *const c_char,
    flags: c_int,
    caller: usize,
) -> *mut c_void {
    if file.is_null() {
        return make_handle(ns, 0, Target::Scope);
    }
    // SAFETY: dlopen's contract: a NUL-terminated file name.
    let name = unsafe { CStr::from_ptr(file) }
        .to_string_lossy()
        .into_owned();
    let global = flags & libc::RTLD_GLOBAL != 0;
    let requester = image_containing(caller);
    tracing::debug!(namespace = %ns.name, file = %name, flags, "dlopen from loaded code");
    if flags & libc::RTLD_NOLOAD != 0 {
        // Only a library already in the namespace (or a system library already loaded).
        let base = name.rsplit('/').next().unwrap_or(&name).to_string();
        let found = {
            let st = ns.state.lock();
            let by_file = std::fs::metadata(&name)
                .ok()
                .and_then(|m| st.by_file.get(&crate::namespace::FileId::of(&m)).cloned());
            by_file.or_else(|| st.by_soname.get(&base).cloned())
        };
        return match found {
            Some(i) => {
                if global {
                    ns.make_global(&i);
                }
                opened(&i, flags);
                make_handle(ns, i.id, Target::Image(Arc::downgrade(&i)))
            }
            // SAFETY: forwarding the caller's arguments: the system answers for its own.
            None if ns.policy_is_system(&name) => unsafe { libc::dlopen(file, flags) },
            None => std::ptr::null_mut(),
        };
    }
    let open = crate::namespace::Open {
        global,
        count: true,
        nodelete: flags & libc::RTLD_NODELETE != 0,
    };
    let result = if name.contains('/') && !ns.policy_is_system(&name) {
        crate::namespace::expand_path_name(&name, requester.as_ref())
            .and_then(|path| ns.load_image(&path, Vec::new(), open))
            .map(|i| Dep::Custom(Arc::downgrade(&i)))
    } else {
        ns.open_dependency(&name, requester.as_ref(), open)
    };
    match result {
        Ok(Dep::Custom(w)) => {
            let Some(i) = w.upgrade() else {
                set_error(format!("{name}: library vanished while loading"));
                return std::ptr::null_mut();
            };
            make_handle(ns, i.id, Target::Image(Arc::downgrade(&i)))
        }
        Ok(Dep::System(s)) => {
            // Keep the system library open for the namespace's lifetime.
            let h = s.handle();
            make_handle(ns, h as u64 | (1 << 63), Target::System(h))
        }
        // The name itself was not found: glibc's wording, then where it was looked for
        // (a missing dependency of the library found is reported as such below).
        Err(crate::Error::MissingDependency {
            name: missing,
            searched,
            ..
        }) if missing == name => {
            let from = requester.map_or_else(String::new, |r| {
                format!("dlopen from {}; ", r.path.display())
            });
            set_error(format!(
                "{name}: cannot open shared object file: not found ({from}searched: {searched})"
            ));
            std::ptr::null_mut()
        }
        Err(e) => {
            set_error(e.to_string());
            std::ptr::null_mut()
        }
    }
}

/// Counts one more open of `img` (closed by `dlclose`); `RTLD_NODELETE` pins it.
fn opened(img: &Image, flags: c_int) {
    img.opens.fetch_add(1, Ordering::AcqRel);
    if flags & libc::RTLD_NODELETE != 0 {
        img.nodelete.store(true, Ordering::Release);
    }
}

/// What `dlsym` returns for a symbol of a custom image: its address, or for a
/// thread-local symbol its address in the calling thread (as glibc's `dlsym` does).
fn symbol_value(img: &Image, s: &crate::elf::Sym) -> Option<usize> {
    if s.kind() == crate::elf::consts::STT_TLS {
        let block = crate::tls::block_for(img.tls_module?)?;
        return Some(block + s.value as usize);
    }
    Some(img.sym_address(s))
}

/// What `dlsym` finds for `name` in `items`, in order: a custom image's definition, or a
/// system library's (a thread-local symbol gives its address in the calling thread, as
/// glibc's `dlsym` does). System libraries are searched in their own tables; those that
/// do not have the name are then asked through `dlvsym`, once per handle.
///
/// Also returns the custom image that defines it, if it is one.
fn lookup_items(
    items: &[ScopeItem],
    name: &CStr,
    version: Option<&CStr>,
) -> Option<(usize, Option<Arc<Image>>)> {
    let n = name.to_bytes();
    let v = version.map(|v| v.to_string_lossy().into_owned());
    let hash = crate::elf::gnu_hash(n);
    let mut fallback = false;
    for item in items {
        match item {
            ScopeItem::Custom(i) => {
                if let Some(s) = i.lookup_own(n, hash, v.as_deref()) {
                    return symbol_value(i, &s).map(|a| (a, Some(i.clone())));
                }
            }
            ScopeItem::System(lib) => match lib.lookup_in_table(n, hash, v.as_deref()) {
                Some(found) => return Some((found, None)),
                None => fallback = true,
            },
            ScopeItem::Provider(p) => {
                if let Some(a) = p.sym_versioned(&name.to_string_lossy(), v.as_deref()) {
                    return Some((a, None));
                }
            }
            ScopeItem::Overrides(_) => {}
        }
    }
    if fallback {
        let mut asked = Vec::new();
        for item in items {
            if let ScopeItem::System(lib) = item {
                let h = lib.dl_handle();
                if asked.contains(&h) {
                    continue;
                }
                if let Some(a) = lib.lookup_c(name, version) {
                    return Some((a, None));
                }
                asked.push(h);
            }
        }
    }
    None
}

/// Looks `name` up in an image's local search list: the image and its dependency
/// closure, breadth-first (dlsym on a handle).
fn lookup_in_closure(img: &Arc<Image>, name: &CStr, version: Option<&CStr>) -> Option<usize> {
    let mut items = Vec::new();
    crate::order::append_closure(&mut items, img);
    lookup_items(&items, name, version).map(|(a, _)| a)
}

/// Looks `name` up in the namespace's global scope (after `after`'s place in it, for
/// `RTLD_NEXT`), then in the namespace's search providers.
fn lookup_in_scope(
    ns: &Arc<NsInner>,
    after: Option<&Arc<Image>>,
    name: &CStr,
    version: Option<&CStr>,
) -> Option<(usize, Option<Arc<Image>>)> {
    let mut items = ns.state.lock().scope.clone();
    if let Some(a) = after {
        let me = ScopeItem::Custom(a.clone());
        let start = items
            .iter()
            .position(|x| x.same(&me))
            .map_or(items.len(), |p| p + 1);
        items.drain(..start);
    }
    items.extend(ns.search.read().iter().cloned().map(ScopeItem::Provider));
    lookup_items(&items, name, version)
}

unsafe fn dlsym_common(
    handle: *mut c_void,
    name: *const c_char,
    version: *const c_char,
    caller: usize,
) -> *mut c_void {
    reset_errors();
    if name.is_null() {
        set_error("dlsym: symbol name is NULL".into());
        return std::ptr::null_mut();
    }
    // SAFETY: dlsym's contract: NUL-terminated strings.
    let cname = unsafe { CStr::from_ptr(name) };
    // SAFETY: as above.
    let cver = (!version.is_null()).then(|| unsafe { CStr::from_ptr(version) });
    let system = |h: *mut c_void| -> *mut c_void {
        // SAFETY: forwarding to the system with the caller's arguments.
        unsafe {
            match cver {
                Some(v) => dlvsym_sys(h, cname.as_ptr(), v.as_ptr()),
                None => libc::dlsym(h, cname.as_ptr()),
            }
        }
    };
    // The process's global scope after the namespace's: a failure there is ours to
    // report (below), so glibc's own error string is consumed.
    let system_fallback = || {
        let p = system(libc::RTLD_DEFAULT);
        if p.is_null() {
            clear_system_error();
        }
        (!p.is_null()).then_some(p as usize)
    };
    let found: Option<usize>;
    if handle.is_null() || handle == libc::RTLD_NEXT {
        let Some((img, ns)) = namespace_of(caller) else {
            return system(handle);
        };
        let after = (handle == libc::RTLD_NEXT).then_some(&img);
        found = match lookup_in_scope(&ns, after, cname, cver) {
            Some((a, def)) => {
                // The caller now uses the defining library: it stays loaded as long as
                // the caller does (glibc adds the same dependency for these lookups).
                if let Some(d) = def {
                    img.add_reldeps(&[d]);
                }
                Some(a)
            }
            None => system_fallback(),
        };
    } else {
        let target = with_handles(|h| {
            h.by_addr
                .get(&(handle as usize))
                .map(|hd| match &hd.target {
                    Target::Image(w) => Some((Some(w.clone()), None, hd.ns.clone())),
                    Target::System(s) => Some((None, Some(*s), hd.ns.clone())),
                    Target::Scope => Some((None, None, hd.ns.clone())),
                    Target::Closed => None,
                })
        });
        let target = match target {
            Some(None) => {
                set_error("dlsym: invalid handle (its namespace was unloaded)".into());
                return std::ptr::null_mut();
            }
            Some(Some(t)) => Some(t),
            None => None,
        };
        match target {
            None => return system(handle),
            Some((_, Some(sys), _)) => return system(sys),
            Some((Some(w), None, _)) => {
                let Some(img) = w.upgrade() else {
                    set_error("dlsym: handle refers to an unloaded library".into());
                    return std::ptr::null_mut();
                };
                found = lookup_in_closure(&img, cname, cver);
            }
            Some((None, None, ns)) => {
                let Some(ns) = ns.upgrade() else {
                    set_error("dlsym: handle refers to an unloaded namespace".into());
                    return std::ptr::null_mut();
                };
                found = lookup_in_scope(&ns, None, cname, cver)
                    .map(|(a, _)| a)
                    .or_else(system_fallback);
            }
        }
    }
    match found {
        Some(a) => a as *mut c_void,
        None => {
            set_error(format!("undefined symbol: {}", cname.to_string_lossy()));
            std::ptr::null_mut()
        }
    }
}

extern "C" {
    #[link_name = "dlvsym"]
    fn dlvsym_sys(
        handle: *mut c_void,
        symbol: *const c_char,
        version: *const c_char,
    ) -> *mut c_void;
}

unsafe extern "C" fn dlsym_impl(
    handle: *mut c_void,
    name: *const c_char,
    caller: usize,
) -> *mut c_void {
    guarded("dlsym", std::ptr::null_mut(), set_error, || {
        // SAFETY: same contract as dlsym.
        unsafe { dlsym_common(handle, name, std::ptr::null(), caller) }
    })
}

unsafe extern "C" fn dlvsym_impl(
    handle: *mut c_void,
    name: *const c_char,
    version: *const c_char,
    caller: usize,
) -> *mut c_void {
    guarded("dlvsym", std::ptr::null_mut(), set_error, || {
        // SAFETY: same contract as dlvsym.
        unsafe { dlsym_common(handle, name, version, caller) }
    })
}

extern "C" fn dlerror_impl() -> *mut c_char {
    guarded("dlerror", std::ptr::null_mut(), set_error, || {
        let ours = LAST_ERROR
            .try_with(|e| e.borrow_mut().take())
            .ok()
            .flatten();
        match ours {
            Some(msg) => RETURNED_ERROR
                .try_with(|r| {
                    let mut r = r.borrow_mut();
                    *r = Some(msg);
                    r.as_ref()
                        .map_or(std::ptr::null_mut(), |m| m.as_ptr() as *mut c_char)
                })
                .unwrap_or(std::ptr::null_mut()),
            // SAFETY: plain forward.
            None => unsafe { libc::dlerror() },
        }
    })
}

unsafe extern "C" fn dlclose_impl(handle: *mut c_void) -> c_int {
    guarded("dlclose", -1, set_error, || {
        reset_errors();
        let target = with_handles(|h| {
            h.by_addr
                .get(&(handle as usize))
                .map(|hd| match &hd.target {
                    Target::Image(w) => Ok(Some((w.clone(), hd.ns.clone()))),
                    Target::System(_) | Target::Scope => Ok(None),
                    Target::Closed => Err(()),
                })
        });
        let (w, ns) = match target {
            // SAFETY: not ours: forward to the system.
            None => return unsafe { libc::dlclose(handle) },
            Some(Err(())) => {
                set_error("dlclose: invalid handle (its namespace was unloaded)".into());
                return -1;
            }
            // System libraries stay open for the namespace's lifetime (its dependency
            // cache holds them); the namespace's scope is not a library.
            Some(Ok(None)) => return 0,
            Some(Ok(Some(t))) => t,
        };
        let Some(img) = w.upgrade() else {
            set_error("dlclose: shared object not open (the library was unloaded)".into());
            return -1;
        };
        let before = img
            .opens
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        match before {
            Err(_) => {
                set_error(format!(
                    "{}: dlclose: shared object not open",
                    img.path.display()
                ));
                -1
            }
            Ok(1) => {
                tracing::debug!(library = %img.path.display(), "dlclose: last open closed");
                drop(img);
                if let Some(ns) = ns.upgrade() {
                    ns.collect_unused();
                    ns.deliver_events();
                }
                0
            }
            Ok(_) => 0,
        }
    })
}

unsafe extern "C" fn dladdr_impl(addr: *const c_void, info: *mut libc::Dl_info) -> c_int {
    guarded("dladdr", 0, set_error, || {
        let Some(img) = image_containing(addr as usize) else {
            // SAFETY: forward with the caller's arguments.
            return unsafe { libc::dladdr(addr, info) };
        };
        if info.is_null() {
            return 0;
        }
        let (sname, saddr) = match img.symbol_at(addr as usize) {
            Some((name, a)) => (name.as_ptr() as *const c_char, a as *mut c_void),
            None => (std::ptr::null(), std::ptr::null_mut()),
        };
        // SAFETY: the caller passes a valid Dl_info; the strings live in the image (the
        // symbol name is NUL-terminated in DT_STRTAB, the path in the image) as long as the
        // library stays loaded, like glibc's.
        unsafe {
            (*info).dli_fname = img.c_path.as_ptr();
            (*info).dli_fbase = img.map.start as *mut c_void;
            (*info).dli_sname = sname;
            (*info).dli_saddr = saddr;
        }
        1
    })
}

// Entries that pass the caller's return address as an extra argument (tail jumps, so
// the stack is exactly as the caller left it).
std::arch::global_asm!(
    ".text",
    ".p2align 4",
    ".globl elf_loader_dlopen",
    ".hidden elf_loader_dlopen",
    "elf_loader_dlopen:",
    "mov rdx, [rsp]",
    "jmp {dlopen}",
    ".p2align 4",
    ".globl elf_loader_dlsym",
    ".hidden elf_loader_dlsym",
    "elf_loader_dlsym:",
    "mov rdx, [rsp]",
    "jmp {dlsym}",
    ".p2align 4",
    ".globl elf_loader_dlvsym",
    ".hidden elf_loader_dlvsym",
    "elf_loader_dlvsym:",
    "mov rcx, [rsp]",
    "jmp {dlvsym}",
    dlopen = sym dlopen_impl,
    dlsym = sym dlsym_impl,
    dlvsym = sym dlvsym_impl,
);

extern "C" {
    fn elf_loader_dlopen();
    fn elf_loader_dlsym();
    fn elf_loader_dlvsym();
}

/// The loader's entries that custom libraries get instead of the system's, by name.
pub(crate) fn overrides() -> &'static Overrides {
    static TABLE: OnceLock<Overrides> = OnceLock::new();
    TABLE.get_or_init(|| {
        let thread_atexit = cxa_thread_atexit as *const () as usize;
        Overrides::new(vec![
            (b"dlopen", elf_loader_dlopen as *const () as usize),
            (b"dlsym", elf_loader_dlsym as *const () as usize),
            (b"dlvsym", elf_loader_dlvsym as *const () as usize),
            (b"dlerror", dlerror_impl as *const () as usize),
            (b"dlclose", dlclose_impl as *const () as usize),
            (b"dladdr", dladdr_impl as *const () as usize),
            (b"__tls_get_addr", crate::tls::tls_get_addr_entry()),
            (b"dl_iterate_phdr", crate::iterate_phdr::iterate_entry()),
            (b"__cxa_thread_atexit", thread_atexit),
            (b"__cxa_thread_atexit_impl", thread_atexit),
            (
                b"pthread_create",
                pthread_create_entry as *const () as usize,
            ),
        ])
    })
}

/// `__cxa_thread_atexit` / `__cxa_thread_atexit_impl` for custom-loaded code: the
/// destructor of custom code pins its image and namespace (see `thread_atexit.rs`);
/// anything else is the system's registration as it is.
///
/// # Safety
/// The contract of `__cxa_thread_atexit`: `dtor(obj)` must be callable at thread exit.
unsafe extern "C" fn cxa_thread_atexit(
    dtor: unsafe extern "C" fn(*mut c_void),
    obj: *mut c_void,
    dso: *mut c_void,
) -> c_int {
    guarded(
        "__cxa_thread_atexit",
        -1,
        |m| eprintln!("elf-loader: {m}"),
        || {
            let owner = namespace_containing(dso as usize).map(|(img, ns)| (img, ns.pins.clone()));
            // SAFETY: the caller's contract.
            unsafe { crate::thread_atexit::register(dtor, obj, dso, owner) }
        },
    )
}

type StartRoutine = extern "C" fn(*mut c_void) -> *mut c_void;
type PthreadCreate = unsafe extern "C" fn(
    *mut libc::pthread_t,
    *const libc::pthread_attr_t,
    StartRoutine,
    *mut c_void,
) -> c_int;

/// The system's `pthread_create`.
fn system_pthread_create() -> Option<PthreadCreate> {
    static SYS: OnceLock<usize> = OnceLock::new();
    let a = *SYS.get_or_init(|| crate::phdr::global_symbol(c"pthread_create").unwrap_or(0));
    // SAFETY: glibc's pthread_create has this signature.
    (a != 0).then(|| unsafe { std::mem::transmute::<usize, PthreadCreate>(a) })
}

/// A thread started by a namespace's code, on its way to its start routine.
struct Starting {
    start: StartRoutine,
    arg: *mut c_void,
    pins: Arc<crate::thread_atexit::Pins>,
}

/// `pthread_create` for custom-loaded code: the system's, and a thread whose start
/// routine is a namespace's code is recorded in that namespace's pins (its end waits
/// for the thread, see `thread_atexit.rs`).
///
/// # Safety
/// The contract of `pthread_create`.
unsafe extern "C" fn pthread_create_entry(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    start: StartRoutine,
    arg: *mut c_void,
) -> c_int {
    let Some(sys) = system_pthread_create() else {
        return libc::EAGAIN;
    };
    let pins = namespace_containing(start as usize).map(|(_, ns)| ns.pins.clone());
    let Some(pins) = pins else {
        // SAFETY: forwarding the caller's arguments.
        return unsafe { sys(thread, attr, start, arg) };
    };
    pins.thread_starting();
    let rec = Box::into_raw(Box::new(Starting {
        start,
        arg,
        pins: pins.clone(),
    }));
    // SAFETY: the trampoline takes back the box exactly once; the caller's contract
    // for the rest.
    let rc = unsafe { sys(thread, attr, starting_trampoline, rec.cast()) };
    if rc != 0 {
        // SAFETY: the thread was not created: the box is still ours.
        drop(unsafe { Box::from_raw(rec) });
        pins.thread_started(None);
    }
    rc
}

/// The first frame of a thread started by a namespace's code (the loader's code, never
/// unmapped): records the thread, then runs the start routine.
extern "C" fn starting_trampoline(p: *mut c_void) -> *mut c_void {
    // SAFETY: the box made by pthread_create_entry, passed exactly once.
    let rec = unsafe { Box::from_raw(p.cast::<Starting>()) };
    rec.pins.thread_started(Some(crate::kthread::current()));
    let (start, arg) = (rec.start, rec.arg);
    drop(rec);
    start(arg)
}
