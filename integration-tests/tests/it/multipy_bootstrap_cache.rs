//! The bootstrap's compiled code is cached per CPython (in memory and, like a `.pyc`, in
//! the runner cache directory): the first interpreter compiles and writes it, the others
//! (and later processes) unmarshal it; a cache file that is damaged, truncated or made
//! by another Python (another import magic number) is not used: the source is compiled
//! again and the file rewritten. Each case runs in a child process of this test binary
//! with a cache directory of its own, so that the in-memory cache starts empty.

use integration_tests::multipy::{Config, Interpreter};
use std::path::{Path, PathBuf};
use std::process::Command;

const CHILD: &str = "MULTIPY_BOOTSTRAP_CACHE_CHILD";

/// In the child: two interpreters, each running the bootstrap and reporting where its
/// code came from and the import magic number.
#[test]
fn child_two_interpreters() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let make = || Interpreter::new(Config::new()).expect("interpreter starts");
    let (a, b) = (make(), make());
    for i in [&a, &b] {
        let out = i
            .run("import _multipy_host, importlib.util\nprint(_multipy_host.dispatch.__code__.co_filename, importlib.util.MAGIC_NUMBER.hex())\nprint(6 * 7)")
            .unwrap()
            .stdout;
        println!("child: {}", out.replace('\n', " | "));
    }
}

fn run_child(cache: &Path) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "multipy_bootstrap_cache::child_two_interpreters",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .env("MULTIPY_CACHE_DIR", cache)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "child failed: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // (libtest may print the test's name on the same line as the first output.)
    let lines: Vec<&str> = text
        .lines()
        .filter_map(|l| l.find("child: ").map(|i| &l[i..]))
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    // Both interpreters ran the same bootstrap and work.
    assert_eq!(lines[0], lines[1]);
    assert!(lines[0].contains("<multipy bootstrap> "), "{}", lines[0]);
    assert!(lines[0].ends_with("| 42 | "), "{}", lines[0]);
    lines[0].to_string()
}

fn cached_files(cache: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(cache)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy().into_owned();
            n.starts_with("bootstrap-py3.11-") && n.ends_with(".marshal")
        })
        .collect();
    v.sort();
    v
}

fn fnv(bytes: &[u8]) -> u64 {
    // The runner cache's FNV-1a, with its trailing 0 byte per part.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes.iter().chain(&[0u8]) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[test]
fn compiled_once_then_reused_and_bad_files_are_recompiled() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let cache = std::env::temp_dir().join(format!("multipy-bootstrap-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);
    std::fs::create_dir_all(&cache).unwrap();

    // 1. Empty cache: the first interpreter compiles and writes the file.
    let first = run_child(&cache);
    let files = cached_files(&cache);
    assert_eq!(files.len(), 1, "{files:?}");
    let file = &files[0];
    let good = std::fs::read(file).unwrap();
    let magic_hex = first.split_whitespace().nth(3).unwrap().to_string();
    let magic = (0..4)
        .map(|i| u8::from_str_radix(&magic_hex[2 * i..2 * i + 2], 16).unwrap())
        .collect::<Vec<u8>>();
    assert_eq!(
        &good[..4],
        &magic[..],
        "the file starts with the import magic number"
    );
    let (payload, hash) = good.split_at(good.len() - 8);
    assert_eq!(hash, fnv(payload).to_le_bytes());

    // 2. A second process reuses it (and leaves it as it was).
    assert_eq!(run_child(&cache), first);
    assert_eq!(std::fs::read(file).unwrap(), good);

    // 3. Another Python's data (wrong magic number, hash right): compiled again,
    //    the file rewritten with this Python's.
    let mut other = payload.to_vec();
    other[0] ^= 0x55;
    let h = fnv(&other);
    other.extend_from_slice(&h.to_le_bytes());
    std::fs::write(file, &other).unwrap();
    assert_eq!(run_child(&cache), first);
    assert_eq!(std::fs::read(file).unwrap(), good);

    // 4. Damaged (hash wrong) and truncated files: the same.
    let mut damaged = good.clone();
    damaged[good.len() / 2] ^= 0xff;
    std::fs::write(file, &damaged).unwrap();
    assert_eq!(run_child(&cache), first);
    assert_eq!(std::fs::read(file).unwrap(), good);
    std::fs::write(file, &good[..good.len() / 3]).unwrap();
    assert_eq!(run_child(&cache), first);
    assert_eq!(std::fs::read(file).unwrap(), good);

    // 5. Marshal data that is valid but not a code object, with the right magic and
    //    hash: not used either.
    let mut not_code = magic.clone();
    not_code.extend_from_slice(b"N"); // marshal's None
    let h = fnv(&not_code);
    not_code.extend_from_slice(&h.to_le_bytes());
    std::fs::write(file, &not_code).unwrap();
    assert_eq!(run_child(&cache), first);
    assert_eq!(std::fs::read(file).unwrap(), good);

    let _ = std::fs::remove_dir_all(&cache);
}
