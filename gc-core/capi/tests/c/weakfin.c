/*
 * Weak references, finalizers, the reference queue and the weak-processing hook from C:
 * Julia's names (julia_gcext_compat.h: jl_gc_new_weakref, jl_weakref_t's value field,
 * jl_gc_add_ptr_finalizer, jl_finalize, jl_gc_run_pending_finalizers,
 * jl_gc_enable_finalizers) and gc-core's own (gc_core.h: gc_refqueue_*, gc_weak_handle_*,
 * GC_CB_WEAK_PROCESSING with gc_is_marked) over the default heap.
 *
 * Objects are rooted only through a root scanner over the `roots` array: a pointer in a
 * local variable is not a root (no conservative scanning here), so every object that
 * must survive an allocation sits in `roots` first.
 *
 * Usage: weakfin [ROUNDS]. Exit status 0 on success; failures print "FAIL ...".
 */
#include "gc_core.h"
#include "julia_gcext_compat.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;
#define CHECK(cond, ...)                                                    \
    do {                                                                    \
        if (!(cond)) {                                                      \
            failures++;                                                     \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                   \
            fprintf(stderr, "\n");                                          \
            if (failures > 20) exit(1);                                     \
        }                                                                   \
    } while (0)

#define MAGIC 0xF1A1F1A1F1A1F1A1ULL
#define DEAD 0xDEADDEADDEADDEADULL

/* A pair: two references (marked by mark_pair) and an id. */
typedef struct {
    jl_value_t *a, *b;
    uint64_t magic;
    uint64_t id;
} pair_t;

static jl_datatype_t *pair_type;

static uintptr_t mark_pair(jl_ptls_t ptls, jl_value_t *obj)
{
    pair_t *p = (pair_t *)obj;
    uintptr_t young = 0;
    if (p->a && jl_gc_mark_queue_obj(ptls, p->a)) young++;
    if (p->b && jl_gc_mark_queue_obj(ptls, p->b)) young++;
    return young;
}

#define NROOTS 4096
static jl_value_t *roots[NROOTS];

static void root_scanner(int full)
{
    (void)full;
    jl_ptls_t ptls = jl_get_ptls_states();
    for (int i = 0; i < NROOTS; i++)
        if (roots[i]) jl_gc_mark_queue_obj(ptls, roots[i]);
}

static pair_t *new_pair(jl_ptls_t ptls, uint64_t id)
{
    pair_t *p = jl_gc_alloc_typed(ptls, sizeof(pair_t), pair_type);
    CHECK(p != NULL, "allocation: %s", jl_gc_last_error());
    p->magic = MAGIC;
    p->id = id;
    return p;
}

/* ---- Finalizers -------------------------------------------------------------------- */

#define MAXID 100000
static unsigned char fin_calls[MAXID];
static size_t fin_total = 0;
static int in_fin = 0;

static void count_fin(void *obj)
{
    pair_t *p = (pair_t *)obj;
    CHECK(!in_fin, "finalizers nested");
    CHECK(p->magic == MAGIC, "finalizer got a corrupted object (magic %llx)",
          (unsigned long long)p->magic);
    if (p->magic != MAGIC || p->id >= MAXID) return;
    /* What the object reaches is alive too. */
    if (p->a) CHECK(((pair_t *)p->a)->magic == MAGIC, "child of %llu corrupted",
                    (unsigned long long)p->id);
    fin_calls[p->id]++;
    fin_total++;
}

/* Resurrects its object into roots[NROOTS - 1]. */
static size_t resurrect_calls = 0;
static void resurrect_fin(void *obj)
{
    resurrect_calls++;
    roots[NROOTS - 1] = (jl_value_t *)obj;
}

/* A finalizer that asks for more finalization: never nested. */
static size_t outer_calls = 0;
static void outer_fin(void *obj)
{
    pair_t *p = (pair_t *)obj;
    in_fin = 1;
    outer_calls++;
    jl_gc_run_pending_finalizers(NULL); /* no nested draining */
    jl_gc_clear_error();
    jl_finalize(p->a);                   /* queued, runs after this one */
    CHECK(jl_gc_last_error() == NULL, "jl_finalize in a finalizer: %s", jl_gc_last_error());
    CHECK(fin_calls[((pair_t *)p->a)->id] == 0, "jl_finalize ran a finalizer inside another");
    in_fin = 0;
}

