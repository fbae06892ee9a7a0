/*
 * gc_core.h: gc-core's native C API (explicit heaps). Generated from gc-core/capi/src by
 * cbindgen; do not edit (UPDATE_HEADERS=1 cargo test -p gc-core-capi --test it headers).
 * The seed's names are in julia_gcext_compat.h.
 */
#ifndef GC_CORE_H
#define GC_CORE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
/* BEGIN rt_status: generated from support/ffi (ffi_support::c_block), the same in every header. */
#ifndef RT_STATUS_DEFINED
#define RT_STATUS_DEFINED
/* The workspace's one C convention: a function that can fail returns an rt_status
 * (RT_OK, or a negative RT_ERR_* code; a crate's own names are aliases of these) or
 * NULL, and leaves a message, per thread, for its library's *_last_error(). No
 * panic crosses the boundary: it becomes RT_ERR_PANIC (or NULL) and a message. */
typedef int32_t rt_status;
#define RT_OK                    0     /* success */
#define RT_ERR_ARG               (-1)  /* a NULL pointer, a bad handle or string, a value out of range */
#define RT_ERR_SHUT_DOWN         (-2)  /* shut down: the thread must leave */
#define RT_ERR_STOPPED           (-3)  /* the thread was asked to stop: unwind */
#define RT_ERR_NOT_ATTACHED      (-4)  /* the calling thread is not attached */
#define RT_ERR_ALREADY_ATTACHED  (-5)  /* the calling thread is already attached */
#define RT_ERR_NOT_HOLDER        (-6)  /* released a lock the thread does not hold */
#define RT_ERR_NOT_FOUND         (-7)  /* no such thread id, symbol or entry */
#define RT_ERR_TIMEOUT           (-8)  /* a wait ran out of time */
#define RT_ERR_PANIC             (-9)  /* an internal panic, caught at the C boundary */
#define RT_ERR_CONFIG            (-10) /* a configuration value is out of range */
#define RT_ERR_ALREADY_SHUT_DOWN (-11) /* shutdown was already called */
#define RT_ERR_INSIDE_ACTION     (-12) /* not allowed inside a safepoint action */
#define RT_ERR_INSIDE_HOOK       (-13) /* not allowed inside a block/unblock hook */
#define RT_ERR_INSIDE_REGION     (-14) /* not allowed inside a blocking region */
#define RT_ERR_STATE             (-15) /* not allowed in the current state */
#define RT_ERR_OOM               (-16) /* out of memory or over a memory cap */
#define RT_ERR_LOAD              (-17) /* loading foreign code failed */
#define RT_ERR_REFUSED           (-18) /* a lower layer refused: the message has its text */
#endif
/* END rt_status */


/**
 * `gc_set_callback` kinds. pre_gc, `void (*)(int full)`: called once per collection on
 * the collecting thread with the world stopped, once the collection is decided full or
 * partial (`full`) and before anything is marked. The threads' remembered sets are
 * merged after the pre-GC callbacks (Julia's order), so a write barrier one issues
 * counts for the collection it runs in: `gc_wb_back` on an old object the program
 * stored young references into without barriers (GAP's PreGCHook does this for its
 * current local-variables bag) keeps them alive in that partial collection.
 */
#define GC_CB_PRE_GC 0

/**
 * post_gc.
 */
#define GC_CB_POST_GC 1

/**
 * root_scanner.
 */
#define GC_CB_ROOT_SCANNER 2

/**
 * task_scanner.
 */
#define GC_CB_TASK_SCANNER 3

/**
 * notify_external_alloc.
 */
#define GC_CB_NOTIFY_EXTERNAL_ALLOC 4

/**
 * notify_external_free.
 */
#define GC_CB_NOTIFY_EXTERNAL_FREE 5

