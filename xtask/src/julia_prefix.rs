//! `cargo xtask julia-prefix DIR`: a Julia-compatibility prefix that julia-gcext clients
//! configure and link against instead of a Julia installation (GAP's
//! `./configure --with-gc=julia --with-julia=DIR`).
//!
//! A client's configure asks a `julia` executable three things: the version
//! (`VERSION.major`/`minor`), the share directory (`Sys.BINDIR`, `DATAROOTDIR`), and
//! `share/julia/julia-config.jl --cflags / --ldflags / --ldlibs`, which must exist. The
//! prefix answers them with a shell script, and holds:
//!
//! - `bin/julia`: that script (it runs no Julia code; anything else is an error);
//! - `share/julia/julia-config.jl`: a marker file the script recognises;
//! - `include/julia/{julia.h, julia_threads.h, julia_gcext.h, julia_version.h}` from
//!   `gc-core/include/julia/`, over `julia_gcext_compat.h`;
//! - `lib/libjulia.so`: gc-runtime's C library (`libgc_runtime.so`, the composed
//!   runtime: it carries gc-core's and gc-conservative's C ABI, which Julia clients use,
//!   and the GIL and `gc_runtime_*`, which they do not), built in release mode.

use crate::steps::{cargo, root};
use anyhow::{bail, Context, Result};
use std::fs;
use std::path::{Path, PathBuf};

/// The headers of the prefix, from the repository.
pub fn header_sources() -> Vec<PathBuf> {
    let inc = root().join("gc-core/include");
    let mut files = vec![inc.join("julia_gcext_compat.h")];
    for h in [
        "julia.h",
        "julia_threads.h",
        "julia_gcext.h",
        "julia_version.h",
    ] {
        files.push(inc.join("julia").join(h));
    }
    files
}

/// Builds the C library and writes the prefix into `dir` (created if needed; files of an
/// earlier prefix there are replaced). Returns `dir`, absolute.
pub fn make(dir: &Path) -> Result<PathBuf> {
    let mut build = cargo();
    build.args(["build", "--release", "-p", "gc-runtime-artifact", "--lib"]);
    let status = build
        .status()
        .context("running cargo build for the prefix's library")?;
    if !status.success() {
        bail!("cargo build --release -p gc-runtime-artifact failed ({status})");
    }
    let lib = root().join("target/release/libgc_runtime.so");
    write_prefix(dir, &lib)
}

/// Writes the prefix's files into `dir`, with `lib` as `lib/libjulia.so`.
fn write_prefix(dir: &Path, lib: &Path) -> Result<PathBuf> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let dir = fs::canonicalize(dir).with_context(|| format!("resolving {}", dir.display()))?;
    for sub in ["bin", "share/julia", "include/julia", "lib"] {
        fs::create_dir_all(dir.join(sub))?;
    }
    for src in header_sources() {
        let name = src.file_name().expect("header files have names");
        fs::copy(&src, dir.join("include/julia").join(name))
            .with_context(|| format!("copying {}", src.display()))?;
    }
    // Copied through a temporary name, then renamed: a running client that mapped the
    // old library keeps its file.
    let tmp = dir.join("lib/.libjulia.so.new");
    fs::copy(lib, &tmp).with_context(|| format!("copying {}", lib.display()))?;
    fs::rename(&tmp, dir.join("lib/libjulia.so"))?;
    fs::write(dir.join("share/julia/julia-config.jl"), JULIA_CONFIG)?;
    let script = dir.join("bin/julia");
    fs::write(&script, JULIA_SCRIPT)?;
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755))?;
    Ok(dir)
}

/// `share/julia/julia-config.jl`: configure only checks that it exists; `bin/julia`
/// answers the questions asked of it.
const JULIA_CONFIG: &str = "\
# The Julia-compatibility prefix of the runtime toolkit (cargo xtask julia-prefix).
# This is not Julia's julia-config.jl: bin/julia answers --cflags, --ldflags and
# --ldlibs for it.
";

