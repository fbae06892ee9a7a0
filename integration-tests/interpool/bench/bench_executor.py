"""`cargo xtask bench executor`: interpool's InterpreterPoolExecutor against
ProcessPoolExecutor (the default start method, fork on 3.10-3.13, and forkserver, 3.14's
default) and ThreadPoolExecutor, in one run. Prints one JSON object of figures."""

import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
import multiprocessing as mp

import numpy as np

import bench_tasks as T
from interpool import InterpreterPoolExecutor


def status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def pss_kib(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def mib(kib):
    return kib / 1024.0


def round_trip_us(pool, n=2000):
    for i in range(50):
        pool.submit(T.noop, i).result()
    times = []
    for i in range(n):
        t = time.perf_counter()
        pool.submit(T.noop, i).result()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def array_sum_s(pool, a, rounds=5):
    pool.submit(T.total, a[:10]).result()
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        v = pool.submit(T.total, a).result()
        best = min(best, time.perf_counter() - t)
        assert v == float(a.size)
    return best


def cpu_s(pool, workers, tasks=8, n=2_000_000):
    # Every worker started before the clock (pools start workers on demand; ours
    # re-imports this script, and so numpy, in each new interpreter, as spawn does).
    list(pool.map(T.wait, [0.2] * workers))
    t = time.perf_counter()
    list(pool.map(T.cpu, [n] * tasks))
    return time.perf_counter() - t


def cpu_now():
    """CPU seconds (user + system) of this process's threads and of its reaped children."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + ch.ru_utime + ch.ru_stime


def stack_startup(make, workers):
    """Seconds from creating a pool of `workers` to each worker having imported numpy,
    scipy and pandas (a checked result from each), the memory it added (this process's
    RSS and PSS growth plus its children's), and the CPU seconds the pool spent per
    worker until it was shut down (children included: shutdown reaps them)."""
    gc.collect()
    me = os.getpid()
    rss0, pss0 = status_kib(me, "VmRSS"), pss_kib(me)
    cpu0 = cpu_now()
    t = time.perf_counter()
    pool = make(workers)
    fs = [pool.submit(T.import_stack_and_wait, 0.5) for _ in range(workers)]
    results = [f.result() for f in fs]
    startup = time.perf_counter() - t - 0.5
    assert all(abs(r - results[0]) < 1e-9 for r in results)
    children = list(getattr(pool, "_processes", {}) or {})
    rss = status_kib(me, "VmRSS") - rss0 + sum(status_kib(p, "VmRSS") for p in children)
    pss = pss_kib(me) - pss0 + sum(pss_kib(p) for p in children)
    pool.shutdown()
    return startup, mib(rss), mib(pss), (cpu_now() - cpu0) / workers


STACK = "import numpy, pandas, scipy.linalg"


def import_cpu_s(rounds=5):
    """The floor under an isolated worker's start-up: CPU seconds CPython itself takes
    to import the stack in a fresh process (`python -c`), and in a process forked from
    this one, which has numpy imported already (what a fork pool's worker pays). The
    median of `rounds` of each."""
    fresh, forked = [], []
    for _ in range(rounds):
        c = cpu_now()
        subprocess.run([sys.executable, "-c", STACK], check=True)
        fresh.append(cpu_now() - c)
        c = cpu_now()
        pid = os.fork()
        if pid == 0:
            try:
                exec(STACK, {})
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        forked.append(cpu_now() - c)
    return statistics.median(fresh), statistics.median(forked)


def main():
    out = {}
    fork = mp.get_context("fork")
    forkserver = mp.get_context("forkserver")

    with InterpreterPoolExecutor(1) as p:
        out["round_trip_us_interpreters"] = round_trip_us(p)
    with ProcessPoolExecutor(1, mp_context=fork) as p:
        out["round_trip_us_processes"] = round_trip_us(p)
    with ThreadPoolExecutor(1) as p:
        out["round_trip_us_threads"] = round_trip_us(p)

    a = np.ones(25_000_000)  # 200 MB of float64
    with InterpreterPoolExecutor(1) as p:
        p.submit(T.total, a[:10]).result()
        gc.collect()
        rss0 = status_kib(os.getpid(), "VmRSS")
        out["array_200mb_s_interpreters"] = array_sum_s(p, a)
        out["array_200mb_rss_growth_mib"] = mib(status_kib(os.getpid(), "VmRSS") - rss0)
    with ProcessPoolExecutor(1, mp_context=fork) as p:
        out["array_200mb_s_processes"] = array_sum_s(p, a, rounds=3)
    host = float("inf")
    for _ in range(5):  # the sum itself, in this thread: what no executor can go below
        t = time.perf_counter()
        assert float(np.sum(a)) == float(a.size)
        host = min(host, time.perf_counter() - t)
    out["array_200mb_s_host"] = host
    del a

    with InterpreterPoolExecutor(1) as p:
        out["cpu_8_tasks_s_1_interpreter"] = cpu_s(p, 1)
    with InterpreterPoolExecutor(2) as p:
        out["cpu_8_tasks_s_2_interpreters"] = cpu_s(p, 2)
    with ProcessPoolExecutor(2, mp_context=fork) as p:
        out["cpu_8_tasks_s_2_processes"] = cpu_s(p, 2)

    for n in (8, 16):
        s, rss, pss, cpu = stack_startup(lambda w: InterpreterPoolExecutor(w), n)
        out[f"stack_{n}_startup_s_interpreters"] = s
        out[f"stack_{n}_rss_mib_interpreters"] = rss
        out[f"stack_{n}_pss_mib_interpreters"] = pss
        out[f"stack_{n}_cpu_s_per_worker_interpreters"] = cpu
        for name, ctx in (("processes", fork), ("forkserver", forkserver)):
            s, rss, pss, cpu = stack_startup(
                lambda w: ProcessPoolExecutor(w, mp_context=ctx), n
            )
            out[f"stack_{n}_startup_s_{name}"] = s
            out[f"stack_{n}_rss_mib_{name}"] = rss
            out[f"stack_{n}_pss_mib_{name}"] = pss
            out[f"stack_{n}_cpu_s_per_worker_{name}"] = cpu

    fresh, forked = import_cpu_s()
    out["stack_import_cpu_s_fresh_process"] = fresh
    out["stack_import_cpu_s_forked_with_numpy"] = forked

    out["python"] = float("%d.%02d" % sys.version_info[:2])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
