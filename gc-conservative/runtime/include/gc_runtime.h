/*
 * gc_runtime.h: a gc-core heap with conservative scanning of its threads and a GIL whose
 * blocking hooks enter and leave GC-safe regions. Generated from src/capi.rs by cbindgen;
 * do not edit (UPDATE_HEADERS=1 cargo test -p gc-runtime --test it headers). Link with
 * libgc_runtime, which also carries gc_core.h's, gc_conservative.h's and gil.h's API.
 */
#ifndef GC_RUNTIME_H
#define GC_RUNTIME_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include "gc_core.h"
#include "gil.h"
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

/* gc-runtime's names for the shared codes (src/status.rs). */
#define GC_RUNTIME_OK RT_OK
#define GC_RUNTIME_ERR_INVALID_ARGUMENT RT_ERR_ARG
#define GC_RUNTIME_ERR_NOT_ATTACHED RT_ERR_NOT_ATTACHED
#define GC_RUNTIME_ERR_ALREADY_ATTACHED RT_ERR_ALREADY_ATTACHED
#define GC_RUNTIME_ERR_STATE RT_ERR_STATE
#define GC_RUNTIME_ERR_GC RT_ERR_REFUSED
#define GC_RUNTIME_ERR_GIL RT_ERR_REFUSED
#define GC_RUNTIME_ERR_STOPPED RT_ERR_STOPPED
#define GC_RUNTIME_ERR_SHUT_DOWN RT_ERR_SHUT_DOWN
#define GC_RUNTIME_ERR_PANIC RT_ERR_PANIC


/**
 * Callee-saved registers of the x86-64 SysV ABI: rbx, rbp, r12, r13, r14, r15.
 */
#define SAVED_REGS 6

/**
 * A runtime (opaque): a heap, its conservative task scanner and a GIL whose hooks make
 * blocked threads GC-safe.
 */
typedef struct gc_runtime_t gc_runtime_t;

/**
 * A scan filter: called with the object a stack word (or saved register) of an attached
 * thread points into, and the configuration's `scan_filter_data`; non-zero keeps it.
 * It may run on any collector thread, concurrently, during a collection.
 */
typedef int (*gc_runtime_filter_t)(void *data, void *obj);

/**
 * The runtime's configuration (the heap's is a `gc_config_t`).
 */
typedef struct gc_runtime_config_t {
  /**
   * The GIL's name in messages (NULL: "gc-runtime").
   */
  const char *gil_name;
  /**
   * The GIL's switch interval in microseconds (0: no switch requests).
   */
  uint64_t switch_interval_us;
  /**
   * Non-zero: every attached thread's stack, and the registers its runtime calls
   * saved, are scanned conservatively in every collection. Zero: nothing is scanned
   * unless the program installs a task scanner calling `gc_runtime_scan_task`.
   */
  int conservative;
  /**
   * Which objects a stack word may keep (NULL: all, external objects included).
   * With a filter, only pool objects (up to `gc_max_internal_obj_size()` bytes) are
   * found from stack words.
   */
  gc_runtime_filter_t scan_filter;
  /**
   * Passed to `scan_filter`.
   */
  void *scan_filter_data;
} gc_runtime_config_t;

/**
 * The message of the calling thread's last failed call (empty if none). Valid until
 * the thread's next failing call.
 */
const char *gc_runtime_last_error(void);

/**
 * The status (`GC_RUNTIME_ERR_*` / `RT_ERR_*`) of the calling thread's last failed
 * call, `GC_RUNTIME_OK` if none: what a NULL return meant.
 */
int32_t gc_runtime_last_status(void);

/**
 * Fills `cfg` with the defaults: GIL "gc-runtime" with a 5 ms switch interval,
 * conservative scanning on, no filter.
 *
 * # Safety
 * `cfg` is null or writable.
 */
int32_t gc_runtime_config_default(struct gc_runtime_config_t *cfg);

/**
 * Creates a runtime: a heap configured by `gc` (NULL: `gc_config_default`'s), with the
 * runtime's conservative task scanner when `cfg->conservative`, and a GIL whose block
 * and unblock hooks enter and leave GC-safe regions. `cfg` NULL: the defaults. NULL on
 * error.
 *
 * # Safety
 * `gc` is null or a valid `gc_config_t`; `cfg` is null or a valid
 * `gc_runtime_config_t` whose `gil_name` is null or NUL-terminated and whose filter may
 * be called with its data and any object, from any collector thread, while the runtime
 * lives.
 */
struct gc_runtime_t *gc_runtime_new(const gc_config_t *gc, const struct gc_runtime_config_t *cfg);

/**
 * Frees a runtime (its GIL and heap). Refused (`GC_RUNTIME_ERR_STATE`) while threads
 * are attached.
 *
 * # Safety
 * `rt` is null or from `gc_runtime_new`, not used afterwards on success.
 */
