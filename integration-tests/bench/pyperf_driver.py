"""Runs one of pyperformance's own benchmark files (`bm_NAME/run_benchmark.py`, from
the pinned pyperformance installed in `target/pyperf-venv-X.Y`) for `cargo xtask bench
interp-speed`. The same command runs in one interpreter of multipy and in a `python`
process of the same version, so both sides run the same code the same way.

Usage: pyperf_driver.py [--clock thread|wall] BENCHMARK_FILE PYPERF_ARGS...

PYPERF_ARGS are pyperf's own, e.g. `--worker --loops 4 --warmups 1 --values 5 --output
FILE.json`: pyperf's worker mode runs the benchmark in the current interpreter (no child
process) and writes its values (seconds per loop) to FILE.json.

`--clock thread` (the default) makes pyperf's clock the calling thread's CPU time
(`time.thread_time`) instead of `time.perf_counter`: on a shared machine, wall time
mostly measures whose turn it was. pyperf's runner reads `time.perf_counter` and the
benchmarks read `pyperf.perf_counter` when they time themselves, so both are replaced
before the benchmark file runs. `--clock wall` keeps pyperf's own clock.
"""

import runpy
import sys
import time


def main(argv):
    clock = "thread"
    if len(argv) >= 2 and argv[0] == "--clock":
        clock, argv = argv[1], argv[2:]
    if clock not in ("thread", "wall") or not argv:
        sys.exit(__doc__)
    import pyperf

    if clock == "thread":
        time.perf_counter = time.thread_time
        pyperf.perf_counter = time.thread_time
    path = argv[0]
    sys.argv = list(argv)
    runpy.run_path(path, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
