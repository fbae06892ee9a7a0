//! The C-extension scenario end to end: the scenario's standard script run on the
//! refbridge side (the extension loaded by elf-loader into this process, host objects on
//! gc-core) and on CPython 3.11 (the same C source as a real extension module), with
//! the objects freed at each checkpoint side by side.
//!
//! `cargo run -p integration-tests --example cext`

use integration_tests::cext::{run_cpython, run_refbridge, standard_script, Op};

fn main() {
    let script = standard_script();
    let ours = run_refbridge(&script).expect("refbridge side");
    let cpython = run_cpython(std::slice::from_ref(&script))
        .expect("CPython side")
        .remove(0);
    println!("script: {} operations", script.len());
    let mut cp = 0;
    let mut since = Vec::new();
    for op in &script {
        if *op == Op::Collect {
            println!(
                "checkpoint {cp} after [{}]\n  refbridge: {:?}\n  CPython:   {:?}",
                since.join(", "),
                ours.checkpoints[cp],
                cpython.checkpoints[cp]
            );
            since.clear();
            cp += 1;
        } else {
            since.push(op.to_string());
        }
    }
    println!(
        "final checkpoint (everything released)\n  refbridge: {:?}\n  CPython:   {:?}",
        ours.checkpoints[cp], cpython.checkpoints[cp]
    );
    println!(
        "extension objects alive at the end: refbridge {}, CPython {}",
        ours.live_at_end, cpython.live_at_end
    );
    println!(
        "same objects freed at the same points: {}",
        if ours == cpython { "yes" } else { "NO" }
    );
    if ours != cpython {
        std::process::exit(1);
    }
}
