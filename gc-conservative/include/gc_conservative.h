/*
 * gc_conservative.h: conservative scanning for gc-core heaps. Generated from
 * capi/src/lib.rs by cbindgen; do not edit (UPDATE_HEADERS=1 cargo test -p
 * gc-conservative-capi --test it headers). Link with libgc_conservative, which also
 * carries gc_core.h's API.
 */
#ifndef GC_CONSERVATIVE_H
#define GC_CONSERVATIVE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include "gc_core.h"
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
 * A filter for `gc_scan_task`: called with the object a stack word points into (its
 * base) and `data`; non-zero keeps (queues) it, zero ignores the word.
 */
typedef int (*gc_scan_filter_t)(void *data, void *obj);

/**
 * Turns on conservative scanning of every attached thread's stack for `heap`
 * (idempotent, thread-safe). `RT_OK` (0) on success, an `RT_ERR_*` code on error
 * (`RT_ERR_ARG` for a NULL, unknown, deleted or wrong-kind heap handle).
 *
 * # Safety
 * None beyond C's: `heap` may be any pointer (it is checked against the live handles).
 */
int gc_enable_conservative_scanning(gc_heap_t *heap);

/**
 * The object of `heap` (internal or external) that `p` points to the beginning,
 * interior or one past the end of; NULL otherwise (an object the last collection found
 * unreachable included, while its memory waits for the lazy sweep). Any `p` is
 * accepted.
 *
 * # Safety
 * `heap` is null or a heap handle from this library (live or deleted: a deleted heap
 * holds no object); it is read with one load, not looked up (a per-word hot path).
 */
void *gc_base_ptr(gc_heap_t *heap, void *p);

/**
 * Like `gc_base_ptr`, for internal (pool) objects only.
 *
 * # Safety
 * As for `gc_base_ptr`.
 */
void *gc_internal_obj_base_ptr(gc_heap_t *heap, void *p);

/**
 * Non-zero iff `p` is the start of an internal object of `heap` or of a cell reserved
 * for one (whose type field is then never a valid type). 0 for the cell of an object
 * the last collection found unreachable while it waits for the lazy sweep (its type
 * field still names the dead object's type).
 *
 * # Safety
 * As for `gc_base_ptr`.
 */
int gc_is_internal_obj_alloc(gc_heap_t *heap, void *p);

/**
 * Scans `[lo, hi)` conservatively during marking (from a root scanner, task scanner or
 * mark function on the collecting thread). Returns the number of words that resolved
 * to objects; `RT_ERR_ARG` (-1) for a bad range, `RT_ERR_STATE` outside marking (or
 * `RT_ERR_ARG` for a ptls of another thread).
 *
 * # Safety
 * `m` is null or a mutator pointer; the range is mapped and readable.
 */
ptrdiff_t gc_scan_range(gc_mutator_t *m, void *lo, void *hi);

/**
 * Scans the stack of `task` (and the registers its thread saved when it stopped)
 * conservatively, from a task scanner on the collecting thread, queueing only the
 * objects `filter` accepts (all of them if `filter` is NULL). For runtimes that install
 * their own task scanner instead of `gc_enable_conservative_scanning`'s, e.g. to accept
 * only words pointing at one type of object. Returns the words accepted (0 for a task
 * no longer registered with the heap being collected, whose stack is not read: a
 * look-up linear in the number of tasks), `RT_ERR_ARG` (-1) for a NULL task,
 * `RT_ERR_STATE` outside marking.
 *
 * # Safety
 * `m` is null or a mutator pointer; `task` is null or the task handed to the task
 * scanner; `filter`, if given, is safe to call with `data` and any object.
 */
ptrdiff_t gc_scan_task(gc_mutator_t *m, gc_task_t *task, gc_scan_filter_t filter, void *data);

/**
 * A foreign type whose objects' payloads are scanned conservatively (no mark function
 * needed); `sweepfunc` may be NULL. NULL on error.
 *
 * # Safety
 * `name` null or NUL-terminated; `sweepfunc` null or a sweep function of the
 * documented signature; `heap` any pointer (checked against the live handles).
 */
void *gc_new_conservative_type(gc_heap_t *heap,
                               const char *name,
                               gc_sweepfunc_t sweepfunc,
                               int large);
#endif /* GC_CONSERVATIVE_H */
