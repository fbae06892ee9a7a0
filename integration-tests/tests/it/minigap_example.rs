//! The `minigap` example's output (the CLI users run), as an insta snapshot, and its
//! command-line errors.

use std::path::{Path, PathBuf};
use std::process::Command;

fn example() -> PathBuf {
    test_support::example_path("minigap")
}

#[test]
fn minigap_cli_output() {
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("minigap/scripts");
    let out = Command::new(example())
        .args(["--gc-stress", "2000"])
        .arg(scripts.join("rubik.g"))
        .output()
        .expect("the minigap example is built by cargo test");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut text = String::from_utf8(out.stdout).unwrap();
    let out = Command::new(example())
        .args(["--threads", "2", "-e"])
        .arg("l := List([1..12], i -> (1,2,3)^i); Print(l, \"\\n\", rec(order := Order(l[1]), n := 2^70), \"\\n\");")
        .output()
        .unwrap();
    assert!(out.status.success());
    text.push_str(&String::from_utf8(out.stdout).unwrap());
    insta::assert_snapshot!(text);
}

#[test]
fn minigap_cli_errors_exit_non_zero() {
    let out = Command::new(example())
        .args(["-e", "Print(x);"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "Error, Variable: 'x' must have a value\nnot in any function at -e:1\n"
    );
    let out = Command::new(example())
        .args(["--gc", "mark-sweep", "-e", "1;"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("unknown GC backend 'mark-sweep'"));
    let out = Command::new(example())
        .arg("/nonexistent.g")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
