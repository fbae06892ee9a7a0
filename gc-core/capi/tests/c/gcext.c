/*
 * A self-contained test of the GC-extension API, in the spirit of the seed's own test
 * program (Julia's test/gcext/gcext.c), written against julia_gcext_compat.h only.
 *
 * - A foreign "stack" type whose mark function marks its buffer; "buffer" objects (small
 *   or large foreign types) hold object references and are marked with
 *   jl_gc_mark_queue_objarray on some collections and with per-element
 *   jl_gc_mark_queue_obj plus young counting on others.
 * - A small and a large data type sharing one sweep function, scheduled per object.
 * - 1024 extra roots from a root scanner; pre/post GC callbacks counting collections; a
 *   callback registered, counted and removed; task scanner calls counted.
 * - Many objects moved between stacks, with collections of every kind between moves.
 * - At the end: full and partial collections both happened, no root was corrupted,
 *   every scheduled sweep ran exactly once, and only for objects that were dead.
 * - GAP's PreGCHook: a young child stored without a barrier into an old bag that a pre-GC
 *   callback passes to jl_gc_wb_back survives the partial collection.
 * - Bad use through the C ABI gets an error, not a crash.
 *
 * Usage: gcext [ITERATIONS]. Exit status 0 on success; failures print "FAIL: ...".
 */
#include "julia_gcext_compat.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;
#define CHECK(cond, ...)                                                  \
    do {                                                                  \
        if (!(cond)) {                                                    \
            failures++;                                                   \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                 \
            fprintf(stderr, "\n");                                        \
            if (failures > 20) exit(1);                                   \
        }                                                                 \
    } while (0)

/* ---- Data objects ------------------------------------------------------------------ */

#define MAGIC 0x5EEDF00DCAFEBABEULL
typedef struct {
    uint64_t magic;
    uint64_t id;
    uint64_t payload[]; /* filled with id ^ index */
} data_t;

static jl_datatype_t *small_type, *large_type;
static size_t max_objects;
static unsigned char *swept; /* per id: how many times its sweep function ran */
static unsigned char *live;  /* per id: reachable from a root right now */
static uint64_t next_id = 0;
static uint64_t sweeps = 0;

static void sweep_data(jl_value_t *obj)
{
    data_t *d = (data_t *)obj;
    if (d->magic != MAGIC) {
        failures++;
        fprintf(stderr, "FAIL: sweep function got a corrupted object %p\n", (void *)obj);
        return;
    }
    if (d->id >= max_objects) {
        failures++;
        fprintf(stderr, "FAIL: sweep of unknown id %llu\n", (unsigned long long)d->id);
        return;
    }
    if (live[d->id]) {
        failures++;
        fprintf(stderr, "FAIL: sweep function ran for reachable object %llu\n",
                (unsigned long long)d->id);
    }
    swept[d->id]++;
    sweeps++;
    d->magic = 0xDEAD; /* a later use of this object will be detected */
}

static size_t data_words(const data_t *d, int large)
{
    return large ? 400 : (d->id % 7) + 1;
}

static void check_data(jl_value_t *obj, const char *where)
{
    data_t *d = (data_t *)obj;
    CHECK(d->magic == MAGIC, "%s: object %p has magic %llx", where, (void *)obj,
          (unsigned long long)d->magic);
    if (d->magic != MAGIC) return;
    int large = jl_typeof(obj) == (jl_value_t *)large_type;
    size_t n = data_words(d, large);
    for (size_t i = 0; i < n; i++)
        CHECK(d->payload[i] == (d->id ^ i), "%s: payload of %llu corrupted at %zu", where,
              (unsigned long long)d->id, i);
}

static jl_value_t *new_data(jl_ptls_t ptls, int large)
{
    uint64_t id = next_id++;
    if (id >= max_objects) {
        fprintf(stderr, "FAIL: too many objects\n");
        exit(1);
    }
    size_t n = large ? 400 : (id % 7) + 1;
    size_t size = sizeof(data_t) + n * sizeof(uint64_t);
    data_t *d = jl_gc_alloc_typed(ptls, size, large ? large_type : small_type);
    CHECK(d != NULL, "allocation failed: %s", jl_gc_last_error());
    d->magic = MAGIC;
    d->id = id;
    for (size_t i = 0; i < n; i++) d->payload[i] = id ^ i;
    jl_gc_schedule_foreign_sweepfunc(ptls, (jl_value_t *)d);
    return (jl_value_t *)d;
}

