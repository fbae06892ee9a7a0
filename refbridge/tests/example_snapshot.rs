//! The `refbridge_tour` example's output, as an insta snapshot (addresses filtered out).

use std::path::{Path, PathBuf};
use std::process::Command;

fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).unwrap();
    dir.join("examples").join(name)
}

#[test]
fn tour_output() {
    let out = Command::new(example("refbridge_tour"))
        .env_remove("RUST_LOG")
        .output()
        .expect("the tour example is built by cargo test");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    insta::with_settings!({ filters => vec![(r"0x[0-9a-f]+", "[ADDR]")] }, {
        insta::assert_snapshot!(text);
    });
}
