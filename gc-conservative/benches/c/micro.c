/*
 * Micro-benchmarks of gc-core/gc-conservative against Boehm GC in one process (both
 * collectors coexist: each only manages its own memory). Linked with -lgc_conservative
 * and -lgc. Prints key=value figures, one per line.
 *
 *   alloc_ns_c / alloc_ns_boehm        allocate 16-byte objects, keep none (GCs included)
 *   base_ptr_hit_ns / gc_base_hit_ns   interior pointers into live objects of all sizes
 *   base_ptr_miss_ns / gc_base_miss_ns stack, static, malloc and random addresses
 *   base_ptr_free_ns                   pointers into free cells (Boehm has no equivalent)
 *   base_ptr_hit_{small,large}_ns /    the hit lookups again with 8,192 and 262,144 objects
 *   gc_base_hit_{small,large}_ns       (~4 MB and ~130 MB heaps; the figures above: 65,536
 *                                      objects, ~33 MB), each in a fresh heap of ours
 *   (lookups: medians of ROUNDS rounds, ours and Boehm's alternating, so that both see
 *   the same machine load)
 *   stack_scan_gbps                    gc_scan_range over a 64 MiB buffer of mixed words
 */
#define _GNU_SOURCE
#include <gc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gc_conservative.h"
#include "gc_core.h"

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static int static_data[1024];
#define NPTR (1 << 20)
#define REPEAT 2
#define ROUNDS 7
static volatile uintptr_t sink;

static double time_ours(gc_heap_t *h, void **ptrs, int n)
{
    uintptr_t acc = 0;
    double t0 = now_ns();
    for (int r = 0; r < REPEAT; r++)
        for (int i = 0; i < n; i++) acc += (uintptr_t)gc_base_ptr(h, ptrs[i]);
    double t = (now_ns() - t0) / ((double)n * REPEAT);
    sink = acc;
    return t;
}