/**
 * The weak-processing hook, `void (*)(int full)`: called between mark and sweep, before
 * weak references are cleared; it asks `gc_is_marked` and may keep objects alive with
 * `gc_mark_queue_obj`, through the collecting thread's mutator (`gc_current_mutator`).
 */
#define GC_CB_WEAK_PROCESSING 6

/**
 * `gc_collect` kinds (same values as the seed's `jl_gc_collection_t`).
 */
#define GC_COLLECT_AUTO 0

/**
 * Full collection.
 */
#define GC_COLLECT_FULL 1

/**
 * Partial (young-generation) collection.
 */
#define GC_COLLECT_PARTIAL 2

/**
 * A heap (`gc_heap_t`): an opaque handle from `gc_heap_new` or `gc_default_heap`.
 */
typedef struct gc_heap_t gc_heap_t;

/**
 * A reference queue (`gc_refqueue_new`): an opaque handle.
 */
typedef struct gc_refqueue_t gc_refqueue_t;

/**
 * A persistent root (`gc_root_t`): an opaque handle from `gc_root_new`.
 */
typedef struct gc_root_t gc_root_t;

/**
 * A weak handle for the embedder (`gc_weak_handle_new`), outside the heap: an opaque
 * handle.
 */
typedef struct gc_weak_handle_t gc_weak_handle_t;

/**
 * A mutator thread's state (opaque; the seed's `jl_ptls_t` points to one).
 */
typedef struct gc_mutator_t {
  uint8_t _opaque[0];
} gc_mutator_t;

/**
 * Heap configuration for `gc_heap_new`.
 */
typedef struct gc_config_t {
  /**
   * The least bytes allocated between two collections while fewer than `small_heap`
   * bytes are live (twice that from then on); the first collection comes after half.
   */
  size_t min_interval;
  /**
   * The next collection comes after `(old live + young_weight * young live) * growth`
   * bytes.
   */
  double growth;
  /**
   * Most bytes between two collections.
   */
  size_t max_interval;
  /**
   * Automatic collections are full when the old generation grew by this factor.
   */
  double full_growth;
  /**
   * Collect every N allocations per thread (0: off).
   */
  uint64_t stress_every;
  /**
   * Non-zero: verify the remembered set and every queued reference.
   */
  int verify;
  /**
   * Free pages kept mapped after a collection.
   */
  size_t keep_free_pages;
  /**
   * Collector threads marking in parallel (0: one per core; 1: the collecting thread
   * alone). Mark functions may then run on any of them, concurrently.
   */
  size_t mark_threads;
  /**
   * Non-zero: pool pages are swept after the world resumes, not inside the pause.
   */
  int lazy_sweep;
  /**
   * How much young survivors count towards the next interval (0.0 to 1.0).
   */
  double young_weight;
  /**
   * Extra bytes between collections for small and middle-sized heaps
   * (`live * headroom / (live + headroom)`; 0: none).
   */
  size_t headroom;
  /**
   * The interval may grow up to this multiple of the formula's to use free memory the
   * heap already holds resident (1.0 or less: off).
   */
  double resident_reuse;
  /**
   * Live bytes from which the least interval is `2 * min_interval` (0: always).
   */
  size_t small_heap;
  /**
   * Helper threads sweeping pool pages in the background after a collection: 0 or 1
   * (Julia's `--gcthreads=N,M`); only with `lazy_sweep` and more than one core.
   */
  size_t sweep_threads;
  /**
   * Old-generation size from which the room before a full collection grows with its
   * square root (`full_growth * sqrt(knee * old)`; 0: always `full_growth * old`).
   */
  size_t full_growth_knee;
  /**
   * Most times the room above that an automatic full collection may be put off by
   * when the last one found little garbage (the inverse of its yield; 1.0: never).
   */
  double full_defer;
  /**
   * Most bytes beyond that room a put-off full collection lets the old generation
   * grow by (shrinking to nothing at `full_growth_knee`).
   */
  size_t full_defer_bytes;
  /**
   * The pause partial collections should stay within, in microseconds: the young
   * generation shrinks (to a quarter at most) after longer ones (0: no goal).
   */
  uint64_t young_pause_goal_us;
} gc_config_t;

