//! multipy: interpreters side by side, with numpy from the project's venv: the seed's
//! example, output capture per interpreter and per call, exceptions and `SystemExit` as
//! values that leave the other interpreters running, the main thread, `sys.executable`
//! and subprocesses, `argv`, `call`, and errors for bad input.

use crate::multipy_common::{interp, venv};
use integration_tests::multipy::{Config, Error, Interpreter, PythonSpec, Stream};
use serde_json::json;
use std::sync::{Arc, Mutex};

#[test]
fn the_seeds_example_in_two_interpreters_at_once() {
    let (a, b) = (interp(), interp());
    let code = "import numpy as np\nprint(np.arange(10)*10)\nprint('I think None is', id(None))";
    let (oa, ob) = std::thread::scope(|s| {
        let ta = s.spawn(|| a.run(code).unwrap());
        let tb = s.spawn(|| b.run(code).unwrap());
        (ta.join().unwrap(), tb.join().unwrap())
    });
    let lines = |o: &str| o.lines().map(str::to_string).collect::<Vec<_>>();
    let (la, lb) = (lines(&oa.stdout), lines(&ob.stdout));
    assert_eq!(la[0], "[ 0 10 20 30 40 50 60 70 80 90]");
    assert_eq!(la[0], lb[0]);
    assert_ne!(la[1], lb[1], "each interpreter has its own None");
    assert_eq!(
        la[1],
        format!(
            "I think None is {}",
            a.libpython_sym("_Py_NoneStruct").unwrap()
        )
    );
    // numpy's extension module was loaded into each interpreter's own namespace.
    for i in [&a, &b] {
        let n = i
            .namespace()
            .library_paths()
            .iter()
            .filter(|p| p.to_string_lossy().contains("_multiarray_umath"))
            .count();
        assert_eq!(n, 1, "interpreter {} has its own numpy core", i.id());
    }
}

#[test]
fn output_is_captured_per_interpreter_and_per_call() {
    let (a, b) = (interp(), interp());
    // Concurrent calls in the same interpreter on four threads keep their output apart.
    std::thread::scope(|s| {
        for t in 0..4 {
            let i = if t % 2 == 0 { &a } else { &b };
            s.spawn(move || {
                for k in 0..20 {
                    let o = i
                        .run(&format!(
                            "import sys\nfor j in range(50): print('t{t} k{k}', j)\nsys.stderr.write('err{t}\\n')"
                        ))
                        .unwrap();
                    let lines: Vec<&str> = o.stdout.lines().collect();
                    assert_eq!(lines.len(), 50);
                    assert!(lines.iter().all(|l| l.starts_with(&format!("t{t} k{k} "))));
                    assert_eq!(o.stderr, format!("err{t}\n"));
                }
            });
        }
    });
    // Output of a thread Python started, written after the call returned, goes to the
    // interpreter's background output, not to another call.
    // (The thread prints once the next call lets it: after the call that started it.)
    a.run("import threading\ngo = threading.Event()\nt = threading.Thread(target=lambda: (go.wait(), print('late')))\nt.start()")
        .unwrap();
    let o = a.run("go.set(); t.join(); print('joined')").unwrap();
    assert_eq!(o.stdout, "joined\n");
    assert_eq!(a.take_background_output().stdout, "late\n");
}

#[test]
fn forwarded_output_reaches_the_sink_with_the_interpreter_id() {
    let seen: Arc<Mutex<Vec<(usize, Stream, String)>>> = Arc::default();
    let s2 = seen.clone();
    let i = Interpreter::new(Config::new().forward(Arc::new(move |id, st, t: &str| {
        s2.lock().unwrap().push((id, st, t.to_string()))
    })))
    .unwrap();
    let o = i
        .run("import sys; print('hello'); print('oops', file=sys.stderr)")
        .unwrap();
    assert_eq!(o.stdout, "", "forwarded, not captured");
    let text: String = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(id, st, _)| *id == i.id() && *st == Stream::Stdout)
        .map(|(_, _, t)| t.clone())
        .collect();
    assert_eq!(text, "hello\n");
    assert!(seen
        .lock()
        .unwrap()
        .iter()
        .any(|(_, st, t)| *st == Stream::Stderr && t == "oops\n"));
}

