"""CPython's side of `cargo xtask bench refbridge`: the cycle collector on the shapes the
Rust side builds with the same extension (cext built for CPython 3.11).

Usage: python3 bench.py MODULE_DIR RINGS NODES [native|cross|none]
Prints one JSON object: seconds of gc.collect() for RINGS rings of NODES containers,
for RINGS rings alternating container and Python object (NODES nodes each), and for a
collection with nothing to free (the interpreter's own objects).
"""
import gc
import json
import sys
import time

sys.path.insert(0, sys.argv[1])
import cext  # noqa: E402


class Host:
    __slots__ = ("s0", "__weakref__")


def native_rings(rings, nodes):
    for _ in range(rings):
        first = cext.container(0)
        prev = first
        for _ in range(nodes - 1):
            c = cext.container(0)
            cext.append(prev, c)
            prev = c
        cext.append(prev, first)


def cross_rings(rings, nodes):
    # container -> host -> container -> ... -> host -> first container
    for _ in range(rings):
        first = cext.container(0)
        prev = first
        for i in range(1, nodes):
            if i % 2:
                h = Host()
                h.s0 = None
                cext.append(prev, h)
                prev = h
            else:
                c = cext.container(0)
                prev.s0 = c
                prev = c
        prev.s0 = first


def timed_collect():
    t = time.perf_counter()
    n = gc.collect()
    return time.perf_counter() - t, n


def one(shape, rings, nodes):
    """Under callgrind: builds one shape ("native", "cross" or "none") and collects it
    once (toggle-collect on gc_collect_main; "none" measures what the interpreter's own
    collections cost, to subtract)."""
    gc.disable()
    if shape == "native":
        native_rings(rings, nodes)
    elif shape == "cross":
        cross_rings(rings, nodes)
    gc.collect()
    assert cext.live() == 0


def main():
    if len(sys.argv) > 4:
        one(sys.argv[4], int(sys.argv[2]), int(sys.argv[3]))
        return
    rings, nodes = int(sys.argv[2]), int(sys.argv[3])
    gc.disable()
    gc.collect()
    base, _ = timed_collect()
    native_rings(rings, nodes)
    before = cext.live()
    native, n1 = timed_collect()
    assert cext.live() == before - rings * nodes, "native rings not all freed"
    cross_rings(rings, nodes)
    cross, n2 = timed_collect()
    assert cext.live() == 0, "cross rings not all freed"
    print(json.dumps({
        "native_s": native, "cross_s": cross, "baseline_s": base,
        "native_unreachable": n1, "cross_unreachable": n2,
        "tracked_after": len(gc.get_objects()),
    }))


if __name__ == "__main__":
    main()