/**
 * A finalizer: `f(obj)`, called once after a collection found `obj` unreachable.
 */
typedef void (*gc_finalizer_t)(void *obj);

/**
 * A reference queue's notification: `f(data)`, called after a collection queued tokens.
 */
typedef void (*gc_notify_t)(void *data);

/**
 * Collection statistics for `gc_stats`.
 */
typedef struct gc_stats_t {
  /**
   * Full collections.
   */
  uint64_t full_collections;
  /**
   * Partial collections.
   */
  uint64_t partial_collections;
  /**
   * Objects allocated (threads report at collections and when they detach).
   */
  uint64_t objects_allocated;
  /**
   * Bytes allocated.
   */
  uint64_t bytes_allocated;
  /**
   * Bytes freed.
   */
  uint64_t bytes_freed;
  /**
   * Bytes live after the last collection.
   */
  uint64_t live_bytes;
  /**
   * Sweep functions run.
   */
  uint64_t sweep_functions_run;
  /**
   * Verify-mode errors found.
   */
  uint64_t verify_errors;
  /**
   * Total pause, in nanoseconds.
   */
  uint64_t total_pause_ns;
  /**
   * Longest pause, in nanoseconds.
   */
  uint64_t max_pause_ns;
  /**
   * Median pause, in nanoseconds.
   */
  uint64_t p50_pause_ns;
  /**
   * 99th-percentile pause, in nanoseconds.
   */
  uint64_t p99_pause_ns;
  /**
   * Weak references (objects and handles) cleared.
   */
  uint64_t weak_refs_cleared;
  /**
   * Finalizers queued to run.
   */
  uint64_t finalizers_queued;
  /**
   * Finalizers run.
   */
  uint64_t finalizers_run;
  /**
   * Reference-queue tokens queued.
   */
  uint64_t tokens_queued;
} gc_stats_t;

/**
 * A registered stack (opaque; the seed's `jl_task_t`).
 */
typedef struct gc_task_t {
  uint8_t _opaque[0];
} gc_task_t;

/**
 * Mark function: queue the children of `obj` with `gc_mark_queue_obj(m, child)` and
 * return how many of those calls returned non-zero (young children). It may run on any
 * collector thread (`mark_threads`) and concurrently with other mark functions: `m` is
 * the thread it runs on (queue through that one only); it must keep no unsynchronised
 * state of its own.
 */
typedef size_t (*gc_markfunc_t)(struct gc_mutator_t *m, void *obj);

/**
 * Sweep function: called once when a sweep finds a scheduled object dead.
 */
typedef void (*gc_sweepfunc_t)(void *obj);

/**
 * A weak-reference object (`gc_weakref_new`): a heap object whose one field reads the
 * referent, and reads NULL once a collection found the referent unreachable. Never a
 * root. C code reads `value` directly and may store a live object of the heap (or NULL)
 * into it directly, from the thread that owns the object, with no barrier needed (Julia
 * allows it; GAP's weakptr.c does it): every collection checks the referent of every
 * weak-reference object. `gc_weakref_set` does the same store after checking `wr`'s
 * type.
 */
typedef struct gc_weakref_t {
  /**
   * The referent, NULL once cleared.
   */
  void *value;
} gc_weakref_t;

/**
 * Allocates a zeroed object (`jl_gc_alloc_typed`). NULL on error (size 0, size over the
 * limit of a small foreign type, not a type, wrong thread, inside a collection).
 *
 * # Safety
 * `m` is null or a mutator pointer; `ty` anything (it is validated).
 */
void *gc_alloc(struct gc_mutator_t *m, size_t size, void *ty);

