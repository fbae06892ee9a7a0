/*
 * Py_INCREF/Py_DECREF in a C loop, the same source compiled against CPython 3.11's
 * Python.h and against refbridge's (include/compat/Python.h). The objects are plain
 * PyObject headers with a large count (no slow path is ever taken, as for any object
 * that stays alive); with refbridge the "stub" variant uses tagged pointers, which the
 * macros untag, as they do for stubs of managed objects.
 *
 * Usage: refcount_loop OBJECTS ROUNDS [stub]
 * Prints: {"ns_per_pair": ..., "pairs": ...}
 */
#include <Python.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* One round: every object increfed, then every object decrefed (what filling and
   emptying a container does). noinline keeps both builds' loops comparable. */
__attribute__((noinline)) static void round_trip(PyObject **objs, long n) {
    for (long i = 0; i < n; i++) Py_INCREF(objs[i]);
    for (long i = 0; i < n; i++) Py_DECREF(objs[i]);
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000;
    long rounds = argc > 2 ? atol(argv[2]) : 10000;
    int stub = argc > 3;
    PyObject *mem = calloc((size_t)n, sizeof(PyObject));
    PyObject **objs = malloc((size_t)n * sizeof(PyObject *));
    for (long i = 0; i < n; i++) {
        mem[i].ob_refcnt = 1000;
        objs[i] = &mem[i];
#ifdef RB_STUB_TAG
        if (stub) objs[i] = (PyObject *)((uintptr_t)objs[i] | RB_STUB_TAG);
#else
        (void)stub;
#endif
    }
    round_trip(objs, n); /* warm up */
    double t0 = now();
    for (long r = 0; r < rounds; r++) round_trip(objs, n);
    double t = now() - t0;
    long bad = 0;
    for (long i = 0; i < n; i++) bad += mem[i].ob_refcnt != 1000;
    double pairs = (double)n * (double)rounds;
    printf("{\"ns_per_pair\": %.4f, \"pairs\": %.0f, \"bad\": %ld}\n", t * 1e9 / pairs, pairs, bad);
    return bad != 0;
}
