//! multipy: dropping an interpreter finalises it and unloads its copy: the process's
//! file mappings, thread count and elf-loader TLS blocks return to what they were (also
//! with numpy imported), a new interpreter imports numpy afresh, and shared buffers
//! outlive every view whatever order interpreters are dropped in. Its own test binary:
//! it compares process-wide counts, so nothing else runs beside it.

#[path = "it/multipy_common/mod.rs"]
mod multipy_common;

use integration_tests::multipy::{thread_count, SharedBuffer};
use multipy_common::{interp, maps};

fn numpy_life(tag: &str) -> usize {
    let i = interp();
    let o = i
        .run(&format!(
            "import numpy as np\nimport numpy.linalg, numpy.fft, numpy.random\na = np.random.default_rng(1).random((40, 40))\nprint('{tag}', round(float(np.linalg.det(a @ a.T)) > 0), np.fft.fft(np.ones(4)).real.tolist())"
        ))
        .unwrap();
    assert_eq!(o.stdout, format!("{tag} 1 [4.0, 0.0, 0.0, 0.0]\n"));
    i.namespace().library_count()
}

#[test]
fn drop_restores_maps_threads_and_tls_and_numpy_imports_afresh() {
    // The first life maps what stays for the process (system libraries such as libffi,
    // the C++ runtime) and compiles the runner.
    let n = numpy_life("first");
    assert!(
        n > 10,
        "libpython, the runner, numpy and its libraries: {n}"
    );
    let (m0, t0, tls0) = (maps(), thread_count(), elf_loader::tls_live_blocks());
    for k in 0..3 {
        numpy_life(&format!("life{k}"));
        let (m1, t1, tls1) = (maps(), thread_count(), elf_loader::tls_live_blocks());
        let added: Vec<&String> = m1.iter().filter(|l| !m0.contains(l)).collect();
        let removed: Vec<&String> = m0.iter().filter(|l| !m1.contains(l)).collect();
        assert!(
            added.is_empty() && removed.is_empty(),
            "maps differ: +{added:#?} -{removed:#?}"
        );
        assert_eq!(t1, t0, "thread count back");
        assert_eq!(tls1, tls0, "TLS blocks back");
    }
    assert!(!maps()
        .iter()
        .any(|l| l.contains("libpython3") || l.contains("_multiarray_umath")));
    assert_eq!(elf_loader::loaded_image_count(), 0);

    // Shared buffers: views in two interpreters, dropped in both orders, and the Rust
    // handle dropped first: the memory lives until the last holder is gone.
    for order in [[0, 1], [1, 0]] {
        let live = SharedBuffer::live_count();
        let buf = SharedBuffer::new(8 * 1000);
        let ints = [interp(), interp()];
        for i in &ints {
            i.share_buffer("shared", &buf, false).unwrap();
            i.run("import numpy as np\nv = np.frombuffer(shared, dtype=np.float64)\nm = memoryview(shared)").unwrap();
        }
        // Each sees the other's writes, without copies.
        ints[0].run("v[:] = np.arange(1000) * 2.0").unwrap();
        let s = ints[1].eval("float(v.sum())").unwrap();
        assert_eq!(s, serde_json::json!(999.0 * 1000.0));
        ints[1]
            .run("v[0] = -1.0; m[8:16] = np.array([7.5]).tobytes()")
            .unwrap();
        assert_eq!(
            ints[0].eval("[float(v[0]), float(v[1])]").unwrap(),
            serde_json::json!([-1.0, 7.5])
        );
        assert_eq!(buf.to_vec()[8..16], 7.5f64.to_ne_bytes());
        assert_eq!(
            ints[0].eval("v.ctypes.data").unwrap(),
            serde_json::json!(buf.as_ptr() as usize),
            "numpy's array points at the Rust allocation"
        );
        // Dropping Python's views gives their holds back.
        assert_eq!(buf.holders(), 3);
        ints[0]
            .run("del v, m, shared\nimport _multipy_host; _multipy_host.buffers.clear()")
            .unwrap();
        assert_eq!(ints[0].shared_buffer_views(), 0);
        assert_eq!(buf.holders(), 2);
        ints[0].share_buffer("shared", &buf, false).unwrap();
        ints[0]
            .run("v = np.frombuffer(shared, dtype=np.float64)")
            .unwrap();
        drop(buf);
        let [a, b] = ints;
        let (first, second) = if order[0] == 0 { (a, b) } else { (b, a) };
        second.run("v += 1").unwrap();
        drop(first);
        assert_eq!(
            SharedBuffer::live_count(),
            live + 1,
            "still held by the second interpreter"
        );
        assert_eq!(
            second.eval("float(v[999])").unwrap(),
            serde_json::json!(1999.0)
        );
        drop(second);
        assert_eq!(SharedBuffer::live_count(), live, "freed with the last view");
    }
}
