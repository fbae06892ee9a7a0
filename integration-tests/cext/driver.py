"""Drives the `cext` extension module (built for CPython 3.11) with the scenario's
scripts, read as JSON from stdin: a list of scripts, each a list of operations.
Prints, per script, the ids freed at each checkpoint ("collect", and a final one after
everything is released): extension objects from the module's tp_dealloc log, host
objects (Python objects with four slots) from weak-reference callbacks.

Usage: python3 driver.py MODULE_DIR < scripts.json
"""
import gc
import json
import sys
import weakref

sys.path.insert(0, sys.argv[1])
import cext  # noqa: E402

gc.disable()  # collections only where the script says


class Host:
    __slots__ = ("id", "s0", "s1", "s2", "s3", "__weakref__")

    def __init__(self, ident):
        self.id = ident
        self.s0 = self.s1 = self.s2 = self.s3 = None


def run(ops):
    held = {}
    host_freed = []
    watchers = []
    checkpoints = []
    cext.freed()
    gc.collect()
    cext.freed()

    def checkpoint():
        gc.collect()
        checkpoints.append(sorted(cext.freed() + host_freed))
        host_freed.clear()

    for op in ops:
        kind = op[0]
        if kind == "container":
            held[op[1]] = cext.container(op[1])
        elif kind == "leaf":
            held[op[1]] = cext.leaf(op[1], op[2])
        elif kind == "host":
            # (no local variable: it would keep the host alive)
            held[op[1]] = Host(op[1])
            watchers.append(
                weakref.ref(held[op[1]], lambda _r, i=op[1]: host_freed.append(i))
            )
        elif kind == "append":
            cext.append(held[op[1]], held[op[2]])
        elif kind == "set":
            setattr(held[op[1]], "s%d" % op[2], held[op[3]])
        elif kind == "unset":
            setattr(held[op[1]], "s%d" % op[2], None)
        elif kind == "clear":
            cext.clear(held[op[1]])
        elif kind == "pop":
            cext.pop(held[op[1]])
        elif kind == "drop":
            del held[op[1]]
        elif kind == "collect":
            checkpoint()
        else:
            raise ValueError("unknown operation %r" % (op,))
    held.clear()
    checkpoint()
    return {"checkpoints": checkpoints, "live": cext.live()}


def main():
    scripts = json.load(sys.stdin)
    json.dump([run(s) for s in scripts], sys.stdout)


if __name__ == "__main__":
    main()