#[test]
fn exceptions_and_system_exit_are_errors_and_the_others_keep_running() {
    let (a, b) = (interp(), interp());
    b.run("import numpy as np\ntotal = 0").unwrap();
    std::thread::scope(|s| {
        let runner = s.spawn(|| {
            // b keeps computing while a raises and exits.
            for k in 0..50 {
                b.run(&format!("total += int(np.arange({k}).sum())"))
                    .unwrap();
            }
        });
        match a.run("print('before')\nimport numpy as np\nnp.linalg.inv(np.zeros((2, 2)))") {
            Err(Error::Exception(e)) => {
                assert_eq!(e.type_name, "numpy.linalg.LinAlgError");
                assert_eq!(e.message, "Singular matrix");
                assert!(
                    e.traceback
                        .starts_with("Traceback (most recent call last):\n"),
                    "{}",
                    e.traceback
                );
                assert!(
                    e.traceback
                        .contains("File \"<multipy>\", line 3, in <module>"),
                    "{}",
                    e.traceback
                );
                assert!(
                    !e.traceback.contains("dispatch"),
                    "the layer's frames are hidden: {}",
                    e.traceback
                );
                assert_eq!(e.output.stdout, "before\n");
            }
            other => panic!("expected LinAlgError, got {other:?}"),
        }
        match a.run("import sys\nprint('bye')\nsys.exit(3)") {
            Err(Error::SystemExit { code, output, .. }) => {
                assert_eq!(code, 3);
                assert_eq!(output.stdout, "bye\n");
            }
            other => panic!("expected SystemExit, got {other:?}"),
        }
        match a.run("exit('message')") {
            Err(Error::SystemExit {
                code: 1, output, ..
            }) => assert_eq!(output.stderr, "message\n"),
            other => panic!("expected SystemExit(1), got {other:?}"),
        }
        match a.run("raise SystemExit") {
            Err(Error::SystemExit { code: 0, .. }) => {}
            other => panic!("expected SystemExit(0), got {other:?}"),
        }
        // Beyond a C long: -1, as `python` computes it (its exit status is then 255).
        match a.run("raise SystemExit(2**70)") {
            Err(Error::SystemExit { code: -1, .. }) => {}
            other => panic!("expected SystemExit(-1), got {other:?}"),
        }
        runner.join().unwrap();
    });
    // Both still work afterwards; b's state is intact.
    let expect: i64 = (0..50).map(|k: i64| k * (k - 1) / 2).sum();
    assert_eq!(b.eval("total").unwrap(), json!(expect));
    assert_eq!(a.run("print(1 + 1)").unwrap().stdout, "2\n");
    // A syntax error is an exception too.
    match a.run("def f(:") {
        Err(Error::Exception(e)) => assert_eq!(e.type_name, "SyntaxError"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn main_thread_signals_and_atexit_behave_as_in_a_process() {
    let i = Interpreter::new(Config::new().venv(venv()).install_signal_handlers(true)).unwrap();
    // The interpreter's own thread is its main thread; calls from elsewhere are not.
    let o = i
        .run_on_main("import threading\nprint(threading.current_thread() is threading.main_thread(), threading.main_thread().name)")
        .unwrap();
    assert_eq!(o.stdout, "True MainThread\n");
    let o = i
        .run("print(threading.current_thread() is threading.main_thread())")
        .unwrap();
    assert_eq!(o.stdout, "False\n");
    // signal.signal works on the main thread (and is refused elsewhere, as in CPython).
    let o = i
        .run_on_main("import signal, os\ngot = []\nsignal.signal(signal.SIGUSR1, lambda s, f: got.append(s))\nos.kill(os.getpid(), signal.SIGUSR1)\nimport time\nfor _ in range(100):\n    if got: break\n    time.sleep(0.01)\nprint(got == [signal.SIGUSR1])")
        .unwrap();
    assert_eq!(o.stdout, "True\n");
    match i.run("signal.signal(signal.SIGUSR2, lambda s, f: None)") {
        Err(Error::Exception(e)) => {
            assert_eq!(e.type_name, "ValueError");
            assert!(e.message.contains("main thread"), "{}", e.message);
        }
        other => panic!("{other:?}"),
    }
    // Only one live interpreter may install signal handlers.
    match Interpreter::new(Config::new().install_signal_handlers(true)) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("signal handlers"), "{m}"),
        other => panic!("{:?}", other.map(|_| ())),
    }
    // atexit functions run when the interpreter is dropped (finalised).
    let out: Arc<Mutex<String>> = Arc::default();
    let o2 = out.clone();
    let j = Interpreter::new(Config {
        background: Some(Arc::new(move |_, _, t: &str| {
            o2.lock().unwrap().push_str(t)
        })),
        ..Config::new()
    })
    .unwrap();
    j.run("import atexit\natexit.register(print, 'atexit ran')")
        .unwrap();
    drop(j);
    assert_eq!(*out.lock().unwrap(), "atexit ran\n");
    // SIGUSR1's disposition pointed into i's copy: after the drop it is the default again.
    drop(i);
    // SAFETY: querying a disposition.
    let handler = unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGUSR1, std::ptr::null(), &mut old);
        old.sa_sigaction
    };
    assert_eq!(
        handler,
        libc::SIG_DFL,
        "no handler left pointing into unmapped code"
    );
}

