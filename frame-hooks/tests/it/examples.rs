//! The `profile` and `breakpoint` examples: insta snapshots of their output (timings and
//! addresses filtered), and the profiler's call counts checked against `cProfile`'s total
//! calls on CPython 3.11, 3.12 and 3.13 for a script with recursion, generators, a
//! coroutine, comprehensions, lambdas, exceptions and threads.

use crate::pythons;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

fn example(name: &str) -> PathBuf {
    let path = test_support::example_path(name);
    // `cargo test` builds examples with the other targets, but not when only this test
    // is selected: make sure the binary is current (a no-op when it is).
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--quiet", "-p", "frame-hooks", "--example", name])
        .status()
        .unwrap();
    assert!(status.success(), "building the example {name} failed");
    path
}

fn script(name: &str) -> String {
    format!("{}/tests/scripts/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.env_remove("RUST_LOG").output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `(line, name) -> calls` for the functions of `file` in a JSON list printed as the
/// last line of `stdout`; `name` is the last component of the qualified name.
fn calls_in(stdout: &str, file: &str) -> BTreeMap<(i64, String), u64> {
    let last = stdout.lines().last().expect("some output");
    let list: serde_json::Value = serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("last line is not JSON ({e}): {last}"));
    let mut out = BTreeMap::new();
    for f in list.as_array().unwrap() {
        if f["file"].as_str().unwrap() != file {
            continue;
        }
        let name = f["function"].as_str().unwrap();
        let short = name.rsplit('.').next().unwrap().to_string();
        let key = (f["line"].as_i64().unwrap(), short);
        *out.entry(key).or_default() += f["calls"].as_u64().unwrap();
    }
    out
}

fn profile_matches_cprofile(minor: u32) {
    let python = match pythons::python(minor) {
        Ok(p) => p,
        Err(why) => {
            println!("skipped: {why}");
            return;
        }
    };
    let workload = script("workload.py");
    let ours =
        run(Command::new(example("profile")).args(["--json", "--python", &python, &workload, "1"]));
    assert!(
        ours.starts_with("fib: 820 squares: 10"),
        "the script's own output comes first:\n{ours}"
    );
    let theirs = run(Command::new(&python).args([&script("cprofile_calls.py"), &workload, "1"]));
    let (ours, theirs) = (calls_in(&ours, &workload), calls_in(&theirs, &workload));
    // 3.12 inlines comprehensions (PEP 709): 14 functions there, 19 on 3.11.
    assert!(ours.len() >= 14, "functions seen: {ours:?}");
    assert_eq!(
        ours, theirs,
        "calls per function: eval-frame profiler vs cProfile"
    );
}

#[test]
fn profile_calls_equal_cprofile_311() {
    profile_matches_cprofile(11);
}

#[test]
fn profile_calls_equal_cprofile_312() {
    profile_matches_cprofile(12);
}

#[test]
fn profile_calls_equal_cprofile_313() {
    profile_matches_cprofile(13);
}

#[test]
fn profile_table_snapshot() {
    let out = run(Command::new(example("profile"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["tests/scripts/workload.py", "1"]));
    insta::with_settings!({filters => vec![
        (r"CPython 3\.\d+\.\d+", "CPython [version]"),
        (r" +\d+\.\d{3} +\d+\.\d{3}\n", " [total ms] [own ms]\n"),
    ]}, {
        insta::assert_snapshot!(out);
    });
}

#[test]
fn breakpoint_snapshot() {
    let out = run(Command::new(example("breakpoint"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["Shape.__init__", "tests/scripts/shapes.py"]));
    insta::with_settings!({filters => vec![(r"0x[0-9a-f]+", "[address]")]}, {
        insta::assert_snapshot!(out);
    });
}

#[test]
fn examples_refuse_bad_input_by_name() {
    let out = Command::new(example("profile"))
        .args(["no/such/script.py"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "profile: no/such/script.py: no such script"
    );
    let out = Command::new(example("breakpoint"))
        .args([
            "--python",
            "/nonexistent/python3",
            "f",
            &script("shapes.py"),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("breakpoint: error: could not load /nonexistent/python3: could not run it"),
        "{err}"
    );
}

#[test]
fn breakpoint_interactive_continue_then_quit() {
    use std::io::Write;
    let mut child = Command::new(example("breakpoint"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["--interactive", "Shape.__init__", "tests/scripts/shapes.py"])
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"c\nq\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stdout.contains("square perimeter 8"), "{stdout}");
    assert!(stdout.contains("breakpoint 2: Shape.__init__"), "{stdout}");
    assert!(
        !stdout.contains("triangle perimeter"),
        "quit before the second shape: {stdout}"
    );
    assert_eq!(stdout.matches("(break) ").count(), 2, "{stdout}");
    assert!(
        stderr.contains("RuntimeError: quit at breakpoint"),
        "{stderr}"
    );
}

#[test]
fn profile_ends_as_python_would() {
    let profile = example("profile");
    let exits = script("exits.py");
    let run = |args: &[&str]| {
        let out = Command::new(&profile)
            .args(args)
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // `sys.exit("message")`: the message on stderr, status 1; the profile printed.
    let (code, stdout, stderr) = run(&[&exits, "message"]);
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    assert_eq!(stderr.trim(), "fatal: bad thing");
    assert!(stdout.contains("1 functions, 1 calls"), "{stdout}");
    // `sys.exit(-1)` is status 255, as with `python`; so is `sys.exit(2**70)`.
    let (code, _, stderr) = run(&[&exits, "negative"]);
    assert_eq!(code, Some(255), "{stderr}");
    let (code, _, stderr) = run(&[&exits, "huge"]);
    assert_eq!(code, Some(255), "{stderr}");
    // An uncaught KeyboardInterrupt: the traceback, then 130 (`python` ends by SIGINT).
    let (code, _, stderr) = run(&[&exits, "interrupt"]);
    assert_eq!(code, Some(130), "{stderr}");
    assert!(stderr.contains("KeyboardInterrupt"), "{stderr}");
    // Recursion `python` survives does not overflow the profiler's stack (the hook's
    // frames sit between Python's; this example is a debug build here).
    let (code, stdout, stderr) = run(&[&exits, "deep"]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("deep ok"), "{stdout}");
    // An uncaught exception: Python's traceback, then the profile (as `python -m
    // cProfile` prints it), the JSON still last on stdout, the script named, status 1.
    let (code, stdout, stderr) = run(&["--json", &exits, "raise"]);
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    assert!(stderr.contains("ValueError: boom"), "{stderr}");
    assert!(
        stderr.ends_with(&format!(
            "profile: Python code raised: the script {exits} (traceback printed above)\n"
        )),
        "{stderr}"
    );
    let calls = calls_in(&stdout, &exits);
    assert_eq!(calls.get(&(9, "fail".to_string())), Some(&1), "{stdout}");
    // A script importing a module next to it, run from another directory.
    let (code, stdout, stderr) = run(&[&script("pkg_demo/main.py")]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.starts_with("hello from the sibling module\n"),
        "{stdout}"
    );
}

#[test]
fn python_option_takes_any_installed_version() {
    // `--python python3.13` as the usage text says, even where `python3.13` is a pyenv
    // shim of a version that is not selected (it does not run).
    let Ok((_, lib)) = frame_hooks::cpython::Libpython::find_minor(13) else {
        println!("skipped: no shared CPython 3.13 on this machine");
        return;
    };
    let out = run(Command::new(example("profile")).args([
        "--python",
        "python3.13",
        &script("exits.py"),
        "normally",
    ]));
    assert!(
        out.contains("under CPython 3.13."),
        "{} not used:\n{out}",
        lib.display()
    );
}
