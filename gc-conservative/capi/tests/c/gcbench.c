/*
 * GCBench, the classic Ellis/Kovac/Boehm shape: a stretch tree, a long-lived tree and a
 * big array of doubles, then many short-lived trees built top-down and bottom-up.
 *
 * Built three ways from this one file:
 *   - against our C ABI (julia_gcext_compat.h, libgc_conservative), with NO precise
 *     roots at all: only conservative stack scanning keeps the trees alive;
 *   - with -DPRECISE_ROOTS against our C ABI with precise roots instead: every local
 *     that holds a tree across an allocation is pushed on a shadow stack that a root
 *     scanner marks (what a precise runtime does), and no conservative scanning;
 *   - with -DUSE_BOEHM against Boehm GC (GC_MALLOC), which scans conservatively too.
 *
 * With -DFOREIGN_TYPES (ours), the program is written against the proposal's API
 * verbatim, as a C system like GAP uses it: the node type is a foreign type
 * (jl_new_foreign_type) whose mark function queues each child with
 * jl_gc_mark_queue_obj and counts the young ones; every allocation passes
 * jl_get_ptls_states() to jl_gc_alloc_typed; every store of a reference is followed by
 * jl_gc_wb. Roots are conservative stack scanning only, as for Boehm.
 *
 * With -DWITH_WEAK (either collector), every short-lived tree gets a finalizer on its
 * root (counting calls) and a weak reference to its root, kept in a ring of the last
 * 4096 (ours: jl_gc_add_ptr_finalizer and jl_gc_new_weakref; Boehm: GC_REGISTER_FINALIZER
 * and a disappearing link in an atomic cell): what weak references and finalizers cost
 * in the same program. Finalizers keep their tree one more collection in both.
 *
 * Usage: gcbench [STRETCH_DEPTH LONG_LIVED_DEPTH MAX_DEPTH [STRESS_EVERY]]
 * (defaults 18 16 16: the classic sizes). Prints one line of key=value figures and
 * checks every tree it builds; exit status 1 on a wrong result.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#ifdef USE_BOEHM
#include <gc.h>
#define NAME "boehm"
#else
#include "gc_core.h"
#include "julia_gcext_compat.h"
#ifdef PRECISE_ROOTS
#define NAME "ours-precise"
#elif defined(FOREIGN_TYPES)
#define NAME "ours-foreign"
#else
#define NAME "ours"
#endif
#endif

/* Shadow stack of roots for the precise variant (no-ops otherwise). */
#ifdef PRECISE_ROOTS
static void *shadow[256];
static int shadow_top;
#define PUSH_ROOT(p) (shadow[shadow_top++] = (void *)(p))
#define POP_ROOTS(n) (shadow_top -= (n))
#define SET_ROOT(i, p) (shadow[(i)] = (void *)(p))
static void scan_shadow(int full)
{
    (void)full;
    jl_ptls_t ptls = jl_get_ptls_states();
    for (int i = 0; i < shadow_top; i++)
        if (shadow[i]) jl_gc_mark_queue_obj(ptls, (jl_value_t *)shadow[i]);
}
#else
#define PUSH_ROOT(p) ((void)(p))
#define POP_ROOTS(n) ((void)0)
#define SET_ROOT(i, p) ((void)(i), (void)(p))
#endif

typedef struct Node {
    struct Node *left;
    struct Node *right;
    long i, j;
} Node;

static int kStretchTreeDepth = 18;
static int kLongLivedTreeDepth = 16;
static int kArraySize = 500000;
static int kMinTreeDepth = 4;
static int kMaxTreeDepth = 16;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

