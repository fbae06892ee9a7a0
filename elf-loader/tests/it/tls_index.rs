//! `TlsIndex::address_in_thread` checks an index of this loader's modules, module and
//! offset (a user trial forged offsets past the block and module 0: an overflow panic
//! in debug builds, a wrapped pointer in release builds, `0x1` for module 0).

use crate::common;
use elf_loader::{Namespace, SymbolProvider, TlsIndex};

#[test]
fn forged_indices_are_refused() {
    let so = common::build_so("tls", &["tls.c"], &[]);
    let ns = Namespace::new("tls-index");
    // SAFETY: the TLS fixture's initialisers are trivial.
    let lib = unsafe { ns.load(&so) }.unwrap();
    let ti = lib.tls_sym("tls_gd").unwrap();
    // SAFETY: an index of this loader's module (checked).
    let good = unsafe { ti.address_in_thread() }.expect("the variable's address");
    for offset in [u64::MAX, 1 << 40, ti.offset + (1 << 20)] {
        let forged = TlsIndex {
            module: ti.module,
            offset,
        };
        // SAFETY: a module of this loader: checked, module and offset.
        let got = unsafe { forged.address_in_thread() };
        assert_eq!(got, None, "offset {offset:#x}");
    }
    let zero = TlsIndex {
        module: 0,
        offset: 0,
    };
    // SAFETY: module 0 is refused before anything is read.
    assert_eq!(unsafe { zero.address_in_thread() }, None);
    // SAFETY: as above.
    assert_eq!(unsafe { ti.address_in_thread() }, Some(good));
}