/* ---- Stacks and their buffers ------------------------------------------------------ */

typedef struct {
    size_t capacity;
    size_t used;
    jl_value_t *items[];
} buffer_t;

typedef struct {
    buffer_t *buf;
} stack_t_;

static jl_datatype_t *stack_type, *buffer_small_type, *buffer_large_type;
static int use_objarray = 0;
static size_t mark_calls = 0;

static uintptr_t mark_stack(jl_ptls_t ptls, jl_value_t *obj)
{
    stack_t_ *s = (stack_t_ *)obj;
    mark_calls++;
    return (uintptr_t)(s->buf ? jl_gc_mark_queue_obj(ptls, (jl_value_t *)s->buf) != 0 : 0);
}

static uintptr_t mark_buffer(jl_ptls_t ptls, jl_value_t *obj)
{
    buffer_t *b = (buffer_t *)obj;
    mark_calls++;
    if (use_objarray) {
        jl_gc_mark_queue_objarray(ptls, obj, b->items, b->used);
        return 0;
    }
    uintptr_t young = 0;
    for (size_t i = 0; i < b->used; i++)
        if (jl_gc_mark_queue_obj(ptls, b->items[i])) young++;
    return young;
}

#define NSTACKS 8
static jl_value_t *stacks[NSTACKS];
#define NAUX 1024
static jl_value_t *aux_roots[NAUX];
static jl_value_t *pending[4]; /* objects in transit between two allocations */

static size_t buffer_bytes(size_t capacity) { return sizeof(buffer_t) + capacity * sizeof(void *); }

static buffer_t *new_buffer(jl_ptls_t ptls, size_t capacity)
{
    size_t bytes = buffer_bytes(capacity);
    jl_datatype_t *ty = bytes <= jl_gc_max_internal_obj_size() ? buffer_small_type : buffer_large_type;
    buffer_t *b = jl_gc_alloc_typed(ptls, bytes, ty);
    CHECK(b != NULL, "buffer allocation failed: %s", jl_gc_last_error());
    b->capacity = capacity;
    b->used = 0;
    return b;
}

static void push(jl_ptls_t ptls, int which, jl_value_t *obj)
{
    stack_t_ *s = (stack_t_ *)stacks[which];
    if (s->buf == NULL || s->buf->used == s->buf->capacity) {
        pending[0] = obj; /* keep obj alive across the allocation */
        size_t cap = s->buf ? s->buf->capacity * 2 : 4;
        buffer_t *nb = new_buffer(ptls, cap);
        s = (stack_t_ *)stacks[which];
        if (s->buf) {
            memcpy(nb->items, s->buf->items, s->buf->used * sizeof(void *));
            nb->used = s->buf->used;
            jl_gc_wb_back(nb);
        }
        s->buf = nb;
        jl_gc_wb(s, nb);
        pending[0] = NULL;
    }
    s->buf->items[s->buf->used++] = obj;
    jl_gc_wb(s->buf, obj);
}

static jl_value_t *pop(int which)
{
    stack_t_ *s = (stack_t_ *)stacks[which];
    if (s->buf == NULL || s->buf->used == 0) return NULL;
    jl_value_t *v = s->buf->items[--s->buf->used];
    s->buf->items[s->buf->used] = NULL;
    return v;
}

/* ---- Callbacks ----------------------------------------------------------------------- */

static size_t full_gcs, partial_gcs, post_gcs, root_scans, task_scans, counted_calls;
static size_t ext_allocs, ext_frees;
static int in_gc = 0;

static void pre_gc(int full)
{
    CHECK(!in_gc, "pre_gc twice without post_gc");
    in_gc = 1;
    if (full) full_gcs++; else partial_gcs++;
    use_objarray = (int)((full_gcs + partial_gcs) % 2);
}

static void post_gc(int full)
{
    (void)full;
    CHECK(in_gc, "post_gc without pre_gc");
    in_gc = 0;
    post_gcs++;
}