#ifdef USE_BOEHM
static double gc_start_ms, max_pause_ms, total_pause_ms;
static long collections;
static void on_event(GC_EventType e)
{
    if (e == GC_EVENT_START) gc_start_ms = now_ms();
    else if (e == GC_EVENT_END) {
        double d = now_ms() - gc_start_ms;
        total_pause_ms += d;
        if (d > max_pause_ms) max_pause_ms = d;
        collections++;
    }
}
static Node *NewNode(Node *l, Node *r)
{
    Node *n = GC_MALLOC(sizeof(Node));
    n->left = l;
    n->right = r;
    return n;
}
#define WB(parent, child) ((void)0)
static double *NewArray(size_t n) { return GC_MALLOC_ATOMIC(n * sizeof(double)); }
#else
static jl_ptls_t ptls;
static jl_datatype_t *node_type, *array_type;
#ifdef FOREIGN_TYPES
/* The seed's mark function: queue each child, return how many are young. */
static uintptr_t mark_node(jl_ptls_t p, jl_value_t *obj)
{
    Node *n = (Node *)obj;
    uintptr_t young = 0;
    if (n->left) young += jl_gc_mark_queue_obj(p, (jl_value_t *)n->left) != 0;
    if (n->right) young += jl_gc_mark_queue_obj(p, (jl_value_t *)n->right) != 0;
    return young;
}
static Node *NewNode(Node *l, Node *r)
{
    Node *n = jl_gc_alloc_typed(jl_get_ptls_states(), sizeof(Node), node_type);
    if (!n) {
        fprintf(stderr, "allocation failed: %s\n", jl_gc_last_error());
        exit(2);
    }
    n->left = l;
    jl_gc_wb(n, l);
    n->right = r;
    jl_gc_wb(n, r);
    return n;
}
static double *NewArray(size_t n) { return jl_gc_alloc_typed(jl_get_ptls_states(), n * sizeof(double), array_type); }
#else
static Node *NewNode(Node *l, Node *r)
{
    Node *n = jl_gc_alloc_typed(ptls, sizeof(Node), node_type);
    if (!n) {
        fprintf(stderr, "allocation failed: %s\n", jl_gc_last_error());
        exit(2);
    }
    /* A new object is young: storing into it needs no write barrier. */
    n->left = l;
    n->right = r;
    return n;
}
static double *NewArray(size_t n) { return jl_gc_alloc_typed(ptls, n * sizeof(double), array_type); }
#endif
#define WB(parent, child) jl_gc_wb((parent), (child))
#endif

#ifdef WITH_WEAK
#define WEAK_RING 4096
/* Weak-reference objects of the latest trees (their referents are not kept alive). */
static void *weak_ring[WEAK_RING];
static long weak_next, finalizers_run;
#ifdef USE_BOEHM
static void on_finalize(void *obj, void *data)
{
    (void)obj;
    (void)data;
    finalizers_run++;
}
static void WatchTree(Node *tree)
{
    void **cell = GC_MALLOC_ATOMIC(sizeof(void *));
    *cell = tree;
    GC_GENERAL_REGISTER_DISAPPEARING_LINK(cell, tree);
    GC_REGISTER_FINALIZER(tree, on_finalize, NULL, NULL, NULL);
    weak_ring[weak_next++ % WEAK_RING] = cell;
}
static void RunFinalizers(void) { GC_invoke_finalizers(); }
#else
static void on_finalize(void *obj)
{
    (void)obj;
    finalizers_run++;
}
static void scan_weak_ring(int full)
{
    (void)full;
    jl_ptls_t p = jl_get_ptls_states();
    for (int i = 0; i < WEAK_RING; i++)
        if (weak_ring[i]) jl_gc_mark_queue_obj(p, (jl_value_t *)weak_ring[i]);
}
static void WatchTree(Node *tree)
{
    PUSH_ROOT(tree); /* across the allocation of the weak reference */
    jl_weakref_t *w = jl_gc_new_weakref((jl_value_t *)tree);
    POP_ROOTS(1);
    jl_gc_add_ptr_finalizer(ptls, (jl_value_t *)tree, (void *)on_finalize);
    weak_ring[weak_next++ % WEAK_RING] = w;
}
static void RunFinalizers(void) { jl_gc_run_pending_finalizers(NULL); }
#endif
/* Weak references of the ring that were cleared. */
static long WeakCleared(void)
{
    long n = 0;
    for (int i = 0; i < WEAK_RING; i++)
        if (weak_ring[i] && *(void **)weak_ring[i] == NULL) n++;
    return n;
}
#else
#define WatchTree(t) ((void)(t))
#endif

