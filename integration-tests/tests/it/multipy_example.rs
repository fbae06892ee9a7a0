//! The `multipy` CLI example: the seed's numpy example in two interpreters (output as an
//! insta snapshot, ids and timings filtered), `-m` and FILE modes with arguments, the
//! exit status when one interpreter raises, and usage errors.

use crate::multipy_common::example;
use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(example())
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

/// Lines sorted by interpreter (their relative order across interpreters is not fixed),
/// the summary line last.
fn sorted(out: &[u8]) -> String {
    let text = String::from_utf8_lossy(out);
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort_by_key(|l| (l.starts_with("multipy:"), l.get(..4).map(str::to_string)));
    lines.join("\n")
}

fn filters() -> Vec<(&'static str, &'static str)> {
    vec![
        (r"None is \d+", "None is [id]"),
        (
            r"start-up \d+\.\d+ s, run \d+\.\d+ s",
            "start-up [secs] s, run [secs] s",
        ),
    ]
}

#[test]
fn seed_example_in_two_interpreters() {
    let venv = crate::multipy_common::venv();
    let out = run(&[
        "--interpreters",
        "2",
        "--venv",
        venv.to_str().unwrap(),
        "-c",
        "import numpy as np, sys\nprint(COPY, 'of', NCOPIES, sys.argv)\nprint(np.arange(10)*10)\nprint('I think None is', id(None))",
        "x",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = sorted(&out.stdout);
    // Two different Nones.
    let nones: std::collections::HashSet<&str> = text
        .lines()
        .filter(|l| l.contains("None is"))
        .map(|l| &l[4..])
        .collect();
    assert_eq!(nones.len(), 2, "{text}");
    insta::with_settings!({filters => filters()}, {
        insta::assert_snapshot!(text);
    });
}

#[test]
fn module_file_threads_and_failures() {
    // -m with arguments, two threads per interpreter.
    let dir = std::env::temp_dir().join(format!("multipy-example-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("prog.py"),
        "import sys, threading\nprint('copy', COPY, 'argv', sys.argv[1:], threading.current_thread() is threading.main_thread())\n",
    )
    .unwrap();
    let prog = dir.join("prog.py");
    let out = run(&[
        "-n",
        "3",
        "--threads-per-interpreter",
        "2",
        prog.to_str().unwrap(),
        "a",
        "b",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = sorted(&out.stdout);
    for copy in 0..3 {
        assert!(
            text.contains(&format!("[{copy}] copy {copy} argv ['a', 'b'] True")),
            "{text}"
        );
        assert!(
            text.contains(&format!("[{copy}] copy {copy} argv ['a', 'b'] False")),
            "{text}"
        );
    }
    assert!(
        text.ends_with("multipy: 3/3 interpreters ok")
            || text.contains("multipy: 3/3 interpreters ok, start-up"),
        "{text}"
    );

    let out = run(&[
        "-n",
        "2",
        "-m",
        "json.tool",
        "--compact",
        "/nonexistent.json",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("multipy: 0/2 interpreters ok"));

    // One interpreter raises: non-zero exit, the other's output intact.
    let out = run(&[
        "-c",
        "if COPY == 1: raise ValueError('only in 1')\nprint('fine', COPY)",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = sorted(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("[0] fine 0"), "{stdout}");
    assert!(stdout.contains("multipy: 1/2 interpreters ok"), "{stdout}");
    assert!(stderr.contains("[1] ValueError: only in 1"), "{stderr}");

    // sys.exit("message") prints the message, as python does, and fails.
    let out = run(&["-c", "import sys; sys.exit('bye from %d' % COPY)"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("[0] bye from 0") && stderr.contains("[1] bye from 1"),
        "{stderr}"
    );

    // Only interpreter 0 reads the process's stdin; the others' reads are refused.
    let mut child = Command::new(example())
        .args(["-c", "print('got', repr(input()))"])
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), b"a\nb\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (sorted(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("[0] got 'a'"), "{stdout}");
    assert!(
        stderr.contains("[1] OSError: multipy: this interpreter was not given the process's stdin"),
        "{stderr}"
    );

    // SystemExit(0) is success; usage errors exit 2.
    assert!(run(&["-c", "raise SystemExit(0)"]).status.success());
    let out = run(&["--interpreters", "zero", "-c", "pass"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("'zero' is not a positive number"));
    assert_eq!(run(&["--interpreters", "2"]).status.code(), Some(2));
    std::fs::remove_dir_all(&dir).ok();
}
