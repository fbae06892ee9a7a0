//! The C-extension scenario: a C extension written in CPython's C-API style
//! (`integration-tests/cext/cext.c`: a GC container with `tp_traverse`/`tp_clear`, a leaf
//! owning a `PyMem_Malloc` buffer) compiled unchanged two ways and driven by the same
//! operations:
//!
//! - against refbridge's `Python.h`, loaded by elf-loader into this process (its CPython
//!   names resolved to refbridge's C API by a [`elf_loader::SymbolProvider`]), living
//!   with **managed host objects** on gc-core ([`RefbridgeHost`]): host objects hold
//!   extension objects (through mirrors), containers hold host objects (through stubs),
//!   cycles go through both;
//! - as a real CPython 3.11 extension module (with `cext_module.c`), driven from Python
//!   by `cext/driver.py`, host objects being Python objects ([`run_cpython`]).
//!
//! A script is a list of [`Op`]s; both sides report, at each `Collect`, the ids of the
//! objects freed since the previous one (extension objects through their `tp_dealloc`
//! log, host objects through weak references). The scenario's claim is that both lists
//! are equal: the same objects are freed at the same points, cycles across the
//! boundary included.

pub mod build;
mod host;
mod script;

pub use build::{build_cpython_module, build_refbridge_library, ExtensionBuild};
pub use host::{Extension, RefbridgeHost};
pub use script::{standard_script, Op, Outcome, HOST_SLOTS};

/// Runs a script on the refbridge side (this process; see [`RefbridgeHost`]).
pub fn run_refbridge(ops: &[Op]) -> Result<Outcome, String> {
    let ext = Extension::load().map_err(|e| e.to_string())?;
    let mut host = RefbridgeHost::new(ext)?;
    host.run(ops)
}

/// Runs scripts on CPython 3.11 (the `cext` module built as a real extension, driven
/// by `cext/driver.py` in one `python3` process).
pub fn run_cpython(scripts: &[Vec<Op>]) -> Result<Vec<Outcome>, String> {
    let module_dir = build_cpython_module()?;
    let driver = module_dir.join("driver.py");
    let input = serde_json::Value::Array(
        scripts
            .iter()
            .map(|s| serde_json::Value::Array(s.iter().map(Op::to_json).collect()))
            .collect(),
    );
    let mut child = std::process::Command::new(build::python3_path()?)
        .arg(&driver)
        .arg(&module_dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting python3: {e}"))?;
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("piped");
        stdin
            .write_all(input.to_string().as_bytes())
            .map_err(|e| format!("writing the scripts to python3: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("waiting for python3: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "driver.py failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| {
        format!(
            "driver.py printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })?;
    v.as_array()
        .ok_or("driver.py printed no list")?
        .iter()
        .map(|o| Outcome::from_json(o).ok_or_else(|| format!("bad outcome from driver.py: {o}")))
        .collect()
}

pub use build::DRIVER;
