"""Ends as argv[1] says: `message` (sys.exit with a string), `negative` (sys.exit(-1)),
`huge` (sys.exit(2**70), beyond a C long), `interrupt` (an uncaught KeyboardInterrupt),
`deep` (recursion 5,000 deep through map, which `python` survives), `raise` (an
uncaught exception after a call), anything else normally."""

import sys


def fail():
    raise ValueError("boom")


how = sys.argv[1]
print("started", how)
if how == "message":
    sys.exit("fatal: bad thing")
elif how == "negative":
    sys.exit(-1)
elif how == "huge":
    sys.exit(2**70)
elif how == "interrupt":
    raise KeyboardInterrupt
elif how == "deep":
    sys.setrecursionlimit(100000)

    def down(n):
        return 0 if n == 0 else list(map(down, [n - 1]))[0]

    down(5000)
    print("deep ok")
elif how == "raise":
    fail()
