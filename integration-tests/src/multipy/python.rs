//! Finding a CPython installation: its version, shared library, headers and executable,
//! asked from the installation itself through `sysconfig` (one child process, once per
//! installation per process).

use super::error::{Error, Result};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

/// Which CPython to load.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum PythonSpec {
    /// CPython 3.11, the default: `python3.11` on the `PATH`, else pyenv's.
    #[default]
    Default,
    /// `pythonX.Y` (3.10 to 3.13) on the `PATH`, else pyenv's newest `X.Y.*`.
    Version(u32, u32),
    /// A Python executable (its `sysconfig` names the shared library).
    Path(PathBuf),
}

impl PythonSpec {
    /// Parses `X.Y` as a version and anything else as a path.
    pub fn parse(s: &str) -> PythonSpec {
        if let Some((a, b)) = s.split_once('.') {
            if let (Ok(a), Ok(b)) = (a.parse(), b.parse()) {
                return PythonSpec::Version(a, b);
            }
        }
        PythonSpec::Path(PathBuf::from(s))
    }
}

/// A CPython installation with a shared library.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PythonInstall {
    /// `(major, minor)`.
    pub version: (u32, u32),
    /// The full version string (`3.11.7`).
    pub version_string: String,
    /// The interpreter executable (`sys.executable` of a plain process).
    pub executable: PathBuf,
    /// `libpythonX.Y.so.1.0`.
    pub libpython: PathBuf,
    /// The directory holding `Python.h`.
    pub include: PathBuf,
}

const PROBE: &str = "import os, sys, sysconfig\n\
v = sys.version_info\n\
print(v[0]); print(v[1]); print(sys.version.split()[0]); print(sys.executable)\n\
print(os.path.join(sysconfig.get_config_var('LIBDIR') or '', sysconfig.get_config_var('INSTSONAME') or ''))\n\
print(sysconfig.get_paths()['include'])\n\
print(sysconfig.get_config_var('Py_ENABLE_SHARED'))";

/// Versions this layer supports.
pub const SUPPORTED: [(u32, u32); 4] = [(3, 10), (3, 11), (3, 12), (3, 13)];

impl PythonInstall {
    /// Finds the installation `spec` names (cached per spec).
    pub fn find(spec: &PythonSpec) -> Result<PythonInstall> {
        static CACHE: OnceLock<Mutex<HashMap<PythonSpec, PythonInstall>>> = OnceLock::new();
        let cache = CACHE.get_or_init(Default::default);
        if let Some(found) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(spec) {
            return Ok(found.clone());
        }
        if let PythonSpec::Version(a, b) = spec {
            // Refused before any probe: an unsupported Python may not even run the probe.
            if !SUPPORTED.contains(&(*a, *b)) {
                return Err(Error::UnsupportedPython {
                    python: PathBuf::from(format!("python{a}.{b}")),
                    version: format!("{a}.{b}"),
                });
            }
        }
        let found = match spec {
            PythonSpec::Default => Self::find_version(3, 11)?,
            PythonSpec::Version(a, b) => Self::find_version(*a, *b)?,
            PythonSpec::Path(p) => Self::probe(p)?,
        };
        if !SUPPORTED.contains(&found.version) {
            return Err(Error::UnsupportedPython {
                python: found.executable.clone(),
                version: found.version_string.clone(),
            });
        }
        cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(spec.clone(), found.clone());
        Ok(found)
    }

