"""Runs a script under cProfile and prints, as the last line, the JSON list of
{"function", "file", "line", "calls"} (calls = cProfile's total calls) for every Python
function. Threads are profiled too: on 3.11 each thread gets its own Profile (merged);
from 3.12 cProfile uses sys.monitoring, which already sees every thread."""

import cProfile
import json
import pstats
import runpy
import sys
import threading

profiles = []
if sys.version_info < (3, 12):
    original_run = threading.Thread.run

    def profiled_run(self):
        p = cProfile.Profile()
        profiles.append(p)
        p.enable()
        try:
            original_run(self)
        finally:
            p.disable()

    threading.Thread.run = profiled_run

script = sys.argv[1]
sys.argv = sys.argv[1:]
main = cProfile.Profile()
main.enable()
try:
    runpy.run_path(script, run_name="__main__")
finally:
    main.disable()
sys.stdout.flush()
stats = pstats.Stats(main)
for p in profiles:
    stats.add(p)
out = []
for (file, line, name), (cc, nc, tt, ct, callers) in stats.stats.items():
    if file == "~":  # built-in functions
        continue
    out.append({"function": name, "file": file, "line": line, "calls": nc})
print(json.dumps(out))
