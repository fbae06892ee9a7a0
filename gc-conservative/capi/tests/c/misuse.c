/* What a C system ported to the compat API gets wrong, and what the library must do
 * about it (each case found by a user trial that crashed, hung or misled before):
 *
 *   safe-alloc   allocating inside a GC-safe region: refused from the first call (the
 *                thread counts as stopped; its page may be swept meanwhile)
 *   other-ptls   allocating with another thread's ptls: refused, naming it
 *   free-type    the seed's validity check jl_gc_internal_obj_base_ptr(jl_typeof(p))
 *                rejects the free cells jl_gc_is_internal_obj_alloc reports
 *   scanner-safe jl_gc_safe_enter/leave inside a root scanner (around a lock wait):
 *                returns instead of waiting for the collection it is part of
 *   not-object   jl_gc_schedule_foreign_sweepfunc and jl_gc_add_ptr_finalizer on
 *                malloc'd memory or an interior pointer, jl_new_foreign_type given a C
 *                string instead of a jl_symbol: an error, nothing recorded
 *   saved-ptls   GAP's mark functions pass the collecting thread's ptls saved in a
 *                global (set in its pre-GC hook), not the one they were given; with
 *                parallel marking they run on every collector thread: every node kept
 *   stale-heap   a deleted heap's handle: the per-word lookups (gc_base_ptr, ...) find
 *                nothing without reading freed memory, the other entries refuse it
 *
 * Prints "<case>: ok" or FAIL lines; exit status 0 iff every check held. */
