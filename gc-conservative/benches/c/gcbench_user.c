/*
 * GCBench as a new user writes it from the seed's API alone ("Garbage collector
 * extensions for better foreign language support"), with no knowledge of gc-core: the
 * node is a foreign type with a mark function, the thread state comes from
 * jl_get_ptls_states() at every allocation, every pointer store is followed by
 * jl_gc_wb, the array of doubles is a large foreign type without pointers, the stacks
 * are scanned conservatively (jl_gc_enable_conservative_scanning) and nothing else is
 * tuned. Built against julia_gcext_compat.h and libgc_conservative; `cargo xtask bench
 * gc` runs it next to Boehm GC's GCBench (gc-conservative/capi/tests/c/gcbench.c,
 * -DUSE_BOEHM), interleaved.
 *
 * Usage: gcbench_user [STRETCH_DEPTH LONG_LIVED_DEPTH MAX_DEPTH] (default 18 16 16).
 * Prints one line of key=value figures; exit status 1 on a wrong tree.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#include "julia_gcext_compat.h"

typedef struct Node {
    struct Node *left;
    struct Node *right;
    long i, j;
} Node;

static jl_datatype_t *node_type, *doubles_type;

static uintptr_t mark_node(jl_ptls_t ptls, jl_value_t *obj)
{
    Node *n = (Node *)obj;
    return jl_gc_mark_queue_obj(ptls, (jl_value_t *)n->left) +
           jl_gc_mark_queue_obj(ptls, (jl_value_t *)n->right);
}

static Node *new_node(Node *left, Node *right)
{
    Node *n = jl_gc_alloc_typed(jl_get_ptls_states(), sizeof(Node), node_type);
    if (!n) {
        fprintf(stderr, "allocation failed: %s\n", jl_gc_last_error());
        exit(2);
    }
    n->left = left;
    jl_gc_wb(n, left);
    n->right = right;
    jl_gc_wb(n, right);
    return n;
}

static int tree_size(int depth) { return (1 << (depth + 1)) - 1; }

static void populate(int depth, Node *node)
{
    if (depth-- <= 0)
        return;
    node->left = new_node(NULL, NULL);
    jl_gc_wb(node, node->left);
    node->right = new_node(NULL, NULL);
    jl_gc_wb(node, node->right);
    populate(depth, node->left);
    populate(depth, node->right);
}

static Node *make_tree(int depth)
{
    if (depth <= 0)
        return new_node(NULL, NULL);
    Node *left = make_tree(depth - 1);
    Node *right = make_tree(depth - 1);
    return new_node(left, right);
}

static long count(const Node *n)
{
    return n ? 1 + count(n->left) + count(n->right) : 0;
}

static int wrong;
static void check(const Node *t, int depth, const char *what)
{
    if (count(t) != tree_size(depth)) {
        fprintf(stderr, "FAIL: %s of depth %d\n", what, depth);
        wrong++;
    }
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
    int stretch = 18, long_lived = 16, max_depth = 16, min_depth = 4, array_size = 500000;
    if (argc >= 4) {
        stretch = atoi(argv[1]);
        long_lived = atoi(argv[2]);
        max_depth = atoi(argv[3]);
        array_size = 500000 >> (16 - (long_lived < 16 ? long_lived : 16));
    }
    jl_gc_enable_conservative_scanning();
    jl_init();
    node_type = jl_new_foreign_type(jl_symbol("Node"), NULL, NULL, mark_node, NULL, 1, 0);
    doubles_type = jl_new_foreign_type(jl_symbol("Doubles"), NULL, NULL, NULL, NULL, 0, 1);
    if (!node_type || !doubles_type) {
        fprintf(stderr, "type creation failed: %s\n", jl_gc_last_error());
        return 2;
    }

    double t0 = now_ms();
    Node *temp = make_tree(stretch);
    check(temp, stretch, "stretch tree");
    temp = NULL;

    Node *long_lived_tree = new_node(NULL, NULL);
    populate(long_lived, long_lived_tree);
    double *array = jl_gc_alloc_typed(jl_get_ptls_states(), array_size * sizeof(double), doubles_type);
    for (int i = 0; i < array_size / 2; i++)
        array[i] = 1.0 / i;

    for (int d = min_depth; d <= max_depth; d += 2) {
        int iters = 2 * tree_size(stretch) / tree_size(d);
        for (int i = 0; i < iters; i++) {
            temp = new_node(NULL, NULL);
            populate(d, temp);
            if (i == iters - 1)
                check(temp, d, "top-down tree");
        }
        for (int i = 0; i < iters; i++) {
            temp = make_tree(d);
            if (i == iters - 1)
                check(temp, d, "bottom-up tree");
        }
    }
    check(long_lived_tree, long_lived, "long-lived tree");
    if (array[1000] != 1.0 / 1000) {
        fprintf(stderr, "FAIL: array\n");
        wrong++;
    }
    double total = now_ms() - t0;

    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("gcbench impl=ours-user total_ms=%.2f peak_rss_mb=%.1f result=%s\n", total,
           ru.ru_maxrss / 1024.0, wrong ? "WRONG" : "ok");
    return wrong ? 1 : 0;
}
