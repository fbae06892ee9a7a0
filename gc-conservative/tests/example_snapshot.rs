//! The `scan` example's output, as an insta snapshot.

use std::path::Path;
use std::process::Command;

#[test]
fn scan_output() {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).unwrap();
    let out = Command::new(dir.join("examples").join("scan"))
        .env_remove("RUST_LOG")
        .output()
        .expect("the scan example is built by cargo test");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    insta::assert_snapshot!(String::from_utf8(out.stdout).unwrap());
}
