//! [`Symbol`]: a typed symbol (a function pointer or a data pointer) that borrows the
//! library or namespace it was found in, so that it cannot be used after the mapping
//! is gone (as libloading's `Symbol<'lib, T>`).

use crate::error::{Error, Result};
use std::marker::PhantomData;

/// A symbol of a loaded library as a value of type `F` (an `extern "C" fn` type or a
/// raw pointer: anything the size of an address), borrowing the library (or namespace)
/// it was looked up in: the borrow checker refuses a use after that library is dropped.
///
/// Made by [`crate::CustomLibrary::get`], [`crate::Namespace::get`] and
/// [`crate::SystemLibrary::get`]. It dereferences to `F`:
///
/// ```
/// use elf_loader::SystemLibrary;
/// // SAFETY: libm's initialisers are safe to run (it is loaded already anyway).
/// let lib = unsafe { SystemLibrary::open("libm.so.6", libc::RTLD_LOCAL) }?;
/// // SAFETY: `cos` has this signature.
/// let cos = unsafe { lib.get::<extern "C" fn(f64) -> f64>("cos") }?;
/// assert_eq!(cos(0.0), 1.0);
/// // A type that is not an address, and a name that is not there, are errors.
/// assert!(unsafe { lib.get::<[usize; 2]>("cos") }.is_err());
/// assert!(unsafe { lib.get::<extern "C" fn()>("no_such_function") }.is_err());
/// # Ok::<(), elf_loader::Error>(())
/// ```
///
/// The symbol cannot outlive its library:
///
/// ```compile_fail,E0505
/// use elf_loader::SystemLibrary;
/// let lib = unsafe { SystemLibrary::open("libm.so.6", libc::RTLD_LOCAL) }.unwrap();
/// let cos = unsafe { lib.get::<extern "C" fn(f64) -> f64>("cos") }.unwrap();
/// drop(lib); // error[E0505]: cannot move out of `lib` because it is borrowed
/// cos(0.0);
/// ```
///
/// The same holds for [`crate::CustomLibrary::get`] and [`crate::Namespace::get`]:
///
/// ```compile_fail,E0505
/// use elf_loader::Namespace;
/// let ns = Namespace::new("demo");
/// let lib = unsafe { ns.load("/path/to/libfoo.so") }.unwrap();
/// let f = unsafe { lib.get::<extern "C" fn() -> i32>("foo") }.unwrap();
/// drop(lib); // error[E0505]
/// f();
/// ```
///
/// Copying the `F` out (`let f: F = *sym;`) or [`Symbol::into_raw`] gives a value
/// without that borrow: keeping the library loaded is then the caller's job, as with
/// libloading.
pub struct Symbol<'lib, F> {
    value: F,
    address: usize,
    _lib: PhantomData<&'lib ()>,
}

impl<'lib, F: Copy> Symbol<'lib, F> {
    /// The symbol at `address` as an `F`.
    ///
    /// # Safety
    /// `address` must be the address of a symbol of a library that stays mapped for
    /// `'lib`, and `F` must be its type (the signature of the function, or a pointer to
    /// the object's type).
    pub(crate) unsafe fn from_address(address: usize, name: &str) -> Result<Self> {
        if std::mem::size_of::<F>() != std::mem::size_of::<usize>() {
            return Err(Error::Usage(format!(
                "symbol {name}: the type {} is {} bytes, not an address ({} bytes): use a function pointer or a raw pointer type",
                std::any::type_name::<F>(),
                std::mem::size_of::<F>(),
                std::mem::size_of::<usize>()
            )));
        }
        if address == 0 {
            return Err(Error::Usage(format!(
                "symbol {name} is at address 0 (an undefined weak symbol): not a valid {}",
                std::any::type_name::<F>()
            )));
        }
        // SAFETY: same size (checked above); the caller guarantees that `F` is the
        // symbol's type, so the bits of its address are a valid `F`.
        let value = unsafe { std::mem::transmute_copy::<usize, F>(&address) };
        Ok(Symbol {
            value,
            address,
            _lib: PhantomData,
        })
    }

    /// The symbol's address (an address only: reading or calling it needs the library
    /// to be mapped, which this `Symbol` guarantees while it lives).
    pub fn address(&self) -> usize {
        self.address
    }

    /// The value without the borrow of its library.
    ///
    /// # Safety
    /// The caller must keep the library (or namespace) the symbol was found in loaded
    /// as long as the value is used.
    pub unsafe fn into_raw(self) -> F {
        self.value
    }
}

impl<F> std::ops::Deref for Symbol<'_, F> {
    type Target = F;
    fn deref(&self) -> &F {
        &self.value
    }
}

impl<F: Copy> Clone for Symbol<'_, F> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<F: Copy> Copy for Symbol<'_, F> {}

impl<F> std::fmt::Debug for Symbol<'_, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Symbol<{}>({:#x})",
            std::any::type_name::<F>(),
            self.address
        )
    }
}

/// Looks `name` up with `find` and makes it a [`Symbol`] of type `F`, or an error naming
/// the symbol and `library`.
///
/// # Safety
/// As [`Symbol::from_address`]: whatever `find` answers must be a symbol of type `F`
/// mapped for `'lib`.
pub(crate) unsafe fn lookup<'lib, F: Copy>(
    name: &str,
    library: impl FnOnce() -> String,
    find: impl FnOnce(&str) -> Option<usize>,
) -> Result<Symbol<'lib, F>> {
    match find(name) {
        // SAFETY: the caller's contract.
        Some(a) => unsafe { Symbol::from_address(a, name) },
        None => Err(Error::SymbolNotFound {
            name: name.to_string(),
            library: library(),
        }),
    }
}
