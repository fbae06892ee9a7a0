//! `cargo xtask julia-prefix DIR [--julia-version 1.6|1.10]`: a Julia-compatibility
//! prefix that julia-gcext clients configure and link against instead of a Julia
//! installation (GAP's `./configure --with-gc=julia --with-julia=DIR`).
//!
//! A client's configure asks a `julia` executable three things: the version
//! (`VERSION.major`/`minor`), the share directory (`Sys.BINDIR`, `DATAROOTDIR`), and
//! `share/julia/julia-config.jl --cflags / --ldflags / --ldlibs`, which must exist. The
//! prefix answers them with a shell script, and holds:
//!
//! - `bin/julia`: that script (it runs no Julia code; anything else is an error); it
//!   answers the version the prefix was made for;
//! - `share/julia/julia-config.jl`: a marker file the script recognises;
//! - `include/julia/{julia.h, julia_threads.h, julia_gcext.h, julia_version.h}` from
//!   `gc-core/include/julia/`, over `julia_gcext_compat.h`; the prefix's
//!   `julia_version.h` has the version fixed, so a client's `jl_init()` tells the
//!   runtime which Julia it was written for (`jl_gc_compat_init`);
//! - `lib/libjulia.so`: gc-runtime's C library (`libgc_runtime.so`, the composed
//!   runtime: it carries gc-core's and gc-conservative's C ABI, which Julia clients use,
//!   and the GIL and `gc_runtime_*`, which they do not), built in release mode where
//!   cargo puts it (any `CARGO_TARGET_DIR`; the checkout itself is only read).

use crate::steps::{cargo, root};
use anyhow::{bail, Context, Result};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Stdio;

/// The Julia version a prefix speaks: what its `julia` answers and its `julia_version.h`
/// says, which is what a client's `jl_init()` reports to the runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JuliaVersion {
    /// Julia 1.6, as GAP 4.12's `julia_gc.c` is written for: marking on one thread.
    V1_6,
    /// Julia 1.10, as GAP 4.13 and later are written for: parallel marking, mark
    /// functions given the marking thread's `ptls`, the task scanner called by the
    /// marking threads.
    V1_10,
}

impl JuliaVersion {
    /// The versions a prefix can speak.
    pub const ALL: [JuliaVersion; 2] = [JuliaVersion::V1_6, JuliaVersion::V1_10];

    /// `1.6` or `1.10`.
    pub fn as_str(self) -> &'static str {
        match self {
            JuliaVersion::V1_6 => "1.6",
            JuliaVersion::V1_10 => "1.10",
        }
    }

    fn minor(self) -> u32 {
        match self {
            JuliaVersion::V1_6 => 6,
            JuliaVersion::V1_10 => 10,
        }
    }

    /// Parses `1.6` or `1.10` (a patch level such as `1.10.0` is accepted); anything
    /// else is an error saying what is supported.
    pub fn parse(s: &str) -> Result<JuliaVersion, String> {
        let t = s.trim();
        let t = t.strip_suffix(".0").unwrap_or(t);
        JuliaVersion::ALL
            .into_iter()
            .find(|v| v.as_str() == t)
            .ok_or_else(|| {
                format!(
                    "unsupported Julia version '{s}': the prefix speaks 1.6 (clients written for \
                     Julia 1.6 to 1.9, such as GAP 4.12: marking on one thread) or 1.10 (GAP 4.13 \
                     and later: parallel marking)"
                )
            })
    }
}

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

/// Builds the C library and writes the prefix for `version` into `dir` (created if
/// needed; files of an earlier prefix there are replaced). Returns `dir`, absolute.
pub fn make(dir: &Path, version: JuliaVersion) -> Result<PathBuf> {
    let lib = build_library()?;
    write_prefix(dir, &lib, version)
}

