//! The examples' output, as insta snapshots (pause times filtered out).

use test_support::example_output;

#[test]
fn tour_output() {
    let text = example_output("tour");
    insta::with_settings!({ filters => vec![(r"pause [0-9.]+[a-zµ]+", "pause [TIME]")] }, {
        insta::assert_snapshot!(text);
    });
}

#[test]
fn weak_output() {
    insta::assert_snapshot!(example_output("weak"));
}
