//! The `cext` example's output (the scenario's standard script on both sides), as an
//! insta snapshot.

use std::path::{Path, PathBuf};
use std::process::Command;

fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).unwrap();
    dir.join("examples").join(name)
}

#[test]
fn cext_example_output() {
    let out = Command::new(example("cext"))
        .env_remove("RUST_LOG")
        .output()
        .expect("the cext example is built by cargo test");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    insta::assert_snapshot!(String::from_utf8(out.stdout).unwrap());
}