/**
 * The write barrier: call after storing `child` into `parent` (either may be NULL).
 *
 * # Safety
 * `m` null or a mutator pointer; `parent` and `child` null or live objects of its heap.
 */
void gc_wb(struct gc_mutator_t *m, void *parent, void *child);

/**
 * The backward barrier: call after storing possibly young references into `parent`.
 *
 * # Safety
 * As for `gc_wb`.
 */
void gc_wb_back(struct gc_mutator_t *m, void *parent);

/**
 * Schedules the sweep function of `obj` (once; a second call returns `RT_ERR_STATE`
 * and never causes a second sweep).
 *
 * # Safety
 * `m` null or a mutator pointer; `obj` null or a live object of its heap.
 */
int gc_schedule_sweep(struct gc_mutator_t *m, void *obj);

/**
 * The type of a live object (`jl_typeof`); NULL for NULL, and for a free or
 * never-used pool cell (whose header holds a free-list link or 0, never a type), so
 * that the seed's validity check `base_ptr(jl_typeof(obj)) != NULL` rejects them.
 *
 * # Safety
 * `obj` null or a live object (or a cell `is_internal_obj_alloc` reported).
 */
void *gc_typeof(void *obj);

/**
 * 1 if a live object is young (not yet promoted), 0 if it is old or NULL: the answer
 * `gc_mark_queue_obj` gives during marking, available at any time (for tests and
 * runtimes that want to know which generation an object is in).
 *
 * # Safety
 * `obj` null or a live object.
 */
int gc_is_young(void *obj);

/**
 * Registers (`enable` non-zero) or removes a C callback of `kind` (`GC_CB_*`). An
 * `RT_ERR_*` code if the heap handle is bad, the function is NULL, already registered,
 * or (on removal) not registered.
 *
 * # Safety
 * `f` null or a function of the kind's signature; `heap` any pointer (checked against
 * the live handles).
 */
int gc_set_callback(struct gc_heap_t *heap, int kind, void *f, int enable);

/**
 * Number of callbacks of `kind` registered on `heap` (a negative `RT_ERR_*` code on
 * error).
 */
int gc_callback_count(struct gc_heap_t *heap, int kind);

/**
 * Fills `cfg` with the default configuration, adjusted by the `GC_CORE_*` environment
 * variables when set (as for the default heap, see `gc_default_heap`).
 *
 * # Safety
 * `cfg` is null or points to writable memory for a `gc_config_t`.
 */
int gc_config_default(struct gc_config_t *cfg);

/**
 * The message of the last failed call on this thread, or NULL if none failed since
 * the last `gc_clear_error` (gc-core's C users test it for NULL; the text is
 * ffi-support's thread-local message). Valid until the next failing call on this
 * thread.
 */
const char *gc_last_error(void);

/**
 * The status (`RT_ERR_*`, an `rt_status`) of the last failed call on this thread, or
 * `RT_OK` if none failed since the last `gc_clear_error`: what a NULL return meant.
 */
int32_t gc_last_status(void);

/**
 * Forgets the last error of this thread.
 */
void gc_clear_error(void);

/**
 * Registers finalizer `f` for `obj` (Julia's `jl_gc_add_ptr_finalizer`). An
 * `RT_ERR_*` code on error (NULL object or function, bad thread, during a collection).
 *
 * # Safety
 * `m` null or a mutator pointer; `obj` anything (checked to be an allocated object of
 * the thread's heap); `f` null or a function of `gc_finalizer_t`'s type that may be
 * called once with `obj` (it must not free it).
 */
int gc_add_finalizer(struct gc_mutator_t *m, void *obj, gc_finalizer_t f);

/**
 * Runs the finalizers of `obj` now (`jl_finalize`); returns how many ran (0 inside a
 * finalizer: they are queued to run after it), a negative `RT_ERR_*` code on error.
 *
 * # Safety
 * `m` null or a mutator pointer; `obj` null or a live object of its heap.
 */