/// Builds `gc-runtime-artifact` in release mode and returns its `libgc_runtime.so`,
/// wherever cargo put it (cargo's own report of the artifact, so that any
/// `CARGO_TARGET_DIR` or configured target directory works).
fn build_library() -> Result<PathBuf> {
    let mut build = cargo();
    build
        .args([
            "build",
            "--release",
            "-p",
            "gc-runtime-artifact",
            "--lib",
            "--message-format=json-render-diagnostics",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let out = build
        .output()
        .context("running cargo build for the prefix's library")?;
    if !out.status.success() {
        bail!(
            "cargo build --release -p gc-runtime-artifact failed ({})",
            out.status
        );
    }
    artifact_from_messages(&String::from_utf8_lossy(&out.stdout))
}

/// The shared library of `gc-runtime-artifact` named in cargo's JSON messages.
fn artifact_from_messages(stdout: &str) -> Result<PathBuf> {
    for line in stdout.lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if msg["reason"] != "compiler-artifact" || msg["target"]["name"] != "gc_runtime" {
            continue;
        }
        let files = msg["filenames"].as_array().into_iter().flatten();
        if let Some(so) = files
            .filter_map(|f| f.as_str())
            .find(|f| f.ends_with(".so"))
        {
            return Ok(PathBuf::from(so));
        }
    }
    bail!("cargo built gc-runtime-artifact but reported no libgc_runtime.so among its artifacts")
}

/// The marker line of the repository's `julia_version.h` that the prefix's copy replaces
/// with the version it was made for.
const VERSION_DEFAULT: &str =
    "#ifndef GC_COMPAT_JULIA_MINOR\n#define GC_COMPAT_JULIA_MINOR 6\n#endif\n";

/// The prefix's `julia_version.h`: the repository's, with the version fixed.
fn version_header(version: JuliaVersion) -> Result<String> {
    let src = root().join("gc-core/include/julia/julia_version.h");
    let text = fs::read_to_string(&src).with_context(|| format!("reading {}", src.display()))?;
    if !text.contains(VERSION_DEFAULT) {
        bail!(
            "{} no longer has the default-version block the prefix replaces:\n{VERSION_DEFAULT}",
            src.display()
        );
    }
    Ok(text.replace(
        VERSION_DEFAULT,
        &format!(
            "/* written by cargo xtask julia-prefix --julia-version {} */\n#define GC_COMPAT_JULIA_MINOR {}\n",
            version.as_str(),
            version.minor()
        ),
    ))
}

/// Writes the prefix's files into `dir`, with `lib` as `lib/libjulia.so`.
fn write_prefix(dir: &Path, lib: &Path, version: JuliaVersion) -> Result<PathBuf> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let dir = fs::canonicalize(dir).with_context(|| format!("resolving {}", dir.display()))?;
    for sub in ["bin", "share/julia", "include/julia", "lib"] {
        fs::create_dir_all(dir.join(sub))?;
    }
    for src in header_sources() {
        let name = src.file_name().expect("header files have names");
        let to = dir.join("include/julia").join(name);
        if name == "julia_version.h" {
            fs::write(&to, version_header(version)?)?;
        } else {
            fs::copy(&src, &to).with_context(|| format!("copying {}", src.display()))?;
        }
    }
    // Copied through a temporary name, then renamed: a running client that mapped the
    // old library keeps its file.
    let tmp = dir.join("lib/.libjulia.so.new");
    fs::copy(lib, &tmp).with_context(|| format!("copying {}", lib.display()))?;
    fs::rename(&tmp, dir.join("lib/libjulia.so"))?;
    fs::write(dir.join("share/julia/julia-config.jl"), JULIA_CONFIG)?;
    let script = dir.join("bin/julia");
    fs::write(&script, julia_script(version))?;
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
fn julia_script(version: JuliaVersion) -> String {
    JULIA_SCRIPT.replace("@VERSION@", version.as_str())
}

const JULIA_SCRIPT: &str = r#"#!/bin/sh
# The julia of the runtime toolkit's Julia-compatibility prefix (cargo xtask
# julia-prefix --julia-version @VERSION@). It runs no Julia code: it answers the
# questions julia-gcext clients' configure scripts ask (GAP's configure
# --with-gc=julia), so that they build against gc-core and gc-conservative
# (lib/libjulia.so, gc-runtime's library) with the headers in include/julia.
prefix=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
version=@VERSION@.0-gccore
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
        *VERSION.major*) printf '@VERSION@'; exit 0 ;;
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

    /// A prefix for `version` in a fresh temporary folder, with a stand-in library.
    fn prefix_for(version: JuliaVersion, tag: &str) -> (PathBuf, PathBuf) {
        let base =
            std::env::temp_dir().join(format!("julia-prefix-test-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        fs::create_dir_all(&base).unwrap();
        let lib = base.join("lib.so");
        fs::write(&lib, b"not a library").unwrap();
        let prefix = write_prefix(&base.join("prefix"), &lib, version).unwrap();
        (base, prefix)
    }

    /// The script answers what GAP's configure asks, in its words, for the version the
    /// prefix was made for.
    #[test]
    fn the_script_answers_configure_questions() {
        for version in JuliaVersion::ALL {
            let (base, prefix) = prefix_for(version, version.as_str());
            let answer = ask(
                &prefix,
                &[
                    "--startup-file=no",
                    "-e",
                    r#"print("$(VERSION.major).$(VERSION.minor)")"#,
                ],
            );
            assert_eq!(answer, (true, version.as_str().to_string()));
            let full = ask(&prefix, &["--version"]);
            assert_eq!(
                full.1.trim(),
                format!("julia version {}.0-gccore", version.as_str())
            );
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
            assert!(prefix.join("include/julia/julia.h").is_file());
            let libs = ask(&prefix, &["--startup-file=no", &config, "--ldlibs"]);
            assert!(libs.1.contains("-ljulia"), "{libs:?}");
            assert_eq!(
                fs::read(prefix.join("lib/libjulia.so")).unwrap(),
                b"not a library"
            );
            // Anything else is refused, saying what this is.
            let other = ask(&prefix, &["-e", "println(1 + 1)"]);
            assert!(!other.0);
            let _ = fs::remove_dir_all(&base);
        }
    }

    /// The prefix's headers define `JULIA_VERSION_*` as the version it was made for, and
    /// a client's `jl_init()` passes that version to the runtime: compiled here (the
    /// preprocessor and the compiler's static assertions check it).
    #[test]
    fn the_headers_say_the_prefix_version() {
        for version in JuliaVersion::ALL {
            let (base, prefix) = prefix_for(version, &format!("h{}", version.as_str()));
            let src = base.join("client.c");
            fs::write(
                &src,
                format!(
                    "#include <julia.h>\n#include <julia_gcext.h>\n#include <julia_threads.h>\n\
                     _Static_assert(JULIA_VERSION_MAJOR == 1, \"major\");\n\
                     _Static_assert(JULIA_VERSION_MINOR == {}, \"minor\");\n\
                     static const char v[] = JULIA_VERSION_STRING;\n\
                     _Static_assert(sizeof(v) == sizeof(\"{}.0-gccore\"), \"string\");\n\
                     void init(void) {{ jl_init(); }}\n",
                    version.minor(),
                    version.as_str()
                ),
            )
            .unwrap();
            let out = Command::new("cc")
                .arg("-E")
                .arg(format!("-I{}", prefix.join("include/julia").display()))
                .arg(&src)
                .output()
                .expect("run cc -E");
            assert!(out.status.success(), "{out:?}");
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                text.contains(&format!("jl_gc_compat_init(1, {})", version.minor())),
                "jl_init() does not pass {}",
                version.as_str()
            );
            let out = Command::new("cc")
                .args(["-fsyntax-only", "-std=gnu11"])
                .arg(format!("-I{}", prefix.join("include/julia").display()))
                .arg(&src)
                .output()
                .expect("run cc");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let _ = fs::remove_dir_all(&base);
        }
    }

    #[test]
    fn versions_parse_and_bad_ones_are_refused() {
        assert_eq!(JuliaVersion::parse("1.6"), Ok(JuliaVersion::V1_6));
        assert_eq!(JuliaVersion::parse("1.10"), Ok(JuliaVersion::V1_10));
        assert_eq!(JuliaVersion::parse("1.10.0"), Ok(JuliaVersion::V1_10));
        for bad in ["1.9", "1.1", "2.0", "", "1.100"] {
            let e = JuliaVersion::parse(bad).unwrap_err();
            assert!(
                e.contains("1.6") && e.contains("1.10") && e.contains(bad),
                "{e}"
            );
        }
    }

    /// The library is found from cargo's own report, wherever the target directory is.
    #[test]
    fn the_library_is_found_in_cargos_messages() {
        let msgs = r#"{"reason":"compiler-artifact","target":{"name":"gc_core"},"filenames":["/x/libgc_core.rlib"]}
not json
{"reason":"compiler-artifact","target":{"name":"gc_runtime"},"filenames":["/elsewhere/t/release/libgc_runtime.so"]}
{"reason":"build-finished","success":true}"#;
        assert_eq!(
            artifact_from_messages(msgs).unwrap(),
            PathBuf::from("/elsewhere/t/release/libgc_runtime.so")
        );
        assert!(artifact_from_messages("{\"reason\":\"build-finished\"}").is_err());
    }
}
