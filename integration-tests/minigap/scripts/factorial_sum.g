# The seed's BigInt benchmark: every factorial computed by repeated multiplication.
s := Sum(List([1..2000], Factorial));;
Print(s, "\n");