static void counted_callback(int full) { (void)full; counted_calls++; }

static void root_scanner(int full)
{
    (void)full;
    root_scans++;
    jl_ptls_t ptls = jl_get_ptls_states();
    for (int i = 0; i < NSTACKS; i++)
        if (stacks[i]) jl_gc_mark_queue_obj(ptls, stacks[i]);
    for (int i = 0; i < NAUX; i++)
        if (aux_roots[i]) jl_gc_mark_queue_obj(ptls, aux_roots[i]);
    for (int i = 0; i < 4; i++)
        if (pending[i]) jl_gc_mark_queue_obj(ptls, pending[i]);
}

static void task_scanner(jl_task_t *task, int full)
{
    (void)full;
    CHECK(task != NULL, "task scanner got NULL");
    size_t size = 0;
    CHECK(jl_task_stack_buffer(task, &size, NULL) != NULL && size > 0, "task without a stack");
    task_scans++;
}

static void ext_alloc(void *addr, size_t size) { (void)addr; (void)size; ext_allocs++; }
static void ext_free(void *addr) { (void)addr; ext_frees++; }

/* ---- GAP's PreGCHook: CHANGED_BAG(CurrLVars) from a pre-GC callback ----------------- */

/* GAP stores into its current local-variables bag without barriers and calls
 * jl_gc_wb_back on it from its pre-GC callback. Julia runs the pre-GC callbacks before it
 * merges the remembered sets, so that barrier counts for the collection it runs in. */
static stack_t_ *curr_lvars;

static void pre_gc_changed_bag(int full)
{
    (void)full;
    if (curr_lvars) jl_gc_wb_back(curr_lvars);
}

static void changed_bag_in_pre_gc(jl_ptls_t ptls)
{
    stack_t_ *lv = jl_gc_alloc_typed(ptls, sizeof(stack_t_), stack_type);
    CHECK(lv != NULL, "lvars allocation: %s", jl_gc_last_error());
    lv->buf = NULL;
    aux_roots[0] = (jl_value_t *)lv; /* a root (through the root scanner) */
    jl_gc_collect(JL_GC_FULL);
    jl_gc_collect(JL_GC_FULL); /* lv is old now */
    jl_gc_set_cb_pre_gc(pre_gc_changed_bag, 1);
    curr_lvars = lv;
    buffer_t *b = new_buffer(ptls, 4);
    jl_value_t *d = new_data(ptls, 0);
    uint64_t id = ((data_t *)d)->id;
    live[id] = 1;
    b->items[b->used++] = d; /* b is young: no barrier needed */
    lv->buf = b;             /* old -> young without a barrier, as GAP's interpreter does */
    size_t before = partial_gcs;
    jl_gc_collect(JL_GC_INCREMENTAL);
    jl_gc_collect(JL_GC_INCREMENTAL);
    CHECK(partial_gcs == before + 2, "%zu partial collections, not 2", partial_gcs - before);
    CHECK(swept[id] == 0, "the young child of the bag the pre-GC callback remembered was freed");
    CHECK(lv->buf == b && b->used == 1 && b->items[0] == d, "lvars changed");
    check_data(d, "child of the remembered bag");
    jl_gc_set_cb_pre_gc(pre_gc_changed_bag, 0);
    curr_lvars = NULL;
    aux_roots[0] = NULL;
    live[id] = 0;
}

/* ---- Bad use --------------------------------------------------------------------- */

