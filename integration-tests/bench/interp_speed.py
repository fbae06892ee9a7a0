"""Pure-Python workloads for `cargo xtask bench interp-speed`: the same file runs in one
interpreter of multipy (a libpython copy loaded by elf-loader) and in a `python` process
of the same version, and the times are compared.

The bodies are small versions, written for this harness, of pyperformance's pure-Python
benchmarks of the same names (the algorithms, not pyperformance's code), plus the
workloads of issue 25 (dict and str churn, exceptions). Each is sized to take tens of
milliseconds on CPython 3.12 here. Prints `name=seconds` per workload: the calling
thread's CPU time (`time.thread_time`, so that time spent waiting for a CPU on a busy
machine does not count), the best of REPEAT runs after one warm-up run, each started
right after a full collection.

Usage: interp_speed.py [REPEAT] [NAME ...]
"""

import gc
import json
import math
import re
import sys
import time


# --- nbody: float arithmetic on lists ---------------------------------------------
def nbody(steps=8000):
    pi = math.pi
    solar_mass = 4 * pi * pi
    days = 365.24
    bodies = [
        ([0.0, 0.0, 0.0], [0.0, 0.0, 0.0], solar_mass),
        ([4.84, -1.16, -0.10], [1.66e-03 * days, 7.70e-03 * days, -6.90e-05 * days], 9.54e-04 * solar_mass),
        ([8.34, 4.12, -0.40], [-2.77e-03 * days, 5.00e-03 * days, 2.30e-05 * days], 2.86e-04 * solar_mass),
        ([12.89, -15.11, -0.22], [2.96e-03 * days, 2.37e-03 * days, -2.96e-05 * days], 4.36e-05 * solar_mass),
        ([15.37, -25.91, 0.17], [2.68e-03 * days, 1.62e-03 * days, -9.51e-05 * days], 5.15e-05 * solar_mass),
    ]
    pairs = [(bodies[i], bodies[j]) for i in range(5) for j in range(i + 1, 5)]
    dt = 0.01
    for _ in range(steps):
        for ([x1, y1, z1], v1, m1), ([x2, y2, z2], v2, m2) in pairs:
            dx, dy, dz = x1 - x2, y1 - y2, z1 - z2
            mag = dt * ((dx * dx + dy * dy + dz * dz) ** -1.5)
            b1m, b2m = m1 * mag, m2 * mag
            v1[0] -= dx * b2m
            v1[1] -= dy * b2m
            v1[2] -= dz * b2m
            v2[0] += dx * b1m
            v2[1] += dy * b1m
            v2[2] += dz * b1m
        for r, [vx, vy, vz], m in bodies:
            r[0] += dt * vx
            r[1] += dt * vy
            r[2] += dt * vz
    return bodies[0][0][0]


# --- spectral_norm: nested loops and function calls -------------------------------
def spectral_norm(n=80):
    def a(i, j):
        return 1.0 / (((i + j) * (i + j + 1) >> 1) + i + 1)

    def times(u):
        return [sum(a(i, j) * uj for j, uj in enumerate(u)) for i in range(n)]

    def times_t(u):
        return [sum(a(j, i) * uj for j, uj in enumerate(u)) for i in range(n)]

    u = [1.0] * n
    for _ in range(5):
        v = times_t(times(u))
        u = times_t(times(v))
    vbv = sum(x * y for x, y in zip(u, v))
    vv = sum(x * x for x in v)
    return math.sqrt(vbv / vv)


# --- nqueens: generators and sets -------------------------------------------------
def nqueens(n=7):
    def permutations(items):
        if len(items) <= 1:
            yield list(items)
            return
        for i, x in enumerate(items):
            for p in permutations(items[:i] + items[i + 1:]):
                yield [x] + p

    cols = range(n)
    return sum(
        1
        for vec in permutations(list(cols))
        if n == len(set(vec[i] + i for i in cols)) == len(set(vec[i] - i for i in cols))
    )


# --- fannkuch: list slicing and reversal --------------------------------------------
def fannkuch(n=8):
    count = list(range(1, n + 1))
    perm1 = list(range(n))
    max_flips = 0
    m = n - 1
    r = n
    while True:
        while r != 1:
            count[r - 1] = r
            r -= 1
        if perm1[0] != 0 and perm1[m] != m:
            perm = perm1[:]
            flips = 0
            k = perm[0]
            while k:
                perm[: k + 1] = perm[k::-1]
                flips += 1
                k = perm[0]
            max_flips = max(max_flips, flips)
        while r != n:
            perm1.insert(r, perm1.pop(0))
            count[r] -= 1
            if count[r] > 0:
                break
            r += 1
        else:
            return max_flips


