//! multipy on every supported CPython found on the machine (3.10 to 3.13, pyenv's): two
//! interpreters of each version side by side in one process (and all versions at
//! once), each with its own `None`, the version asked for, stdlib C extension modules
//! (`_decimal`, `ctypes` included),
//! `PyConfig` isolation from `PYTHON*` variables, and a clean drop. A version missing
//! from the machine is reported and skipped; 3.11 (the default) must be there.

use integration_tests::multipy::{Config, Error, Interpreter, PythonSpec, SUPPORTED};

#[test]
fn every_supported_version_side_by_side() {
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