/* ---- The reference queue ----------------------------------------------------------- */

static gc_refqueue_t *queue;
static int notified = 0;
static void on_tokens(void *data)
{
    CHECK(data == (void *)&notified, "notify data");
    notified++;
}

static unsigned char token_seen[MAXID];
static void *drain_thread(void *arg)
{
    (void)arg;
    /* Not attached: draining needs no heap access. */
    uintptr_t buf[64];
    size_t n, total = 0;
    while ((n = gc_refqueue_drain(queue, buf, 64)) > 0) {
        for (size_t i = 0; i < n; i++) {
            CHECK(buf[i] < MAXID, "token %lu", (unsigned long)buf[i]);
            if (buf[i] < MAXID) token_seen[buf[i]]++;
        }
        total += n;
    }
    return (void *)total;
}

/* ---- The weak-processing hook: an ephemeron table ---------------------------------- */

#define NEPH 8
static jl_value_t *eph_key[NEPH], *eph_value[NEPH];
static size_t hook_calls = 0;
static void weak_hook(int full)
{
    (void)full;
    hook_calls++;
    gc_mutator_t *m = gc_current_mutator();
    /* Backwards, so that the chain key0 -> value0 = key1 -> ... needs a round per link. */
    for (int i = NEPH - 1; i >= 0; i--)
        if (eph_key[i] && gc_is_marked(m, eph_key[i])) gc_mark_queue_obj(m, eph_value[i]);
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 20;
    jl_init();
    jl_ptls_t ptls = jl_get_ptls_states();
    gc_heap_t *heap = gc_default_heap();
    pair_type = jl_new_foreign_type(jl_symbol("Pair"), NULL, NULL, mark_pair, NULL, 1, 0);
    CHECK(pair_type != NULL, "type: %s", jl_gc_last_error());
    jl_gc_set_cb_root_scanner(root_scanner, 1);
    uint64_t next_id = 1;

    /* Weak references from C: value reads the referent, NULL once it died. */
    roots[0] = (jl_value_t *)new_pair(ptls, next_id++);
    jl_weakref_t *w = jl_gc_new_weakref(roots[0]);
    CHECK(w != NULL, "jl_gc_new_weakref: %s", jl_gc_last_error());
    CHECK(jl_typeof((jl_value_t *)w) == gc_weakref_type(heap), "weak ref type");
    roots[1] = (jl_value_t *)w;
    jl_gc_collect(JL_GC_FULL);
    CHECK(w->value == roots[0], "cleared while the referent is rooted");
    roots[0] = NULL;
    jl_gc_collect(JL_GC_INCREMENTAL);
    CHECK(w->value == NULL, "not cleared after the referent died (%p)", (void *)w->value);
    CHECK(gc_weakref_get((gc_weakref_t *)w) == NULL, "gc_weakref_get");

    /* A weak reference held inside an object; old weak ref, young referent. */
    pair_t *holder = new_pair(ptls, next_id++);
    roots[2] = (jl_value_t *)holder;
    holder->a = (jl_value_t *)jl_gc_new_weakref(NULL);
    jl_gc_wb(holder, holder->a);
    jl_gc_collect(JL_GC_INCREMENTAL);
    jl_gc_collect(JL_GC_INCREMENTAL); /* holder and its weak ref are old now */
    roots[3] = (jl_value_t *)new_pair(ptls, next_id++);
    CHECK(gc_weakref_set((gc_mutator_t *)ptls, (gc_weakref_t *)holder->a, roots[3]) == 0,
          "gc_weakref_set: %s", jl_gc_last_error());
    jl_gc_collect(JL_GC_INCREMENTAL);
    CHECK(((jl_weakref_t *)holder->a)->value == roots[3], "young referent lost");
    roots[3] = NULL;
    jl_gc_collect(JL_GC_INCREMENTAL);
    CHECK(((jl_weakref_t *)holder->a)->value == NULL, "partial collection left it set");

    /* GAP's weakptr.c stores into value directly (Julia allows it), with a barrier that
     * names another object than the referent: an old weak ref with an old referent,
     * re-pointed at a young object that then dies in a partial collection, reads NULL. */
    roots[4000] = (jl_value_t *)new_pair(ptls, next_id++);
    jl_weakref_t *dw = jl_gc_new_weakref(roots[4000]);
    roots[4001] = (jl_value_t *)dw;
    jl_gc_collect(JL_GC_FULL);
    jl_gc_collect(JL_GC_FULL); /* the weak ref and its referent are old */
    pair_t *young = new_pair(ptls, next_id++);
    dw->value = (jl_value_t *)young;
    jl_gc_wb(dw, roots[4000]);
    CHECK(gc_weakref_get((gc_weakref_t *)dw) == (void *)young, "a direct store is read back");
    jl_gc_collect(JL_GC_INCREMENTAL);
    CHECK(dw->value == NULL, "the young referent of a direct store died, the weak ref still reads %p",
          (void *)dw->value);
    /* A directly stored young referent that lives stays, and is cleared when it dies. */
    roots[4002] = (jl_value_t *)new_pair(ptls, next_id++);
    dw->value = roots[4002];
    jl_gc_collect(JL_GC_INCREMENTAL);
    CHECK(dw->value == roots[4002], "a live young referent of a direct store was cleared");
    roots[4002] = NULL;
    jl_gc_collect(JL_GC_INCREMENTAL);
    CHECK(dw->value == NULL, "its young referent died, the weak ref still reads %p", (void *)dw->value);
    roots[4000] = roots[4001] = NULL;

    /* Weak handles. */
    roots[4] = (jl_value_t *)new_pair(ptls, next_id++);
    gc_weak_handle_t *h = gc_weak_handle_new(heap, roots[4]);
    jl_gc_collect(JL_GC_FULL);
    CHECK(gc_weak_handle_get(h) == roots[4], "handle lost a rooted object");
    roots[4] = NULL;
    jl_gc_collect(JL_GC_FULL);
    CHECK(gc_weak_handle_get(h) == NULL, "handle not cleared");
    gc_weak_handle_delete(h);

    /* Finalizers counting calls, each object with a child: threads attached by jl_init
     * run pending finalizers right after the collections they run. */
    queue = gc_refqueue_new(heap);
    CHECK(gc_refqueue_set_notify(queue, on_tokens, &notified) == 0, "set_notify");
    uint64_t first = next_id;
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < 100; i++) {
            pair_t *p = new_pair(ptls, next_id++);
            roots[10 + i] = (jl_value_t *)p;
            p->a = (jl_value_t *)new_pair(ptls, next_id++);
            jl_gc_wb(p, p->a);
            jl_gc_add_ptr_finalizer(ptls, (jl_value_t *)p, (void *)count_fin);
            CHECK(gc_refqueue_register(queue, (jl_value_t *)p, (uintptr_t)p->id) == 0, "register");
        }
        jl_gc_collect(r % 2 ? JL_GC_FULL : JL_GC_INCREMENTAL);
        for (int i = 0; i < 100; i++) roots[10 + i] = NULL;
        size_t before = fin_total;
        jl_gc_collect(JL_GC_INCREMENTAL); /* finds them; runs their finalizers after */
        CHECK(fin_total == before + 100, "round %d: %zu finalizers ran", r, fin_total - before);
    }
    jl_gc_collect(JL_GC_FULL); /* the finalized objects die now: tokens */
    for (uint64_t id = first; id < next_id; id += 2)
        CHECK(fin_calls[id] == 1, "finalizer of %llu ran %d times", (unsigned long long)id, fin_calls[id]);
    CHECK(notified > 0, "no queue notification");
    pthread_t t;
    void *drained;
    pthread_create(&t, NULL, drain_thread, NULL);
    pthread_join(t, &drained);
    CHECK((size_t)drained == (size_t)rounds * 100, "drained %zu tokens", (size_t)drained);
    for (uint64_t id = first; id < next_id; id += 2)
        CHECK(token_seen[id] == 1, "token %llu seen %d times", (unsigned long long)id, token_seen[id]);

    /* A resurrecting finalizer: the object lives on; its finalizer never runs again. */
    pair_t *z = new_pair(ptls, next_id++);
    roots[5] = (jl_value_t *)z;
    jl_gc_add_ptr_finalizer(ptls, (jl_value_t *)z, (void *)resurrect_fin);
    roots[5] = NULL;
    jl_gc_collect(JL_GC_FULL);
    CHECK(resurrect_calls == 1 && roots[NROOTS - 1] == (jl_value_t *)z, "not resurrected");
    jl_gc_collect(JL_GC_FULL);
    CHECK(z->magic == MAGIC, "resurrected object corrupted");
    roots[NROOTS - 1] = NULL;
    jl_gc_collect(JL_GC_FULL);
    jl_gc_collect(JL_GC_FULL);
    CHECK(resurrect_calls == 1, "a resurrected object's finalizer ran again");

    /* jl_finalize runs them now, once; inside a finalizer it defers. */
    pair_t *f = new_pair(ptls, next_id++);
    roots[6] = (jl_value_t *)f;
    jl_gc_add_ptr_finalizer(ptls, (jl_value_t *)f, (void *)count_fin);
    jl_gc_add_ptr_finalizer(ptls, (jl_value_t *)f, (void *)count_fin);
    jl_finalize((jl_value_t *)f);
    CHECK(fin_calls[f->id] == 2, "jl_finalize ran %d", fin_calls[f->id]);
    jl_finalize((jl_value_t *)f);
    CHECK(fin_calls[f->id] == 2, "jl_finalize twice ran them again");
    pair_t *outer = new_pair(ptls, next_id++);
    roots[7] = (jl_value_t *)outer;
    outer->a = (jl_value_t *)new_pair(ptls, next_id++);
    jl_gc_wb(outer, outer->a);
    uint64_t inner_id = ((pair_t *)outer->a)->id;
    jl_gc_add_ptr_finalizer(ptls, outer->a, (void *)count_fin);
    jl_gc_add_ptr_finalizer(ptls, (jl_value_t *)outer, (void *)outer_fin);
    jl_finalize((jl_value_t *)outer);
    CHECK(outer_calls == 1 && fin_calls[inner_id] == 1, "deferred finalize: %zu %d", outer_calls,
          fin_calls[inner_id]);

    /* jl_gc_enable_finalizers: disabled, collections leave them pending. */
    jl_gc_enable_finalizers(NULL, 0);
    pair_t *g = new_pair(ptls, next_id++);
    jl_gc_add_ptr_finalizer(ptls, (jl_value_t *)g, (void *)count_fin);
    uint64_t gid = g->id;
    jl_gc_collect(JL_GC_FULL);
    CHECK(gc_pending_finalizers(heap) == 1, "pending %zu", gc_pending_finalizers(heap));
    jl_gc_run_pending_finalizers(NULL);
    CHECK(fin_calls[gid] == 0, "ran while disabled");
    jl_gc_enable_finalizers(NULL, 1);
    CHECK(fin_calls[gid] == 1 && gc_pending_finalizers(heap) == 0, "not run when re-enabled");

    /* The weak-processing hook keeps the values of marked keys (an ephemeron table whose
     * chain needs several rounds). */
    CHECK(gc_set_callback(heap, GC_CB_WEAK_PROCESSING, (void *)weak_hook, 1) == 0, "hook: %s",
          jl_gc_last_error());
    roots[8] = (jl_value_t *)new_pair(ptls, next_id++);
    for (int i = NEPH - 1; i >= 0; i--) {
        eph_value[i] = (jl_value_t *)new_pair(ptls, next_id++);
        roots[20 + i] = eph_value[i]; /* until the table is complete */
    }
    for (int i = 0; i < NEPH; i++) eph_key[i] = i == 0 ? roots[8] : eph_value[i - 1];
    gc_weak_handle_t *last = gc_weak_handle_new(heap, eph_value[NEPH - 1]);
    for (int i = 0; i < NEPH; i++) roots[20 + i] = NULL;
    jl_gc_collect(JL_GC_FULL);
    CHECK(hook_calls >= NEPH, "hook ran %zu times", hook_calls);
    for (int i = 0; i < NEPH; i++)
        CHECK(((pair_t *)eph_value[i])->magic == MAGIC, "ephemeron value %d lost", i);
    CHECK(gc_weak_handle_get(last) == eph_value[NEPH - 1], "hook-kept value cleared");
    roots[8] = NULL;
    jl_gc_collect(JL_GC_FULL);
    CHECK(gc_weak_handle_get(last) == NULL, "value of a dead key kept");
    memset(eph_key, 0, sizeof eph_key);
    gc_weak_handle_delete(last);
    CHECK(gc_set_callback(heap, GC_CB_WEAK_PROCESSING, (void *)weak_hook, 0) == 0, "hook removal");
    CHECK(gc_is_marked(gc_current_mutator(), roots[2]) == 0 && jl_gc_last_error() != NULL,
          "gc_is_marked outside a collection not refused");

    /* Bad use gets an error, not a crash. */
    jl_gc_clear_error();
    jl_gc_add_ptr_finalizer(ptls, NULL, (void *)count_fin);
    CHECK(jl_gc_last_error() && strstr(jl_gc_last_error(), "NULL"), "NULL object: %s", jl_gc_last_error());
    jl_gc_clear_error();
    jl_gc_add_ptr_finalizer(ptls, roots[2], NULL);
    CHECK(jl_gc_last_error() != NULL, "NULL finalizer accepted");
    jl_gc_clear_error();
    CHECK(gc_weakref_set(gc_current_mutator(), (gc_weakref_t *)roots[2], NULL) == -1, "set on a pair");
    CHECK(jl_gc_last_error() && strstr(jl_gc_last_error(), "not a weak-reference object"), "%s",
          jl_gc_last_error());
    /* Memory that is no object of the heap (malloc'd, here) is refused before anything is
     * read from it (run under valgrind too: no read before the block). */
    void *not_ours = malloc(64);
    CHECK(gc_weakref_set(gc_current_mutator(), (gc_weakref_t *)not_ours, roots[2]) == -1,
          "malloc'd weak ref accepted");
    CHECK(jl_gc_last_error() && strstr(jl_gc_last_error(), "not an allocated object"), "%s",
          jl_gc_last_error());
    free(not_ours);
    jl_gc_clear_error();
    CHECK(jl_gc_alloc_typed(ptls, 8, gc_weakref_type(heap)) == NULL, "weak ref type allocated");
    jl_gc_clear_error();
    jl_gc_enable_finalizers(NULL, 1);
    CHECK(jl_gc_last_error() && strstr(jl_gc_last_error(), "already enabled"), "%s", jl_gc_last_error());
    jl_gc_clear_error();
    jl_gc_run_pending_finalizers((jl_task_t *)&failures);
    CHECK(jl_gc_last_error() && strstr(jl_gc_last_error(), "not the calling thread"), "%s",
          jl_gc_last_error());

    gc_stats_t st;
    gc_stats(heap, &st);
    CHECK(st.weak_refs_cleared >= 3 && st.finalizers_run == fin_total + resurrect_calls + outer_calls &&
              st.tokens_queued == (uint64_t)rounds * 100,
          "stats: cleared %llu run %llu tokens %llu", (unsigned long long)st.weak_refs_cleared,
          (unsigned long long)st.finalizers_run, (unsigned long long)st.tokens_queued);

    gc_refqueue_delete(queue);
    printf("weakfin: %zu finalizers, %llu weak refs cleared, %llu tokens, %zu hook calls, %s\n",
           fin_total, (unsigned long long)st.weak_refs_cleared, (unsigned long long)st.tokens_queued,
           hook_calls, failures ? "FAILED" : "ok");
    jl_gc_thread_detach();
    return failures ? 1 : 0;
}
