//! [`Overrides`]: the loader's own entries that loaded code's references bind to instead
//! of the system's (the `dlopen` family, `dl_iterate_phdr`, `__tls_get_addr`,
//! `__cxa_thread_atexit`), as a table of names and addresses.
//!
//! The table is data: the module that implements the entries (`dlfcn.rs`, above the
//! namespace) makes it, the namespace passes it into each relocation scope, and the
//! image only reads it. So relocation does not reach up to the entries' module.

/// Names and the addresses of the loader's entries that replace them.
pub(crate) struct Overrides {
    entries: Vec<(&'static [u8], usize)>,
}

impl Overrides {
    /// A table of `(name, address)` pairs.
    pub(crate) fn new(entries: Vec<(&'static [u8], usize)>) -> Overrides {
        Overrides { entries }
    }

    /// The loader's entry for `name`, if loaded code gets ours instead of the system's.
    #[inline]
    pub(crate) fn get(&self, name: &[u8]) -> Option<usize> {
        self.entries
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, a)| a)
    }
}
