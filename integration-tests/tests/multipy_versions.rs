//! multipy on every supported CPython found on the machine (3.10 to 3.13, pyenv's): two
//! interpreters of each version side by side in one process (and all versions at
//! once), each with its own `None`, the version asked for, stdlib C extension modules
//! (`_decimal`, `ctypes` included),
//! `PyConfig` isolation from `PYTHON*` variables, and a clean drop. A version missing
//! from the machine is reported and skipped; 3.11 (the default) must be there.
//! numpy on 3.12 and 3.13: two interpreters of each at once, from that version's numpy
//! environment, against a process of the same environment.

use integration_tests::multipy::{Config, Error, Interpreter, PythonSpec, SUPPORTED};
use std::path::PathBuf;
use std::sync::Mutex;

/// The tests here run one at a time: each ends by checking that nothing is left loaded,
/// and one sets a `PYTHON*` variable that the other's processes would inherit.
static SERIAL: Mutex<()> = Mutex::new(());

#[test]
fn every_supported_version_side_by_side() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // A host variable that would change a plain python's behaviour: ignored by default.
    std::env::set_var("PYTHONOPTIMIZE", "2");
    let mut all = Vec::new();
    for (major, minor) in SUPPORTED {
        let make = || Interpreter::new(Config::new().python(PythonSpec::Version(major, minor)));
        let a = match make() {
            Ok(i) => i,
            Err(Error::PythonNotFound { .. }) if (major, minor) != (3, 11) => {
                eprintln!("CPython {major}.{minor} not on this machine: skipped");
                continue;
            }
            Err(e) => panic!("{major}.{minor}: {e}"),
        };
        let b = make().unwrap();
        // _decimal and _ctypes: 3.12+ lib-dynload modules rely on libpython's libm
        // being in the global scope (ceil).
        let code = "import sys, math, json, _struct, array, threading, _decimal, ctypes\nassert str(_decimal.Decimal(1) / 8) == '0.125'\nassert ctypes.c_int(7).value == 7\nprint('%d.%d' % sys.version_info[:2], sys.flags.optimize, id(None), json.dumps([math.factorial(5)]))";
        let (oa, ob) = (a.run(code).unwrap().stdout, b.run(code).unwrap().stdout);
        let fa: Vec<&str> = oa.split_whitespace().collect();
        let fb: Vec<&str> = ob.split_whitespace().collect();
        assert_eq!(fa[0], format!("{major}.{minor}"));
        assert_eq!(fa[1], "0", "{major}.{minor}: PYTHONOPTIMIZE ignored");
        assert_ne!(fa[2], fb[2], "{major}.{minor}: two Nones");
        assert_eq!(
            fa[2],
            a.libpython_sym("_Py_NoneStruct").unwrap().to_string()
        );
        assert_eq!(fa[3], "[120]");
        assert_eq!(a.python().version, (major, minor));
        all.push(a);
        all.push(b);
    }
    // With use_environment the variable is honoured (3.11).
    let c = Interpreter::new(Config::new().use_environment(true)).unwrap();
    assert_eq!(
        c.run("import sys; print(sys.flags.optimize)")
            .unwrap()
            .stdout,
        "2\n"
    );
    std::env::remove_var("PYTHONOPTIMIZE");
    // All versions run at once from their own threads.
    std::thread::scope(|s| {
        for i in &all {
            s.spawn(move || {
                let o = i.run("print(sum(i * i for i in range(100000)))").unwrap();
                assert_eq!(o.stdout, "333328333350000\n");
            });
        }
    });
    drop(all);
    drop(c);
    assert_eq!(elf_loader::loaded_image_count(), 0);
}

/// numpy (linalg through OpenBLAS, fft, random, ufuncs) in two interpreters of 3.12 and
/// of 3.13 at once, each on its version's numpy environment (`$MULTIPY_VENV_3_12`, else
/// `target/multipy-venv-3.12`, which `cargo xtask test` and `cargo xtask bench multipy`
/// make when that CPython is on the machine; skipped, and said, when it is missing):
/// each interpreter has its own numpy, and prints what a process of that environment
/// prints.
#[test]
fn numpy_on_newer_versions() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let code = "import sys, numpy as np\nrng = np.random.default_rng(7)\nm = rng.random((120, 120)) + 120 * np.eye(120)\nassert np.allclose(m @ np.linalg.inv(m), np.eye(120))\nf = np.fft.fft(np.arange(8.0))\nassert abs(f[0].real - 28.0) < 1e-9\ns = float(np.exp(np.sin(np.arange(100000.0))).sum())\nprint('%d.%d' % sys.version_info[:2], np.__version__, repr(s), repr(float(np.linalg.det(m[:4, :4]))))\n";
    let mut checked = 0;
    for (major, minor) in [(3u32, 12u32), (3, 13)] {
        let venv = std::env::var_os(format!("MULTIPY_VENV_{major}_{minor}"))
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                    .join(format!("../target/multipy-venv-{major}.{minor}"))
            });
        if !venv.join("bin/python").exists() {
            eprintln!(
                "{major}.{minor}: no numpy environment at {} (`cargo xtask test` makes it when CPython {major}.{minor} is on the machine): skipped",
                venv.display()
            );
            continue;
        }
        let process = std::process::Command::new(venv.join("bin/python"))
            .args(["-c", code])
            .env("OPENBLAS_NUM_THREADS", "1")
            .output()
            .unwrap();
        assert!(
            process.status.success(),
            "{major}.{minor} process: {}",
            String::from_utf8_lossy(&process.stderr)
        );
        let expected = String::from_utf8_lossy(&process.stdout).into_owned();
        assert!(
            expected.starts_with(&format!("{major}.{minor} ")),
            "{expected}"
        );
        let make = || {
            Interpreter::new(
                Config::new()
                    .python(PythonSpec::Version(major, minor))
                    .venv(&venv),
            )
            .unwrap_or_else(|e| panic!("{major}.{minor}: {e}"))
        };
        let (a, b) = (make(), make());
        let (oa, ob) = std::thread::scope(|s| {
            let ta = s.spawn(|| a.run(code).unwrap().stdout);
            let tb = s.spawn(|| b.run(code).unwrap().stdout);
            (ta.join().unwrap(), tb.join().unwrap())
        });
        assert_eq!(oa, expected, "{major}.{minor}: interpreter a vs process");
        assert_eq!(ob, expected, "{major}.{minor}: interpreter b vs process");
        // Each its own numpy: the module objects and numpy's core extension differ.
        let ids = "import numpy, numpy._core._multiarray_umath as m\nprint(id(numpy), id(m))";
        assert_ne!(a.run(ids).unwrap().stdout, b.run(ids).unwrap().stdout);
        drop((a, b));
        checked += 1;
    }
    eprintln!("numpy checked on {checked} of 3.12 and 3.13");
    assert_eq!(elf_loader::loaded_image_count(), 0);
}
