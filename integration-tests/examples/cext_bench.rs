//! The cycle collector of the C-extension scenario against CPython's, for `cargo xtask
//! bench refbridge` (build with `--release`): the same extension (`cext/cext.c`) and the
//! same shapes on both sides, runs interleaved:
//!
//! - `RINGS` rings of `NODES` containers (native cycles);
//! - `RINGS` rings alternating container and host object (cycles crossing the boundary
//!   `NODES` times: host objects are gc-core objects here, Python objects in CPython).
//!
//! Ours: the time of `Bridge::collect` (cycle collection, replication, full managed
//! collection, queue drain: every object freed when it returns); CPython's: the time of
//! `gc.collect()` (`cext/bench.py`). Prints one JSON object with the medians and the
//! spreads over `RUNS` runs (arguments: RUNS RINGS NODES, default 7 10000 10).
//! `--one native|cross RINGS NODES` builds one shape and collects it once, for
//! callgrind (`--toggle-collect=cext_bench::measured_collect`); `--module-dir` prints
//! where the CPython build of the extension is.

use integration_tests::cext::{
    build::python3_path, build_cpython_module, Extension, Op, RefbridgeHost,
};
use std::process::Command;
use std::time::Instant;

fn native_rings(h: &mut RefbridgeHost, rings: i64, nodes: i64) {
    let mut id = 1;
    for _ in 0..rings {
        let first = id;
        for k in 0..nodes {
            h.apply(&Op::Container(id + k)).unwrap();
            if k > 0 {
                h.apply(&Op::Append(id + k - 1, id + k)).unwrap();
            }
        }
        h.apply(&Op::Append(id + nodes - 1, first)).unwrap();
        for k in 0..nodes {
            h.apply(&Op::Drop(id + k)).unwrap();
        }
        id += nodes;
    }
}

fn cross_rings(h: &mut RefbridgeHost, rings: i64, nodes: i64) {
    let mut id = 1;
    for _ in 0..rings {
        // even k: container, odd k: host; each points to the next, the last to the first.
        for k in 0..nodes {
            h.apply(&if k % 2 == 0 {
                Op::Container(id + k)
            } else {
                Op::Host(id + k)
            })
            .unwrap();
        }
        for k in 0..nodes {
            let next = id + (k + 1) % nodes;
            h.apply(&if k % 2 == 0 {
                Op::Append(id + k, next)
            } else {
                Op::Set(id + k, 0, next)
            })
            .unwrap();
        }
        for k in 0..nodes {
            h.apply(&Op::Drop(id + k)).unwrap();
        }
        id += nodes;
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn spread(v: &[f64]) -> f64 {
    let (lo, hi) = (v[0], v[v.len() - 1]);
    (hi - lo) / median(&mut v.to_vec())
}

/// Under callgrind: builds one shape and collects it once (`--one native|cross RINGS
/// NODES`), so that the instructions of the collection can be counted
/// (`--toggle-collect=cext_bench::measured_collect`).
fn one(shape: &str, rings: i64, nodes: i64) {
    let mut h = RefbridgeHost::new(Extension::load().unwrap()).unwrap();
    h.set_watching(false);
    if shape == "native" {
        native_rings(&mut h, rings, nodes);
    } else {
        cross_rings(&mut h, rings, nodes);
    }
    measured_collect(&mut h);
    assert_eq!(h.ext.live(), 0, "not all freed");
}

/// The collection callgrind counts.
#[inline(never)]
fn measured_collect(h: &mut RefbridgeHost) {
    h.bridge.collect(&mut h.m).unwrap();
}

fn main() {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    if raw.first().map(String::as_str) == Some("--module-dir") {
        // Where the CPython build of the extension is (for runs under callgrind).
        println!("{}", build_cpython_module().unwrap().display());
        return;
    }
    if raw.first().map(String::as_str) == Some("--one") {
        one(&raw[1], raw[2].parse().unwrap(), raw[3].parse().unwrap());
        return;
    }
    let args: Vec<i64> = raw.iter().map(|a| a.parse().unwrap()).collect();
    let runs = *args.first().unwrap_or(&7) as usize;
    let rings = *args.get(1).unwrap_or(&10_000);
    let nodes = *args.get(2).unwrap_or(&10);
    let total = (rings * nodes) as f64;
    let module = build_cpython_module().unwrap();
    let py = python3_path().unwrap();
    let (mut on, mut oc, mut pn, mut pc, mut pb) = (vec![], vec![], vec![], vec![], vec![]);
    let mut replicated = 0;
    for _ in 0..runs {
        // Ours.
        let mut h = RefbridgeHost::new(Extension::load().unwrap()).unwrap();
        h.set_watching(false);
        native_rings(&mut h, rings, nodes);
        let t = Instant::now();
        h.bridge.collect(&mut h.m).unwrap();
        on.push(t.elapsed().as_secs_f64());
        assert_eq!(h.ext.live(), 0, "native rings not all freed");
        cross_rings(&mut h, rings, nodes);
        let t = Instant::now();
        let r = h.bridge.collect(&mut h.m).unwrap();
        oc.push(t.elapsed().as_secs_f64());
        replicated = r.replicated;
        assert_eq!(h.ext.live(), 0, "cross rings not all freed");
        assert_eq!(h.bridge.stats().stubs_live, 0);
        drop(h);
        // CPython, same shapes.
        let out = Command::new(&py)
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/cext/bench.py"))
            .arg(&module)
            .arg(rings.to_string())
            .arg(nodes.to_string())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        pn.push(v["native_s"].as_f64().unwrap());
        pc.push(v["cross_s"].as_f64().unwrap());
        pb.push(v["baseline_s"].as_f64().unwrap());
    }
    let ns = |s: f64| s * 1e9 / total;
    let (mon, moc, mpn, mpc, mpb) = (
        median(&mut on),
        median(&mut oc),
        median(&mut pn),
        median(&mut pc),
        median(&mut pb),
    );
    println!(
        "{{\"native_cycles_ns_per_obj\": {:.2}, \"native_cycles_ns_per_obj_cpython\": {:.2}, \
\"cross_cycles_ns_per_obj\": {:.2}, \"cross_cycles_ns_per_obj_cpython\": {:.2}, \
\"cpython_empty_collect_ms\": {:.3}, \"native_cycles_spread\": {:.3}, \"native_cycles_spread_cpython\": {:.3}, \
\"cross_cycles_spread\": {:.3}, \"cross_cycles_spread_cpython\": {:.3}, \"cycle_objects\": {}, \"cycle_runs\": {}, \
\"cross_replicated\": {}}}",
        ns(mon),
        ns(mpn),
        ns(moc),
        ns(mpc),
        mpb * 1e3,
        spread(&on),
        spread(&pn),
        spread(&oc),
        spread(&pc),
        total,
        runs,
        replicated
    );
}