int gc_finalize(struct gc_mutator_t *m, void *obj);

/**
 * Runs the pending finalizers on the calling thread; returns how many ran (0 inside a
 * finalizer), a negative `RT_ERR_*` code on error (bad thread, during a collection, in
 * a GC-safe region).
 *
 * # Safety
 * `m` null or a mutator pointer.
 */
int gc_run_finalizers(struct gc_mutator_t *m);

/**
 * Runs every registered finalizer (reachable objects included) and the pending ones:
 * for shutdown, before `gc_heap_delete` (finalizers never run at heap deletion).
 * Returns how many ran, a negative `RT_ERR_*` code on error.
 *
 * # Safety
 * `m` null or a mutator pointer.
 */
int gc_run_all_finalizers(struct gc_mutator_t *m);

/**
 * Opts the calling thread in (non-zero) or out of running pending finalizers at its
 * safepoints (after collections it runs or stops for, when leaving a GC-safe region).
 * Off for `gc_thread_attach`, on for `jl_init`/`jl_adopt_thread`. An `RT_ERR_*` code
 * on error.
 *
 * # Safety
 * `m` null or a mutator pointer.
 */
int gc_set_finalizers_at_safepoints(struct gc_mutator_t *m, int on);

/**
 * Number of finalizers waiting to run on `heap` (0 and an error for a bad heap handle).
 */
size_t gc_pending_finalizers(struct gc_heap_t *heap);

/**
 * Creates a heap; `cfg` may be NULL for the defaults. NULL on error.
 *
 * # Safety
 * `cfg` is null or points to a valid `gc_config_t`.
 */
struct gc_heap_t *gc_heap_new(const struct gc_config_t *cfg);

/**
 * Destroys a heap created by `gc_heap_new`: `RT_OK`, or `RT_ERR_ARG` for a NULL,
 * unknown, already deleted or wrong-kind handle (or the default heap), `RT_ERR_STATE`
 * while threads are attached. Objects still rooted by roots, weak handles or queues of
 * the heap keep its memory until those are deleted too.
 */
int gc_heap_delete(struct gc_heap_t *heap);

/**
 * The process's default heap (the one the `jl_*` names use), created on first use
 * with the default configuration, adjusted by environment variables (as Julia's
 * `JULIA_NUM_GC_THREADS`): `GC_CORE_MARK_THREADS` (collector threads, 0 = one per
 * core; `HeapConfig::mark_threads`), `GC_CORE_SWEEP_THREADS` (0 or 1; a helper sweeping
 * in the background, `HeapConfig::sweep_threads`), `GC_CORE_LAZY_SWEEP` (0 or 1;
 * `HeapConfig::lazy_sweep`) and the policy knobs `GC_CORE_MIN_INTERVAL`,
 * `GC_CORE_GROWTH`, `GC_CORE_YOUNG_WEIGHT`, `GC_CORE_HEADROOM` (bytes),
 * `GC_CORE_MAX_INTERVAL` (bytes), `GC_CORE_RESIDENT_REUSE`, `GC_CORE_FULL_GROWTH` and
 * `GC_CORE_FULL_GROWTH_KNEE` (bytes) (the `HeapConfig` fields of those names),
 * `GC_CORE_STRESS` (collect every N allocations per thread) and `GC_CORE_VERIFY` (0 or
 * 1). A value that does not parse or is out of range is reported
 * on stderr and ignored. `GC_CORE_STATS_FILE=path` writes the heap's statistics there
 * as JSON at exit. Its handle is never deleted (`gc_heap_delete` refuses it).
 */
struct gc_heap_t *gc_default_heap(void);

/**
 * The calling thread's own `ptls` while it marks (a collector helper thread's record,
 * or the collecting thread's mutator while its marker is set), NULL otherwise. The
 * compat header's inline `jl_gc_mark_queue_obj` caches it per thread, so that a
 * reference queued with another thread's `ptls` (GAP passes a saved one from mark
 * functions that run on every collector thread) needs no call out of line.
 */
