//! The GAP-language subset of the minigap kernel (gc-core backend): each check is a
//! piece of GAP code and exactly what GAP prints for it (output format, line breaking at
//! 80 columns, error messages with their line).

use integration_tests::minigap::{Backend, Config, Kernel, KernelThread};

fn thread() -> KernelThread {
    let k = Kernel::init(Backend::Ours, &Config::default()).unwrap();
    k.thread("test").unwrap()
}

#[track_caller]
fn check(code: &str, expected: &str) {
    let t = thread();
    if let Err(e) = t.eval(code, "test.g") {
        panic!("{code}\nfailed: {e}");
    }
    assert_eq!(t.take_output(), expected, "for {code}");
}

#[track_caller]
fn check_error(code: &str, expected: &str) {
    let t = thread();
    match t.eval(code, "test.g") {
        Ok(()) => panic!("{code}: no error"),
        Err(e) => assert_eq!(e.to_string(), expected, "for {code}"),
    }
}

#[test]
fn integers() {
    check("Print(1 + 2 * 3 - 4, \"\\n\");", "3\n");
    check(
        "Print(2^64, \" \", -2^64, \" \", 2^62 - 2^62, \"\\n\");",
        "18446744073709551616 -18446744073709551616 0\n",
    );
    check(
        "Print(17 mod 5, \" \", -17 mod 5, \" \", 12 / 4, \"\\n\");",
        "2 3 3\n",
    );
    check(
        "Print(-2^2, \" \", (-2)^2, \" \", (-1)^-3, \"\\n\");",
        "-4 4 -1\n",
    );
    check(
        "Print(Factorial(30), \" \", Gcd(2^100, 6^50), \" \", QuoInt(-7, 2), \" \", RemInt(-7, 2), \"\\n\");",
        "265252859812191058636308480000000 1125899906842624 -3 -1\n",
    );
    check(
        "x := 123456789012345678901234567890; Print(x * x - x, \" \", (x * x) mod 97, \"\\n\");",
        "15241578753238836750495351562412741998489559520973784484210 85\n",
    );
    check(
        "Print(2^60 - 1 + 1, \" \", -(2^60) - 1, \"\\n\");",
        "1152921504606846976 -1152921504606846977\n",
    );
    check(
        "Print(Sum([1..100]), \" \", Product([1..20]), \" \", Sum([1..4], i -> i^2), \"\\n\");",
        "5050 2432902008176640000 30\n",
    );
}

#[test]
fn rationals() {
    check("Print(7 / 2, \" \", 1/3 + 1/6, \" \", 2^-2, \" \", (2/3)^2, \" \", 4/2, \" \", -3/6, \"\\n\");", "7/2 1/2 1/4 4/9 2 -1/2\n");
    check("Print(1/2 < 2/3, \" \", 2/4 = 1/2, \" \", [1/2, 1, 3/2] * 2, \" \", NumeratorRat(6/4), DenominatorRat(6/4), \"\\n\");", "true true [ 1, 2, 3 ] 32\n");
    check(
        "Print(2^100 / 2^98, \" \", 1 / 2^70, \"\\n\");",
        "4 1/1180591620717411303424\n",
    );
}

#[test]
fn long_integers_break_lines_like_gap() {
    let t = thread();
    t.eval("Print(2^300, \"\\n\");", "t.g").unwrap();
    assert_eq!(
        t.take_output(),
        "203703597633448608626844568840937816105146839366593625063614044935438129976333\\\n6706183397376\n"
    );
}

#[test]
fn lists_and_ranges() {
    check(
        "Print([1, 2, 3], \" \", [], \" \", [1..5], \" \", [1, 3 .. 9], \"\\n\");",
        "[ 1, 2, 3 ] [  ] [ 1 .. 5 ] [ 1, 3 .. 9 ]\n",
    );
    check(
        "l := [1..4]; l[6] := 6; Print(l, \" \", Length(l), \"\\n\");",
        "[ 1, 2, 3, 4,, 6 ] 6\n",
    );
    check(
        "l := []; Add(l, 1); Append(l, [2, 3]); Print(l, Concatenation(l, [4], [5]), \"\\n\");",
        "[ 1, 2, 3 ][ 1, 2, 3, 4, 5 ]\n",
    );
    check(
        "Print(List([1..5], x -> x^2), Filtered([1..10], x -> x mod 3 = 0), \"\\n\");",
        "[ 1, 4, 9, 16, 25 ][ 3, 6, 9 ]\n",
    );
    check(
        "Print(3 in [1..5], \" \", 7 in [1, 3 .. 9], \" \", [1, 2] < [1, 3], \"\\n\");",
        "true true true\n",
    );
    check(
        "Print(List([1..30], i -> 1000 * i), \"\\n\");",
        "[ 1000, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000, 11000, 12000, \n  13000, 14000, 15000, 16000, 17000, 18000, 19000, 20000, 21000, 22000, \n  23000, 24000, 25000, 26000, 27000, 28000, 29000, 30000 ]\n",
    );
    check("Print(Position([5, 6, 7], 6), \" \", Position([5], 9), \" \", Maximum([3, 9, 2]), \" \", Reversed([1, 2, 3]), \"\\n\");", "2 fail 9 [ 3, 2, 1 ]\n");
}

#[test]
fn strings_characters_records() {
    check("s := \"abc\"; Print(s, \" \", [s], \" \", s[2], \" \", [s[2]], \" \", Length(s), \"\\n\");", "abc [ \"abc\" ] b [ 'b' ] 3\n");
    check("Print(Concatenation(\"ab\", \"cd\"), \"\\n\");", "abcd\n");
    check(
        "r := rec(b := 1, a := [1, 2]); r.c := \"x\"; Print(r, \" \", r.b + 1, \"\\n\");",
        "rec(\n  a := [ 1, 2 ],\n  b := 1,\n  c := \"x\" ) 2\n",
    );
    check(
        "Print(rec(), \" \", IsBound(rec(a := 1).a), \"\\n\");",
        "rec( ) true\n",
    );
}