#include "julia_gcext_compat.h"
#include "gc_conservative.h"
#include "gc_core.h"
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures;
#define CHECK(c, ...)                                                                 \
    do {                                                                              \
        if (!(c)) {                                                                   \
            failures++;                                                               \
            fprintf(stderr, "FAIL %s:%d %s: ", __FILE__, __LINE__, #c);               \
            fprintf(stderr, __VA_ARGS__);                                             \
            fprintf(stderr, "\n");                                                    \
        }                                                                             \
    } while (0)

static const char *last_error(void)
{
    const char *e = jl_gc_last_error();
    return e ? e : "(none)";
}

typedef struct node {
    struct node *l, *r;
    uint64_t id, magic;
} node_t;

static jl_datatype_t *leaf_ty;

/* ---- safe-alloc ---------------------------------------------------------------- */

static void safe_alloc(jl_ptls_t p)
{
    CHECK(jl_gc_alloc_typed(p, 16, leaf_ty) != NULL, "%s", last_error());
    int8_t s = jl_gc_safe_enter(p);
    int ok = 0;
    for (int i = 0; i < 2000; i++)
        ok += jl_gc_alloc_typed(p, 16, leaf_ty) != NULL;
    const char *e = last_error();
    CHECK(ok == 0, "%d allocations inside a GC-safe region succeeded", ok);
    CHECK(strstr(e, "GC-safe region") != NULL, "error: %s", e);
    jl_gc_safe_leave(p, s);
    CHECK(jl_gc_alloc_typed(p, 16, leaf_ty) != NULL, "after leaving: %s", last_error());
    printf("safe-alloc: ok\n");
}

/* ---- other-ptls ---------------------------------------------------------------- */

static jl_ptls_t main_ptls;
static char other_error[256];
static int other_got;

static void *other_thread(void *attach)
{
    if (attach)
        jl_adopt_thread();
    void *o = jl_gc_alloc_typed(main_ptls, 16, leaf_ty);
    other_got = o != NULL;
    snprintf(other_error, sizeof other_error, "%s", last_error());
    if (attach)
        jl_gc_thread_detach();
    return NULL;
}

static void other_ptls(void)
{
    for (int attach = 0; attach < 2; attach++) {
        pthread_t t;
        pthread_create(&t, NULL, other_thread, attach ? (void *)1 : NULL);
        pthread_join(t, NULL);
        CHECK(!other_got, "attach=%d: allocation with another thread's ptls succeeded", attach);
        CHECK(strstr(other_error, attach ? "is not the calling thread's" : "not attached") != NULL,
              "attach=%d: %s", attach, other_error);
    }
    printf("other-ptls: ok\n");
}

/* ---- free-type ----------------------------------------------------------------- */

#define NFREE 4000
static void *dead_cells[NFREE], *kept_cells[NFREE];

static void keep_cells(int full)
{
    (void)full;
    jl_ptls_t p = jl_get_ptls_states();
    for (int i = 0; i < NFREE; i++)
        jl_gc_mark_queue_obj(p, kept_cells[i]);
}

static __attribute__((noinline)) void make_garbage(jl_ptls_t p)
{
    /* Interleaved with kept ones, so that their pages stay in use (a page left empty is
     * given back whole, and its cells are no longer reserved). */
    for (int i = 0; i < NFREE; i++) {
        kept_cells[i] = jl_gc_alloc_typed(p, 32, leaf_ty);
        dead_cells[i] = jl_gc_alloc_typed(p, 32, leaf_ty);
    }
}

static void free_type(jl_ptls_t p)
{
    jl_gc_set_cb_root_scanner(keep_cells, 1);
    make_garbage(p);
    /* Only dead_cells (not scanned) remembers the others: they die. */
    jl_gc_collect(JL_GC_FULL);
    jl_gc_collect(JL_GC_FULL);
    int reserved = 0, valid_type = 0;
    for (int i = 0; i < NFREE; i++) {
        jl_value_t *c = dead_cells[i];
        /* Reserved and free (a stale stack word may have kept one alive: not counted). */
        if (jl_gc_is_internal_obj_alloc(c) && jl_gc_internal_obj_base_ptr(c) == NULL) {
            reserved++;
            valid_type += jl_gc_internal_obj_base_ptr(jl_typeof(c)) != NULL;
        }
    }
    CHECK(reserved > NFREE / 2, "only %d of %d dead cells still reserved", reserved, NFREE);
    CHECK(valid_type == 0, "%d free cells pass the seed's type check", valid_type);
    /* A live object still passes it. */
    jl_value_t *live = jl_gc_alloc_typed(p, 32, leaf_ty);
    CHECK(jl_gc_internal_obj_base_ptr(jl_typeof(live)) != NULL, "a live object fails the check");
    int kept_ok = 0;
    for (int i = 0; i < NFREE; i++)
        kept_ok += jl_gc_internal_obj_base_ptr(jl_typeof(kept_cells[i])) != NULL;
    CHECK(kept_ok == NFREE, "%d of %d kept objects pass the check", kept_ok, NFREE);
    jl_gc_set_cb_root_scanner(keep_cells, 0);
    printf("free-type: ok (%d reserved free cells)\n", reserved);
}

/* ---- scanner-safe -------------------------------------------------------------- */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int scanner_runs, scanner_states_ok;

static void locking_scanner(int full)
{
    (void)full;
    jl_ptls_t p = jl_get_ptls_states();
    int8_t s = jl_gc_safe_enter(p);
    pthread_mutex_lock(&lock);
    jl_gc_safe_leave(p, s);
    scanner_runs++;
    scanner_states_ok += s >= 0;
    pthread_mutex_unlock(&lock);
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "FAIL scanner-safe: the collection hung (safe region in a root scanner)\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(3);
}

static void scanner_safe(void)
{
    signal(SIGALRM, on_alarm);
    alarm(20);
    jl_gc_set_cb_root_scanner(locking_scanner, 1);
    jl_gc_collect(JL_GC_FULL);
    jl_gc_collect(JL_GC_AUTO);
    jl_gc_set_cb_root_scanner(locking_scanner, 0);
    alarm(0);
    CHECK(scanner_runs >= 2 && scanner_states_ok == scanner_runs, "runs %d, states ok %d",
          scanner_runs, scanner_states_ok);
    printf("scanner-safe: ok\n");
}

/* ---- not-object ---------------------------------------------------------------- */

static int finalized;
static void count_fin(void *o)
{
    (void)o;
    finalized++;
}
static void sweep_nothing(jl_value_t *o) { (void)o; }

static void not_object(jl_ptls_t p)
{
    jl_datatype_t *sweep_ty =
        jl_new_foreign_type(jl_symbol("Swept"), NULL, NULL, NULL, sweep_nothing, 0, 0);
    uint64_t *m = calloc(8, sizeof(uint64_t));
    m[1] = (uintptr_t)sweep_ty; /* looks like a header naming a valid type */
    jl_gc_schedule_foreign_sweepfunc(p, (jl_value_t *)(m + 2));
    CHECK(strstr(last_error(), "is not an allocated object") != NULL, "malloc'd: %s", last_error());
    /* A C string where jl_symbol(...) belongs. */
    CHECK(jl_new_foreign_type((jl_sym_t *)"Name", NULL, NULL, NULL, NULL, 0, 0) == NULL,
          "a C string accepted as a symbol");
    CHECK(strstr(last_error(), "is not a symbol from jl_symbol") != NULL, "%s", last_error());
    jl_value_t *o = jl_gc_alloc_typed(p, 64, sweep_ty);
    jl_gc_schedule_foreign_sweepfunc(p, (jl_value_t *)((char *)o + 16));
    CHECK(strstr(last_error(), "is not an allocated object") != NULL, "interior: %s", last_error());
    jl_gc_add_ptr_finalizer(p, (jl_value_t *)(m + 2), (void *)count_fin);
    CHECK(strstr(last_error(), "is not an allocated object") != NULL, "finalizer: %s", last_error());
    /* The native API's root, weak handle and queue registration: errors, no abort. */
    CHECK(gc_root_new(gc_default_heap(), m + 2) == NULL, "a root of malloc'd memory");
    CHECK(strstr(last_error(), "gc_root_new") && strstr(last_error(), "is not an allocated object"),
          "root: %s", last_error());
    uint64_t before = m[1];
    jl_gc_collect(JL_GC_FULL);
    jl_gc_collect(JL_GC_FULL);
    jl_gc_run_pending_finalizers(NULL);
    CHECK(finalized == 0, "a finalizer on malloc'd memory ran %d times", finalized);
    CHECK(m[1] == before, "the malloc'd memory was written");
    free(m);
    printf("not-object: ok\n");
}

/* ---- saved-ptls ---------------------------------------------------------------- */

static jl_datatype_t *node_ty;
static jl_ptls_t saved_ptls; /* GAP's JuliaTLS */
static node_t *tree;

static void save_tls(int full)
{
    (void)full;
    saved_ptls = jl_get_ptls_states();
}

static uintptr_t mark_node(jl_ptls_t ptls, jl_value_t *obj)
{
    (void)ptls;
    node_t *n = (node_t *)obj;
    return (jl_gc_mark_queue_obj(saved_ptls, (jl_value_t *)n->l) != 0) +
           (jl_gc_mark_queue_obj(saved_ptls, (jl_value_t *)n->r) != 0);
}

static void tree_root(int full)
{
    (void)full;
    jl_gc_mark_queue_obj(saved_ptls, (jl_value_t *)tree);
}

static node_t *build(jl_ptls_t p, int depth, uint64_t *id)
{
    node_t *n = jl_gc_alloc_typed(p, sizeof(node_t), node_ty);
    n->id = (*id)++;
    n->magic = 0x600D;
    if (depth > 0) {
        n->l = build(p, depth - 1, id);
        jl_gc_wb(n, n->l);
        n->r = build(p, depth - 1, id);
        jl_gc_wb(n, n->r);
    }
    return n;
}

static long count(node_t *n, long *bad)
{
    if (!n)
        return 0;
    if (n->magic != 0x600D) {
        (*bad)++;
        return 0;
    }
    return 1 + count(n->l, bad) + count(n->r, bad);
}

static __attribute__((noinline)) void churn(jl_ptls_t p)
{
    for (int i = 0; i < 200000; i++) {
        node_t *g = jl_gc_alloc_typed(p, sizeof(node_t), node_ty);
        g->magic = 0xBAD;
    }
}

static void saved_ptls_marking(jl_ptls_t p, int depth)
{
    node_ty = jl_new_foreign_type(jl_symbol("Node"), NULL, NULL, mark_node, NULL, 1, 0);
    jl_gc_set_cb_pre_gc(save_tls, 1);
    jl_gc_set_cb_root_scanner(tree_root, 1);
    uint64_t id = 0;
    tree = build(p, depth, &id);
    long bad = 0;
    for (int k = 0; k < 4; k++) {
        jl_gc_collect(k % 2 ? JL_GC_AUTO : JL_GC_FULL);
        churn(p);
    }
    long n = count(tree, &bad);
    CHECK(n == (long)id && bad == 0, "%ld of %llu nodes reachable, %ld corrupted", n,
          (unsigned long long)id, bad);
    printf("saved-ptls: ok (%llu nodes)\n", (unsigned long long)id);
}

/* ---- stale-heap ------------------------------------------------------------------ */

static void stale_heap(void)
{
    gc_heap_t *h = gc_heap_new(NULL);
    CHECK(h != NULL, "%s", last_error());
    CHECK(gc_heap_delete(h) == RT_OK, "%s", last_error());
    int probe = 0;
    CHECK(gc_base_ptr(h, &probe) == NULL, "a deleted heap's lookup found an object");
    CHECK(gc_internal_obj_base_ptr(h, &probe) == NULL, "a deleted heap's lookup");
    CHECK(gc_is_internal_obj_alloc(h, &probe) == 0, "a deleted heap's lookup");
    CHECK(gc_enable_conservative_scanning(h) == RT_ERR_ARG, "a deleted heap accepted");
    CHECK(strstr(last_error(), "gc_enable_conservative_scanning: heap: ") &&
              strstr(last_error(), "is not a live heap handle"),
          "%s", last_error());
    CHECK(gc_new_conservative_type(h, "T", NULL, 0) == NULL, "a type in a deleted heap");
    if (!failures) printf("stale-heap: ok\n");
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    int depth = argc > 1 ? atoi(argv[1]) : 17;
    /* build() keeps partial trees only on its stack while collections run. */
    jl_gc_enable_conservative_scanning();
    jl_init();
    main_ptls = jl_get_ptls_states();
    leaf_ty = jl_new_foreign_type(jl_symbol("Leaf"), NULL, NULL, NULL, NULL, 0, 0);
    safe_alloc(main_ptls);
    other_ptls();
    free_type(main_ptls);
    scanner_safe();
    not_object(main_ptls);
    saved_ptls_marking(main_ptls, depth);
    stale_heap();
    printf(failures ? "misuse: %d FAILED\n" : "misuse: all ok\n", failures);
    return failures != 0;
}