void *gc_marking_ptls(void);

/**
 * Queues `obj` for marking (`jl_gc_mark_queue_obj`): 1 if it is young, 0 if old, NULL
 * or on error (outside the mark phase, wrong thread).
 *
 * # Safety
 * `m` null or a mutator pointer; `obj` null or a live object of its heap.
 */
int gc_mark_queue_obj(struct gc_mutator_t *m, void *obj);

/**
 * Queues the `n` references at `objs`, inside `parent`, with one mark-stack entry
 * (`jl_gc_mark_queue_objarray`).
 *
 * # Safety
 * As for `gc_mark_queue_obj`; `objs` readable for `n` words inside `parent`.
 */
void gc_mark_queue_objarray(struct gc_mutator_t *m, void *parent, void **objs, size_t n);

/**
 * In a weak-processing hook (or a mark function): 1 if `obj` is marked so far (it
 * survives this collection), 0 if not or on error (outside marking, wrong thread).
 *
 * # Safety
 * `m` null or a mutator pointer; `obj` null or a live object of its heap.
 */
int gc_is_marked(struct gc_mutator_t *m, void *obj);

/**
 * Attaches the calling thread to `heap`; returns its mutator (`ptls`), NULL on error
 * (already attached, bad heap handle). The thread detaches at exit or with
 * `gc_thread_detach`.
 */
struct gc_mutator_t *gc_thread_attach(struct gc_heap_t *heap);

/**
 * Detaches the calling thread (attached with `gc_thread_attach` or `jl_init`); its
 * reachable objects stay alive. `RT_ERR_NOT_ATTACHED` if it was not attached through
 * the C ABI.
 */
int gc_thread_detach(void);

/**
 * The calling thread's mutator, NULL if it is not attached.
 */
struct gc_mutator_t *gc_current_mutator(void);

/**
 * Runs a collection (`GC_COLLECT_AUTO`, `_FULL` or `_PARTIAL`). 1 if this call ran
 * one, 0 if another thread's collection satisfied it, a negative `RT_ERR_*` code on
 * error.
 *
 * # Safety
 * `m` is null or a mutator pointer.
 */
int gc_collect(struct gc_mutator_t *m, int kind);

/**
 * A safepoint poll (a hot path: no panic guard).
 *
 * # Safety
 * `m` is null or a mutator pointer.
 */
void gc_safepoint(struct gc_mutator_t *m);

/**
 * Enters a GC-safe region (blocking call, waiting for a lock): collections may run and
 * this thread must not touch the heap until `gc_safe_leave`. Returns the previous
 * state, to pass to `gc_safe_leave`; -1 on error.
 *
 * Copies the caller's callee-saved registers and stack pointer into a buffer in its own
 * frame, then calls `gc_safe_enter_impl` with the buffer and `m`, which checks `m`
 * before anything is written to the mutator (`gc_core::spill_and_call!`). Written
 * without a prologue so that the registers saved are the caller's, and the stack
 * pointer is the caller's (which stays live for the whole GC-safe region, unlike this
 * function's frame).
 *
 * # Safety
 * `m` is null or a mutator pointer (it is checked).
 */
int8_t gc_safe_enter(struct gc_mutator_t *m);

/**
 * Enters a GC-safe region like `gc_safe_enter`, recording `sp` as the lowest stack
 * address in use during the region instead of the caller's stack pointer. For a
 * callback called deeper than the frame that stays live while the thread blocks (a GIL's
 * block hook): `sp` is the stack pointer of that frame, which must have spilled the
 * callee-saved registers that may hold references into itself, and must not return
 * before `gc_safe_leave`. The registers saved are this call's (their values only add
 * roots). Returns the previous state; -1 on error (`sp` not inside the thread's stack,
 * or below the caller's own stack pointer).
 *
 * # Safety
 * `m` is null or a mutator pointer; `sp` satisfies the above.
 */