static void *unattached_thread(void *arg)
{
    (void)arg;
    jl_ptls_t p = jl_get_ptls_states();
    CHECK(p == NULL, "an unattached thread has a ptls");
    CHECK(jl_gc_last_error() != NULL, "no error for an unattached thread");
    void *o = jl_gc_alloc_typed(p, 16, small_type);
    CHECK(o == NULL, "allocation from an unattached thread succeeded");
    jl_gc_collect(JL_GC_FULL);
    CHECK(jl_gc_last_error() != NULL && strstr(jl_gc_last_error(), "not attached"),
          "collect from an unattached thread: %s", jl_gc_last_error());
    CHECK(jl_gc_last_status() == RT_ERR_NOT_ATTACHED, "status %d for an unattached thread",
          (int)jl_gc_last_status());
    /* Attached threads allocate and detach; their reachable objects stay alive. */
    jl_ptls_t mine = jl_adopt_thread();
    CHECK(mine != NULL, "adopt_thread failed: %s", jl_gc_last_error());
    /* The inline jl_get_ptls_states caches per thread: NULL before, the state now. */
    CHECK(jl_get_ptls_states() == mine, "jl_get_ptls_states after adopting");
    CHECK(jl_get_ptls_states() == mine, "jl_get_ptls_states cached");
    jl_value_t *d = new_data(mine, 0);
    aux_roots[NAUX - 1] = d;
    /* The main thread waits in pthread_join inside a GC-safe region: this collection
     * must not wait for it. */
    jl_gc_collect(JL_GC_FULL);
    CHECK(((data_t *)aux_roots[NAUX - 1])->magic == MAGIC, "object lost in another thread's GC");
    CHECK(jl_gc_thread_detach() == 0, "detach failed");
    /* The cached state is stale now: the cache must notice. */
    CHECK(jl_get_ptls_states() == NULL, "a detached thread still has a ptls");
    CHECK(jl_adopt_thread() != NULL, "re-adopt failed: %s", jl_gc_last_error());
    CHECK(jl_get_ptls_states() != NULL, "no ptls after re-adopting");
    CHECK(jl_gc_thread_detach() == 0, "second detach failed");
    CHECK(jl_get_ptls_states() == NULL, "a detached thread still has a ptls (2)");
    return NULL;
}

/* Attaches, allocates and exits WITHOUT detaching: the thread's exit must detach it
 * (otherwise the next collection would wait for it forever). */
static void *exits_attached(void *arg)
{
    (void)arg;
    jl_ptls_t mine = jl_adopt_thread();
    CHECK(mine != NULL, "adopt_thread failed: %s", jl_gc_last_error());
    /* The inline jl_get_ptls_states caches per thread: NULL before, the state now. */
    CHECK(jl_get_ptls_states() == mine, "jl_get_ptls_states after adopting");
    CHECK(jl_get_ptls_states() == mine, "jl_get_ptls_states cached");
    aux_roots[NAUX - 2] = new_data(mine, 0);
    return NULL;
}

/* The compat header's inline jl_gc_alloc_typed against the out-of-line rules: cells
 * reused after a collection come back zeroed and typed (conservative.c in
 * gc-conservative checks interior lookups of them); inside a GC-safe region allocation is refused (the inline path leaves it to the
 * out-of-line one), and works again after. */
static void inline_allocation(jl_ptls_t ptls)
{
    /* Payload sizes of the cells the inline path zeroes with word stores (16, 32, 48 and
     * 64 bytes) and one it zeroes with memset (128). */
    static const size_t sizes[] = {8, 24, 40, 56, 120};
    enum { N = 4000, SZ = 40 };
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t sz = sizes[s];
        for (int i = 0; i < N; i++) {
            unsigned char *o = jl_gc_alloc_typed(ptls, sz, small_type);
            CHECK(o != NULL, "allocation %d of %zu bytes failed: %s", i, sz, jl_gc_last_error());
            if (o)
                memset(o, 0xAB, sz);
        }
        jl_gc_collect(JL_GC_FULL); /* every one of them garbage: their cells are free again */
        int dirty = 0, untyped = 0;
        for (int i = 0; i < N; i++) {
            unsigned char *o = jl_gc_alloc_typed(ptls, sz, small_type);
            CHECK(o != NULL, "reallocation %d of %zu bytes failed: %s", i, sz, jl_gc_last_error());
            if (!o)
                break;
            for (size_t k = 0; k < sz; k++)
                dirty += o[k] != 0;
            untyped += jl_typeof((jl_value_t *)o) != (jl_value_t *)small_type;
        }
        CHECK(dirty == 0, "%d payload bytes of reused %zu-byte objects not zeroed", dirty, sz);
        CHECK(untyped == 0, "%d objects of %zu bytes with the wrong type", untyped, sz);
    }
    int8_t state = jl_gc_safe_enter(ptls);
    jl_gc_clear_error();
    CHECK(jl_gc_alloc_typed(ptls, SZ, small_type) == NULL, "allocation inside a GC-safe region");
    CHECK(jl_gc_last_error() != NULL, "no error for an allocation inside a GC-safe region");
    jl_gc_safe_leave(ptls, state);
    jl_gc_clear_error();
    CHECK(jl_gc_alloc_typed(ptls, SZ, small_type) != NULL, "allocation after a GC-safe region: %s",
          jl_gc_last_error());
}