#[test]
fn executable_argv_venv_and_subprocess() {
    let v = venv();
    let i = Interpreter::new(Config::new().venv(&v).argv(["prog", "--flag", "x"])).unwrap();
    let o = i
        .run("import sys, subprocess, numpy\nprint(sys.argv)\nprint(sys.executable)\nprint(sys.prefix)\nprint(numpy.__file__.startswith(sys.prefix))\nr = subprocess.run([sys.executable, '-c', 'import numpy, sys; print(numpy.__version__, sys.prefix)'], capture_output=True, text=True)\nprint(r.returncode, r.stdout.strip())")
        .unwrap();
    let lines: Vec<&str> = o.stdout.lines().collect();
    assert_eq!(lines[0], "['prog', '--flag', 'x']");
    assert_eq!(lines[1], v.join("bin/python").to_string_lossy());
    assert_eq!(lines[2], v.to_string_lossy());
    assert_eq!(lines[3], "True");
    let numpy_version = i
        .call("numpy", "__getattribute__", &[json!("__version__")])
        .unwrap()
        .value;
    assert_eq!(
        lines[4],
        format!("0 {} {}", numpy_version.as_str().unwrap(), v.display())
    );
    // Without a venv: the base installation, no numpy.
    let plain = Interpreter::new(Config::new()).unwrap();
    match plain.run("import numpy") {
        Err(Error::Exception(e)) => assert_eq!(e.type_name, "ModuleNotFoundError"),
        other => panic!("{other:?}"),
    }
    assert_eq!(plain.executable(), plain.python().executable);
}

