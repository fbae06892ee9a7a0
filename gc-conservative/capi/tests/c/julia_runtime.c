/*
 * The Julia runtime names of the Julia-compatibility prefix, used the way an unmodified
 * julia-gcext client uses them (GAP's julia_gc.c, weakptr.c, gap.c): compiled against
 * the prefix's <julia.h> (gc-core/include/julia) and linked with libgc_conservative,
 * which the prefix installs as lib/libjulia.so.
 *
 *   julia_runtime names     the globals, type checks, tasks, threads, versions, no-ops
 *   julia_runtime restore   jl_set_safe_restore: faulting reads return to the restore point
 *   julia_runtime fault     a fault with no restore point still kills the process (SIGSEGV)
 *   julia_runtime threads   prints jl_n_gcthreads (the marking a 1.6 client gets)
 */
#define _GNU_SOURCE
#include <julia.h>
#include <julia_gcext.h>
#include <julia_threads.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define CHECK(c)                                                                       \
    do {                                                                               \
        if (!(c)) {                                                                    \
            fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n", __FILE__,    \
                    __LINE__, #c, jl_gc_last_error() ? jl_gc_last_error() : "none");   \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

static uintptr_t mark_pair(jl_ptls_t ptls, jl_value_t *obj)
{
    jl_value_t **slots = (jl_value_t **)obj;
    return (uintptr_t)jl_gc_mark_queue_obj(ptls, slots[0]) +
           (uintptr_t)jl_gc_mark_queue_obj(ptls, slots[1]);
}

static jl_value_t *root_obj;

static void scan_roots(int full)
{
    (void)full;
    jl_gc_mark_queue_obj(jl_get_ptls_states(), root_obj);
}

static int adopted_count;

static void *adopt(void *arg)
{
    (void)arg;
    CHECK(jl_adopt_thread() != NULL);
    adopted_count = jl_n_threads;
    CHECK(jl_gc_thread_detach() == 0);
    return NULL;
}

static int names(void)
{
    CHECK(jl_any_type == NULL && jl_datatype_type == NULL);
    jl_init();
    jl_ptls_t ptls = jl_get_ptls_states();
    CHECK(ptls != NULL);
    jl_gc_set_cb_root_scanner(scan_roots, 1);
    CHECK(jl_any_type != NULL && jl_datatype_type != NULL && jl_weakref_type != NULL);
    CHECK(jl_is_datatype(jl_any_type));
    CHECK(jl_is_datatype(jl_weakref_type));
    CHECK(jl_typeof((jl_value_t *)jl_any_type) == (jl_value_t *)jl_datatype_type);
    CHECK(jl_nothing == NULL);
    CHECK(jl_main_module != NULL);
    CHECK(strncmp(jl_ver_string(), "1.6", 3) == 0);
    CHECK(JULIA_VERSION_MAJOR == 1 && JULIA_VERSION_MINOR == 6);

    /* GAP's types: a foreign type under jl_any_type in jl_main_module. */
    jl_datatype_t *pair = jl_new_foreign_type(jl_symbol("Pair"), jl_main_module, jl_any_type,
                                              mark_pair, NULL, 1, 0);
    CHECK(pair != NULL && jl_is_datatype(pair));
    jl_set_const(jl_main_module, jl_symbol("Pair"), (jl_value_t *)pair);
    jl_value_t *p = jl_gc_alloc_typed(ptls, 2 * sizeof(void *), pair);
    CHECK(p != NULL && jl_typeis(p, pair) && !jl_typeis(p, jl_any_type));
    /* "young and unmarked", always */
    CHECK(jl_astaggedvalue(p)->bits.gc == 0);

    /* A weak reference: its type, and a cleared one reads jl_nothing. */
    jl_value_t *target = jl_gc_alloc_typed(ptls, 2 * sizeof(void *), pair);
    jl_weakref_t *wr = jl_gc_new_weakref(target);
    CHECK(wr != NULL && jl_typeis(wr, jl_weakref_type) && wr->value == target);
    ((jl_value_t **)p)[0] = (jl_value_t *)wr;
    jl_gc_wb(p, wr);
    root_obj = p;
    jl_value_t *keep = p;
    target = NULL;
    jl_gc_collect(JL_GC_FULL);
    CHECK(((jl_weakref_t *)((jl_value_t **)keep)[0])->value == jl_nothing);

    /* Threads Julia knows about. */
    CHECK(jl_n_threads == 1);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, adopt, NULL) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    CHECK(adopted_count == 2 && jl_n_threads == 1);

    /* Tasks. */
    jl_task_t *ct = jl_get_current_task();
    CHECK(ct != NULL && ct == jl_gc_current_task());
    char *a0, *a1, *t0, *t1;
    jl_active_task_stack(ct, &a0, &a1, &t0, &t1);
    char here;
    CHECK(t0 < t1 && a1 == t1 && a0 >= t0 && a0 < t1);
    CHECK(&here >= t0 && &here < t1 && a0 <= &here + 4096);
    size_t size;
    int tid;
    CHECK((char *)jl_task_stack_buffer(ct, &size, &tid) == t0 && t0 + size == t1);
    jl_active_task_stack(NULL, &a0, &a1, &t0, &t1);
    CHECK(a0 == NULL && a1 == NULL && t0 == NULL && t1 == NULL);

    /* Conservative support: always on here; the call is recorded. */
    CHECK(jl_gc_conservative_gc_support_enabled() == 0);
    CHECK(jl_gc_enable_conservative_gc_support() == 0);
    CHECK(jl_gc_enable_conservative_gc_support() == 1);
    CHECK(jl_gc_conservative_gc_support_enabled() == 1);
    CHECK(jl_gc_internal_obj_base_ptr((char *)keep + 3) == keep);

    jl_atexit_hook(0);
    printf("names: ok\n");
    return 0;
}

/* Reads *p under a restore point, as GAP's SafeScanTaskStack does. */
static int guarded_read(volatile char *p, char *out)
{
    volatile jl_jmp_buf *old = (volatile jl_jmp_buf *)jl_get_safe_restore();
    jl_jmp_buf buf;
    int faulted = 1;
    if (!jl_setjmp(buf, 0)) {
        jl_set_safe_restore(&buf);
        *out = *p;
        faulted = 0;
    }
    jl_set_safe_restore((jl_jmp_buf *)old);
    return faulted;
}

static int restore(void)
{
    jl_init();
    long page = 4096;
    char *m = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(m != MAP_FAILED);
    m[0] = 42;
    CHECK(mprotect(m + page, page, PROT_NONE) == 0);
    CHECK(jl_get_safe_restore() == NULL);
    char v = 0;
    for (int i = 0; i < 3; i++) {
        CHECK(guarded_read(m, &v) == 0 && v == 42);
        CHECK(guarded_read(m + page + 8 * i, &v) == 1);
        CHECK(jl_get_safe_restore() == NULL);
    }
    printf("restore: ok\n");
    return 0;
}

static int fault(void)
{
    jl_init();
    char v;
    /* installs the handler */
    CHECK(guarded_read((volatile char *)&v, &v) == 0);
    volatile char *bad = (volatile char *)16;
    printf("fault: reading %p with no restore point\n", (void *)bad);
    fflush(stdout);
    v = *bad;
    printf("fault: survived (wrong)\n");
    return 1;
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "names";
    if (!strcmp(what, "names"))
        return names();
    if (!strcmp(what, "restore"))
        return restore();
    if (!strcmp(what, "fault"))
        return fault();
    if (!strcmp(what, "threads")) {
        jl_init();
        printf("gcthreads=%d\n", jl_n_gcthreads);
        return 0;
    }
    fprintf(stderr, "unknown case %s\n", what);
    return 2;
}