static void bad_use(jl_ptls_t ptls)
{
    jl_gc_clear_error();
    CHECK(jl_gc_alloc_typed(ptls, 16, NULL) == NULL, "NULL type accepted");
    CHECK(jl_gc_last_error() != NULL, "no error for NULL type");
    CHECK(jl_gc_last_status() == RT_ERR_ARG, "status %d for NULL type", (int)jl_gc_last_status());
    jl_gc_clear_error();
    CHECK(jl_gc_last_status() == RT_OK && jl_gc_last_error() == NULL, "error not cleared");
    CHECK(jl_gc_alloc_typed(ptls, 16, &failures) == NULL, "a non-type accepted as type");
    CHECK(jl_gc_last_error() && strstr(jl_gc_last_error(), "not a type"), "%s", jl_gc_last_error());
    CHECK(jl_gc_alloc_typed(ptls, 0, small_type) == NULL, "size 0 accepted");
    CHECK(jl_gc_last_error() && strstr(jl_gc_last_error(), "size 0"), "%s", jl_gc_last_error());
    CHECK(jl_gc_alloc_typed(ptls, jl_gc_max_internal_obj_size() + 1, small_type) == NULL,
          "oversized small object accepted");
    CHECK(jl_gc_last_error() && strstr(jl_gc_last_error(), "exceeds"), "%s", jl_gc_last_error());
    CHECK(jl_gc_alloc_typed((jl_ptls_t)&failures, 16, small_type) == NULL, "a bogus ptls accepted");
    jl_gc_clear_error();
    jl_value_t *d = new_data(ptls, 0);
    jl_gc_clear_error();
    jl_gc_schedule_foreign_sweepfunc(ptls, d); /* second time for this object */
    CHECK(jl_gc_last_error() && strstr(jl_gc_last_error(), "already scheduled"),
          "double sweep scheduling not refused: %s", jl_gc_last_error());
    jl_gc_clear_error();
    jl_gc_set_cb_pre_gc(pre_gc, 1); /* already registered */
    CHECK(jl_gc_last_error() && strstr(jl_gc_last_error(), "already registered"),
          "double registration not refused: %s", jl_gc_last_error());
    jl_gc_clear_error();
    jl_gc_set_cb_post_gc(counted_callback, 0); /* never registered */
    CHECK(jl_gc_last_error() != NULL, "removing an unregistered callback not reported");
    jl_gc_clear_error();
    CHECK(jl_gc_mark_queue_obj(ptls, d) == 0 && jl_gc_last_error() != NULL,
          "marking outside a collection not refused");
    jl_gc_clear_error();
    CHECK(jl_new_foreign_type(NULL, NULL, NULL, mark_stack, NULL, 1, 0) == NULL, "NULL name accepted");
    CHECK(jl_new_foreign_type(jl_symbol("nomark"), NULL, NULL, NULL, NULL, 1, 0) == NULL,
          "pointers without mark function accepted");
    CHECK(jl_new_foreign_type(jl_symbol("badsuper"), NULL, (jl_datatype_t *)d, mark_stack, NULL, 1, 0) == NULL,
          "a non-type accepted as super");
    jl_gc_clear_error();
    pthread_t t;
    pthread_create(&t, NULL, unattached_thread, NULL);
    int8_t state = jl_gc_safe_enter(ptls); /* blocking: let the other thread collect */
    pthread_join(t, NULL);
    jl_gc_safe_leave(ptls, state);
    pthread_create(&t, NULL, exits_attached, NULL);
    state = jl_gc_safe_enter(ptls);
    pthread_join(t, NULL);
    jl_gc_safe_leave(ptls, state);
    jl_gc_collect(JL_GC_FULL); /* must not wait for the thread that exited */
    CHECK(((data_t *)aux_roots[NAUX - 2])->magic == MAGIC, "object of an exited thread lost");
    /* d is garbage now; it is swept like any other object (live[] is 0 for it). */
}

