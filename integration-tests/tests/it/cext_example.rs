//! The `cext` example's output (the scenario's standard script on both sides), as an
//! insta snapshot.

#[test]
fn cext_example_output() {
    insta::assert_snapshot!(test_support::example_output("cext"));
}