int8_t gc_safe_enter_sp(struct gc_mutator_t *m, void *sp);

/**
 * Leaves a GC-safe region entered with `gc_safe_enter` (`state` is what it returned),
 * waiting for a running collection to finish first.
 *
 * # Safety
 * `m` is null or a mutator pointer.
 */
void gc_safe_leave(struct gc_mutator_t *m, int8_t state);

/**
 * A new reference queue of `heap`. NULL on error (bad heap handle).
 */
struct gc_refqueue_t *gc_refqueue_new(struct gc_heap_t *heap);

/**
 * Registers `obj` with `token`. `RT_ERR_ARG` on error (bad queue handle, `obj` NULL or
 * not an allocated object of the queue's heap).
 */
int gc_refqueue_register(struct gc_refqueue_t *q, void *obj, size_t token);

/**
 * Takes up to `cap` available tokens, oldest first, into `out`; returns how many (0
 * and an error for a bad queue handle). Any thread, outside collections.
 *
 * # Safety
 * `out` writable for `cap` words (or NULL with 0); `q` any pointer (checked against the
 * live handles).
 */
size_t gc_refqueue_drain(struct gc_refqueue_t *q, size_t *out, size_t cap);

/**
 * Number of tokens available (the queue's own count needs no lock: a flag to poll); 0
 * and an error for a bad queue handle.
 */
size_t gc_refqueue_len(struct gc_refqueue_t *q);

/**
 * Sets (NULL `f`: removes) the function a collecting thread calls with `data`, after
 * the world resumes, when a collection queued tokens on `q`.
 *
 * # Safety
 * `f` null or a function of the documented type that may be called with `data` from
 * any attached thread; `q` any pointer (checked against the live handles).
 */
int gc_refqueue_set_notify(struct gc_refqueue_t *q, gc_notify_t f, void *data);

/**
 * Deletes a queue: its registrations end, tokens not drained are lost. `RT_OK`, or
 * `RT_ERR_ARG` for a NULL, unknown, already deleted or wrong-kind handle.
 */
int gc_refqueue_delete(struct gc_refqueue_t *q);

/**
 * Roots `obj` until `gc_root_delete`. NULL on error (bad heap handle, `obj` NULL or not
 * an allocated object of the heap).
 */
struct gc_root_t *gc_root_new(struct gc_heap_t *heap, void *obj);

/**
 * The object a root holds; NULL (and an error) for a NULL, unknown, deleted or
 * wrong-kind handle.
 */
void *gc_root_get(struct gc_root_t *root);

/**
 * Unroots and frees a root: `RT_OK`, or `RT_ERR_ARG` for a NULL, unknown, already
 * deleted or wrong-kind handle.
 */
int gc_root_delete(struct gc_root_t *root);

/**
 * Copies the heap's statistics into `out`. From inside a collection (a callback, a
 * mark or sweep function) they are those as of the start of that collection.
 *
 * # Safety
 * `heap` any pointer (checked against the live handles); `out` null or writable.
 */
int gc_stats(struct gc_heap_t *heap, struct gc_stats_t *out);

/**
 * Sets the stress mode: collect every `every` allocations per thread (0: off).
 */
int gc_set_stress(struct gc_heap_t *heap, uint64_t every);

/**
 * Turns the verify mode on (non-zero) or off.
 */
int gc_set_verify(struct gc_heap_t *heap, int on);

/**
 * `jl_gc_max_internal_obj_size`.
 */
size_t gc_max_internal_obj_size(void);

/**
 * Registers a stack `[lo, hi)` as a task. NULL on error (empty range, bad heap).
 *
 * # Safety
 * `[lo, hi)` is readable memory for as long as the task stays registered
 * (conservative scanning reads it); `heap` any pointer (checked against the live
 * handles).
 */
