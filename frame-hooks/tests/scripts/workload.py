"""A workload for the profiler tests: recursion, generators, a coroutine, comprehensions,
lambdas, exceptions (raised, caught, thrown into a generator) and threads."""

import sys
import threading


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def countdown(n):
    while n > 0:
        yield n
        n -= 1


def echo():
    received = []
    try:
        while True:
            try:
                value = yield
                received.append(value)
            except ValueError:
                received.append("thrown")
    except GeneratorExit:
        pass


def fails(i):
    if i % 3 == 0:
        raise KeyError(i)
    return i


def guarded(i):
    try:
        return fails(i)
    except KeyError:
        return -1


async def double(x):
    return 2 * x


async def gather_doubles(n):
    return [await double(i) for i in range(n)]


def run_coroutine(coro):
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value


def worker(results, k):
    results.append(sum(fib(i) for i in range(k)))


def main(argv):
    scale = int(argv[1]) if len(argv) > 1 else 1
    total = fib(15 * scale)
    total += sum(countdown(20))
    squares = [x * x for x in range(10)]
    evens = {x for x in squares if x % 2 == 0}
    table = {k: v for k, v in zip("abc", range(3))}
    key = sorted(table, key=lambda k: -table[k])
    mapped = list(map(lambda v: v + 1, squares))
    guards = [guarded(i) for i in range(10)]
    e = echo()
    next(e)
    for v in range(3):
        e.send(v)
    e.throw(ValueError("into the generator"))
    e.close()
    coro_result = run_coroutine(gather_doubles(4))
    results = []
    for k in (8, 10, 12):
        t = threading.Thread(target=worker, args=(results, k))
        t.start()
        t.join()
    print("fib:", total, "squares:", len(squares), "evens:", len(evens), "key:", key)
    print("mapped:", mapped[-1], "guards:", guards.count(-1), "coroutine:", coro_result)
    print("threads:", sorted(results))


if __name__ == "__main__":
    main(sys.argv)
