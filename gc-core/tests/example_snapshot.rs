//! The examples' output, as insta snapshots (pause times filtered out).

use std::path::{Path, PathBuf};
use std::process::Command;

fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).unwrap();
    dir.join("examples").join(name)
}

#[test]
fn tour_output() {
    let out = Command::new(example("tour"))
        .env_remove("RUST_LOG")
        .output()
        .expect("the tour example is built by cargo test");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    insta::with_settings!({ filters => vec![(r"pause [0-9.]+[a-zµ]+", "pause [TIME]")] }, {
        insta::assert_snapshot!(text);
    });
}

#[test]
fn weak_output() {
    let out = Command::new(example("weak"))
        .env_remove("RUST_LOG")
        .output()
        .expect("the weak example is built by cargo test");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    insta::assert_snapshot!(String::from_utf8(out.stdout).unwrap());
}
