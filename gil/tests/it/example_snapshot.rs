//! The `handoff` example's output, as an insta snapshot (times filtered out).

#[path = "../../examples/handoff.rs"]
mod handoff;

#[test]
fn handoff_example_output() {
    let out = handoff::run_demo();
    insta::with_settings!({filters => vec![
        (r"\b\d+(\.\d+)?\s?(ns|µs|us|ms|s)\b", "[time]"),
        (r"0x[0-9a-f]+", "[addr]"),
    ]}, {
        insta::assert_snapshot!(out);
    });
}