static double time_boehm(void **ptrs, int n)
{
    uintptr_t acc = 0;
    double t0 = now_ns();
    for (int r = 0; r < REPEAT; r++)
        for (int i = 0; i < n; i++) acc += (uintptr_t)GC_base(ptrs[i]);
    double t = (now_ns() - t0) / ((double)n * REPEAT);
    sink = acc;
    return t;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of n values (sorts them). */
static double median(double *v, int n)
{
    qsort(v, n, sizeof(double), cmp_double);
    return v[n / 2];
}

/* Hit lookups with `nobj` objects of 8..1007 bytes in a fresh heap of ours and in Boehm's:
 * the same offsets into the same sizes, ROUNDS rounds alternating, medians printed as
 * base_ptr_hit_<name>_ns and gc_base_hit_<name>_ns. The calling thread must be detached. */
static void hits_by_heap_size(int nobj, const char *name, void **ours_hit, void **boehm_hit)
{
    gc_config_t cfg;
    gc_config_default(&cfg);
    cfg.min_interval = (size_t)1 << 30; /* no collection while measuring lookups */
    cfg.max_interval = (size_t)1 << 30;
    gc_heap_t *h = gc_heap_new(&cfg);
    gc_mutator_t *m = gc_thread_attach(h);
    void *t = gc_new_foreign_type(h, "Blob", NULL, NULL, 0, 0);
    void **objs = malloc(nobj * sizeof(void *));
    size_t *sizes = malloc(nobj * sizeof(size_t));
    void **bobjs = GC_MALLOC(nobj * sizeof(void *));
    for (int i = 0; i < nobj; i++) {
        sizes[i] = 8 + next() % 1000;
        objs[i] = gc_alloc(m, sizes[i], t);
        bobjs[i] = GC_MALLOC(sizes[i]);
    }
    for (int i = 0; i < NPTR; i++) {
        int k = (int)(next() % nobj);
        size_t off = next() % sizes[k];
        ours_hit[i] = (char *)objs[k] + off;
        boehm_hit[i] = (char *)bobjs[k] + off;
    }
    int hits_ok = 0;
    for (int i = 0; i < NPTR; i++) hits_ok += gc_base_ptr(h, ours_hit[i]) != NULL;
    if (hits_ok != NPTR) fprintf(stderr, "warning: %d of %d hits resolved (%s)\n", hits_ok, NPTR, name);
    double t_ours[ROUNDS], t_boehm[ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        t_ours[r] = time_ours(h, ours_hit, NPTR);
        t_boehm[r] = time_boehm(boehm_hit, NPTR);
    }
    printf("base_ptr_hit_%s_ns=%.3f\n", name, median(t_ours, ROUNDS));
    printf("gc_base_hit_%s_ns=%.3f\n", name, median(t_boehm, ROUNDS));
    /* The objects of both collectors become garbage; the heap goes. */
    for (int i = 0; i < nobj; i++) bobjs[i] = NULL;
    free(objs);
    free(sizes);
    gc_thread_detach();
    gc_heap_delete(h);
}

static void *scan_lo, *scan_hi;
static gc_mutator_t *mut;
static double scan_ns;
static void scan_root(int full)
{
    (void)full;
    double t0 = now_ns();
    gc_scan_range(mut, scan_lo, scan_hi);
    scan_ns = now_ns() - t0;
}

int main(void)
{
    GC_INIT();
    gc_config_t cfg;
    gc_config_default(&cfg);
    cfg.min_interval = (size_t)1 << 30; /* no collection while measuring lookups */
    cfg.max_interval = (size_t)1 << 30;
    gc_heap_t *heap = gc_heap_new(&cfg);
    mut = gc_thread_attach(heap);
    void *blob = gc_new_foreign_type(heap, "Blob", NULL, NULL, 0, 0);

    /* ---- allocation: 16-byte objects, nothing kept, collections included ---- */
    {
        gc_heap_t *ah = heap;
        const long n = 20000000;
        gc_thread_detach();
        gc_config_t c2;
        gc_config_default(&c2);
        gc_heap_t *h2 = gc_heap_new(&c2);
        gc_mutator_t *m2 = gc_thread_attach(h2);
        void *t2 = gc_new_foreign_type(h2, "Small", NULL, NULL, 0, 0);
        double t0 = now_ns();
        for (long i = 0; i < n; i++) sink = (uintptr_t)gc_alloc(m2, 16, t2);
        double ours = (now_ns() - t0) / n;
        t0 = now_ns();
        for (long i = 0; i < n; i++) sink = (uintptr_t)GC_MALLOC(16);
        double boehm = (now_ns() - t0) / n;
        printf("alloc_ns_c=%.3f\nalloc_ns_boehm=%.3f\n", ours, boehm);
        gc_thread_detach();
        gc_heap_delete(h2);
        mut = gc_thread_attach(ah);
    }

    /* ---- lookups ---- */
    void **ours_hit = malloc(NPTR * sizeof(void *));
    void **boehm_hit = malloc(NPTR * sizeof(void *));
    void **miss = malloc(NPTR * sizeof(void *));
    void **freep = malloc(NPTR * sizeof(void *));
    const int nobj = 65536;
    void **objs = malloc(nobj * sizeof(void *));
    size_t *sizes = malloc(nobj * sizeof(size_t));
    void **bobjs = GC_MALLOC(nobj * sizeof(void *)); /* keeps Boehm's objects alive */
    for (int i = 0; i < nobj; i++) {
        size_t sz = 8 + next() % 1000;
        sizes[i] = sz;
        objs[i] = gc_alloc(mut, sz, blob);
        bobjs[i] = GC_MALLOC(sz);
    }
    for (int i = 0; i < NPTR; i++) {
        int k = (int)(next() % nobj);
        size_t off = next() % sizes[k];
        ours_hit[i] = (char *)objs[k] + off;
        boehm_hit[i] = (char *)bobjs[k] + off;
        switch (i % 4) {
        case 0: miss[i] = (char *)&static_data[next() % 1024]; break;
        case 1: miss[i] = (char *)&k - (next() % 4096); break;
        case 2: miss[i] = (char *)ours_hit + (next() % (NPTR * sizeof(void *))); break;
        default: miss[i] = (void *)(uintptr_t)next(); break;
        }
    }
    /* Free cells: allocate, drop, collect. */
    void **dead = malloc(nobj * sizeof(void *));
    for (int i = 0; i < nobj; i++) dead[i] = gc_alloc(mut, sizes[i], blob);
    gc_root_t **keep = malloc(nobj * sizeof(gc_root_t *));
    for (int i = 0; i < nobj; i++) keep[i] = gc_root_new(heap, objs[i]);
    gc_collect(mut, GC_COLLECT_FULL);
    int nfree_ok = 0;
    for (int i = 0; i < NPTR; i++) {
        int k = (int)(next() % nobj);
        freep[i] = (char *)dead[k] + next() % sizes[k];
        if (gc_base_ptr(heap, freep[i]) == NULL) nfree_ok++;
    }
    int hits_ok = 0;
    for (int i = 0; i < NPTR; i++) hits_ok += gc_base_ptr(heap, ours_hit[i]) != NULL;
    if (hits_ok != NPTR) fprintf(stderr, "warning: %d of %d hits resolved\n", hits_ok, NPTR);

    double t[5][ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        t[0][r] = time_ours(heap, ours_hit, NPTR);
        t[1][r] = time_boehm(boehm_hit, NPTR);
        t[2][r] = time_ours(heap, miss, NPTR);
        t[3][r] = time_boehm(miss, NPTR);
        t[4][r] = time_ours(heap, freep, NPTR);
    }
    printf("base_ptr_hit_ns=%.3f\n", median(t[0], ROUNDS));
    printf("gc_base_hit_ns=%.3f\n", median(t[1], ROUNDS));
    printf("base_ptr_miss_ns=%.3f\n", median(t[2], ROUNDS));
    printf("gc_base_miss_ns=%.3f\n", median(t[3], ROUNDS));
    printf("base_ptr_free_ns=%.3f\n", median(t[4], ROUNDS));
    printf("free_cells_rejected=%d\n", nfree_ok);

    /* ---- conservative scan throughput ---- */
    size_t words = (64u << 20) / sizeof(uintptr_t);
    uintptr_t *buf = malloc(words * sizeof(uintptr_t));
    for (size_t i = 0; i < words; i++) {
        uint64_t r = next();
        switch (r % 10) {
        case 0: buf[i] = (uintptr_t)objs[r % nobj] + (r >> 40) % 8; break; /* heap pointer */
        case 1: case 2: case 3: buf[i] = r % 1000; break;                  /* small integers */
        case 4: buf[i] = (uintptr_t)&buf[r % words]; break;               /* pointer into malloc */
        default: buf[i] = r; break;                                        /* anything */
        }
    }
    scan_lo = buf;
    scan_hi = buf + words;
    gc_set_callback(heap, GC_CB_ROOT_SCANNER, (void *)scan_root, 1);
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
        gc_collect(mut, GC_COLLECT_FULL);
        if (scan_ns < best) best = scan_ns;
    }
    printf("stack_scan_gbps=%.3f\n", (double)(words * sizeof(uintptr_t)) / best);
    free(buf);

    /* ---- hit lookups by heap size ---- */
    gc_thread_detach();
    hits_by_heap_size(8192, "small", ours_hit, boehm_hit);
    hits_by_heap_size(262144, "large", ours_hit, boehm_hit);
    return 0;
}
