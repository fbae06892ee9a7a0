/*
 * The runtime a julia-gcext client gets for the Julia version it is compiled for: this
 * one source is built twice against the prefix's headers (gc-core/include/julia), with
 * -DGC_COMPAT_JULIA_MINOR=6 and =10, as GAP 4.12.1 and GAP 4.15.1 are, and each binary
 * checks its version's behaviour (JULIA_VERSION_MINOR):
 *
 *   julia_versions threads   jl_init: the version string, jl_n_gcthreads (the threads
 *                            that mark: 1 for a 1.6 client, one per core for 1.10)
 *   julia_versions ptls      mark functions get the ptls of the thread that marks them
 *                            (jl_get_ptls_states() there): how many threads marked
 *   julia_versions tasks     the task scanner: on which threads, how many at once, its
 *                            second argument, jl_get_ptls_states() inside it, bits.gc of
 *                            a task; objects held only by tasks survive
 *   julia_versions bits      jl_astaggedvalue(v)->bits.gc between and during collections
 *   julia_versions stack     jl_active_task_stack of another thread's task (stopped in a
 *                            GC-safe region): from its saved stack pointer (1.6), or all
 *                            of it, as Julia 1.10 reports it (GAP 4.15 then skips its first
 *                            32 KiB as guard pages)
 *
 * Each prints "<case>: ok (...)" with its figures, or a failed check and exits 1.
 */
#define _GNU_SOURCE
#include <julia.h>
#include <julia_gcext.h>
#include <julia_threads.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define V10 (JULIA_VERSION_MINOR >= 10)