static int TreeSize(int i) { return (1 << (i + 1)) - 1; }
static int NumIters(int i) { return 2 * TreeSize(kStretchTreeDepth) / TreeSize(i); }

/* Build tree top down, assigning to older objects. */
static void Populate(int depth, Node *node)
{
    if (depth <= 0) return;
    depth--;
    /* node is reachable from the caller's roots. */
    node->left = NewNode(NULL, NULL);
    WB(node, node->left);
    node->right = NewNode(NULL, NULL);
    WB(node, node->right);
    Populate(depth, node->left);
    Populate(depth, node->right);
}

/* Build tree bottom-up. */
static Node *MakeTree(int depth)
{
    if (depth <= 0) return NewNode(NULL, NULL);
    Node *left = MakeTree(depth - 1);
    PUSH_ROOT(left);
    Node *right = MakeTree(depth - 1);
    PUSH_ROOT(right);
    Node *n = NewNode(left, right);
    POP_ROOTS(2);
    return n;
}

static long CountNodes(const Node *n)
{
    long c = 0;
    while (n) { /* recurse left, iterate right */
        c += 1 + CountNodes(n->left);
        n = n->right;
    }
    return c;
}

static int failures;
static void Check(const Node *tree, int depth, const char *what)
{
    long c = CountNodes(tree);
    if (c != TreeSize(depth)) {
        fprintf(stderr, "FAIL: %s of depth %d has %ld nodes, expected %d\n", what, depth, c, TreeSize(depth));
        failures++;
    }
}

static void TimeConstruction(int depth)
{
    int iNumIters = NumIters(depth);
    Node *tempTree = NULL;
    PUSH_ROOT(NULL);
    int slot = 0;
#ifdef PRECISE_ROOTS
    slot = shadow_top - 1;
#endif
    for (int i = 0; i < iNumIters; ++i) {
        tempTree = NewNode(NULL, NULL);
        SET_ROOT(slot, tempTree);
        WatchTree(tempTree);
        Populate(depth, tempTree);
        if (i == iNumIters - 1) Check(tempTree, depth, "top-down tree");
        tempTree = NULL;
    }
    SET_ROOT(slot, NULL);
    POP_ROOTS(1);
    for (int i = 0; i < iNumIters; ++i) {
        tempTree = MakeTree(depth);
        WatchTree(tempTree);
        if (i == iNumIters - 1) Check(tempTree, depth, "bottom-up tree");
        tempTree = NULL;
    }
}

