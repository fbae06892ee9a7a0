/*
 * gil.h: C interface of the `gil` crate, a global interpreter lock with switch
 * requests, safepoint actions, blocking regions and clean shutdown.
 *
 * Link with -lgil (libgil.so, built from gil/capi by `cargo build --release`). Every
 * function acts on the calling thread, found through its thread-local attachment: C code
 * needs no per-thread handle. Functions returning int32_t return GIL_OK or a GIL_ERR_*
 * code (aliases of the workspace's shared RT_* status codes); on failure gil_last_error()
 * holds a message naming the thread, GIL and problem. NULL pointers, deleted or unknown
 * handles and misuse are reported, never crash; no panic crosses the boundary.
 *
 * Checked against gil/capi/src/lib.rs by gil/capi/tests/it/header.rs: keep them in step.
 */
#ifndef GIL_H
#define GIL_H

#include <stdint.h>

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

#ifdef __cplusplus
extern "C" {
#endif

/* Return codes: the workspace's shared status codes (the block below, the same in every
 * header of the toolkit), under gil's own names. */
#define GIL_OK RT_OK
#define GIL_ERR_INVALID_ARGUMENT RT_ERR_ARG         /* a NULL pointer, a bad handle, a value out of range */
#define GIL_ERR_SHUT_DOWN RT_ERR_SHUT_DOWN          /* the GIL is shut down: leave */
#define GIL_ERR_STOPPED RT_ERR_STOPPED              /* the thread was asked to stop: unwind */
#define GIL_ERR_NOT_ATTACHED RT_ERR_NOT_ATTACHED    /* the calling thread is not attached */
#define GIL_ERR_ALREADY_ATTACHED RT_ERR_ALREADY_ATTACHED /* the calling thread is already attached */
#define GIL_ERR_NOT_HOLDER RT_ERR_NOT_HOLDER        /* released a GIL the thread does not hold */
#define GIL_ERR_UNKNOWN_THREAD RT_ERR_NOT_FOUND     /* no attached thread has that id */
#define GIL_ERR_TIMEOUT RT_ERR_TIMEOUT              /* an action or shutdown wait ran out of time */
#define GIL_ERR_PANIC RT_ERR_PANIC                  /* an internal panic, caught at the boundary */
#define GIL_ERR_INVALID_CONFIG RT_ERR_CONFIG        /* a configuration value is out of range */
#define GIL_ERR_ALREADY_SHUT_DOWN RT_ERR_ALREADY_SHUT_DOWN /* shutdown was already called */
#define GIL_ERR_INSIDE_ACTION RT_ERR_INSIDE_ACTION  /* not allowed inside a safepoint action */
#define GIL_ERR_INSIDE_HOOK RT_ERR_INSIDE_HOOK      /* not allowed inside an on_block/on_unblock hook */
#define GIL_ERR_INSIDE_REGION RT_ERR_INSIDE_REGION  /* not allowed inside a blocking region */

/* gil_submit_action target: every attached thread. */
#define GIL_ALL_THREADS 0
/* Hook reasons. */
#define GIL_BLOCK_WAITING_FOR_GIL 1
#define GIL_BLOCK_BLOCKING_REGION 2

/* An opaque GIL. */
typedef struct gil_t gil_t;
/* An opaque submitted action. */
typedef struct gil_action_t gil_action_t;

/* What gil_ensure did; pass it back to gil_ensure_release. */
typedef struct gil_ensure_state_t {
    uint8_t acquired; /* 1 if the call took the GIL */
    uint8_t attached; /* 1 if the call attached the thread */
} gil_ensure_state_t;

/* Passed to an action function. */
typedef struct gil_action_ctx_t {
    uint64_t thread_id; /* the thread running the action */
    int32_t holds_gil;  /* 1 if it holds the GIL while running it */
} gil_action_ctx_t;

/* Progress of an action. */
typedef struct gil_action_report_t {
    uint32_t targets; /* target threads */
    uint32_t ran;     /* targets that ran it */
    uint32_t skipped; /* targets that detached first */
    uint32_t pending; /* targets still to run it */
} gil_action_report_t;

/* What shutdown did with each thread (counts). */
typedef struct gil_shutdown_report_t {
    uint32_t threads;         /* attached at the start, the caller included */
    uint32_t detached;        /* detached */
    uint32_t left_with_error; /* got an error and left the GIL */
    uint32_t idle;            /* were not inside the GIL (the caller counts here) */
    uint32_t stuck;           /* still inside when the time ran out */
} gil_shutdown_report_t;

/* An action body; may run on several attached threads, concurrently for threads that
 * do not hold the GIL. */
typedef void (*gil_action_fn)(void *data, const gil_action_ctx_t *ctx);
/* Frees an action's data once no thread can run it any more. */
typedef void (*gil_free_fn)(void *data);
/* A block/unblock hook; reason is GIL_BLOCK_*. Runs on the thread that changes state. */
typedef void (*gil_hook_fn)(void *data, uint64_t thread_id, int32_t reason);

/* The calling thread's last error message ("" if none); valid until its next failure. */
const char *gil_last_error(void);

/* Creates a GIL named name (may be NULL). switch_interval_us: how long a waiter lets the
 * holder run before asking it to drop (CPython's default is 5000); 0: never ask. */
int32_t gil_new(const char *name, uint64_t switch_interval_us, gil_t **out);
/* Frees this handle: no thread may pass the pointer to any gil_* call afterwards
 * (gil_release and gil_detach included). A thread blocked inside a call at that moment
 * finishes it (the GIL's state lives until no thread needs it). So: gil_shutdown first,
 * which ends the threads, then gil_delete once every thread has detached. NULL is
 * ignored. Handles are checked: a call with a deleted (or unknown) handle, a second
 * delete included, gets GIL_ERR_INVALID_ARGUMENT, unless a new handle reuses the address. */
void gil_delete(gil_t *gil);

/* Attaches the calling thread (name may be NULL); thread_id_out may be NULL. */
int32_t gil_attach(gil_t *gil, const char *name, uint64_t *thread_id_out);
/* Detaches the calling thread, releasing the GIL if it holds it. */
int32_t gil_detach(gil_t *gil);
/* The calling thread's id within the GIL. */
int32_t gil_current_thread(const gil_t *gil, uint64_t *thread_id_out);

/* Takes the GIL: *acquired_out = 1 if this call took it, 0 if the thread already held it
 * (never deadlocks on itself). Pass the value to gil_release. Inside a blocking region:
 * GIL_ERR_INSIDE_REGION (leave the region first). */
int32_t gil_acquire(gil_t *gil, int32_t *acquired_out);
/* Releases the GIL if acquired is non-zero; with waiters it goes to the next one. */
int32_t gil_release(gil_t *gil, int32_t acquired);
/* Takes the GIL from any thread, attaching it if needed (PyGILState_Ensure). */
int32_t gil_ensure(gil_t *gil, gil_ensure_state_t *state_out);
/* Undoes gil_ensure: releases if it acquired, detaches if it attached. */
int32_t gil_ensure_release(gil_t *gil, gil_ensure_state_t state);
/* A safepoint: runs pending actions and honours switch requests. GIL_ERR_STOPPED or
 * GIL_ERR_SHUT_DOWN: unwind, release what you hold, and leave. */
int32_t gil_poll(gil_t *gil);
/* 1 if the calling thread holds the GIL, else 0. */
int32_t gil_holds(const gil_t *gil);

/* Blocking region (Py_BEGIN_ALLOW_THREADS): releases the GIL if held. Between enter and
 * leave, touch nothing the GIL protects; gil_poll runs pending actions; taking the GIL
 * (gil_acquire, gil_ensure) or a second gil_blocking_enter is GIL_ERR_INSIDE_REGION. */
int32_t gil_blocking_enter(gil_t *gil, int32_t *token_out);
/* Leaves it: runs pending actions and re-takes the GIL if it was held at enter. */
int32_t gil_blocking_leave(gil_t *gil, int32_t token);

/* Submits fn_(data, ctx) to run on thread target (or GIL_ALL_THREADS) at its next
 * safepoint: at the holder's next gil_poll, at once on a thread waiting for the GIL
 * (without the GIL), in a blocking region at gil_poll or at leave. free_data (may be
 * NULL) runs once no thread can run it and the handle was deleted. out may be NULL. */
int32_t gil_submit_action(gil_t *gil, uint64_t target, gil_action_fn fn_, void *data,
                          gil_free_fn free_data, gil_action_t **out);
/* Waits at most timeout_us for every target; report_out (may be NULL) is filled either
 * way. GIL_ERR_TIMEOUT if targets are still pending. */
int32_t gil_action_wait(const gil_action_t *action, uint64_t timeout_us,
                        gil_action_report_t *report_out);
/* Deletes the handle (the action still runs where pending). NULL is ignored. */
void gil_action_delete(gil_action_t *action);

/* Asks a thread to stop: its GIL calls then return GIL_ERR_STOPPED; a waiter is woken. */
int32_t gil_request_stop(gil_t *gil, uint64_t thread_id);
/* Installs hooks told when a thread blocks (waits for the GIL, enters a blocking
 * region) and unblocks, e.g. so a GC counts it as stopped. Both NULL removes them. */
int32_t gil_set_hooks(gil_t *gil, gil_hook_fn on_block, gil_hook_fn on_unblock, void *data);

/* Shuts the GIL down: waiters are woken with GIL_ERR_SHUT_DOWN, the holder is stopped at
 * its next poll, blocking regions return with an error at leave; waits at most
 * timeout_us. report_out (may be NULL) accounts for every thread. GIL_ERR_TIMEOUT if
 * threads are still inside. Afterwards every call fails with GIL_ERR_SHUT_DOWN. */
int32_t gil_shutdown(gil_t *gil, uint64_t timeout_us, gil_shutdown_report_t *report_out);

#ifdef __cplusplus
}
#endif

#endif /* GIL_H */