# --- float: objects, attribute access, math calls -----------------------------------
class Point:
    def __init__(self, i):
        self.x = x = math.sin(i)
        self.y = math.cos(i) * 3
        self.z = (x * x) / 2

    def normalize(self):
        norm = math.sqrt(self.x * self.x + self.y * self.y + self.z * self.z)
        self.x /= norm
        self.y /= norm
        self.z /= norm

    def maximize(self, other):
        self.x = max(self.x, other.x)
        self.y = max(self.y, other.y)
        self.z = max(self.z, other.z)
        return self


def float_(n=40000):
    points = [Point(i) for i in range(n)]
    for p in points:
        p.normalize()
    best = points[0]
    for p in points[1:]:
        best = best.maximize(p)
    return best.x


# --- unpack_sequence: tuple and list unpacking ------------------------------------
def unpack_sequence(loops=40000):
    t = tuple(range(10))
    lst = list(range(10))
    total = 0
    for _ in range(loops):
        a, b, c, d, e, f, g, h, i, j = t
        a, b, c, d, e, f, g, h, i, j = lst
        a, b, c, d, e, f, g, h, i, j = t
        a, b, c, d, e, f, g, h, i, j = lst
        a, b, c, d, e, f, g, h, i, j = t
        a, b, c, d, e, f, g, h, i, j = lst
        a, b, c, d, e, f, g, h, i, j = t
        a, b, c, d, e, f, g, h, i, j = lst
        total += a + j
    return total


# --- generators: a tree walked by recursive generators ------------------------------
class Tree:
    def __init__(self, left, value, right):
        self.left = left
        self.value = value
        self.right = right

    def __iter__(self):
        if self.left:
            yield from self.left
        yield self.value
        if self.right:
            yield from self.right


def make_tree(lo, hi):
    if lo >= hi:
        return None
    mid = (lo + hi) // 2
    return Tree(make_tree(lo, mid), mid, make_tree(mid + 1, hi))


def generators(n=25000):
    tree = make_tree(0, n)
    return sum(tree) + sum(x for x in range(n) if x & 1)


# --- json_dumps / json_loads: the C accelerator and dict building ---------------------
DOC = {
    "key": "value",
    "list": [1, 2, 3, 4.5, "six", None, True],
    "nested": {"a": [{"b": i, "c": str(i)} for i in range(20)]},
    "text": "unicode \u00e9\u00e8 and escapes \"\\\n",
}


def json_dumps(n=1500):
    s = 0
    for _ in range(n):
        s += len(json.dumps(DOC))
    return s


def json_loads(n=1500):
    text = json.dumps(DOC)
    s = 0
    for _ in range(n):
        s += len(json.loads(text)["nested"]["a"])
    return s


# --- regex: the sre engine -----------------------------------------------------------
REGEX_TEXT = " ".join(
    f"user{i}@example{i % 7}.com 192.168.{i % 256}.{(i * 7) % 256} v{i}.{i % 10}.{i % 3}"
    for i in range(400)
)


def regex(n=20):
    pats = [
        re.compile(r"[\w.]+@[\w.]+\.com"),
        re.compile(r"\b(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\b"),
        re.compile(r"v(\d+)\.(\d+)\.(\d+)"),
    ]
    c = 0
    for _ in range(n):
        for p in pats:
            c += len(p.findall(REGEX_TEXT))
        c += len(re.sub(r"\d+", "#", REGEX_TEXT[:2000]))
    return c


# --- raytrace: a small vector-class ray caster ---------------------------------------
class Vec:
    __slots__ = ("x", "y", "z")

    def __init__(self, x, y, z):
        self.x, self.y, self.z = x, y, z

    def dot(self, o):
        return self.x * o.x + self.y * o.y + self.z * o.z

    def __sub__(self, o):
        return Vec(self.x - o.x, self.y - o.y, self.z - o.z)

    def __add__(self, o):
        return Vec(self.x + o.x, self.y + o.y, self.z + o.z)

    def scale(self, k):
        return Vec(self.x * k, self.y * k, self.z * k)

    def norm(self):
        return self.scale(1.0 / math.sqrt(self.dot(self)))