#[test]
fn permutations() {
    check(
        "Print((1,2,3)*(2,3), \" \", (1,2,3)^-1, \" \", 2^(1,2,3), \" \", (1,2)^(2,3), \"\\n\");",
        "(1,3) (1,3,2) 3 (1,3)\n",
    );
    check("Print((1,2,3)(4,5), \" \", (), \" \", Order((1,2,3)(4,5)), \" \", (1,2,3) = (2,3,1), \"\\n\");", "(1,2,3)(4,5) () 6 true\n");
    check(
        "Print(( 1, 3, 8, 6)( 2, 5, 7, 4)( 9,33,25,17), \"\\n\");",
        "( 1, 3, 8, 6)( 2, 5, 7, 4)( 9,33,25,17)\n",
    );
    check(
        "Print((1,2)/(1,2), \" \", (1,2,3)^3, \" \", (1,2,3,4)^2, \"\\n\");",
        "() () (1,3)(2,4)\n",
    );
}

#[test]
fn control_flow_and_functions() {
    check(
        "f := function(n) local i, s; s := 0; for i in [1..n] do if i mod 2 = 0 then continue; elif i > 7 then break; else s := s + i; fi; od; return s; end; Print(f(100), \"\\n\");",
        "16\n",
    );
    check(
        "i := 0; while i < 5 do i := i + 1; od; repeat i := i - 2; until i < 0; Print(i, \"\\n\");",
        "-1\n",
    );
    check(
        "fib := function(n) if n < 2 then return n; fi; return fib(n - 1) + fib(n - 2); end; Print(fib(20), \"\\n\");",
        "6765\n",
    );
    check(
        "adder := function(a) return x -> x + a; end; add5 := adder(5); Print(add5(10), \" \", List([1..3], adder(100)), \"\\n\");",
        "15 [ 101, 102, 103 ]\n",
    );
    check(
        "counter := function() local n; n := 0; return function() n := n + 1; return n; end; end; c := counter(); c(); c(); Print(c(), \"\\n\");",
        "3\n",
    );
    check(
        "Print(true and not false, \" \", false or 1 = 1, \" \", 1 <> 2, \" \", 3 >= 4, \"\\n\");",
        "true true true false\n",
    );
}

#[test]
fn groups() {
    check(
        "Print(Size(Group((1,2,3), (1,2))), \" \", Group((1,2)), \"\\n\");",
        "6 Group([ (1,2) ])\n",
    );
    check(
        "Print(Size(Group((1,2,3,4,5,6,7,8,9,10,11), (3,7,11,8)(4,10,5,6))), \"\\n\");",
        "7920\n",
    );
}

#[test]
fn errors_are_gap_messages_with_the_line() {
    check_error(
        "x := 1;\nPrint(y);",
        "Error, Variable: 'y' must have a value\nnot in any function at test.g:2",
    );
    check_error(
        "x := 1 y := 2;",
        "Syntax error: ; expected in test.g:1\nx := 1 y := 2;\n       ^",
    );
    check_error("Print(1 + (1,2));", "Error, no 1st choice method found for `+' on 2 arguments (integer and permutation)\nnot in any function at test.g:1");
    check_error("l := [1];\n\nPrint(l[3]);", "Error, List Element: <list>[3] must have an assigned value\nnot in any function at test.g:3");
    check_error(
        "Print(1 / 0);",
        "Error, Rational operations: <divisor> must not be zero\nnot in any function at test.g:1",
    );
    check_error(
        "f := function(a) return a; end; f(1, 2);",
        "Error, Function: number of arguments must be 1 (not 2)\nnot in any function at test.g:1",
    );
    check_error("if 1 then fi;", "Error, if: <condition> must be 'true' or 'false' (not a integer)\nnot in any function at test.g:1");
    // An allocation the system refuses (800 GB): a GAP error, not the end of the process.
    check_error(
        "l := [];\nl[100000000000] := 1;",
        "Error, cannot extend the workspace any more (growing a bag of 800000000024 bytes)\nnot in any function at test.g:2",
    );
    check_error(
        "Print(\"abc);",
        "Syntax error: String must not include <newline> in test.g:1\nPrint(\"abc);\n      ^",
    );
    {
        let t = thread();
        let e = t
            .eval("f := function() return f(); end; f();", "test.g")
            .unwrap_err();
        assert!(
            e.to_string().starts_with("Error, recursion depth trap ("),
            "{e}"
        );
        assert!(
            e.to_string().ends_with("\nnot in any function at test.g:1"),
            "{e}"
        );
    }
    check_error(
        "Print := 1;",
        "Error, Variable: 'Print' is read only\nnot in any function at test.g:1",
    );
}

#[test]
fn output_before_an_error_is_kept_and_threads_have_own_globals() {
    let t = thread();
    assert!(t
        .eval("a := 5; Print(a, \"\\n\"); Print(b);", "t.g")
        .is_err());
    assert_eq!(t.take_output(), "5\n");
    let other = std::thread::spawn(|| {
        let t2 = thread();
        t2.eval("Print(IsBound(a), \"\\n\");", "u.g").unwrap();
        t2.take_output()
    })
    .join()
    .unwrap();
    assert_eq!(other, "false\n");
}

#[test]
fn retyping_to_a_type_with_a_free_function_is_refused() {
    check("Print(RetypeBagRefused(), \"\\n\");", "true\n");
}