    fn find_version(major: u32, minor: u32) -> Result<PythonInstall> {
        let name = format!("python{major}.{minor}");
        let mut tried = vec![name.clone()];
        // `pythonX.Y` on the PATH, unless it is a pyenv shim (a script that runs pyenv:
        // slow, and its answer cannot be cached); pyenv's own versions then come first.
        let on_path = std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join(&name))
                .find(|p| p.is_file())
        });
        let shim = on_path
            .as_ref()
            .is_some_and(|p| p.to_string_lossy().contains("/shims/"));
        if let (Some(p), false) = (&on_path, shim) {
            if let Ok(found) = Self::probe(p) {
                return Ok(found);
            }
        }
        // pyenv: the newest X.Y.* under `pyenv root`/versions.
        // pyenv's root: $PYENV_ROOT, ~/.pyenv, or what `pyenv root` says (slowest).
        let root = std::env::var_os("PYENV_ROOT")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pyenv")))
            .filter(|r| r.join("versions").is_dir())
            .or_else(|| {
                Command::new("pyenv")
                    .arg("root")
                    .output()
                    .ok()
                    .filter(|o| o.status.success())
                    .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
            });
        if let Some(root) = root {
            let mut candidates: Vec<(Vec<u32>, PathBuf)> = std::fs::read_dir(root.join("versions"))
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| {
                    let v = e.file_name().to_string_lossy().into_owned();
                    let parts: Vec<u32> = v.split('.').map_while(|p| p.parse().ok()).collect();
                    (parts.len() == 3 && parts[0] == major && parts[1] == minor)
                        .then(|| (parts, e.path().join("bin").join(&name)))
                })
                .collect();
            candidates.sort();
            for (_, exe) in candidates.into_iter().rev() {
                tried.push(exe.display().to_string());
                if let Ok(found) = Self::probe(&exe) {
                    return Ok(found);
                }
            }
        }
        if let (Some(p), true) = (&on_path, shim) {
            tried.push(p.display().to_string());
            if let Ok(found) = Self::probe(p) {
                return Ok(found);
            }
        }
        Err(Error::PythonNotFound {
            wanted: format!("{major}.{minor}"),
            tried,
        })
    }

    /// The installation a virtual environment was made from (its `pyvenv.cfg`'s
    /// `home`), without a pyenv shim in between; `None` if the file does not say.
    pub fn from_venv(venv: &Path) -> Option<PythonInstall> {
        let cfg = std::fs::read_to_string(venv.join("pyvenv.cfg")).ok()?;
        let get = |key: &str| {
            cfg.lines()
                .filter_map(|l| l.split_once('='))
                .find(|(k, _)| k.trim() == key)
                .map(|(_, v)| v.trim().to_string())
        };
        let home = PathBuf::from(get("home")?);
        let version = get("version").or_else(|| get("version_info"))?;
        let mut parts = version.split('.');
        let (a, b) = (parts.next()?, parts.next()?);
        Self::probe(&home.join(format!("python{a}.{b}"))).ok()
    }

    /// Asks `exe` for its sysconfig. The answer is cached on disk (next to the compiled
    /// runners) per executable, size and modification time, so later processes start
    /// no child process.
    pub fn probe(exe: &Path) -> Result<PythonInstall> {
        let not_found = |why: String| Error::PythonNotFound {
            wanted: exe.display().to_string(),
            tried: vec![why],
        };
        let cache = std::fs::canonicalize(exe)
            .ok()
            .and_then(|real| {
                let meta = std::fs::metadata(&real).ok()?;
                let mtime = meta
                    .modified()
                    .ok()?
                    .duration_since(std::time::UNIX_EPOCH)
                    .ok()?;
                let key = super::cache::fnv(&[
                    real.as_os_str().as_encoded_bytes(),
                    exe.as_os_str().as_encoded_bytes(),
                    &meta.len().to_le_bytes(),
                    &mtime.as_nanos().to_le_bytes(),
                    PROBE.as_bytes(),
                ]);
                Some(super::cache::cache_dir().join(format!("probe-{key:016x}.txt")))
            })
            // A pyenv shim is a script whose answer depends on pyenv's settings.
            .filter(|_| !exe.to_string_lossy().contains("/shims/"));
        let text = match cache.as_ref().and_then(|c| std::fs::read_to_string(c).ok()) {
            Some(t) => t,
            None => {
                let out = Command::new(exe)
                    .args(["-I", "-c", PROBE])
                    .output()
                    .map_err(|e| not_found(format!("{}: {e}", exe.display())))?;
                if !out.status.success() {
                    return Err(not_found(format!(
                        "{}: {}",
                        exe.display(),
                        String::from_utf8_lossy(&out.stderr).trim()
                    )));
                }
                let t = String::from_utf8_lossy(&out.stdout).into_owned();
                if let Some(c) = &cache {
                    super::cache::write_cache_file(c, t.as_bytes());
                }
                t
            }
        };
        let lines: Vec<&str> = text.lines().collect();
        if lines.len() < 7 {
            return Err(not_found(format!(
                "{}: unexpected sysconfig output",
                exe.display()
            )));
        }
        let version = (lines[0].parse().unwrap_or(0), lines[1].parse().unwrap_or(0));
        let install = PythonInstall {
            version,
            version_string: lines[2].to_string(),
            executable: PathBuf::from(lines[3]),
            libpython: PathBuf::from(lines[4]),
            include: PathBuf::from(lines[5]),
        };
        if lines[6] != "1" || !install.libpython.is_file() {
            return Err(Error::NoSharedLibrary {
                python: install.executable.clone(),
                libpython: install.libpython.clone(),
            });
        }
        if !install.include.join("Python.h").is_file() {
            return Err(Error::NoHeaders {
                python: install.executable.clone(),
                include: install.include.clone(),
            });
        }
        Ok(install)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_parses_versions_and_paths() {
        assert_eq!(PythonSpec::parse("3.12"), PythonSpec::Version(3, 12));
        assert_eq!(
            PythonSpec::parse("/usr/bin/python3"),
            PythonSpec::Path("/usr/bin/python3".into())
        );
        assert_eq!(
            PythonSpec::parse("python3.x"),
            PythonSpec::Path("python3.x".into())
        );
    }
}
