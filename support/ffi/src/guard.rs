//! The panic guard every `extern "C"` entry runs its body through: a panic never unwinds
//! into C. [`guard`] turns it into the entry's documented error return and a message
//! naming the entry and the panic ([`Status::Panic`] for the last error);
//! [`guard_with`] also hands the message to the crate (refbridge's pending error,
//! a log); [`or_abort`] is for entries C cannot hear an error from.

use crate::{set_error, Status};
use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The message a panic carried ("(no message)" for a payload that is not a string).
pub fn panic_message(payload: &(dyn Any + Send)) -> &str {
    let text = payload.downcast_ref::<&str>().copied();
    text.or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// The message recorded for a panic caught in `entry`.
fn caught(entry: &str, payload: &(dyn Any + Send)) -> String {
    format!(
        "{entry}: internal panic (caught at the C boundary): {}",
        panic_message(payload)
    )
}

/// Runs `body`, the body of the C entry `entry`. Its value is returned; a panic is
/// caught instead: the thread's last error becomes [`Status::Panic`] with the message
/// "`entry`: internal panic (caught at the C boundary): `<panic message>`" and
/// `on_panic` (the entry's documented error return: `Status::Panic.code()`, NULL, 0,
/// `()`) is returned.
///
/// ```
/// use ffi_support::{guard, last_message, last_status, Status};
/// extern "C" fn my_entry(x: i32) -> i32 {
///     guard("my_entry", Status::Panic.code(), || {
///         assert!(x >= 0, "x is negative");
///         Status::Ok.code()
///     })
/// }
/// assert_eq!(my_entry(1), 0);
/// # std::panic::set_hook(Box::new(|_| {}));
/// assert_eq!(my_entry(-1), Status::Panic.code());
/// assert_eq!(last_status(), Status::Panic);
/// assert!(last_message().starts_with("my_entry: internal panic"));
/// ```
#[inline]
pub fn guard<T>(entry: &str, on_panic: T, body: impl FnOnce() -> T) -> T {
    guard_with(entry, on_panic, |_| {}, body)
}

/// [`guard`], and `report` also receives the message of a caught panic (after it was
/// recorded as the last error): refbridge sets CPython's pending error with it.
#[inline]
pub fn guard_with<T>(
    entry: &str,
    on_panic: T,
    report: impl FnOnce(&str),
    body: impl FnOnce() -> T,
) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(v) => v,
        Err(payload) => {
            let msg = caught(entry, &*payload);
            set_error(Status::Panic, &msg);
            report(&msg);
            on_panic
        }
    }
}

/// Runs `body` of the C entry `entry`, which has no way to report an error (glibc
/// aborts where these fail: `__tls_get_addr`, thread-exit destructors): a panic is
/// printed to stderr, naming `library`, the entry and the panic, and the process aborts
/// instead of unwinding into C.
pub fn or_abort<T>(library: &str, entry: &str, body: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(v) => v,
        Err(payload) => {
            eprintln!(
                "{library}: {entry}: internal panic: {}; aborting",
                panic_message(&*payload)
            );
            std::process::abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{clear_error, last_message, last_status};

    fn quiet() {
        std::panic::set_hook(Box::new(|_| {}));
    }

    #[test]
    fn a_panic_becomes_the_error_return_and_a_message() {
        quiet();
        clear_error();
        assert_eq!(guard("f", -9, || 3), 3);
        assert_eq!(last_status(), Status::Ok, "no panic, nothing recorded");
        let p: *mut u8 = guard("g", std::ptr::null_mut(), || panic!("boom {}", 7));
        assert!(p.is_null());
        assert_eq!(last_status(), Status::Panic);
        assert_eq!(
            last_message(),
            "g: internal panic (caught at the C boundary): boom 7"
        );
        let mut seen = String::new();
        guard_with("h", (), |m| seen = m.to_string(), || panic!("static"));
        assert_eq!(seen, "h: internal panic (caught at the C boundary): static");
        assert_eq!(last_message(), seen);
    }

    #[test]
    fn a_payload_without_text_is_named_so() {
        let payload: Box<dyn Any + Send> = Box::new(42u8);
        assert_eq!(panic_message(&*payload), "(no message)");
    }
}
