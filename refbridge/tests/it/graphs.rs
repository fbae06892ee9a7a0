//! Exhaustive small graphs: every directed graph of up to 4 nodes, each node native or
//! managed, each edge present or absent, each node rooted or not (a native node by a
//! native reference the test holds, a managed node by a managed root). After one
//! `Bridge::collect` exactly the unreachable nodes are freed, and the reachable ones are
//! intact; after everything is released the bridge is empty.
//!
//! `cargo test` runs every graph up to isomorphism (relabelling the nodes), self-loops
//! included for up to 3 nodes and excluded for 4 (about 50,000 graphs);
//! `REFBRIDGE_FULL=1` runs 4 nodes with self-loops too (about 700,000 graphs).

#![allow(clippy::needless_range_loop)] // nodes are indices into several arrays

use crate::common::*;
use gc_core::{ObjRef, Root, WeakRef};
use refbridge::BridgeConfig;
use refbridge::PyObject;
use std::collections::HashSet;

#[derive(Clone, Copy, Debug)]
struct Graph {
    n: usize,
    /// Bit i: node i is managed.
    managed: u32,
    /// Bit i: node i is rooted.
    rooted: u32,
    /// Bit i*n+j: edge i -> j.
    edges: u32,
}

impl Graph {
    fn edge(&self, i: usize, j: usize) -> bool {
        self.edges >> (i * self.n + j) & 1 != 0
    }

    fn encode(&self) -> u64 {
        (self.edges as u64) | (self.managed as u64) << 16 | (self.rooted as u64) << 24
    }

    fn permuted(&self, p: &[usize]) -> Graph {
        let mut g = Graph {
            n: self.n,
            managed: 0,
            rooted: 0,
            edges: 0,
        };
        for i in 0..self.n {
            g.managed |= (self.managed >> i & 1) << p[i];
            g.rooted |= (self.rooted >> i & 1) << p[i];
            for j in 0..self.n {
                if self.edge(i, j) {
                    g.edges |= 1 << (p[i] * self.n + p[j]);
                }
            }
        }
        g
    }

    fn reachable(&self) -> Vec<bool> {
        let mut seen: Vec<bool> = (0..self.n).map(|i| self.rooted >> i & 1 != 0).collect();
        let mut stack: Vec<usize> = (0..self.n).filter(|&i| seen[i]).collect();
        while let Some(i) = stack.pop() {
            for j in 0..self.n {
                if self.edge(i, j) && !seen[j] {
                    seen[j] = true;
                    stack.push(j);
                }
            }
        }
        seen
    }
}

fn permutations(n: usize) -> Vec<Vec<usize>> {
    if n == 0 {
        return vec![vec![]];
    }
    let mut out = Vec::new();
    for p in permutations(n - 1) {
        for k in 0..n {
            let mut q = p.clone();
            q.insert(k, n - 1);
            out.push(q);
        }
    }
    out
}

/// Every graph of `n` nodes up to isomorphism.
fn graphs(n: usize, self_loops: bool) -> Vec<Graph> {
    let perms = permutations(n);
    let mut edge_bits: Vec<usize> = Vec::new();
    for i in 0..n {
        for j in 0..n {
            if i != j || self_loops {
                edge_bits.push(i * n + j);
            }
        }
    }
    let mut out = Vec::new();
    for em in 0u32..(1 << edge_bits.len()) {
        let mut edges = 0u32;
        for (b, &pos) in edge_bits.iter().enumerate() {
            if em >> b & 1 != 0 {
                edges |= 1 << pos;
            }
        }
        for managed in 0..(1u32 << n) {
            for rooted in 0..(1u32 << n) {
                let g = Graph {
                    n,
                    managed,
                    rooted,
                    edges,
                };
                let code = g.encode();
                if perms.iter().all(|p| g.permuted(p).encode() >= code) {
                    out.push(g);
                }
            }
        }
    }
    out
}

enum Node {
    Native(*mut PyObject),
    Managed(ObjRef, WeakRef),
}