int main(int argc, char **argv)
{
    long stress = 0;
    if (argc >= 4) {
        kStretchTreeDepth = atoi(argv[1]);
        kLongLivedTreeDepth = atoi(argv[2]);
        kMaxTreeDepth = atoi(argv[3]);
        kArraySize = 500000 >> (16 - (kLongLivedTreeDepth < 16 ? kLongLivedTreeDepth : 16));
    }
    if (argc >= 5) stress = atol(argv[4]);

#ifdef USE_BOEHM
    GC_INIT();
    (void)stress; /* Boehm has no collect-every-N mode */
    GC_start_performance_measurement();
    GC_set_on_collection_event(on_event);
#else
#ifdef PRECISE_ROOTS
    jl_init();
    jl_gc_set_cb_root_scanner(scan_shadow, 1);
#else
    jl_gc_enable_conservative_scanning(); /* the only roots: thread stacks */
    jl_init();
#endif
    ptls = jl_get_ptls_states();
#ifdef FOREIGN_TYPES
    node_type = jl_new_foreign_type(jl_symbol("Node"), NULL, NULL, mark_node, NULL, 1, 0);
#else
    uint32_t offsets[2] = {0, 8};
    node_type = gc_new_layout_type(gc_default_heap(), "Node", sizeof(Node), offsets, 2);
#endif
    array_type = jl_new_foreign_type(jl_symbol("DoubleArray"), NULL, NULL, NULL, NULL, 0, 1);
    if (!node_type || !array_type) {
        fprintf(stderr, "type creation failed: %s\n", jl_gc_last_error());
        return 2;
    }
    if (stress > 0) gc_set_stress(gc_default_heap(), (uint64_t)stress);
#ifdef WITH_WEAK
    jl_gc_set_cb_root_scanner(scan_weak_ring, 1);
#endif
#endif

    double t0 = now_ms();
    /* Stretch the memory space quickly. */
    Node *tempTree = MakeTree(kStretchTreeDepth);
    Check(tempTree, kStretchTreeDepth, "stretch tree");
    tempTree = NULL;

    /* A long-lived tree and array that stay live throughout. */
    Node *longLivedTree = NewNode(NULL, NULL);
    PUSH_ROOT(longLivedTree);
    Populate(kLongLivedTreeDepth, longLivedTree);
    double *array = NewArray(kArraySize);
    PUSH_ROOT(array);
    for (int i = 0; i < kArraySize / 2; ++i) array[i] = 1.0 / i;

    for (int d = kMinTreeDepth; d <= kMaxTreeDepth; d += 2) TimeConstruction(d);

    Check(longLivedTree, kLongLivedTreeDepth, "long-lived tree");
    if (array[1000 % (kArraySize / 2)] != 1.0 / (1000 % (kArraySize / 2))) {
        fprintf(stderr, "FAIL: long-lived array corrupted\n");
        failures++;
    }
    double total = now_ms() - t0;
#ifdef WITH_WEAK
    /* Every tree but the last few is garbage: after two collections (the first finds the
     * finalizable roots, the second frees them) nearly every finalizer has run and nearly
     * every weak reference of the ring is cleared. */
    long watched = weak_next;
#ifdef USE_BOEHM
    GC_gcollect();
    RunFinalizers();
    GC_gcollect();
#else
    jl_gc_collect(JL_GC_FULL);
    RunFinalizers();
    jl_gc_collect(JL_GC_FULL);
#endif
    RunFinalizers();
    long cleared = WeakCleared();
    if (finalizers_run < watched - 64 || cleared < WEAK_RING - 64) { /* stack residue may keep a few */
        fprintf(stderr, "FAIL: %ld of %ld finalizers ran, %ld of %d weak references cleared\n",
                finalizers_run, watched, cleared, WEAK_RING);
        failures++;
    }
    printf("weak_trees=%ld finalizers_run=%ld weak_cleared=%ld ", watched, finalizers_run, cleared);
#endif

    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
#ifdef USE_BOEHM
    printf("gcbench impl=%s total_ms=%.2f gc_ms=%.2f max_pause_ms=%.3f collections=%ld peak_rss_mb=%.1f heap_mb=%.1f",
           NAME, total, total_pause_ms, max_pause_ms, collections, ru.ru_maxrss / 1024.0,
           GC_get_heap_size() / 1048576.0);
#else
    gc_stats_t s;
    gc_stats(gc_default_heap(), &s);
    printf("gcbench impl=%s total_ms=%.2f gc_ms=%.2f max_pause_ms=%.3f collections=%llu peak_rss_mb=%.1f "
           "full=%llu partial=%llu p50_pause_ms=%.3f",
           NAME, total, s.total_pause_ns / 1e6, s.max_pause_ns / 1e6,
           (unsigned long long)(s.full_collections + s.partial_collections), ru.ru_maxrss / 1024.0,
           (unsigned long long)s.full_collections, (unsigned long long)s.partial_collections, s.p50_pause_ns / 1e6);
#endif
    printf(" result=%s\n", failures ? "WRONG" : "ok");
    return failures ? 1 : 0;
}