#define CHECK(c)                                                                       \
    do {                                                                               \
        if (!(c)) {                                                                    \
            fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n", __FILE__,    \
                    __LINE__, #c, jl_gc_last_error() ? jl_gc_last_error() : "none");   \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* ---- A node type with a mark function that records who marks ---------------------- */

typedef struct {
    jl_value_t *next;
    jl_value_t *other;
    uintptr_t value;
} node_t;

static jl_datatype_t *Node;

#define MAX_THREADS 64
static _Atomic(uintptr_t) seen_ptls[MAX_THREADS];
static atomic_long ptls_mismatch;
static atomic_long mark_calls;

static void note(_Atomic(uintptr_t) *set, uintptr_t v)
{
    for (int i = 0; i < MAX_THREADS; i++) {
        uintptr_t cur = atomic_load(&set[i]);
        if (cur == v)
            return;
        if (cur == 0) {
            uintptr_t zero = 0;
            if (atomic_compare_exchange_strong(&set[i], &zero, v) || zero == v)
                return;
            i--; /* someone took the slot: look at it again */
        }
    }
}

static int count(_Atomic(uintptr_t) *set)
{
    int n = 0;
    for (int i = 0; i < MAX_THREADS; i++)
        n += atomic_load(&set[i]) != 0;
    return n;
}

static uintptr_t mark_node(jl_ptls_t ptls, jl_value_t *obj)
{
    atomic_fetch_add(&mark_calls, 1);
    /* The ptls a mark function gets is the one of the thread it runs on. */
    if (ptls != jl_get_ptls_states())
        atomic_fetch_add(&ptls_mismatch, 1);
    note(seen_ptls, (uintptr_t)ptls);
    node_t *n = (node_t *)obj;
    uintptr_t young = 0;
    if (n->next)
        young += jl_gc_mark_queue_obj(ptls, n->next);
    if (n->other)
        young += jl_gc_mark_queue_obj(ptls, n->other);
    return young;
}

static jl_value_t *new_node(uintptr_t value)
{
    node_t *n = (node_t *)jl_gc_alloc_typed(jl_get_ptls_states(), sizeof(node_t), Node);
    CHECK(n != NULL);
    n->value = value;
    return (jl_value_t *)n;
}

static void set_next(jl_value_t *parent, jl_value_t *child)
{
    ((node_t *)parent)->next = child;
    jl_gc_wb(parent, child);
}

static void set_other(jl_value_t *parent, jl_value_t *child)
{
    ((node_t *)parent)->other = child;
    jl_gc_wb(parent, child);
}

/* ---- Roots ------------------------------------------------------------------------- */

#define MAX_ROOTS 16
static jl_value_t *roots[MAX_ROOTS];

static void scan_roots(int full)
{
    (void)full;
    jl_ptls_t ptls = jl_get_ptls_states();
    for (int i = 0; i < MAX_ROOTS; i++)
        if (roots[i])
            jl_gc_mark_queue_obj(ptls, roots[i]);
}

static void setup(void)
{
    jl_init();
    Node = jl_new_foreign_type(jl_symbol("Node"), jl_main_module, jl_any_type, mark_node, NULL,
                               1, 0);
    CHECK(Node != NULL);
    jl_gc_set_cb_root_scanner(scan_roots, 1);
}

/* A complete binary tree of n nodes, built top-down so that every node is reachable
 * from roots[slot] when it is made; values are the indices. */
static jl_value_t **build_tree(int slot, long n)
{
    jl_value_t **all = malloc(n * sizeof(jl_value_t *));
    CHECK(all != NULL);
    for (long i = 0; i < n; i++) {
        all[i] = new_node((uintptr_t)i);
        if (i == 0)
            roots[slot] = all[0];
        else if (i % 2 == 1)
            set_next(all[(i - 1) / 2], all[i]);
        else
            set_other(all[(i - 1) / 2], all[i]);
    }
    return all;
}

static void check_tree(jl_value_t **all, long n)
{
    for (long i = 0; i < n; i++) {
        CHECK(jl_typeis(all[i], Node));
        CHECK(((node_t *)all[i])->value == (uintptr_t)i);
    }
}

/* ---- Cases ------------------------------------------------------------------------- */

static int threads(void)
{
    CHECK(strncmp(jl_ver_string(), "1.6", 3) == 0); /* before jl_init */
    jl_init();
    char want[32];
    snprintf(want, sizeof want, "1.%d.0-gccore", JULIA_VERSION_MINOR);
    CHECK(strcmp(jl_ver_string(), want) == 0);
    CHECK(strcmp(JULIA_VERSION_STRING, want) == 0);
    CHECK(jl_n_gcthreads >= 1);
    printf("threads: ok (version=%s gcthreads=%d)\n", jl_ver_string(), jl_n_gcthreads);
    return 0;
}

static int ptls_case(void)
{
    setup();
    long n = 1 << 17;
    jl_value_t **all = build_tree(0, n);
    int rounds = 0;
    /* Until two threads have marked (each round a full collection of the tree), for at
     * most 20 s: a machine busy elsewhere may leave a helper unscheduled for a while. */
    double t0 = now_us();
    while (now_us() - t0 < 20e6) {
        for (int i = 0; i < MAX_THREADS; i++)
            atomic_store(&seen_ptls[i], 0);
        jl_gc_collect(JL_GC_FULL);
        rounds++;
        if (count(seen_ptls) >= 2 || jl_n_gcthreads < 2)
            break;
    }
    check_tree(all, n);
    CHECK(atomic_load(&ptls_mismatch) == 0);
    CHECK(atomic_load(&mark_calls) >= n);
    int marked_by = count(seen_ptls);
    /* Marking is parallel exactly when jl_n_gcthreads says so. */
    if (jl_n_gcthreads >= 2)
        CHECK(marked_by >= 2);
    else
        CHECK(marked_by == 1);
    printf("ptls: ok (gcthreads=%d marked_by=%d rounds=%d)\n", jl_n_gcthreads, marked_by,
           rounds);
    return 0;
}

/* The task scanner, written as GAP 4.15's: a table shared by all calls, guarded by a
 * mutex when jl_n_gcthreads > 1. */
#define NTASKS 8
#define LIST 20000
static jl_task_t *tasks[NTASKS];
static jl_value_t *task_lists[NTASKS];
static char *task_stacks[NTASKS];
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static long table_calls; /* written under the lock when it is needed */
static _Atomic(uintptr_t) scanner_threads[MAX_THREADS];
static atomic_int in_flight, max_in_flight;
static atomic_long scans, bad_arg, bad_bits, bad_ptls, own_task_scans;
static pthread_t main_thread;
static jl_task_t *main_task;
static int full_now;

static void scan_task(jl_task_t *task, int arg)
{
    int f = atomic_fetch_add(&in_flight, 1) + 1;
    int m = atomic_load(&max_in_flight);
    while (f > m && !atomic_compare_exchange_weak(&max_in_flight, &m, f))
        ;
    atomic_fetch_add(&scans, 1);
    note(scanner_threads, (uintptr_t)pthread_self());
    jl_ptls_t ptls = jl_get_ptls_states();
    /* Inside a scanner, jl_get_ptls_states() is the marking thread's own ptls. */
    if (ptls == NULL || gc_marking_ptls() != (void *)ptls)
        atomic_fetch_add(&bad_ptls, 1);
    if (jl_astaggedvalue(task)->bits.gc & 2)
        atomic_fetch_add(&bad_bits, 1);
    int own = task == main_task;
    if (own)
        atomic_fetch_add(&own_task_scans, 1);
    /* 1.10: Julia's "the root task of its thread" (the main thread's own stack here);
     * 1.6: the seed's "the collection is full". */
    int want = V10 ? own : full_now;
    if (arg != want)
        atomic_fetch_add(&bad_arg, 1);
    if (jl_n_gcthreads > 1)
        pthread_mutex_lock(&table_lock);
    table_calls++;
    if (jl_n_gcthreads > 1)
        pthread_mutex_unlock(&table_lock);
    for (int i = 0; i < NTASKS; i++)
        if (tasks[i] == task)
            jl_gc_mark_queue_obj(ptls, task_lists[i]);
    /* Stay a moment, so that a scanner running at the same time on another thread is
     * seen. */
    double t0 = now_us();
    while (now_us() - t0 < 200)
        ;
    atomic_fetch_sub(&in_flight, 1);
}

static int tasks_case(void)
{
    main_thread = pthread_self();
    setup();
    main_task = jl_get_current_task();
    jl_gc_set_cb_task_scanner(scan_task, 1);
    for (int t = 0; t < NTASKS; t++) {
        task_stacks[t] = calloc(1, 64 * 1024);
        CHECK(task_stacks[t] != NULL);
        tasks[t] = jl_gc_register_task(task_stacks[t], task_stacks[t] + 64 * 1024);
        CHECK(tasks[t] != NULL);
        CHECK((jl_astaggedvalue(tasks[t])->bits.gc & 2) == 0);
        /* A list held only by this task (through the scanner): built while rooted. */
        roots[1] = new_node(t * 1000000);
        jl_value_t *tail = roots[1];
        for (long i = 1; i < LIST; i++) {
            jl_value_t *n = new_node(t * 1000000 + i);
            set_next(tail, n);
            tail = n;
        }
        task_lists[t] = roots[1];
        roots[1] = NULL;
    }
    /* Full and partial collections in turn, at least 4, until two scanners were seen
     * running at once on two threads where that can happen (for at most 20 s: a machine
     * busy elsewhere may leave a helper thread unscheduled for a while). */
    int parallel = V10 && jl_n_gcthreads >= 2;
    /* Count from here: building the lists collected too. */
    atomic_store(&scans, 0);
    atomic_store(&own_task_scans, 0);
    atomic_store(&max_in_flight, 0);
    table_calls = 0;
    for (int i = 0; i < MAX_THREADS; i++)
        atomic_store(&scanner_threads[i], 0);
    int rounds = 0;
    double t0 = now_us();
    while (rounds < 4 || now_us() - t0 < 20e6) {
        full_now = rounds % 2 == 0;
        jl_gc_collect(full_now ? JL_GC_FULL : JL_GC_INCREMENTAL);
        rounds++;
        int seen = count(scanner_threads) >= 2 && atomic_load(&max_in_flight) >= 2;
        if (rounds >= 4 && (!parallel || seen))
            break;
    }
    for (int t = 0; t < NTASKS; t++) {
        jl_value_t *n = task_lists[t];
        for (long i = 0; i < LIST; i++) {
            CHECK(n != NULL && jl_typeis(n, Node));
            CHECK(((node_t *)n)->value == (uintptr_t)(t * 1000000 + i));
            n = ((node_t *)n)->next;
        }
        CHECK((jl_astaggedvalue(tasks[t])->bits.gc & 2) == 0);
    }
    CHECK(atomic_load(&bad_arg) == 0);
    CHECK(atomic_load(&bad_bits) == 0);
    CHECK(atomic_load(&bad_ptls) == 0);
    CHECK(table_calls == atomic_load(&scans));
    /* Every registered task and the main thread's own, once per collection. */
    CHECK(atomic_load(&scans) == (long)rounds * (NTASKS + 1));
    CHECK(atomic_load(&own_task_scans) == rounds);
    int on = count(scanner_threads);
    int at_once = atomic_load(&max_in_flight);
    if (parallel) {
        CHECK(on >= 2);
        CHECK(at_once >= 2);
    } else {
        /* At the roots, on the collecting thread alone. */
        CHECK(on == 1 && atomic_load(&scanner_threads[0]) == (uintptr_t)main_thread);
        CHECK(at_once == 1);
    }
    printf("tasks: ok (gcthreads=%d scanner_threads=%d at_once=%d rounds=%d)\n",
           jl_n_gcthreads, on, at_once, rounds);
    return 0;
}

/* bits.gc of the children of a probe object, before and after its mark function
 * queues them. */
static jl_datatype_t *Probe;
static int probe_bits[2][2]; /* [young, old][before, after] */
static int probe_marked;

static uintptr_t mark_probe(jl_ptls_t ptls, jl_value_t *obj)
{
    node_t *p = (node_t *)obj;
    uintptr_t young = 0;
    probe_bits[0][0] = jl_astaggedvalue(p->next)->bits.gc;
    probe_bits[1][0] = jl_astaggedvalue(p->other)->bits.gc;
    young += jl_gc_mark_queue_obj(ptls, p->next);
    young += jl_gc_mark_queue_obj(ptls, p->other);
    probe_bits[0][1] = jl_astaggedvalue(p->next)->bits.gc;
    probe_bits[1][1] = jl_astaggedvalue(p->other)->bits.gc;
    probe_marked++;
    return young;
}

/* A young probe whose children are a new object and the old object `old`, which only
 * the probe holds during the collection. */
static void probe(jl_value_t *old, int full, int want[2][2])
{
    jl_value_t *pr = jl_gc_alloc_typed(jl_get_ptls_states(), sizeof(node_t), Probe);
    CHECK(pr != NULL);
    roots[2] = pr;
    ((node_t *)pr)->next = new_node(7);
    jl_gc_wb(pr, ((node_t *)pr)->next);
    ((node_t *)pr)->other = old;
    jl_gc_wb(pr, old);
    roots[3] = NULL;
    probe_marked = 0;
    jl_gc_collect(full ? JL_GC_FULL : JL_GC_INCREMENTAL);
    roots[3] = old;
    CHECK(probe_marked == 1);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            if (probe_bits[i][j] != want[i][j]) {
                fprintf(stderr, "%s collection: %s child %s queueing: bits.gc %d, want %d\n",
                        full ? "full" : "partial", i ? "old" : "young", j ? "after" : "before",
                        probe_bits[i][j], want[i][j]);
                exit(1);
            }
    roots[2] = NULL;
}

static int bits(void)
{
    setup();
    Probe = jl_new_foreign_type(jl_symbol("Probe"), jl_main_module, jl_any_type, mark_probe,
                                NULL, 1, 0);
    CHECK(Probe != NULL);
    /* Between collections: a new object is young (0); one that survived two collections
     * is old (3); an old one that got a young child is in the remembered set (1). */
    jl_value_t *o = new_node(1);
    roots[3] = o;
    CHECK(jl_astaggedvalue(o)->bits.gc == 0);
    jl_gc_collect(JL_GC_INCREMENTAL);
    jl_gc_collect(JL_GC_INCREMENTAL);
    CHECK(jl_astaggedvalue(o)->bits.gc == (V10 ? 3 : 0));
    jl_value_t *y = new_node(2);
    CHECK(jl_astaggedvalue(y)->bits.gc == 0);
    set_next(o, y);
    CHECK(jl_astaggedvalue(o)->bits.gc == (V10 ? 1 : 0));
    set_next(o, NULL);
    jl_gc_collect(JL_GC_FULL);
    CHECK(jl_astaggedvalue(o)->bits.gc == (V10 ? 3 : 0));
    /* While marking, in the mark function of a young probe: a young child is unmarked (0)
     * and marked once queued (1); an old child is unmarked (2) then marked (3) in a full
     * collection, and counts as marked (3) in a partial one. 1.6: 0 throughout. */
    int full_want[2][2] = {{0, V10 ? 1 : 0}, {V10 ? 2 : 0, V10 ? 3 : 0}};
    int part_want[2][2] = {{0, V10 ? 1 : 0}, {V10 ? 3 : 0, V10 ? 3 : 0}};
    probe(o, 1, full_want);
    probe(o, 0, part_want);
    printf("bits: ok\n");
    return 0;
}

/* Another thread, attached and waiting in a GC-safe region. */
static jl_task_t *other_task;
static pthread_mutex_t other_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t other_cond = PTHREAD_COND_INITIALIZER;
static int other_ready, other_done;

static void *other_thread(void *arg)
{
    (void)arg;
    CHECK(jl_adopt_thread() != NULL);
    other_task = jl_get_current_task();
    CHECK(other_task != NULL);
    jl_ptls_t ptls = jl_get_ptls_states();
    int8_t state = jl_gc_safe_enter(ptls);
    pthread_mutex_lock(&other_lock);
    other_ready = 1;
    pthread_cond_broadcast(&other_cond);
    while (!other_done)
        pthread_cond_wait(&other_cond, &other_lock);
    pthread_mutex_unlock(&other_lock);
    jl_gc_safe_leave(ptls, state);
    CHECK(jl_gc_thread_detach() == 0);
    return NULL;
}

static int stack_case(void)
{
    jl_init();
    pthread_t t;
    CHECK(pthread_create(&t, NULL, other_thread, NULL) == 0);
    pthread_mutex_lock(&other_lock);
    while (!other_ready)
        pthread_cond_wait(&other_cond, &other_lock);
    pthread_mutex_unlock(&other_lock);
    char *a0, *a1, *t0, *t1;
    jl_active_task_stack(other_task, &a0, &a1, &t0, &t1);
    CHECK(t0 != NULL && t0 < t1 && a1 == t1);
    if (V10)
        CHECK(a0 == t0);
    else
        CHECK(a0 > t0 && a0 < t1 && t1 - a0 < 64 * 1024);
    int from_start = a0 == t0;
    /* The calling thread's own task: from the caller's frame, for both. */
    char here;
    char *b0, *b1, *u0, *u1;
    jl_active_task_stack(jl_get_current_task(), &b0, &b1, &u0, &u1);
    CHECK(b0 > u0 && b0 <= &here + 4096 && b1 == u1);
    pthread_mutex_lock(&other_lock);
    other_done = 1;
    pthread_cond_broadcast(&other_cond);
    pthread_mutex_unlock(&other_lock);
    CHECK(pthread_join(t, NULL) == 0);
    printf("stack: ok (other=%s)\n", from_start ? "whole" : "from-sp");
    return 0;
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "threads";
    if (!strcmp(what, "threads"))
        return threads();
    if (!strcmp(what, "ptls"))
        return ptls_case();
    if (!strcmp(what, "tasks"))
        return tasks_case();
    if (!strcmp(what, "bits"))
        return bits();
    if (!strcmp(what, "stack"))
        return stack_case();
    fprintf(stderr, "unknown case %s\n", what);
    return 2;
}