/// `bin/julia`: answers what julia-gcext clients' configure scripts ask, nothing else.
const JULIA_SCRIPT: &str = r#"#!/bin/sh
# The julia of the runtime toolkit's Julia-compatibility prefix (cargo xtask
# julia-prefix). It runs no Julia code: it answers the questions julia-gcext clients'
# configure scripts ask (GAP's configure --with-gc=julia), so that they build against
# gc-core and gc-conservative (lib/libjulia.so, gc-runtime's library) with the headers
# in include/julia.
prefix=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
version=1.6.0-gccore
config=
expr=
while [ $# -gt 0 ]; do
    case "$1" in
        --startup-file=*|--history-file=*|-q|--quiet|--color=*) ;;
        --version|-v) echo "julia version $version"; exit 0 ;;
        -e|--eval) shift; expr=$1 ;;
        *julia-config.jl) config=1 ;;
        --cflags) [ -n "$config" ] && { echo "-I$prefix/include/julia -fPIC"; exit 0; } ;;
        --ldflags) [ -n "$config" ] && { echo "-L$prefix/lib"; exit 0; } ;;
        --ldlibs) [ -n "$config" ] && { echo "-Wl,-rpath,$prefix/lib -ljulia"; exit 0; } ;;
        --allflags) [ -n "$config" ] && { echo "-I$prefix/include/julia -fPIC -L$prefix/lib -Wl,-rpath,$prefix/lib -ljulia"; exit 0; } ;;
        *) ;;
    esac
    shift
done
if [ -n "$expr" ]; then
    case "$expr" in
        *VERSION.major*) printf '1.6'; exit 0 ;;
        *Sys.BINDIR*|*DATAROOTDIR*) printf '%s' "$prefix/share/julia"; exit 0 ;;
    esac
fi
echo "julia (runtime toolkit prefix, $prefix): this is not Julia; it only answers" \
     "configure's questions (the version, the share directory, julia-config.jl" \
     "--cflags/--ldflags/--ldlibs). Asked: ${expr:-$*}" >&2
exit 1
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn ask(prefix: &Path, args: &[&str]) -> (bool, String) {
        let out = Command::new(prefix.join("bin/julia"))
            .args(args)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }

    /// The script answers what GAP 4.12's configure asks, in its words.
    #[test]
    fn the_script_answers_configure_questions() {
        let dir = std::env::temp_dir().join(format!("julia-prefix-test-{}", std::process::id()));
        let lib = std::env::temp_dir().join(format!("julia-prefix-lib-{}", std::process::id()));
        fs::write(&lib, b"not a library").unwrap();
        let prefix = write_prefix(&dir, &lib).unwrap();
        let version = ask(
            &prefix,
            &[
                "--startup-file=no",
                "-e",
                r#"print("$(VERSION.major).$(VERSION.minor)")"#,
            ],
        );
        assert_eq!(version, (true, "1.6".to_string()));
        let share = ask(
            &prefix,
            &[
                "--startup-file=no",
                "-e",
                r#"print(joinpath(Sys.BINDIR, Base.DATAROOTDIR, "julia"))"#,
            ],
        );
        assert_eq!(share.1, format!("{}/share/julia", prefix.display()));
        assert!(Path::new(&share.1).join("julia-config.jl").is_file());
        let config = format!("{}/julia-config.jl", share.1);
        let cflags = ask(&prefix, &["--startup-file=no", &config, "--cflags"]);
        assert!(cflags
            .1
            .contains(&format!("-I{}/include/julia", prefix.display())));
        assert!(Path::new(&format!("{}/include/julia/julia.h", prefix.display())).is_file());
        let libs = ask(&prefix, &["--startup-file=no", &config, "--ldlibs"]);
        assert!(libs.1.contains("-ljulia"), "{libs:?}");
        assert_eq!(
            fs::read(prefix.join("lib/libjulia.so")).unwrap(),
            b"not a library"
        );
        // Anything else is refused, saying what this is.
        let other = ask(&prefix, &["-e", "println(1 + 1)"]);
        assert!(!other.0);
        let _ = fs::remove_dir_all(&dir);
        let _ = fs::remove_file(&lib);
    }
}