int32_t gc_runtime_delete(struct gc_runtime_t *rt);

/**
 * The runtime's heap, for `gc_core.h` and `gc_conservative.h` calls (NULL for a bad
 * handle). Do not `gc_heap_delete` it.
 *
 * # Safety
 * `rt` is null or from `gc_runtime_new`.
 */
gc_heap_t *gc_runtime_heap(const struct gc_runtime_t *rt);

/**
 * The runtime's GIL, for `gil.h` calls (NULL for a bad handle). Do not `gil_delete` it.
 * `gil.h`'s blocking calls made directly on an attached thread still make it GC-safe
 * (the hooks), but without the caller's registers saved: prefer the runtime's calls.
 *
 * # Safety
 * `rt` is null or from `gc_runtime_new`.
 */
gil_t *gc_runtime_gil(const struct gc_runtime_t *rt);

/**
 * Attaches the calling thread to the runtime's heap (as a mutator) and GIL (as `name`,
 * NULL: the OS thread's name). The thread starts outside: call `gc_runtime_enter`
 * before touching the heap. Returns the thread's mutator for `gc_core.h` calls
 * (`gc_alloc`, ...), NULL on error (already attached, bad handle).
 *
 * # Safety
 * `rt` is null or from `gc_runtime_new`; `name` is null or NUL-terminated.
 */
gc_mutator_t *gc_runtime_attach(struct gc_runtime_t *rt, const char *name);

/**
 * Detaches the calling thread from the runtime's GIL and heap. It must be outside
 * (after `gc_runtime_leave`).
 *
 * # Safety
 * `rt` is null or from `gc_runtime_new`.
 */
int32_t gc_runtime_detach(struct gc_runtime_t *rt);

/**
 * Enters: takes the GIL (GC-safe while waiting for it) and leaves the GC-safe region of
 * the outside; the thread may then touch the heap. On `GC_RUNTIME_ERR_STOPPED` or
 * `_SHUT_DOWN` the thread stays outside.
 *
 * # Safety
 * `rt` is null or from `gc_runtime_new`.
 */
int32_t gc_runtime_enter(struct gc_runtime_t *rt);

/**
 * Leaves: enters a GC-safe region (the caller's frame and registers stay roots of the
 * conservative scan) and releases the GIL.
 *
 * # Safety
 * `rt` is null or from `gc_runtime_new`.
 */
int32_t gc_runtime_leave(struct gc_runtime_t *rt);

/**
 * The GIL's safepoint: honours a switch request (GC-safe while waiting to get the GIL
 * back) and runs pending actions. `GC_RUNTIME_ERR_STOPPED` / `_SHUT_DOWN` tell the
 * thread to unwind. Costs a call into the GIL: call it every N loop iterations.
 *
 * # Safety
 * `rt` is null or from `gc_runtime_new`.
 */
int32_t gc_runtime_poll(struct gc_runtime_t *rt);

/**
 * Begins a blocking region (a sleep, I/O, a lock): the thread enters a GC-safe region
 * whose roots are the caller's frame and the registers it held at this call, and
 * releases the GIL if it holds it. Until `gc_runtime_blocking_end`, called from the
 * same function, the thread must not touch the heap.
 *
 * # Safety
 * `rt` is null or from `gc_runtime_new`.
 */
int32_t gc_runtime_blocking_begin(struct gc_runtime_t *rt);

/**
 * Ends the blocking region: re-takes the GIL if the thread held it (GC-safe while
 * waiting), then leaves the GC-safe region. If the GIL could not be taken back
 * (`GC_RUNTIME_ERR_STOPPED` / `_SHUT_DOWN`), the thread is outside.
 *
 * # Safety
 * `rt` is null or from `gc_runtime_new`.
 */
int32_t gc_runtime_blocking_end(struct gc_runtime_t *rt);

/**
 * For a task scanner of the program's own (`conservative = 0`, installed with
 * `gc_set_callback(gc_runtime_heap(rt), GC_CB_TASK_SCANNER, ...)`): scans `task` as the
 * runtime's scanner would (its stack through the configured filter, and the registers
 * the runtime saved for its thread). Returns the words accepted (a task no longer
 * registered with the heap has its stack left unread: a look-up linear in the number
 * of tasks), a negative `GC_RUNTIME_ERR_*` code on error (outside a task scanner, NULL
 * task, bad handle).
 *
 * # Safety
 * `rt` is null or from `gc_runtime_new`; `task` is null or the task the calling task
 * scanner was given.
 */
ptrdiff_t gc_runtime_scan_task(const struct gc_runtime_t *rt, gc_task_t *task);
#endif /* GC_RUNTIME_H */