/* ---- Main ------------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    long iterations = argc > 1 ? atol(argv[1]) : 20000;
    max_objects = (size_t)iterations * 2 + 10000;
    swept = calloc(max_objects, 1);
    live = calloc(max_objects, 1);

    jl_gc_set_cb_notify_external_alloc(ext_alloc, 1); /* before jl_init: sees everything */
    jl_gc_set_cb_notify_external_free(ext_free, 1);
    jl_init();
    jl_ptls_t ptls = jl_get_ptls_states();
    CHECK(ptls != NULL, "no ptls after jl_init");

    jl_sym_t *sym = jl_symbol("Stack");
    CHECK(sym == jl_symbol("Stack"), "symbols are not interned");
    CHECK(strcmp(jl_symbol_name(sym), "Stack") == 0, "symbol name");
    stack_type = jl_new_foreign_type(sym, NULL, NULL, mark_stack, NULL, 1, 0);
    buffer_small_type = jl_new_foreign_type(jl_symbol("Buffer"), NULL, NULL, mark_buffer, NULL, 1, 0);
    buffer_large_type = jl_new_foreign_type(jl_symbol("BigBuffer"), NULL, NULL, mark_buffer, NULL, 1, 1);
    small_type = jl_new_foreign_type(jl_symbol("Data"), NULL, NULL, NULL, sweep_data, 0, 0);
    large_type = jl_new_foreign_type(jl_symbol("BigData"), NULL, NULL, NULL, sweep_data, 0, 1);
    CHECK(stack_type && buffer_small_type && buffer_large_type && small_type && large_type,
          "type creation failed: %s", jl_gc_last_error());
    CHECK(jl_typeof((jl_value_t *)small_type) == jl_typeof((jl_value_t *)stack_type),
          "types do not share a meta type");
    CHECK(jl_gc_max_internal_obj_size() == 2024, "max internal size %zu", jl_gc_max_internal_obj_size());

    jl_gc_set_cb_pre_gc(pre_gc, 1);
    jl_gc_set_cb_post_gc(post_gc, 1);
    jl_gc_set_cb_root_scanner(root_scanner, 1);
    jl_gc_set_cb_task_scanner(task_scanner, 1);
    CHECK(jl_gc_last_error() == NULL, "registration failed: %s", jl_gc_last_error());

    for (int i = 0; i < NSTACKS; i++) {
        stacks[i] = jl_gc_alloc_typed(ptls, sizeof(stack_t_), stack_type);
        CHECK(stacks[i] != NULL, "stack allocation: %s", jl_gc_last_error());
    }

    /* A callback registered, counted and removed. */
    jl_gc_set_cb_pre_gc(counted_callback, 1);
    jl_gc_collect(JL_GC_FULL);
    jl_gc_collect(JL_GC_INCREMENTAL);
    CHECK(counted_calls == 2, "counted callback ran %zu times", counted_calls);
    jl_gc_set_cb_pre_gc(counted_callback, 0);
    jl_gc_collect(JL_GC_AUTO);
    CHECK(counted_calls == 2, "removed callback still runs (%zu)", counted_calls);

    changed_bag_in_pre_gc(ptls);
    bad_use(ptls);
    inline_allocation(ptls);
    CHECK(aux_roots[NAUX - 1] != NULL, "the detached thread's object is gone");

    /* Fill the auxiliary roots (the last two hold the other threads' objects). */
    live[((data_t *)aux_roots[NAUX - 2])->id] = 1;
    for (int i = 0; i < NAUX - 2; i++) {
        aux_roots[i] = new_data(ptls, i % 97 == 0);
        live[((data_t *)aux_roots[i])->id] = 1;
    }
    live[((data_t *)aux_roots[NAUX - 1])->id] = 1;

    unsigned long long rng = 88172645463325252ULL;
    for (long it = 0; it < iterations; it++) {
        rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
        int a = (int)(rng % NSTACKS), b = (int)((rng >> 8) % NSTACKS);
        switch ((rng >> 16) % 8) {
        case 0: case 1: case 2: { /* push a new object */
            jl_value_t *d = new_data(ptls, (rng >> 24) % 50 == 0);
            live[((data_t *)d)->id] = 1;
            push(ptls, a, d);
            break;
        }
        case 3: case 4: { /* move the top of a onto b */
            jl_value_t *v = pop(a);
            if (v) push(ptls, b, v);
            break;
        }
        case 5: { /* drop the top of a */
            jl_value_t *v = pop(a);
            if (v) live[((data_t *)v)->id] = 0;
            break;
        }
        case 6: { /* replace an auxiliary root */
            int k = (int)((rng >> 32) % (NAUX - 2));
            live[((data_t *)aux_roots[k])->id] = 0;
            aux_roots[k] = NULL;
            jl_value_t *d = new_data(ptls, (rng >> 40) % 31 == 0);
            aux_roots[k] = d;
            live[((data_t *)d)->id] = 1;
            break;
        }
        case 7:
            if (it % 64 == 7) jl_gc_collect(it % 3 == 0 ? JL_GC_FULL : (it % 3 == 1 ? JL_GC_INCREMENTAL : JL_GC_AUTO));
            else jl_gc_safepoint();
            break;
        }
        if (it % 1024 == 0) { /* no root corrupted */
            for (int i = 0; i < NAUX; i++) check_data(aux_roots[i], "aux root");
            for (int s = 0; s < NSTACKS; s++) {
                stack_t_ *st = (stack_t_ *)stacks[s];
                if (st->buf)
                    for (size_t i = 0; i < st->buf->used; i++) check_data(st->buf->items[i], "stack item");
            }
        }
    }
    jl_gc_collect(JL_GC_FULL);
    for (int s = 0; s < NSTACKS; s++) {
        stack_t_ *st = (stack_t_ *)stacks[s];
        if (st->buf)
            for (size_t i = 0; i < st->buf->used; i++) check_data(st->buf->items[i], "stack item");
    }
    /* Every object still reachable was never swept. */
    for (uint64_t id = 0; id < next_id; id++)
        if (live[id]) CHECK(swept[id] == 0, "reachable object %llu was swept", (unsigned long long)id);

    /* Drop everything: every sweep runs exactly once. */
    for (int i = 0; i < NSTACKS; i++) stacks[i] = NULL;
    for (int i = 0; i < NAUX; i++) aux_roots[i] = NULL;
    memset(live, 0, max_objects);
    jl_gc_collect(JL_GC_FULL);
    jl_gc_collect(JL_GC_FULL);
    for (uint64_t id = 0; id < next_id; id++)
        CHECK(swept[id] == 1, "object %llu swept %d times", (unsigned long long)id, swept[id]);
    CHECK(sweeps == next_id, "%llu sweeps for %llu objects", (unsigned long long)sweeps,
          (unsigned long long)next_id);
    CHECK(full_gcs > 0 && partial_gcs > 0, "full %zu partial %zu", full_gcs, partial_gcs);
    CHECK(post_gcs == full_gcs + partial_gcs, "post_gc %zu vs %zu", post_gcs, full_gcs + partial_gcs);
    CHECK(root_scans == post_gcs, "root scanner ran %zu times in %zu collections", root_scans, post_gcs);
    CHECK(task_scans >= post_gcs, "task scanner ran %zu times", task_scans);
    CHECK(ext_allocs > 0 && ext_frees > 0 && ext_frees <= ext_allocs, "external allocs %zu frees %zu",
          ext_allocs, ext_frees);
    CHECK(mark_calls > 0, "no mark function ran");

    printf("gcext: %llu objects, %zu full + %zu partial collections, %llu sweeps, "
           "%zu mark calls, %zu external allocations, %s\n",
           (unsigned long long)next_id, full_gcs, partial_gcs, (unsigned long long)sweeps, mark_calls,
           ext_allocs, failures ? "FAILED" : "ok");
    jl_gc_thread_detach();
    free(swept);
    free(live);
    return failures ? 1 : 0;
}
