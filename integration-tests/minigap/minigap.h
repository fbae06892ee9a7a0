/*
 * minigap.h: the public C API of minigap, a small GAP-like kernel (bags through master
 * pointers, a subset of the GAP language, permutation groups, big integers) whose memory
 * is managed either by gc-core + gc-conservative with threads serialised by gil
 * ("ours"), or by Boehm GC ("boehm").
 *
 * One kernel per backend per process. Each backend is one translation unit
 * (unity_ours.c, unity_boehm.c) whose exported names carry a prefix: mg_ours_* and
 * mg_boehm_*. A C program that uses one backend includes this header with MG_PREFIX
 * left at its default (mg_ours_) or set before including it.
 *
 * Threads: a thread calls thread_attach once (it then runs no kernel code and counts as
 * stopped for the GC), eval any number of times (each call takes the GIL for its
 * duration, polling it so other threads get their turn), and thread_detach. Every
 * function returns 0 (or a value) on success and -1 on error, with a message in
 * last_error(); a script error is a GAP-style message naming the line, never a crash.
 */
#ifndef MINIGAP_H
#define MINIGAP_H

#include <stddef.h>
#include <stdint.h>

#ifndef MG_PREFIX
#define MG_PREFIX mg_ours_
#endif
#define MG_CAT2_(a, b) a##b
#define MG_CAT_(a, b) MG_CAT2_(a, b)
#define MG(name) MG_CAT_(MG_PREFIX, name)

#ifdef __cplusplus
extern "C" {
#endif

/* Kernel configuration (mg_*_config_default fills the defaults). */
typedef struct mg_config {
    uint64_t gc_stress;          /* collect every N allocations per thread (0: off) */
    int conservative;            /* 1: scan every thread's stack (default); 0: off */
    int track_bags;              /* 1: count every bag's death (for checks; slower) */
    int verify;                  /* 1: gc-core verify mode (remembered-set check) */
    int debug_newly_marked;      /* 1: count young children as "newly marked" (Julia's
                                    trap; the young-counting test must then fail) */
    int debug_skip_stopped_stacks_in_partial; /* 1: do not rescan other threads' stacks in
                                    partial collections (GAP.jl #1032; must then fail) */
    uint64_t switch_interval_us; /* GIL switch interval (default 5000) */
    size_t min_interval;         /* gc-core: bytes before the first collection (0: default) */
} mg_config;

/* Statistics (mg_*_stats). Pause figures are nanoseconds. */
typedef struct mg_stats {
    uint64_t full_collections;
    uint64_t partial_collections;
    uint64_t total_pause_ns;
    uint64_t max_pause_ns;
    uint64_t p50_pause_ns;
    uint64_t bytes_allocated;
    uint64_t live_bytes;
    uint64_t heap_bytes;          /* heap size the backend reports */
    uint64_t bags_allocated;      /* NewBag calls */
    uint64_t bags_freed;          /* bag deaths seen (track_bags only) */
    uint64_t free_functions_run;  /* TNUM free functions run */
    uint64_t double_sweeps;       /* bags swept twice: must stay 0 */
    uint64_t ext_mallocs;         /* malloc'd big-integer buffers */
    uint64_t ext_frees;           /* ... freed by their bag's free function */
    uint64_t host_releases;       /* host objects released */
    uint64_t verify_errors;       /* gc-core verify-mode errors */
} mg_stats;

/* What mg_*_check_live found after a full collection. */
typedef struct mg_live_report {
    uint64_t live_bags;           /* bags allocated minus bags that died (track_bags) */
    uint64_t reachable_bags;      /* bags reachable from the global bags and roots */
    uint64_t ext_live;            /* malloc'd buffers not freed */
    uint64_t ext_reachable;       /* of which reachable from the globals */
} mg_live_report;

/* Output of Print, by whole lines (the last partial line at the end of an eval). */
typedef void (*mg_output_fn)(void *data, const char *text, size_t len);
/* Releases a host object when the bag that holds it dies. */
typedef void (*mg_host_release_fn)(void *handle);

void MG(config_default)(mg_config *cfg);
int MG(init)(const mg_config *cfg);
const char *MG(last_error)(void);
int MG(thread_attach)(const char *name, mg_output_fn out, void *data);
int MG(thread_detach)(void);
/* Evaluates GAP code in the calling thread's own global namespace. */
int MG(eval)(const char *code, const char *filename);
/* Runs a full (1) or partial (0) collection from the calling (attached) thread. */
int MG(collect)(int full);
int MG(stats)(mg_stats *out);
/* A full collection, then counts live and reachable bags (needs track_bags). */
int MG(check_live)(mg_live_report *out);
/* Host objects: binds global `name` of the calling thread to a new bag holding
   `handle`; `release` runs once when that bag dies. */
int MG(set_host_release)(mg_host_release_fn release);
int MG(bind_host)(const char *name, void *handle);
/* Roots held by the host: roots the value of global `name` (returns a root id >= 0). */
int64_t MG(root_global)(const char *name);
/* Binds global `name` of the calling thread to the value a root holds. */
int MG(root_to_global)(int64_t root, const char *name);
int MG(root_release)(int64_t root);
/* Number of live host roots. */
int64_t MG(root_count)(void);
/* Test helpers: the young-counting and stopped-stack scenarios, run inside the kernel;
   0 if the kernel behaved correctly, 1 if the bag in question was lost, -1 on error. */
int MG(scenario_young_counting)(void);
int MG(scenario_stopped_stack_hold)(uint64_t hold_us, int in_gil_wait);

#ifdef __cplusplus
}
#endif
#endif /* MINIGAP_H */
