//! The calling thread's last failure: a [`Status`] and a message, set by [`set_error`]
//! (or [`fail`]) and read by each C layer's `*_last_error()` through
//! [`last_error_ptr`].

use crate::Status;
use std::cell::RefCell;
use std::ffi::{c_char, CString};

struct LastError {
    status: Status,
    message: CString,
}

thread_local! {
    static LAST: RefCell<LastError> = RefCell::new(LastError {
        status: Status::Ok,
        message: CString::default(),
    });
}

/// Records a failure of the calling thread: `status` and `message` (a NUL inside it
/// becomes a space). Replaces the previous one. During thread teardown, after the
/// thread-local is gone, it is dropped silently.
pub fn set_error(status: Status, message: &str) {
    let message = CString::new(message.replace('\0', " ")).unwrap_or_default();
    let _ = LAST.try_with(|e| {
        // A getter's pointer into the old message is invalidated here, as documented
        // (valid until the thread's next failure).
        *e.borrow_mut() = LastError { status, message };
    });
}

/// Records the failure and returns its code: the tail of an `extern "C"` function,
/// `return fail(Status::Arg, "gil_new: out is NULL")`.
pub fn fail(status: Status, message: &str) -> i32 {
    set_error(status, message);
    status.code()
}

/// Forgets the calling thread's last failure (`*_last_error()` then returns "").
pub fn clear_error() {
    let _ = LAST.try_with(|e| {
        *e.borrow_mut() = LastError {
            status: Status::Ok,
            message: CString::default(),
        }
    });
}

/// The calling thread's last failure's status ([`Status::Ok`] if none).
pub fn last_status() -> Status {
    LAST.try_with(|e| e.borrow().status).unwrap_or(Status::Ok)
}

/// The calling thread's last failure's message ("" if none).
pub fn last_message() -> String {
    LAST.try_with(|e| e.borrow().message.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The message as C reads it: a NUL-terminated string owned by the thread, "" if there
/// was no failure, valid until the thread's next failure (or its exit). This is what a
/// C layer's `*_last_error()` returns.
pub fn last_error_ptr() -> *const c_char {
    LAST.try_with(|e| e.borrow().message.as_ptr())
        .unwrap_or(c"".as_ptr())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn set_read_clear() {
        clear_error();
        assert_eq!(last_status(), Status::Ok);
        // SAFETY: the pointer is the thread's message, valid until its next failure.
        assert_eq!(unsafe { CStr::from_ptr(last_error_ptr()) }, c"");
        assert_eq!(fail(Status::Arg, "f: x is NULL"), -1);
        assert_eq!(last_status(), Status::Arg);
        assert_eq!(last_message(), "f: x is NULL");
        // SAFETY: as above.
        assert_eq!(unsafe { CStr::from_ptr(last_error_ptr()) }, c"f: x is NULL");
        set_error(Status::State, "a\0b");
        assert_eq!(last_message(), "a b");
        clear_error();
        assert_eq!(last_message(), "");
    }

    #[test]
    fn each_thread_has_its_own() {
        set_error(Status::Timeout, "main");
        std::thread::spawn(|| {
            assert_eq!(last_status(), Status::Ok);
            set_error(Status::Oom, "other");
        })
        .join()
        .unwrap();
        assert_eq!(last_status(), Status::Timeout);
        assert_eq!(last_message(), "main");
    }
}
