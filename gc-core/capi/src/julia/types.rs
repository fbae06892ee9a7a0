//! The seed's types (`jl_value_t`, `jl_ptls_t`, the callback and mark function types)
//! and symbols (`jl_symbol`: interned, immortal names).

use crate::entry::{arg, c_str, entry, Checked};
use crate::mutator::gc_mutator_t;
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::ffi::{c_char, c_int, c_void, CString};

/// Opaque `jl_value_t`: any object.
#[repr(C)]
pub struct jl_value_t {
    _opaque: [u8; 0],
}

/// Opaque `jl_datatype_t`: a type (itself an object).
#[repr(C)]
pub struct jl_datatype_t {
    _opaque: [u8; 0],
}

/// Opaque `jl_module_t`: kept for the caller, never used.
#[repr(C)]
pub struct jl_module_t {
    _opaque: [u8; 0],
}

/// Opaque `jl_task_t`: a registered stack.
#[repr(C)]
pub struct jl_task_t {
    _opaque: [u8; 0],
}

/// Opaque thread state behind `jl_ptls_t`.
#[repr(C)]
pub struct jl_tls_states_t {
    _opaque: [u8; 0],
}

/// `jl_ptls_t`: the calling thread's state.
pub type jl_ptls_t = *mut jl_tls_states_t;
/// `jl_gc_collection_t`: `JL_GC_AUTO` (0), `JL_GC_FULL` (1), `JL_GC_INCREMENTAL` (2).
pub type jl_gc_collection_t = std::ffi::c_uint;
/// `jl_markfunc_t`.
pub type jl_markfunc_t = Option<unsafe extern "C" fn(jl_ptls_t, *mut jl_value_t) -> usize>;
/// `jl_sweepfunc_t`.
pub type jl_sweepfunc_t = Option<unsafe extern "C" fn(*mut jl_value_t)>;
/// `jl_gc_cb_pre_gc_t`: see `GC_CB_PRE_GC` (a barrier it issues counts for the
/// collection it runs in).
pub type jl_gc_cb_pre_gc_t = Option<unsafe extern "C" fn(c_int)>;
/// `jl_gc_cb_post_gc_t`.
pub type jl_gc_cb_post_gc_t = Option<unsafe extern "C" fn(c_int)>;
/// `jl_gc_cb_root_scanner_t`.
pub type jl_gc_cb_root_scanner_t = Option<unsafe extern "C" fn(c_int)>;
/// `jl_gc_cb_task_scanner_t`.
pub type jl_gc_cb_task_scanner_t = Option<unsafe extern "C" fn(*mut jl_task_t, c_int)>;
/// `jl_gc_cb_notify_external_alloc_t`.
pub type jl_gc_cb_notify_external_alloc_t = Option<unsafe extern "C" fn(*mut c_void, usize)>;
/// `jl_gc_cb_notify_external_free_t`.
pub type jl_gc_cb_notify_external_free_t = Option<unsafe extern "C" fn(*mut c_void)>;

/// A seed `ptls` as this library's mutator pointer (the same record).
pub(crate) fn ptls(p: jl_ptls_t) -> *mut gc_mutator_t {
    p as *mut gc_mutator_t
}

/// Opaque `jl_sym_t`: an interned, immortal name.
pub struct jl_sym_t {
    pub(crate) name: CString,
}

static SYMBOLS: Mutex<Option<HashMap<String, &'static jl_sym_t>>> = Mutex::new(None);
/// The addresses `jl_symbol` handed out, so that a pointer given as a symbol can be
/// checked before it is read (a C string passed instead of `jl_symbol(...)` is a common
/// slip when porting).
static SYMBOL_ADDRS: Mutex<Option<HashSet<usize>>> = Mutex::new(None);

/// The symbol behind `sym` if it came from `jl_symbol`; refused, naming `what`, if it
/// is NULL or did not.
pub(crate) fn symbol_arg(sym: *const jl_sym_t, what: &str) -> Checked<&'static jl_sym_t> {
    if sym.is_null() {
        return Err(arg(format!("{what}: name is NULL")));
    }
    let known = SYMBOL_ADDRS
        .lock()
        .as_ref()
        .is_some_and(|s| s.contains(&(sym as usize)));
    if !known {
        return Err(arg(format!(
            "{what}: {sym:p} is not a symbol from jl_symbol (a C string passed as the name?)"
        )));
    }
    // SAFETY: handed out by jl_symbol; symbols are immortal.
    Ok(unsafe { &*sym })
}

/// Interns `name` (`jl_symbol`); NULL if `name` is NULL or not UTF-8.
///
/// # Safety
/// `name` null or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn jl_symbol(name: *const c_char) -> *mut jl_sym_t {
    entry("jl_symbol", || {
        // SAFETY: the name is null or NUL-terminated (this function's contract).
        let s = unsafe { c_str(name, "jl_symbol") }?;
        let mut table = SYMBOLS.lock();
        let map = table.get_or_insert_with(HashMap::new);
        let sym = *map.entry(s.to_string()).or_insert_with(|| {
            let sym: &'static jl_sym_t = Box::leak(Box::new(jl_sym_t {
                name: CString::new(s).expect("came from a C string"),
            }));
            SYMBOL_ADDRS
                .lock()
                .get_or_insert_with(Default::default)
                .insert(sym as *const jl_sym_t as usize);
            sym
        });
        Ok(sym as *const jl_sym_t as *mut jl_sym_t)
    })
}

/// The text of a symbol (NULL and an error if `sym` is not from `jl_symbol`).
#[no_mangle]
pub extern "C" fn jl_symbol_name(sym: *mut jl_sym_t) -> *const c_char {
    entry("jl_symbol_name", || {
        Ok(symbol_arg(sym, "jl_symbol_name")?.name.as_ptr())
    })
}
