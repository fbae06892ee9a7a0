//! The `two_pythons` example's output, as an insta snapshot (ids, timings and ratios
//! filtered out).

use std::path::PathBuf;
use std::process::Command;

fn example_binary() -> PathBuf {
    // Built by cargo in a target directory of the tests' own (a no-op when current): a
    // `cargo build -p elf-loader` in the workspace's target directory would rebuild the
    // unhashed `libelf_loader.rlib` that other crates were compiled against.
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("own-build");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args([
            "build",
            "--quiet",
            "-p",
            "elf-loader",
            "--example",
            "two_pythons",
            "--target-dir",
        ])
        .arg(&target)
        .env_remove("RUSTFLAGS")
        .status()
        .unwrap();
    assert!(status.success(), "building the example failed");
    target.join("debug").join("examples").join("two_pythons")
}

#[test]
fn two_pythons_example_output() {
    let out = Command::new(example_binary())
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    // The two threads' "took" lines may come in either order; keep the rest in order.
    lines.iter_mut().for_each(|l| {
        if l.starts_with("fib(25) took") {
            *l = "fib(25) took [time]".into();
        }
    });
    let text = lines.join("\n");
    insta::with_settings!({filters => vec![
        (r"None is \d+", "None is [id]"),
        (r"\d+\.\d+ s", "[secs] s"),
        (r"\(\d+\.\d+x\)", "([ratio]x)"),
    ]}, {
        insta::assert_snapshot!(text);
    });
}