#[test]
fn run_file_run_module_and_call() {
    let i = interp();
    let dir = std::env::temp_dir().join(format!("multipy-run-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("helper_mod.py"),
        "def triple(x):\n    return 3 * x\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("script.py"),
        "import helper_mod, sys\nprint(__name__, helper_mod.triple(14))\n",
    )
    .unwrap();
    let o = i.run_file(dir.join("script.py")).unwrap();
    assert_eq!(o.stdout, "__main__ 42\n");
    // run_module: sys.argv as `python -m` sets it; json's CLI reads a file argument.
    std::fs::write(dir.join("in.json"), "{\"b\": [1, 2], \"a\": null}").unwrap();
    let f = dir.join("in.json");
    let o = i
        .run_module(
            "json.tool",
            &["--sort-keys", "--compact", f.to_str().unwrap()],
        )
        .unwrap();
    assert_eq!(o.stdout, "{\"a\":null,\"b\":[1,2]}\n");
    match i.run_module("json.tool", &["/nonexistent/file.json"]) {
        Err(Error::SystemExit { code, output, .. }) => {
            assert_ne!(code, 0);
            assert!(output.stderr.contains("No such file"), "{}", output.stderr);
        }
        other => panic!("{other:?}"),
    }
    let r = i.call("helper_mod", "triple", &[json!([1, 2])]).unwrap();
    assert_eq!(r.value, json!([1, 2, 1, 2, 1, 2]));
    let r = i
        .call("numpy", "dot", &[json!([1, 2, 3]), json!([4, 5, 6])])
        .unwrap();
    assert_eq!(
        r.value,
        json!("np.int64(32)"),
        "non-JSON values come back as repr"
    );
    match i.call("helper_mod", "missing", &[]) {
        Err(Error::Exception(e)) => assert_eq!(e.type_name, "AttributeError"),
        other => panic!("{other:?}"),
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_input_gives_errors_naming_the_problem() {
    let e = Interpreter::new(Config::new().python(PythonSpec::Path("/nonexistent/python3".into())))
        .err()
        .unwrap();
    assert!(matches!(e, Error::PythonNotFound { .. }), "{e}");
    assert!(e.to_string().contains("/nonexistent/python3"), "{e}");
    let e = Interpreter::new(Config::new().python(PythonSpec::Version(3, 99)))
        .err()
        .unwrap();
    assert!(
        e.to_string()
            .contains("CPython 3.99 is not supported (3.10 to 3.13 are)"),
        "{e}"
    );
    // An old Python that exists is refused by its version too, before any probe.
    let e = Interpreter::new(Config::new().python(PythonSpec::Version(2, 7)))
        .err()
        .unwrap();
    assert!(matches!(e, Error::UnsupportedPython { .. }), "{e}");
    let e = Interpreter::new(Config::new().venv("/nonexistent/venv"))
        .err()
        .unwrap();
    assert!(matches!(e, Error::BadVenv { .. }), "{e}");
    assert!(e.to_string().contains("pyvenv.cfg"), "{e}");
    let i = Interpreter::new(Config::new()).unwrap();
    let e = i
        .share_buffer(
            "not a name",
            &integration_tests::multipy::SharedBuffer::new(8),
            false,
        )
        .unwrap_err();
    assert!(e.to_string().contains("not a Python identifier"), "{e}");
    let e = Interpreter::new(Config::new().argv(["a\0b"]))
        .err()
        .unwrap();
    assert!(e.to_string().contains("NUL"), "{e}");
    // Code with a NUL byte is Python's own error.
    match i.run("x = 1\0") {
        Err(Error::Exception(e)) => assert!(e.message.contains("null"), "{}", e.message),
        other => panic!("{other:?}"),
    }
}

/// GNU readline and ncurses keep process-global state that is not thread-safe; CPython
/// calls them under its one GIL. Interpreters importing `readline` (pdb and doctest do)
/// at the same moment crashed inside a shared libreadline (5 of 30 runs of four
/// interpreters); each namespace now has its own copy of them.
#[test]
fn readline_and_curses_are_per_interpreter() {
    // Each sets its own completer delimiters, waits (a barrier) until the others have
    // set theirs, and reads them back: one shared readline would show another's.
    let set = "import readline, _curses, pdb\n\
               pdb.Pdb()\n\
               readline.set_completer_delims(' \\t' + str(COPY))";
    let read = "print(repr(readline.get_completer_delims()))";
    for round in 0..6 {
        let interps: Vec<Interpreter> = (0..4).map(|_| interp()).collect();
        let all_set = std::sync::Barrier::new(interps.len());
        let outs: Vec<String> = std::thread::scope(|s| {
            let hs: Vec<_> = interps
                .iter()
                .enumerate()
                .map(|(k, i)| {
                    let all_set = &all_set;
                    s.spawn(move || {
                        i.set_global("COPY", &json!(k)).unwrap();
                        i.run(set).unwrap();
                        all_set.wait();
                        i.run(read).unwrap().stdout
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (k, out) in outs.iter().enumerate() {
            assert_eq!(
                out.trim(),
                format!("' \\t{k}'"),
                "round {round}, interpreter {k}"
            );
        }
        for i in &interps {
            let own = |name: &str| {
                i.namespace()
                    .library_paths()
                    .iter()
                    .filter(|p| p.to_string_lossy().contains(name))
                    .count()
            };
            assert_eq!(own("libreadline"), 1, "libreadline is loaded per namespace");
            assert_eq!(own("libtinfo"), 1, "libtinfo is loaded per namespace");
        }
    }
}

/// What hostile code does to the layer's own machinery: bytes that are not UTF-8, an
/// exception whose message cannot be encoded or whose `__str__` raises, values JSON
/// cannot carry. Each is reported (never an empty result, never a lost call's output).
#[test]
fn undecodable_output_and_unprintable_exceptions_are_reported_not_lost() {
    let i = interp();
    // Invalid UTF-8 on sys.stdout.buffer: the call's other output survives, the bad
    // bytes become U+FFFD in the captured text.
    let o = i
        .run("import sys\nprint('first')\nsys.stdout.buffer.write(b'ok \\xff\\xfe bytes\\n')\nprint('last')")
        .unwrap();
    assert_eq!(o.stdout, "first\nok \u{fffd}\u{fffd} bytes\nlast\n");
    // A UTF-8 character split across two writes of the buffer arrives whole.
    let o = i
        .run("import sys\nb = 'h\\u00e9llo\\n'.encode()\nsys.stdout.buffer.write(b[:2])\nsys.stdout.buffer.write(b[2:])")
        .unwrap();
    assert_eq!(o.stdout, "h\u{e9}llo\n");
    // An exception message with a lone surrogate: type, message and traceback kept.
    match i.run("print('before')\nraise ValueError('bad \\udcff surrogate')") {
        Err(Error::Exception(e)) => {
            assert_eq!(e.type_name, "ValueError");
            assert!(
                e.message.starts_with("bad ") && e.message.ends_with(" surrogate"),
                "{}",
                e.message
            );
            assert!(
                e.traceback.contains("line 2, in <module>"),
                "{}",
                e.traceback
            );
            assert_eq!(e.output.stdout, "before\n");
        }
        other => panic!("{other:?}"),
    }
    // An exception whose __str__ raises: reported as Python reports it.
    match i.run("class E(Exception):\n    def __str__(self): raise ValueError('no str')\nraise E()")
    {
        Err(Error::Exception(e)) => {
            assert_eq!(e.type_name, "__main__.E");
            assert_eq!(e.message, "<exception str() failed>");
            assert!(
                e.traceback.contains("line 3, in <module>"),
                "{}",
                e.traceback
            );
        }
        other => panic!("{other:?}"),
    }
    // Values JSON cannot carry exactly come back as their repr, never as null.
    assert_eq!(i.eval("float('nan')").unwrap(), json!("nan"));
    assert_eq!(
        i.eval("2**100").unwrap(),
        json!("1267650600228229401496703205376")
    );
    assert_eq!(
        i.eval("[1, 2**70]").unwrap(),
        json!("[1, 1180591620717411303424]")
    );
    assert_eq!(i.eval("'\\udcff'").unwrap(), json!("'\\udcff'"));
    assert_eq!(
        i.eval("{'a': [1, 2.5, None, True]}").unwrap(),
        json!({"a": [1, 2.5, null, true]})
    );
    assert_eq!(i.eval("2**64 - 1").unwrap(), json!(u64::MAX));
    assert_eq!(i.eval("-2**63").unwrap(), json!(i64::MIN));
    // repr itself raising is named.
    let v = i
        .eval("type('R', (), {'__repr__': lambda self: 1/0})()")
        .unwrap();
    assert_eq!(v, json!("<repr() failed: ZeroDivisionError>"));
    // The interpreter is intact.
    assert_eq!(i.run("print('still fine')").unwrap().stdout, "still fine\n");
}

/// A thread Python started that writes without a final newline and ends: its text is
/// not lost (it goes out when the thread ends), in capture and in forward mode.
#[test]
fn partial_lines_of_ended_threads_are_delivered() {
    let i = interp();
    let o = i
        .run("import sys, threading\nt = threading.Thread(target=lambda: (sys.stdout.write('thread partial'), sys.stderr.write('err partial')))\nt.start(); t.join()\nprint('joined')")
        .unwrap();
    assert_eq!(o.stdout, "joined\n");
    let bg = i.take_background_output();
    assert_eq!(
        (bg.stdout.as_str(), bg.stderr.as_str()),
        ("thread partial", "err partial")
    );

    let seen: Arc<Mutex<String>> = Arc::default();
    let s2 = seen.clone();
    let f = Interpreter::new(Config::new().forward(Arc::new(move |_, st, t: &str| {
        if st == Stream::Stdout {
            s2.lock().unwrap().push_str(t)
        }
    })))
    .unwrap();
    f.run("import sys, threading\nt = threading.Thread(target=lambda: print('partial', end=''))\nt.start(); t.join()\nprint(' joined')")
        .unwrap();
    assert_eq!(*seen.lock().unwrap(), "partial joined\n");
    // A daemon thread's partial line goes out at finalisation.
    f.run("import threading, sys, time\nev = threading.Event()\ndef w():\n    sys.stdout.write('daemon partial'); ev.set(); time.sleep(0.2)\nd = threading.Thread(target=w, daemon=True); d.start(); ev.wait()")
        .unwrap();
    // The daemon thread has ended (joined, not slept for) before finalisation.
    f.run("d.join()").unwrap();
    drop(f);
    assert!(
        seen.lock().unwrap().ends_with("daemon partial"),
        "{:?}",
        seen.lock().unwrap()
    );
}

/// The process has one stdin: one interpreter at a time may read it; the others'
/// `sys.stdin` refuses reads with a message naming the option.
#[test]
fn stdin_is_given_to_one_interpreter_at_a_time() {
    let a = Interpreter::new(Config::new().inherit_stdin(true)).unwrap();
    let e = Interpreter::new(Config::new().inherit_stdin(true))
        .err()
        .unwrap();
    assert!(
        e.to_string().contains(&format!(
            "interpreter {} already has the process's stdin",
            a.id()
        )),
        "{e}"
    );
    // a's stdin is the process's (its fd 0); b's refuses.
    assert_eq!(
        a.eval("__import__('sys').stdin.fileno()").unwrap(),
        json!(0)
    );
    let b = interp();
    match b.run("input('name? ')") {
        Err(Error::Exception(e)) => {
            assert_eq!(e.type_name, "OSError");
            assert!(
                e.message.contains("not given the process's stdin"),
                "{}",
                e.message
            );
            assert!(e.message.contains("Config::inherit_stdin"), "{}", e.message);
            assert!(
                !e.traceback.contains("multipy bootstrap"),
                "{}",
                e.traceback
            );
        }
        other => panic!("{other:?}"),
    }
    // Dropping the owner frees the role.
    drop(a);
    let c = Interpreter::new(Config::new().inherit_stdin(true)).unwrap();
    assert_eq!(
        c.eval("__import__('sys').stdin.fileno()").unwrap(),
        json!(0)
    );
}

/// An interpreter's main thread has a python main thread's stack: recursion that a
/// plain `python` survives (C frames between the Python ones: `map`) works there.
#[test]
fn main_thread_recursion_depth_matches_a_python_process() {
    let code = "import sys\nsys.setrecursionlimit(100000)\ndef f(n):\n    return 0 if n == 0 else list(map(f, [n - 1]))[0]\nf(10000)\nprint('deep ok')";
    let plain = std::process::Command::new(venv().join("bin/python"))
        .args(["-c", code])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&plain.stdout),
        "deep ok\n",
        "a plain python survives it"
    );
    let i = interp();
    assert_eq!(i.run_on_main(code).unwrap().stdout, "deep ok\n");
    assert!(integration_tests::multipy::main_stack_size() >= 8 << 20 || stack_limit_below_8mib());
}

/// Whether this process's soft stack limit is set below 8 MiB (then the interpreter's
/// main thread follows it).
fn stack_limit_below_8mib() -> bool {
    std::fs::read_to_string("/proc/self/limits")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("Max stack size"))
        .and_then(|l| l.split_whitespace().nth(3)?.parse::<u64>().ok())
        .is_some_and(|soft| soft < 8 << 20)
}
