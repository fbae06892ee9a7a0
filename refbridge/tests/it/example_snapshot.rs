//! The `refbridge_tour` example's output, as an insta snapshot (addresses filtered out).

#[test]
fn tour_output() {
    let text = test_support::example_output("refbridge_tour");
    insta::with_settings!({ filters => vec![(r"0x[0-9a-f]+", "[ADDR]")] }, {
        insta::assert_snapshot!(text);
    });
}
