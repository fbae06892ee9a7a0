//! Builds the minigap C kernel (`minigap/`) with `cc`: once on gc-runtime (gc-core +
//! gc-conservative + gil, `unity_ours.c`, always), and once on Boehm GC
//! (`unity_boehm.c`, when Debian's `libgc-dev` is installed; `cargo xtask test` and
//! `cargo xtask bench gap` install it). The kernels' C ABI calls resolve to the Rust
//! crates linked into the same binary: one heap, one GIL, shared with Rust code.

use std::path::Path;

fn main() {
    let dir = Path::new("minigap");
    println!("cargo::rustc-check-cfg=cfg(minigap_boehm)");
    println!("cargo::rerun-if-changed=minigap");
    // The kernel is compiled against these headers (struct layouts, constants).
    println!("cargo::rerun-if-changed=../gc-core/include");
    println!("cargo::rerun-if-changed=../gc-conservative/include");
    println!("cargo::rerun-if-changed=../gil/include");
    println!("cargo::rerun-if-changed=../gc-conservative/runtime/include");
    println!("cargo::rerun-if-changed=/usr/include/gc.h");
    let common = |b: &mut cc::Build| {
        b.std("gnu11")
            .opt_level(2)
            .flag_if_supported("-fno-omit-frame-pointer")
            .warnings(true)
            .flag("-Wno-unused-function")
            .include("../gc-core/include")
            .include("../gc-conservative/include")
            .include("../gil/include")
            .include("../gc-conservative/runtime/include");
    };
    let mut ours = cc::Build::new();
    common(&mut ours);
    ours.file(dir.join("unity_ours.c")).compile("minigap_ours");
    if Path::new("/usr/include/gc.h").exists() {
        let mut boehm = cc::Build::new();
        common(&mut boehm);
        boehm
            .file(dir.join("unity_boehm.c"))
            .compile("minigap_boehm");
        println!("cargo::rustc-link-lib=dylib=gc");
        println!("cargo::rustc-cfg=minigap_boehm");
    }
}
