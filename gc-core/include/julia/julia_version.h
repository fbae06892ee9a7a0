/* julia_version.h of the Julia-compatibility prefix: the Julia version a client is
 * compiled for, which decides what the runtime gives it (see julia.h): 1.6 (the
 * julia-gcext API as GAP 4.12 uses it: marking on one thread) or 1.10 (GAP 4.13 and
 * later: parallel marking, mark functions given the marking thread's ptls, the task
 * scanner called by the marking threads, real GC bits from jl_astaggedvalue).
 * `cargo xtask julia-prefix DIR --julia-version X.Y` writes the prefix's copy with the
 * version fixed in place of the block below; compiled from this folder directly, it is
 * 1.6 unless the compiler is given -DGC_COMPAT_JULIA_MINOR=10. */
#ifndef JL_VERSION_H
#define JL_VERSION_H
#ifndef GC_COMPAT_JULIA_MINOR
#define GC_COMPAT_JULIA_MINOR 6
#endif
#if GC_COMPAT_JULIA_MINOR != 6 && GC_COMPAT_JULIA_MINOR != 10
#error "the Julia-compatibility prefix speaks Julia 1.6 or 1.10 (GC_COMPAT_JULIA_MINOR 6 or 10)"
#endif
#define GC_COMPAT_STR_(x) #x
#define GC_COMPAT_STR(x) GC_COMPAT_STR_(x)
#define JULIA_VERSION_STRING "1." GC_COMPAT_STR(GC_COMPAT_JULIA_MINOR) ".0-gccore"
#define JULIA_VERSION_MAJOR 1
#define JULIA_VERSION_MINOR GC_COMPAT_JULIA_MINOR
#define JULIA_VERSION_PATCH 0
#define JULIA_VERSION_IS_RELEASE 0
#endif /* JL_VERSION_H */
