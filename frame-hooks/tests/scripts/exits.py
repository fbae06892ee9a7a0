"""Ends as argv[1] says: `message` (sys.exit with a string), `negative` (sys.exit(-1)),
`raise` (an uncaught exception after a call), anything else normally."""

import sys


def fail():
    raise ValueError("boom")


how = sys.argv[1]
print("started", how)
if how == "message":
    sys.exit("fatal: bad thing")
elif how == "negative":
    sys.exit(-1)
elif how == "raise":
    fail()
