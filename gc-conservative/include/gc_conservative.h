/*
 * gc_conservative.h: conservative scanning for gc-core heaps. Generated from
 * src/capi.rs by cbindgen; do not edit (UPDATE_HEADERS=1 cargo test -p gc-conservative
 * --test it headers). Link with libgc_conservative, which also carries gc_core.h's API.
 */
#ifndef GC_CONSERVATIVE_H
#define GC_CONSERVATIVE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include "gc_core.h"

/**
 * A filter for `gc_scan_task`: called with the object a stack word points into (its
 * base) and `data`; non-zero keeps (queues) it, zero ignores the word.
 */
typedef int (*gc_scan_filter_t)(void *data, void *obj);

/**
 * Turns on conservative scanning of every attached thread's stack for `heap`
 * (idempotent, thread-safe). 0 on success, -1 on error.
 *
 * # Safety
 * `heap` is null or a live heap.
 */
int gc_enable_conservative_scanning(gc_heap_t *heap);

/**
 * The object of `heap` (internal or external) that `p` points to the beginning,
 * interior or one past the end of; NULL otherwise (an object the last collection found
 * unreachable included, while its memory waits for the lazy sweep). Any `p` is
 * accepted.
 *
 * # Safety
 * `heap` is null or a live heap.
 */
void *gc_base_ptr(gc_heap_t *heap, void *p);

/**
 * Like `gc_base_ptr`, for internal (pool) objects only.
 *
 * # Safety
 * `heap` is null or a live heap.
 */
void *gc_internal_obj_base_ptr(gc_heap_t *heap, void *p);

/**
 * Non-zero iff `p` is the start of an internal object of `heap` or of a cell reserved
 * for one (whose type field is then never a valid type). 0 for the cell of an object
 * the last collection found unreachable while it waits for the lazy sweep (its type
 * field still names the dead object's type).
 *
 * # Safety
 * `heap` is null or a live heap.
 */
int gc_is_internal_obj_alloc(gc_heap_t *heap, void *p);

/**
 * Scans `[lo, hi)` conservatively during marking (from a root scanner, task scanner or
 * mark function on the collecting thread). Returns the number of words that resolved
 * to objects, -1 outside marking or for a bad range.
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
 * only words pointing at one type of object. Returns the words accepted, -1 outside
 * marking or for a NULL task.
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
 * `heap` null or live; `name` null or NUL-terminated.
 */
void *gc_new_conservative_type(gc_heap_t *heap,
                               const char *name,
                               gc_sweepfunc_t sweepfunc,
                               int large);
#endif /* GC_CONSERVATIVE_H */
