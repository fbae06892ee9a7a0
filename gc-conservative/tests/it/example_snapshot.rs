//! The `scan` example's output, as an insta snapshot.

#[test]
fn scan_output() {
    insta::assert_snapshot!(test_support::example_output("scan"));
}
