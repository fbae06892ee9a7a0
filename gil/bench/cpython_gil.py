"""CPython's side of `cargo xtask bench gil`: the same measurements as the Rust side,
with CPython's own GIL. Prints one JSON object.

- pingpong_us_cpython: two threads ping-ponging a pair of threading.Lock objects;
  round trip in microseconds (best of 3).
- io_latency_*_ms_cpython: a thread looping time.sleep(100e-6) next to a busy thread,
  at a 5 ms switch interval; how long each sleep takes (median of 3 runs' p50/p99).
- io_latency_p50_ms_idle_cpython: the same sleep with no busy thread.
- cpu_throughput_ratio_vs_alone_cpython: the busy thread's loop rate next to the
  sleeping thread over its rate alone.
"""

import json
import platform
import statistics
import sys
import threading
import time

sys.setswitchinterval(0.005)


def pingpong(rounds):
    ping = threading.Lock()
    pong = threading.Lock()
    pong.acquire()

    def player(mine, other):
        for _ in range(rounds):
            mine.acquire()
            other.release()

    a = threading.Thread(target=player, args=(ping, pong))
    b = threading.Thread(target=player, args=(pong, ping))
    t0 = time.perf_counter()
    a.start()
    b.start()
    a.join()
    b.join()
    return (time.perf_counter() - t0) * 1e6 / rounds


def busy(stop, out):
    n = 0
    t0 = time.perf_counter()
    while not stop[0]:
        n += 1
    out.append(n / (time.perf_counter() - t0))


def sleeps(n):
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        time.sleep(100e-6)
        samples.append((time.perf_counter() - t) * 1e3)
    samples.sort()
    return samples


def pct(sorted_samples, p):
    i = round((len(sorted_samples) - 1) * p)
    return sorted_samples[min(i, len(sorted_samples) - 1)]


def io_run(samples):
    # The busy thread alone, for about as long as the sleeping loop will take.
    stop, alone = [False], []
    t = threading.Thread(target=busy, args=(stop, alone))
    t.start()
    time.sleep(samples * 0.0055)
    stop[0] = True
    t.join()
    # Next to the sleeping thread.
    stop, with_io = [False], []
    t = threading.Thread(target=busy, args=(stop, with_io))
    t.start()
    time.sleep(0.02)
    s = sleeps(samples)
    stop[0] = True
    t.join()
    return pct(s, 0.5), pct(s, 0.99), with_io[0] / alone[0]


def main():
    pp = min(pingpong(20000) for _ in range(3))
    idle = pct(sleeps(500), 0.5)
    runs = [io_run(150) for _ in range(3)]
    out = {
        "pingpong_us_cpython": pp,
        "io_latency_p50_ms_cpython": statistics.median(r[0] for r in runs),
        "io_latency_p99_ms_cpython": statistics.median(r[1] for r in runs),
        "io_latency_p50_ms_idle_cpython": idle,
        "cpu_throughput_ratio_vs_alone_cpython": statistics.median(r[2] for r in runs),
        "cpython_version": float("%d.%02d" % sys.version_info[:2]),
    }
    print(json.dumps(out, indent=2))
    print("cpython:", platform.python_implementation(), platform.python_version(), file=sys.stderr)


if __name__ == "__main__":
    main()
