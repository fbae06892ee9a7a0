# The seed's array benchmark: a global list of n*n*m2 pairs, then an n x n list of
# pairs rebuilt m times with every pair swapped.
bencharr := function(n, m, m2, x, y)
  local a, i;
  t := List([1..n*n*m2], i -> [x, y]);
  a := List([1..n], i -> List([1..n], j -> [x, y]));
  for i in [1..m] do
    a := List(a, outer -> List(outer, inner -> [inner[2], inner[1]]));
  od;
  return a[n][n];
end;