def raytrace(w=60, h=60):
    spheres = [(Vec(0, 0, 5), 1.0), (Vec(1.5, 0.5, 6), 0.8), (Vec(-1.5, -0.5, 4), 0.6)]
    light = Vec(-1, 1, -1).norm()
    eye = Vec(0, 0, 0)
    total = 0.0
    for j in range(h):
        for i in range(w):
            d = Vec((i - w / 2) / w, (j - h / 2) / h, 1).norm()
            best = None
            for c, r in spheres:
                oc = eye - c
                b = oc.dot(d)
                disc = b * b - oc.dot(oc) + r * r
                if disc > 0:
                    t = -b - math.sqrt(disc)
                    if t > 0 and (best is None or t < best[0]):
                        best = (t, c)
            if best:
                p = eye + d.scale(best[0])
                n = (p - best[1]).norm()
                total += max(0.0, n.dot(light))
    return total


# --- richards: an operating-system task scheduler simulation --------------------------
class Task:
    def __init__(self, ident, priority, work):
        self.ident = ident
        self.priority = priority
        self.work = work
        self.queue = []
        self.held = False


def richards(rounds=8):
    result = 0
    for _ in range(rounds):
        tasks = [Task(i, i % 5, (i * 37) % 11 + 1) for i in range(60)]
        ready = sorted(tasks, key=lambda t: -t.priority)
        clock = 0
        while ready and clock < 4000:
            t = ready.pop(0)
            clock += 1
            if t.queue:
                t.work += t.queue.pop()
            t.work -= 1
            if t.work > 0:
                target = tasks[(t.ident * 7 + clock) % len(tasks)]
                if not target.held:
                    target.queue.append(1)
                t.held = clock % 3 == 0
                ready.append(t)
                if t.held:
                    ready.sort(key=lambda x: (-x.priority, x.ident))
            result += t.ident
    return result


# --- coroutines: send() into generators ---------------------------------------------
def coroutines(n=150000):
    def averager():
        total = 0.0
        count = 0
        avg = None
        while True:
            v = yield avg
            total += v
            count += 1
            avg = total / count

    c = averager()
    next(c)
    last = 0.0
    for i in range(n):
        last = c.send(i)
    return last


# --- pidigits: big integers ----------------------------------------------------------
def pidigits(n=600):
    out = []
    q, r, t, k, m, x = 1, 0, 1, 1, 3, 3
    while len(out) < n:
        if 4 * q + r - t < m * t:
            out.append(m)
            q, r, t, k, m, x = 10 * q, 10 * (r - m * t), t, k, (10 * (3 * q + r)) // t - 10 * m, x
        else:
            q, r, t, k, m, x = q * k, (2 * q + r) * x, t * x, k + 1, (q * (7 * k + 2) + r * x) // (t * x), x + 2
    return out[-1]


# --- issue 25's workloads -------------------------------------------------------------
def dict_str_churn(n=150000):
    d = {}
    for i in range(n):
        d[str(i)] = i
        if len(d) > 1000:
            d.clear()
    return len(d)


def exceptions(n=80000):
    c = 0
    for i in range(n):
        try:
            if i % 2:
                raise ValueError(i)
            raise KeyError(i)
        except (ValueError, KeyError) as e:
            c += 1 if e.args else 0
    return c


def str_format(n=30000):
    s = 0
    for i in range(n):
        s += len(f"{i:08d} {i * 0.5:.3f} {'x' * (i % 7)!r}") + len("%s-%d" % ("a", i))
    return s


WORKLOADS = {
    "nbody": nbody,
    "spectral_norm": spectral_norm,
    "nqueens": nqueens,
    "fannkuch": fannkuch,
    "float": float_,
    "unpack_sequence": unpack_sequence,
    "generators": generators,
    "json_dumps": json_dumps,
    "json_loads": json_loads,
    "regex": regex,
    "raytrace": raytrace,
    "richards": richards,
    "coroutines": coroutines,
    "pidigits": pidigits,
    "dict_str_churn": dict_str_churn,
    "exceptions": exceptions,
    "str_format": str_format,
}


def main(argv):
    repeat = int(argv[0]) if argv else 5
    names = argv[1:] or list(WORKLOADS)
    for name in names:
        f = WORKLOADS[name]
        f()
        best = float("inf")
        for _ in range(repeat):
            # The same cyclic-GC state on both sides at the start of each run: otherwise
            # when the collector's generations fill up (which the work done before,
            # start-up included, decides) moves a workload's time by 10-20%.
            gc.collect()
            t = time.thread_time()
            f()
            best = min(best, time.thread_time() - t)
        print(f"{name}={best:.6f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
