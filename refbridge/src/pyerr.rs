//! The pending error (CPython's error indicator): the entered bridge's, or the calling
//! thread's own when none is entered.

use crate::error::BridgeError;
use crate::state::current;
use std::cell::RefCell;
use std::ffi::{CStr, CString};

thread_local! {
    /// The pending error of a thread with no bridge entered.
    static LAST_ERROR: RefCell<Option<CString>> = const { RefCell::new(None) };
}

fn c_message(msg: &str) -> CString {
    CString::new(msg.replace('\0', "?")).expect("NULs replaced")
}

/// Sets the pending error (CPython's `PyErr_SetString`, the type in the text): the
/// entered bridge's, or the calling thread's own when none is entered.
pub fn set_pending_error(msg: &str) {
    match current() {
        Some(inner) => inner.set_error(msg),
        None => LAST_ERROR.with(|e| *e.borrow_mut() = Some(c_message(msg))),
    }
}

/// Sets `err` as the pending error, the way the C API reports a failure:
/// `"<exception>: <message>"` ([`BridgeError::exception`]).
pub fn set_pending_error_from(err: &BridgeError) {
    set_pending_error(&format!("{}: {err}", err.exception()));
}

/// Clears the pending error (`PyErr_Clear`).
pub fn clear_pending_error() {
    match current() {
        Some(inner) => {
            inner.local.0.error.borrow_mut().take();
        }
        None => LAST_ERROR.with(|e| {
            e.borrow_mut().take();
        }),
    }
}

/// The pending error's text, if any.
pub fn pending_error() -> Option<String> {
    with_pending_error(|e| e.map(|c| c.to_string_lossy().into_owned()))
}

/// Calls `f` with the pending error. The string stays at its address until the pending
/// error is set or cleared on this thread (or the bridge it belongs to is left), so a C
/// caller may keep a pointer to it until then.
pub fn with_pending_error<R>(f: impl FnOnce(Option<&CStr>) -> R) -> R {
    match current() {
        Some(inner) => f(inner.local.0.error.borrow().as_deref()),
        None => LAST_ERROR.with(|e| f(e.borrow().as_deref())),
    }
}