struct gc_task_t *gc_register_task(struct gc_heap_t *heap, void *lo, void *hi);

/**
 * Unregisters a task registered with `gc_register_task`. `RT_ERR_ARG` if unknown.
 */
int gc_unregister_task(struct gc_heap_t *heap, struct gc_task_t *task);

/**
 * Records the lowest stack address in use by a suspended task (0: unknown).
 *
 * # Safety
 * `task` null or a registered task.
 */
void gc_task_set_sp(struct gc_task_t *task, void *sp);

/**
 * The stack bounds of a task.
 *
 * # Safety
 * `task` null or a registered task; `lo` and `hi` null or writable.
 */
int gc_task_stack(struct gc_task_t *task, void **lo, void **hi);

/**
 * The calling thread's own task (its stack), NULL if not attached.
 */
struct gc_task_t *gc_current_task(void);

/**
 * Creates a foreign type (`jl_new_foreign_type`). NULL on error (bad heap handle, NULL
 * name, pointers without a mark function, inside a collection).
 *
 * # Safety
 * `name` null or NUL-terminated; the functions, if given, have the documented
 * signatures; `heap` any pointer (checked against the live handles).
 */
void *gc_new_foreign_type(struct gc_heap_t *heap,
                          const char *name,
                          gc_markfunc_t markfunc,
                          gc_sweepfunc_t sweepfunc,
                          int haspointers,
                          int large);

/**
 * Creates a precise type: objects of at least `size` bytes with references at the
 * `n` byte offsets `offsets`. NULL on error.
 *
 * # Safety
 * `name` null or NUL-terminated; `offsets` readable for `n`; `heap` any pointer
 * (checked against the live handles).
 */
void *gc_new_layout_type(struct gc_heap_t *heap,
                         const char *name,
                         size_t size,
                         const uint32_t *offsets,
                         size_t n);

/**
 * Allocates a weak-reference object pointing at `obj` (NULL allowed: a cleared one).
 * NULL on error. A safepoint: `obj` must be reachable across the call.
 *
 * # Safety
 * `m` null or a mutator pointer; `obj` null or a live object of its heap.
 */
struct gc_weakref_t *gc_weakref_new(struct gc_mutator_t *m, void *obj);

/**
 * The referent of a weak-reference object, NULL once cleared (or for NULL `wr`).
 *
 * # Safety
 * `wr` null or a live weak-reference object.
 */
void *gc_weakref_get(struct gc_weakref_t *wr);

/**
 * Points a weak-reference object at `obj` (NULL: at nothing). `RT_ERR_ARG` if `wr` is
 * not a weak-reference object or on a bad thread.
 *
 * # Safety
 * `m` null or a mutator pointer; `wr` and `obj` anything (both are checked to be
 * allocated objects of the thread's heap before either is read).
 */
int gc_weakref_set(struct gc_mutator_t *m, struct gc_weakref_t *wr, void *obj);

/**
 * The type of weak-reference objects of `heap` (what `gc_typeof` returns for them).
 */
void *gc_weakref_type(struct gc_heap_t *heap);

/**
 * A weak handle to `obj` for the embedder (lives outside the heap, never a root). NULL
 * on error (bad heap handle, `obj` NULL or not an allocated object of the heap).
 */
struct gc_weak_handle_t *gc_weak_handle_new(struct gc_heap_t *heap, void *obj);

/**
 * The object of a weak handle, NULL once a collection found it unreachable (and NULL
 * with an error for a NULL, unknown, deleted or wrong-kind handle).
 */
void *gc_weak_handle_get(struct gc_weak_handle_t *h);

/**
 * Releases a weak handle: `RT_OK`, or `RT_ERR_ARG` for a NULL, unknown, already
 * deleted or wrong-kind handle.
 */
int gc_weak_handle_delete(struct gc_weak_handle_t *h);
#endif /* GC_CORE_H */