fn check(e: &mut Env, g: &Graph, base: u64) {
    let mut nodes = Vec::new();
    let mut roots: Vec<Option<Root>> = Vec::new();
    for i in 0..g.n {
        let id = base + i as u64;
        if g.managed >> i & 1 != 0 {
            let o = e.managed(id);
            roots.push(Some(e.root(o)));
            nodes.push(Node::Managed(o, e.heap.new_weak_ref(o)));
        } else {
            nodes.push(Node::Native(e.native(id)));
            roots.push(None);
        }
    }
    for i in 0..g.n {
        for j in 0..g.n {
            if !g.edge(i, j) {
                continue;
            }
            match nodes[i] {
                Node::Native(src) => {
                    let p = match nodes[j] {
                        Node::Native(d) => d,
                        // SAFETY: rooted during construction.
                        Node::Managed(o, _) => unsafe { e.bridge.to_native(o).unwrap() },
                    };
                    e.set_native_slot(src, j, p);
                }
                Node::Managed(src, _) => {
                    let v = match nodes[j] {
                        Node::Managed(o, _) => o,
                        // SAFETY: held during construction.
                        Node::Native(d) => unsafe { e.bridge.to_managed(&mut e.m, d).unwrap() },
                    };
                    e.set_managed_slot(src, j, Some(v));
                }
            }
        }
    }
    // Roots: keep those of rooted nodes, release the others.
    for i in 0..g.n {
        if g.rooted >> i & 1 == 0 {
            match nodes[i] {
                Node::Native(p) => decref(p),
                Node::Managed(..) => roots[i] = None,
            }
        }
    }
    e.collect();
    let reach = g.reachable();
    let freed: HashSet<u64> = take_freed().into_iter().collect();
    for i in 0..g.n {
        let id = base + i as u64;
        match &nodes[i] {
            Node::Native(p) => {
                assert_eq!(
                    freed.contains(&id),
                    !reach[i],
                    "{g:?}: native node {i} freed = {}",
                    freed.contains(&id)
                );
                if reach[i] {
                    for j in 0..g.n {
                        // SAFETY: a live node.
                        let s = unsafe { (*(*p as *mut NodeObj)).slots[j] };
                        assert_eq!(!s.is_null(), g.edge(i, j), "{g:?}: slot {j} of {i}");
                    }
                }
            }
            Node::Managed(o, w) => {
                assert_eq!(w.is_cleared(), !reach[i], "{g:?}: managed node {i}");
                if reach[i] {
                    for j in 0..g.n {
                        // SAFETY: a live node.
                        let v = unsafe { e.m.load_ref(*o, 8 * j) };
                        assert_eq!(v.is_some(), g.edge(i, j), "{g:?}: slot {j} of {i}");
                    }
                }
            }
        }
    }
    // Release everything: the bridge is empty again.
    drop(roots);
    for i in 0..g.n {
        if let (true, Node::Native(p)) = (g.rooted >> i & 1 != 0, &nodes[i]) {
            decref(*p);
        }
    }
    e.collect();
    let freed: HashSet<u64> = take_freed().into_iter().collect();
    for i in 0..g.n {
        if reach[i] {
            if let Node::Native(_) = nodes[i] {
                assert!(
                    freed.contains(&(base + i as u64)),
                    "{g:?}: node {i} at teardown"
                );
            }
        }
    }
    let s = e.bridge.stats();
    assert_eq!(
        (
            s.stubs_live,
            s.mirrors_live,
            s.tracked,
            s.native_bytes,
            s.strong_entries
        ),
        (0, 0, 0, 0, Some(0)),
        "{g:?}: {s:?}"
    );
}

fn run(n: usize, self_loops: bool) -> usize {
    let mut e = Env::new(BridgeConfig {
        cycle_threshold: None,
        ..BridgeConfig::default()
    });
    let all = graphs(n, self_loops);
    for (k, g) in all.iter().enumerate() {
        check(&mut e, g, (k as u64 + 1) * 16);
    }
    all.len()
}

fn full() -> bool {
    std::env::var_os("REFBRIDGE_FULL").is_some()
}

#[test]
fn graphs_of_one_to_three_nodes_with_self_loops() {
    let counts: Vec<usize> = (1..=3).map(|n| run(n, true)).collect();
    eprintln!("graphs checked (1, 2, 3 nodes): {counts:?}");
    // Up to isomorphism: 1 node 8 graphs (2 kinds x 2 roots x loop or not), ...
    assert_eq!(counts[0], 8);
    assert!(counts[2] > 1000, "{counts:?}");
}

#[test]
fn graphs_of_four_nodes() {
    let n = run(4, full());
    eprintln!("4-node graphs checked: {n}");
    assert!(n > 40_000, "{n}");
}
