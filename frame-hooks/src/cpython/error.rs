//! The backend's errors ([`Error`]) and the small formatting helpers every part uses
//! (a panic's message, a `Py_Version` as text). A leaf: it names no other module.

/// Errors of the CPython backend; each names the thing that is wrong.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The resolver did not find a symbol.
    #[error("symbol {name} not found in this libpython")]
    MissingSymbol {
        /// The symbol.
        name: String,
    },
    /// The copy is not CPython 3.11, 3.12 or 3.13.
    #[error("CPython {version} is not supported (3.11, 3.12 and 3.13 are)")]
    UnsupportedVersion {
        /// The copy's `Py_Version`, as text.
        version: String,
    },
    /// The running library's layout differs from the one known for its version.
    #[error("frame layout mismatch in CPython {version}: {what}")]
    LayoutMismatch {
        /// The copy's version.
        version: String,
        /// The field, offset and what was found.
        what: String,
    },
    /// The interpreter is not initialised.
    #[error("the interpreter of this libpython is not initialised (Py_IsInitialized() == 0)")]
    NotInitialized,
    /// The interpreter is finalising: no hook is installed then.
    #[error("the interpreter is finalising; refusing to install a frame hook")]
    Finalizing,
    /// All trampolines are in use.
    #[error("all {0} frame-hook trampolines are in use (one per installed hook)")]
    NoFreeSlot(usize),
    /// Another evaluator was installed after ours: uninstall it first.
    #[error("the interpreter's eval-frame function is no longer our hook (another one was installed after it); uninstall that one first")]
    NotCurrent,
    /// The copy gave out all of its code-extra indices.
    #[error("CPython {version} refused a code-extra index: its 254 indices are used up")]
    ExtraIndexExhausted {
        /// The copy's version.
        version: String,
    },
    /// Python code raised (the traceback was printed to the copy's stderr).
    #[error("Python code raised: {0}")]
    Python(String),
    /// Loading a libpython failed.
    #[error("could not load {path}: {message}")]
    Load {
        /// The library path.
        path: String,
        /// What dlopen or the interpreter said.
        message: String,
    },
}

/// The message a panic carried.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    let text = payload.downcast_ref::<&str>().copied();
    text.or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// `Py_Version` as `3.11.7` (with a release-level suffix when not final).
pub fn version_string(v: u32) -> String {
    let level = match (v >> 4) & 0xf {
        0xa => "a",
        0xb => "b",
        0xc => "rc",
        _ => "",
    };
    let serial = if level.is_empty() {
        String::new()
    } else {
        format!("{}", v & 0xf)
    };
    format!(
        "{}.{}.{}{level}{serial}",
        v >> 24,
        (v >> 16) & 0xff,
        (v >> 8) & 0xff
    )
}
