//! The loader's error type: every failure names the file and the offending item
//! (header field, segment, dynamic tag, symbol, relocation offset, ...).

use std::path::PathBuf;

/// Everything that can go wrong while parsing, loading, relocating or using a library.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be opened, inspected or mapped.
    #[error("{path}: {what}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done (open, stat, mmap, ...).
        what: &'static str,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a well-formed ELF file of the kind we load.
    #[error("{path}: malformed ELF: {item}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the header field, segment or entry and its offset.
        item: String,
    },
    /// The file is well-formed but uses something this loader does not support.
    #[error("{path}: unsupported: {item}")]
    Unsupported {
        /// The file.
        path: PathBuf,
        /// The unsupported feature (relocation type, machine, ...).
        item: String,
    },
    /// A `DT_NEEDED` dependency could not be found or loaded.
    #[error("{path}: dependency {name} not found (searched: {searched})")]
    MissingDependency {
        /// The library that needs it.
        path: PathBuf,
        /// The `DT_NEEDED` name.
        name: String,
        /// The directories searched, in order.
        searched: String,
    },
    /// A library given by name (no `/`) was found nowhere `dlopen` would look.
    #[error("{name}: cannot open shared object file: not found (searched: {searched})")]
    NotFound {
        /// The name.
        name: String,
        /// The directories and files searched, in order.
        searched: String,
    },
    /// The system loader refused a library (`dlopen` failed).
    #[error("system loader could not open {name}: {message}")]
    SystemLoad {
        /// The name or path given to `dlopen`.
        name: String,
        /// `dlerror()`'s text.
        message: String,
    },
    /// A version the library needs (`DT_VERNEED`, not weak) is not defined by the
    /// dependency it names (glibc's "version `X' not found").
    #[error("{file}: version `{version}' not found (required by {path})")]
    VersionNotFound {
        /// The library that needs it.
        path: PathBuf,
        /// The version name.
        version: String,
        /// The dependency (`vn_file`) that should define it.
        file: String,
    },
    /// A strong undefined symbol was found in no provider.
    #[error("{path}: undefined symbol {symbol}{version} (relocation at offset {offset:#x})")]
    UndefinedSymbol {
        /// The library whose relocation needs the symbol.
        path: PathBuf,
        /// The symbol name.
        symbol: String,
        /// `@VERSION` if the reference is versioned, else empty.
        version: String,
        /// The relocation's offset (link-time address).
        offset: u64,
    },
    /// A symbol asked for by name (`get`) is not defined where it was looked up.
    #[error("{library}: symbol {name} not found")]
    SymbolNotFound {
        /// The symbol name.
        name: String,
        /// The library or namespace searched.
        library: String,
    },
    /// A relocation could not be honoured (unsupported type, TLS model, bad target).
    #[error("{path}: relocation {kind} at offset {offset:#x} for symbol {symbol}: {reason}")]
    Relocation {
        /// The library.
        path: PathBuf,
        /// The relocation type's name (R_X86_64_...).
        kind: String,
        /// The relocation's offset (link-time address).
        offset: u64,
        /// The symbol it refers to (empty if none).
        symbol: String,
        /// Why it was refused.
        reason: String,
    },
    /// The API was used in the wrong order or with an invalid argument.
    #[error("{0}")]
    Usage(String),
}

impl Error {
    pub(crate) fn malformed(path: &std::path::Path, item: impl Into<String>) -> Self {
        Error::Malformed {
            path: path.to_path_buf(),
            item: item.into(),
        }
    }
    pub(crate) fn unsupported(path: &std::path::Path, item: impl Into<String>) -> Self {
        Error::Unsupported {
            path: path.to_path_buf(),
            item: item.into(),
        }
    }
}

/// The loader's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
