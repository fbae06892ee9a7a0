/*
 * julia.h of the Julia-compatibility prefix (cargo xtask julia-prefix DIR): what a
 * client written against Julia 1.6's julia.h for its GC extensions (GAP's julia_gc.c,
 * configured --with-gc=julia) needs to compile unchanged against gc-core and
 * gc-conservative, with no libjulia: the GC-extension API and the runtime names of
 * julia_gcext_compat.h, plus the few macros of Julia's julia.h such clients use.
 * Link with the prefix's lib/libjulia.so (gc-conservative's C library, which carries
 * gc-core's).
 *
 * What is real and what is not:
 * - jl_init() expands to jl_gc_compat_init(1, 6): a client written for Julia 1.6 gets
 *   the single-threaded marking it was written for; GC_CORE_MARK_THREADS=N opts into
 *   parallel marking (mark functions must then keep their state per thread).
 * - jl_typeis, jl_is_datatype: real (type pointer comparisons).
 * - jl_astaggedvalue(v)->bits.gc: always 0, "young and unmarked". gc-core's header bits
 *   mean other things (a mark bit relative to a parity that flips every collection), so
 *   Julia's values cannot be read from them. A client that uses the field as a
 *   shortcut then takes its generic path (GAP's MarkBag queues the object and counts
 *   its young result, which gives the same answer; GAP's task scanner rescans every
 *   task). Never write through it.
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

/* "Young and unmarked", for every object (see above). */
static inline jl_taggedvalue_t *gc_compat_untagged(void)
{
    static jl_taggedvalue_t t;
    t.header = 0;
    return &t;
}
#define jl_astaggedvalue(v) ((void)(v), gc_compat_untagged())

#define jl_typeis(v, t) (jl_typeof((jl_value_t *)(v)) == (jl_value_t *)(t))
#define jl_is_datatype(v) jl_typeis((v), jl_datatype_type)

#define jl_init() jl_gc_compat_init(JULIA_VERSION_MAJOR, JULIA_VERSION_MINOR)

#endif /* JULIA_H */
