/*
 * julia.h of the Julia-compatibility prefix (cargo xtask julia-prefix DIR
 * [--julia-version 1.6|1.10]): what a client written against Julia's julia.h for its GC
 * extensions (GAP's julia_gc.c, configured --with-gc=julia) needs to compile unchanged
 * against gc-core and gc-conservative, with no libjulia: the GC-extension API and the
 * runtime names of julia_gcext_compat.h, plus the few macros of Julia's julia.h such
 * clients use. Link with the prefix's lib/libjulia.so (gc-runtime's C library, which
 * carries gc-core's and gc-conservative's).
 *
 * The version in julia_version.h is the Julia the client is written for, and jl_init()
 * tells the runtime (jl_gc_compat_init(JULIA_VERSION_MAJOR, JULIA_VERSION_MINOR)):
 * - 1.6: marking on one thread, as Julia before 1.10 (GAP 4.12's mark functions count
 *   young references in a global); GC_CORE_MARK_THREADS=N opts into parallel marking.
 *   Task scanners run on the collecting thread, once per task.
 * - 1.10: parallel marking by default (one mark thread per core; jl_n_gcthreads says
 *   how many threads mark), mark functions run on every marking thread with its ptls,
 *   task scanners run as mark work on whichever thread marks the task (several at
 *   once), with "is its thread's root task" as second argument, as Julia 1.10 does.
 *
 * What is real and what is not:
 * - jl_typeis, jl_is_datatype: real (type pointer comparisons).
 * - jl_astaggedvalue(v)->bits.gc:
 *   1.10: real. Julia's two GC bits of v, computed from gc-core's header and the calling
 *   thread's marker: 2 = old, 1 = marked (while a collection marks on this thread; in a
 *   partial collection every old object counts as marked, as in Julia's), and between
 *   collections Julia's values there (young 0, old 3, an old object in the remembered
 *   set 1). A task reads 0 (young): a client never takes a task's stack for unchanged
 *   since the last collection (what GAP itself does since gap #6528). Read-only: the
 *   pointer is to a per-thread copy.
 *   1.6: always 0, "young and unmarked": the client's generic path (GAP's MarkBag queues
 *   the object and counts its young result, which gives the same answer), so every
 *   reference goes through jl_gc_mark_queue_obj, where gc-core counts young children
 *   itself: a lost increment of a mark function's global count (GAP 4.12's YoungRef
 *   with parallel marking opted into) cannot lose a remembered-set entry.
 * - jl_nothing is NULL (what a cleared weak reference reads); jl_main_module is opaque;
 *   jl_set_const does nothing; jl_atexit_hook runs the finalizers.
 */
#ifndef JULIA_H
#define JULIA_H

#include "julia_version.h"
#include "julia_gcext_compat.h"

#define JL_DLLEXPORT __attribute__((visibility("default")))

typedef struct _jl_taggedvalue_t jl_taggedvalue_t;
struct _jl_taggedvalue_t {
    union {
        uintptr_t header;
        struct {
            uintptr_t gc : 2;
        } bits;
    };
};

#if JULIA_VERSION_MINOR >= 10 && !defined(GC_CORE_CHECKED)

/* Julia's GC bits of v (see above): from v's header word and, while this thread marks,
 * its marker's parities (gc_mark_fast_t). */
static inline uintptr_t gc_compat_julia_bits(const void *v)
{
    uintptr_t h = GC_COMPAT_HDR(v);
    const gc_tls_head_t *own = gc_compat_own_marking_head(gc_compat_self());
    const gc_mark_fast_t *mk = own ? (const gc_mark_fast_t *)own->marker : NULL;
    if (h & GC_HDR_OLD) {
        if (mk == NULL)
            return (h & GC_HDR_REMEMBERED) ? 1 : 3;
        return 2 | (uintptr_t)((h & mk->old_mask) == mk->old_want);
    }
    if (mk == NULL)
        return 0;
    return (uintptr_t)((h & (GC_HDR_AGE | GC_HDR_MARK)) == mk->young_marked);
}

static inline jl_taggedvalue_t *gc_compat_tagged(const void *v)
{
    static __thread jl_taggedvalue_t t;
    t.header = gc_compat_julia_bits(v);
    return &t;
}
#define jl_astaggedvalue(v) gc_compat_tagged((const void *)(v))

#else

/* "Young and unmarked", for every object (see above). */
static inline jl_taggedvalue_t *gc_compat_untagged(void)
{
    static __thread jl_taggedvalue_t t;
    t.header = 0;
    return &t;
}
#define jl_astaggedvalue(v) ((void)(v), gc_compat_untagged())

#endif

#define jl_typeis(v, t) (jl_typeof((jl_value_t *)(v)) == (jl_value_t *)(t))
#define jl_is_datatype(v) jl_typeis((v), jl_datatype_type)

#define jl_init() jl_gc_compat_init(JULIA_VERSION_MAJOR, JULIA_VERSION_MINOR)

#endif /* JULIA_H */
