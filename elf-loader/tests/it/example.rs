//! The `two_pythons` example's output, as an insta snapshot (ids, timings and ratios
//! filtered out).

#[test]
fn two_pythons_example_output() {
    // Built by `cargo test` next to this binary; run without RUST_LOG.
    let out = test_support::example_output("two_pythons");
    let mut lines: Vec<String> = out.lines().map(str::to_string).collect();
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
