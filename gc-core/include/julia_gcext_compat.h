/*
 * julia_gcext_compat.h: the API of "Garbage collector extensions for better foreign
 * language support" (Julia's julia_gcext.h) under its own names, argument order and
 * types, implemented by gc-core over a process-wide default heap.
 *
 * C written against the seed compiles unchanged. On top of the seed's functions it
 * declares the few a client needs to run at all (jl_init, jl_gc_collect, the write
 * barriers, jl_typeof, jl_symbol, safepoints, thread attach/detach, task stacks) and
 * error reporting: a call that cannot be honoured (NULL argument, unattached thread,
 * repeated registration, size over the limit, ...) does nothing harmful, returns NULL or
 * 0 where it returns something, and leaves a message in jl_gc_last_error() and a status
 * (RT_ERR_*, the workspace's shared codes) in jl_gc_last_status(). No panic unwinds into
 * C: one is reported as RT_ERR_PANIC (or, on the per-object fast paths, aborts).
 *
 * Link with libgc_core (precise roots only) or with libgc_conservative, which also
 * provides the conservative-scanning functions at the end of this header.
 *
 * This header is checked against the Rust side by gc-core's tests (tests/it/headers.rs):
 * a declaration that drifts from the exported function fails to compile there.
 *
 * Fast paths. jl_get_ptls_states, jl_gc_alloc_typed, jl_gc_mark_queue_obj, jl_gc_wb,
 * jl_gc_wb_back and jl_typeof are inline functions (macros over gc_compat_*, at the end
 * of this header) that read the published layouts of the thread state (gc_tls_head_t),
 * its allocation state (gc_alloc_fast_t) and the marker (gc_mark_fast_t), as Julia's
 * julia.h does: marking a child from a mark function is a few loads, a compare of the
 * ptls's thread, a store and a push, with no call; allocating is a free-list pop or a
 * bump in the thread's pool page, the payload zeroed, the header and allocation bit
 * stored. They trust their objects as the seed's API does (live objects); a ptls of
 * another thread is sent out of line. The out-of-line functions check the ptls (it
 * must be the calling thread's; in a mark function, any thread's ptls is taken as the
 * calling collector thread's own, as GAP's mark functions pass a saved one) and, with
 * the heap's verify mode on, every queued reference. Define GC_CORE_CHECKED before
 * including this header to call the out-of-line functions everywhere.
 */
#ifndef JULIA_GCEXT_COMPAT_H
#define JULIA_GCEXT_COMPAT_H

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

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
#if !defined(GC_CORE_CHECKED) && !(defined(__x86_64__) && defined(__GLIBC__))
#include <pthread.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Types -------------------------------------------------------------------- */

/* Any object. Object pointers point just past a one-word header (type + GC bits). */
typedef struct _jl_value_t jl_value_t;
/* A type; types are objects too (jl_typeof(jl_typeof(x)) is the meta type). */
typedef struct _jl_datatype_t jl_datatype_t;
/* An interned name, from jl_symbol. */
typedef struct _jl_sym_t jl_sym_t;
/* Accepted and kept for the caller; may be NULL. */
typedef struct _jl_module_t jl_module_t;
/* A registered stack (a thread's own, or a coroutine's). */
typedef struct _jl_task_t jl_task_t;
/* The calling thread's state, from jl_get_ptls_states(). */
typedef struct _jl_tls_states_t *jl_ptls_t;

typedef enum {
    JL_GC_AUTO = 0,        /* the heap's policy decides */
    JL_GC_FULL = 1,        /* the whole heap */
    JL_GC_INCREMENTAL = 2  /* the young generation (a partial collection) */
} jl_gc_collection_t;

/* ---- Callbacks ------------------------------------------------------------------ */

typedef void (*jl_gc_cb_pre_gc_t)(int full);
typedef void (*jl_gc_cb_post_gc_t)(int full);
typedef void (*jl_gc_cb_root_scanner_t)(int full);
typedef void (*jl_gc_cb_task_scanner_t)(jl_task_t *task, int full);
typedef void (*jl_gc_cb_notify_external_alloc_t)(void *addr, size_t size);
typedef void (*jl_gc_cb_notify_external_free_t)(void *addr);

/* enable != 0 registers cb (a function is registered at most once: a repeat is refused
 * with an error); enable == 0 removes it. pre_gc and post_gc run once per collection
 * with the world stopped; root_scanner at the start of marking; task_scanner once per
 * registered task per collection: by default on the collecting thread after the root
 * scanners, its second argument non-zero for a full collection (the seed's); for a
 * client initialised as Julia 1.10 or later (jl_gc_compat_init), as Julia 1.10 calls it:
 * on whichever collector thread marks the task, possibly on several at once, its second
 * argument non-zero when the task is its thread's own stack (Julia's root task), and
 * jl_get_ptls_states() there is that collector thread's ptls; notify_external_alloc/free
 * for external (big) objects, with the object pointer and its payload size.
 * pre_gc runs on the collecting thread once the collection is decided full or partial
 * (its argument) and before anything is marked; the threads' remembered sets are merged
 * after it (Julia's order), so a write barrier it issues counts for that collection:
 * GAP's PreGCHook calls jl_gc_wb_back (CHANGED_BAG) on its current local-variables bag,
 * which it stores young references into without barriers. */
void jl_gc_set_cb_root_scanner(jl_gc_cb_root_scanner_t cb, int enable);
void jl_gc_set_cb_task_scanner(jl_gc_cb_task_scanner_t cb, int enable);
void jl_gc_set_cb_pre_gc(jl_gc_cb_pre_gc_t cb, int enable);
void jl_gc_set_cb_post_gc(jl_gc_cb_post_gc_t cb, int enable);
void jl_gc_set_cb_notify_external_alloc(jl_gc_cb_notify_external_alloc_t cb, int enable);
void jl_gc_set_cb_notify_external_free(jl_gc_cb_notify_external_free_t cb, int enable);

/* ---- Marking -------------------------------------------------------------------- */

/* Queues obj for marking; returns non-zero if obj is young (not yet promoted). A mark
 * function counts the non-zero results and returns the count, as the seed says; the
 * collector also counts them itself while the mark function runs, so that an old
 * object with young children enters the remembered set even if the returned count is
 * wrong (kept in a global that several mark threads share, or Julia's "newly marked"
 * semantics). NULL is ignored (0). Outside the mark phase: 0 and an error. */
int jl_gc_mark_queue_obj(jl_ptls_t ptls, jl_value_t *obj);

/* Queues the nobjs references at objs (an array inside parent, never on a stack or in
 * static memory) with one mark-stack entry; NULL entries are skipped. Does the young
 * counting for parent itself. */
void jl_gc_mark_queue_objarray(jl_ptls_t ptls, jl_value_t *parent,
                               jl_value_t **objs, size_t nobjs);

/* ---- Foreign types -------------------------------------------------------------- */

/* A mark function queues obj's children with jl_gc_mark_queue_obj(ptls, child) and
 * returns how many of them are young (non-zero results; the collector counts them too,
 * see jl_gc_mark_queue_obj). It may run on any collector thread (HeapConfig::
 * mark_threads, GC_CORE_MARK_THREADS; default one per core, but one for Julia 1.6 clients of
 * the Julia-compatibility prefix, see jl_gc_compat_init) and concurrently with other
 * mark functions: it gets the ptls of the thread it runs on (a ptls saved from another
 * thread also works: the call queues on the calling collector thread) and must keep
 * no unsynchronised state of its own besides that count. */
typedef uintptr_t (*jl_markfunc_t)(jl_ptls_t ptls, jl_value_t *obj);
typedef void (*jl_sweepfunc_t)(jl_value_t *obj);

/* A type whose objects are marked by markfunc (required when haspointers != 0; never
 * called when haspointers == 0) and, if scheduled per object, cleaned up by sweepfunc
 * (may be NULL). large != 0: objects are external objects of any size; large == 0:
 * sizes up to jl_gc_max_internal_obj_size(). module and super may be NULL; a non-NULL
 * super must be a type. NULL on error. */
jl_datatype_t *jl_new_foreign_type(jl_sym_t *name, jl_module_t *module,
                                   jl_datatype_t *super, jl_markfunc_t markfunc,
                                   jl_sweepfunc_t sweepfunc, int haspointers, int large);

/* The largest payload of an internal (pool) object: 2024 bytes. */
size_t jl_gc_max_internal_obj_size(void);

/* Asks for obj's sweep function to run when a sweep finds obj dead. Once per object: a
 * second call is refused with an error and never causes a second sweep. */
void jl_gc_schedule_foreign_sweepfunc(jl_ptls_t ptls, jl_value_t *obj);

/* Allocates a zeroed object of sz payload bytes of type ty. NULL on error (size 0, size
 * over the limit of a small foreign type, ty not a type, ptls not the calling thread's,
 * called during a collection). A safepoint: a collection may run inside. */
void *jl_gc_alloc_typed(jl_ptls_t ptls, size_t sz, void *ty);

/* ---- Running ---------------------------------------------------------------------- */

/* Creates the default heap and attaches the calling thread. */
void jl_init(void);
/* Attaches the calling thread to the default heap (returns its ptls; the current one
 * if already attached). Threads detach at exit or with jl_gc_thread_detach. */
jl_ptls_t jl_adopt_thread(void);
/* Detaches the calling thread; its reachable objects stay alive. -1 if not attached. */
int jl_gc_thread_detach(void);
/* The calling thread's ptls: its attached mutator's, or on a collector thread inside a
 * mark function or task scanner, that thread's own; NULL (and an error) on a thread that
 * is neither. */
jl_ptls_t jl_get_ptls_states(void);

/* Runs a collection on the calling thread. */
void jl_gc_collect(jl_gc_collection_t kind);
/* Write barrier: call after storing ptr into parent (either may be NULL). */
void jl_gc_wb(void *parent, void *ptr);
/* Backward barrier: call after storing possibly young references into ptr in bulk. */
void jl_gc_wb_back(void *ptr);
/* The type of an object (NULL for NULL). */
jl_value_t *jl_typeof(jl_value_t *v);
/* Interns a name; NULL for NULL or non-UTF-8 input. */
jl_sym_t *jl_symbol(const char *str);
/* The text of a symbol. */
const char *jl_symbol_name(jl_sym_t *sym);
/* A safepoint: stops here while another thread collects. */
void jl_gc_safepoint(void);
/* A GC-safe region around a blocking call: the thread counts as stopped and must not
 * touch the heap until jl_gc_safe_leave(ptls, state) with the returned state. */
int8_t jl_gc_safe_enter(jl_ptls_t ptls);
void jl_gc_safe_leave(jl_ptls_t ptls, int8_t state);

/* ---- Tasks (stacks) ---------------------------------------------------------------- */

/* Registers a coroutine stack [lo, hi), which must stay readable memory while it is
 * registered (conservative scanning reads it); attached threads' stacks are registered
 * automatically. task_scanner callbacks run once per registered task. */
jl_task_t *jl_gc_register_task(void *lo, void *hi);
/* -1 if the task is unknown or is a thread's own stack. */
int jl_gc_unregister_task(jl_task_t *task);
/* The task of the calling thread's own stack; NULL if not attached. */
jl_task_t *jl_gc_current_task(void);
/* The task's stack start and size; *tid is set to -1. */
void *jl_task_stack_buffer(jl_task_t *task, size_t *size, int *tid);

/* ---- Weak references and finalizers (Julia's names) ------------------------------- */

/* A weak-reference object: a heap object (it can be stored in other objects and is kept
 * alive like any object) whose field `value` reads the referent, and reads NULL (Julia:
 * `nothing`) once a collection found the referent unreachable: cleared atomically, before
 * any finalizer of the referent runs and before the threads resume. Never a root, not
 * even for conservative scanning. C may re-point it by storing a live object (or NULL)
 * into `value` directly, as Julia allows (GAP's weakptr.c does `wref->value = val`): no
 * barrier is needed, every collection checks the referent of every weak-reference
 * object, old or young (gc_weakref_set in gc_core.h does the same store after a type
 * check). jl_typeof() of one is gc_weakref_type(gc_default_heap()). */
typedef struct _jl_weakref_t {
    jl_value_t *value;
} jl_weakref_t;

/* A new weak-reference object to value (NULL allowed), on the calling thread. A
 * safepoint: value must stay reachable across the call. NULL on error. */
jl_weakref_t *jl_gc_new_weakref(jl_value_t *value);

/* Registers f, a void (*)(void *), to be called once with v after the collection that
 * finds v unreachable. v and everything it reaches stay alive until f has run (one more
 * collection cycle). f runs outside the stop-the-world, on the thread that drains the
 * pending finalizers: jl_gc_run_pending_finalizers, or, for threads attached by jl_init
 * or jl_adopt_thread, right after a collection they ran or stopped for and when leaving
 * a GC-safe region. Never while a collection runs, never nested on one thread. f may
 * resurrect v (store it where a root reaches it); f then does not run again. Several
 * finalizers of one object run in reverse registration order; finalizers of objects
 * found in the same collection too (no order by reachability: f may see objects whose
 * own finalizers already ran; their memory is still valid). Errors (NULL v or f, bad
 * ptls, during a collection) are reported by jl_gc_last_error. */
void jl_gc_add_ptr_finalizer(jl_ptls_t ptls, jl_value_t *v, void *f);

/* Runs the finalizers of o now, on the calling thread, once: they never run again.
 * Inside a finalizer they are queued instead and run right after it. */
void jl_finalize(jl_value_t *o);

/* Runs the pending finalizers on the calling thread (ct: NULL or the calling thread's
 * task). Does nothing inside a finalizer or while finalizers are disabled. */
void jl_gc_run_pending_finalizers(jl_task_t *ct);

/* on == 0 disables running finalizers on the calling thread (nesting); on != 0
 * re-enables them and runs the pending ones. ct: NULL or the calling thread's task. */
void jl_gc_enable_finalizers(jl_task_t *ct, int on);

/* The reference queue (phantom semantics), weak handles and the weak-processing hook
 * have no Julia names: they are in gc_core.h (gc_refqueue_*, gc_weak_handle_*,
 * GC_CB_WEAK_PROCESSING with gc_is_marked), used with gc_default_heap(). */

/* ---- Errors ------------------------------------------------------------------------ */

/* The message of the last call that failed on this thread, or NULL. */
const char *jl_gc_last_error(void);
/* Its status (RT_ERR_*, the rt_status block above), RT_OK if none failed: what a NULL
 * or 0 return meant. */
rt_status jl_gc_last_status(void);
/* Forgets both. */
void jl_gc_clear_error(void);

/* ---- Conservative scanning (provided by libgc_conservative) ------------------------ */

/* Turns on conservative scanning of every attached thread's stack and registers; may be
 * called before or after jl_init, from any thread, any number of times. */
void jl_gc_enable_conservative_scanning(void);
/* The object p points to the beginning, interior or one past the end of, or NULL. An
 * object the last collection found unreachable is not one, even while its memory waits
 * for the lazy sweep (GC_CORE_LAZY_SWEEP): NULL from the collection on. */
jl_value_t *jl_gc_internal_obj_base_ptr(void *p);
/* Non-zero iff p is an allocated internal object, or memory reserved for allocating
 * internal objects whose type field then never holds a valid type (a free cell). The
 * cell of an object the last collection found unreachable, while it waits for the lazy
 * sweep, still has its type field: 0 for it (as for memory that is no pool object). */
int jl_gc_is_internal_obj_alloc(jl_value_t *p);

/* Julia's jl_gc_enable_conservative_gc_support: lookups always work here, so this only
 * records the call (it does not scan stacks: jl_gc_enable_conservative_scanning does);
 * returns 1 if it had been called before. */
int jl_gc_enable_conservative_gc_support(void);
/* Whether jl_gc_enable_conservative_gc_support was called. */
int jl_gc_conservative_gc_support_enabled(void);

/* ---- Julia runtime names for unmodified julia-gcext clients ----------------------- */

/* What a client written against Julia's julia.h uses beyond the GC-extension API (GAP's
 * julia_gc.c, weakptr.c, gap.c). The Julia-compatibility prefix (cargo xtask
 * julia-prefix DIR) wraps this header as include/julia/julia.h, where jl_init() expands
 * to jl_gc_compat_init(JULIA_VERSION_MAJOR, JULIA_VERSION_MINOR). */

/* jl_init for a client compiled against Julia major.minor. Julia marked on one thread
 * before 1.10, and clients written for it may keep mark-function state in globals (GAP
 * 4.12's YoungRef): for them the default heap marks on one thread unless
 * GC_CORE_MARK_THREADS asks for more (parallel marking is an explicit opt-in), and task
 * scanners run at the roots. A client written for 1.10 or later (GAP 4.13+) gets
 * Julia 1.10's collector: parallel marking (one mark thread per core unless
 * GC_CORE_MARK_THREADS says otherwise) and task scanners run as mark work (see
 * jl_gc_set_cb_task_scanner). A mark function that runs with several mark threads must
 * keep its state per thread (__thread, or what its ptls argument leads to) or in the
 * object. jl_ver_string() then answers major.minor. */
void jl_gc_compat_init(int major, int minor);

/* Set by jl_init: a pointer-free type named Any (the usual super type), the meta type
 * (jl_typeof of any type), the type of weak-reference objects. NULL before jl_init. */
extern jl_datatype_t *jl_any_type;
extern jl_datatype_t *jl_datatype_type;
extern jl_datatype_t *jl_weakref_type;
/* What a cleared weak reference's value reads: NULL here (Julia: its nothing
 * singleton), so wref->value == jl_nothing tests "cleared" as in Julia. */
extern jl_value_t *jl_nothing;
/* An opaque module, accepted wherever a module is. */
extern jl_module_t *jl_main_module;
/* Threads attached to the default heap; threads that mark in a collection (the
 * collecting thread and the helpers: Julia counts only the helpers, so that here
 * jl_n_gcthreads > 1 says exactly whether a mark function or task scanner may run on two
 * threads at once). */
extern int jl_n_threads;
extern int jl_n_gcthreads;

/* The calling thread's task (as jl_gc_current_task). */
jl_task_t *jl_get_current_task(void);
/* The part of task's stack in use ([*active_start, *active_end): from its saved stack
 * pointer while its thread is stopped, from the caller's frame for the calling thread's
 * own task, else all of it) and the whole stack. All NULL for a NULL task. */
void jl_active_task_stack(jl_task_t *task, char **active_start, char **active_end,
                          char **total_start, char **total_end);

/* Safe-restore points, with Julia's meaning: while one is set on a thread, a SIGSEGV or
 * SIGBUS there jumps back to it (siglongjmp(buf, 1)): how a client reads memory that
 * may be unmapped (another task's stack down to its guard page). jl_setjmp(buf, 0)
 * fills buf. The fault handler is installed at the first non-NULL jl_set_safe_restore
 * and passes every other fault to the handler it replaced. */
#if defined(__GLIBC__)
/* glibc: sigjmp_buf is jmp_buf, and sigsetjmp is __sigsetjmp (declared in every mode). */
typedef jmp_buf jl_jmp_buf;
#define jl_setjmp(buf, savemask) __sigsetjmp((buf), (savemask))
#else
typedef sigjmp_buf jl_jmp_buf;
#define jl_setjmp(buf, savemask) sigsetjmp((buf), (savemask))
#endif
jl_jmp_buf *jl_get_safe_restore(void);
void jl_set_safe_restore(jl_jmp_buf *buf);

/* The Julia version this library stands in for, with a build tag: the version the
 * client's jl_init gave ("1.10.0-gccore"), "1.6.0-gccore" before any. */
const char *jl_ver_string(void);
/* Nothing to do: types stay alive with their heap, modules are opaque. */
void jl_set_const(jl_module_t *module, jl_sym_t *name, jl_value_t *value);
/* Runs the pending and registered finalizers of the calling thread's heap, as Julia
 * does at exit. */
void jl_atexit_hook(int status);

/* ---- Published layouts and inline fast paths ------------------------------------- */

/* The first fields of every ptls (an attached thread's, or a collector helper thread's
 * while it marks). Checked against the Rust side by tests/it/headers.rs. */
typedef struct gc_tls_head_t {
    uintptr_t regs[7];   /* callee-saved registers and stack pointer at the last stop */
    uint64_t magic;      /* GC_TLS_MUTATOR_MAGIC, GC_TLS_HELPER_MAGIC, or dead */
    uintptr_t thread;    /* pthread_self() of the owning thread; 0 once it detached */
    void *marker;        /* gc_mark_fast_t * while this thread marks, else NULL */
    uint8_t checked;     /* verify mode: entry points check their arguments */
    void *alloc;         /* gc_alloc_fast_t * of an attached thread; NULL in verify mode */
} gc_tls_head_t;

/* The calling thread's own ptls while it marks (a collector helper thread's record, or
 * the collecting thread's), NULL otherwise; for the inline jl_gc_mark_queue_obj. */
void *gc_marking_ptls(void);

#define GC_TLS_MUTATOR_MAGIC 0x4D555441544F5221ull
#define GC_TLS_HELPER_MAGIC 0x474348454C504552ull

/* The GC bits of an object's header word (gc-core's object.rs, where they are packed and
 * unpacked; tests/it/headers.rs checks these values against it). AGE is REMEMBERED's bit
 * on a young object: "survived a collection". A free cell's header has FREE set. */
#define GC_HDR_MARK ((uintptr_t)1)
#define GC_HDR_OLD ((uintptr_t)2)
#define GC_HDR_REMEMBERED ((uintptr_t)4)
#define GC_HDR_AGE ((uintptr_t)4)
#define GC_HDR_FREE ((uintptr_t)8)
#define GC_HDR_TAG_BITS ((uintptr_t)15)

/* The first fields of a collector thread's marker: its mark stack. A young object is
 * marked iff (header & (AGE | MARK)) == young_marked; an old one (header & OLD) iff
 * (header & old_mask) == old_want; AGE on a young object means "survived a collection"
 * (marking it again promotes it: left to the out-of-line function). */
typedef struct gc_mark_fast_t {
    uintptr_t slow;      /* non-zero: every queue goes out of line */
    uintptr_t *top;
    uintptr_t *limit;
    uintptr_t old_mask;
    uintptr_t old_want;
    uintptr_t young_marked;
    uint64_t marked;
    uint64_t young;      /* young results since the current mark function started */
} gc_mark_fast_t;

/* A thread's allocation state (its own; only that thread reads or writes it): what the
 * inline jl_gc_alloc_typed needs to take a cell of a pool page the thread holds. A type
 * in `types` may have pool objects of sizes min_size..max_small (max_small 0: none); a
 * pool's free list is threaded through the free cells' headers and ends with
 * GC_HDR_FREE; past it, cells bump..bump_end are fresh (zero). `bits` is the held page's
 * allocation bitmap: the cell whose payload is at p has index
 * (((p % GC_PAGE_SIZE) - GC_FIRST_PAYLOAD) * magic) >> 32. */
#define GC_PAGE_SIZE ((uintptr_t)16384)
#define GC_FIRST_PAYLOAD ((uintptr_t)16)
#define GC_NUM_CLASSES 55

typedef struct gc_alloc_type_t {
    uintptr_t ty;
    size_t min_size;
    size_t max_small;
} gc_alloc_type_t;

typedef struct gc_alloc_pool_t {
    uintptr_t free;
    uintptr_t bump;
    uintptr_t bump_end;
    uint64_t *bits;
    uint32_t cell;       /* cell size, header included */
    uint32_t magic;
    void *page;
} gc_alloc_pool_t;

typedef struct gc_alloc_fast_t {
    uint64_t countdown;  /* allocations left before the stress mode collects; 0 when GC-safe */
    uint64_t objects;
    uint64_t bytes;
    const uint32_t *gc_flag; /* non-zero: a collection is requested */
    const uint8_t *class_of; /* size class of (size + 23) / 16 */
    gc_alloc_type_t types[4];
    gc_alloc_pool_t pools[GC_NUM_CLASSES];
} gc_alloc_fast_t;

#ifndef GC_CORE_CHECKED

#define GC_COMPAT_HDR(v) (((const uintptr_t *)(v))[-1])

static inline uintptr_t gc_compat_self(void)
{
#if defined(__x86_64__) && defined(__GLIBC__)
    /* glibc's pthread_self() on x86_64 is the thread pointer, %fs:0x10. */
    uintptr_t self;
    __asm__("mov %%fs:0x10, %0" : "=r"(self));
    return self;
#else
    return (uintptr_t)pthread_self();
#endif
}

/* jl_get_ptls_states: a per-thread cache, valid while it names this thread's attached
 * state: detaching clears the state's thread field (and a recycled state names its new
 * thread), so one comparison checks it. */
static inline jl_ptls_t gc_compat_get_ptls(void)
{
    static __thread jl_ptls_t cached;
    jl_ptls_t p = cached;
    if (__builtin_expect(p != NULL, 1) &&
        __builtin_expect(((const gc_tls_head_t *)p)->thread == gc_compat_self(), 1))
        return p;
    p = (jl_get_ptls_states)();
    cached = p;
    return p;
}

/* The calling thread's own ptls while it marks (gc_marking_ptls), cached per thread. */
static inline const gc_tls_head_t *gc_compat_own_marking_head(uintptr_t self)
{
    static __thread const gc_tls_head_t *own;
    const gc_tls_head_t *h = own;
    if (__builtin_expect(h != NULL && h->thread == self && h->marker != NULL, 1))
        return h;
    h = (const gc_tls_head_t *)gc_marking_ptls();
    own = h;
    return h;
}

/* jl_gc_mark_queue_obj: mark and push onto the calling collector thread's own stack. */
static inline int gc_compat_mark_queue_obj(jl_ptls_t ptls, jl_value_t *obj)
{
    if (obj == NULL)
        return 0;
    const gc_tls_head_t *hd = (const gc_tls_head_t *)ptls;
    if (__builtin_expect(hd == NULL, 0))
        return (jl_gc_mark_queue_obj)(ptls, obj);
    uintptr_t self = gc_compat_self();
    /* Another thread's ptls (GAP passes the collecting thread's, kept in a global, from
     * mark functions that run on every collector thread): the calling collector thread's
     * own stack instead (its ptls cached per thread); out of line if it does not mark. */
    if (__builtin_expect(hd->thread != self, 0)) {
        const gc_tls_head_t *own = gc_compat_own_marking_head(self);
        if (own == NULL)
            return (jl_gc_mark_queue_obj)(ptls, obj);
        hd = own;
        ptls = (jl_ptls_t)own;
    }
    gc_mark_fast_t *mk = (gc_mark_fast_t *)hd->marker;
    if (__builtin_expect(mk == NULL || mk->slow != 0, 0))
        return (jl_gc_mark_queue_obj)(ptls, obj);
    uintptr_t *hp = (uintptr_t *)obj - 1;
    uintptr_t h = *hp;
    if (h & GC_HDR_OLD) {
        if ((h & mk->old_mask) == mk->old_want)
            return 0;
        if (__builtin_expect(mk->top == mk->limit, 0))
            return (jl_gc_mark_queue_obj)(ptls, obj);
        *hp = h ^ GC_HDR_MARK;
        *mk->top++ = (uintptr_t)obj;
        mk->marked++;
        return 0;
    }
    if ((h & (GC_HDR_AGE | GC_HDR_MARK)) == mk->young_marked) {
        mk->young++;
        return 1;
    }
    if (__builtin_expect((h & GC_HDR_AGE) != 0 || mk->top == mk->limit, 0))
        return (jl_gc_mark_queue_obj)(ptls, obj);
    *hp = h | mk->young_marked;
    *mk->top++ = (uintptr_t)obj;
    mk->marked++;
    mk->young++;
    return 1;
}

/* Zeroes the payload of a reused cell of `cell` bytes (header included) whose header is
 * at `hdr`: the cells of up to 64 bytes (a master pointer's, most small bodies') with
 * word stores, no call; larger ones with memset. */
static inline __attribute__((always_inline)) void gc_compat_zero_payload(uintptr_t hdr,
                                                                         uint32_t cell)
{
    uint64_t *w = (uint64_t *)(hdr + 8);
    if (cell == 16) {
        w[0] = 0;
    }
    else if (cell <= 64) {
        w[0] = 0;
        w[1] = 0;
        w[2] = 0;
        if (cell > 32) {
            w[3] = 0;
            w[4] = 0;
            if (cell > 48) {
                w[5] = 0;
                w[6] = 0;
            }
        }
    }
    else {
        memset(w, 0, cell - 8);
    }
}

/* jl_gc_alloc_typed: a cell of the calling thread's pool when the thread owns ptls, runs
 * managed code (not GC-safe, no collection requested, no stress collection due), the
 * type is one it allocated recently and the size one of its pool sizes, and the pool's
 * page has a cell left; everything else (errors included) out of line. */
static inline __attribute__((always_inline)) void *gc_compat_alloc_typed(jl_ptls_t ptls, size_t sz,
                                                                        void *ty)
{
    const gc_tls_head_t *hd = (const gc_tls_head_t *)ptls;
    gc_alloc_fast_t *a;
    if (__builtin_expect(hd == NULL || hd->thread != gc_compat_self() ||
                             (a = (gc_alloc_fast_t *)hd->alloc) == NULL, 0))
        return (jl_gc_alloc_typed)(ptls, sz, ty);
    const gc_alloc_type_t *t = a->types;
    while (t->ty != (uintptr_t)ty) {
        if (++t == a->types + 4)
            return (jl_gc_alloc_typed)(ptls, sz, ty);
    }
    if (__builtin_expect(sz - 1 >= t->max_small || sz < t->min_size || a->countdown <= 1 ||
                             __atomic_load_n(a->gc_flag, __ATOMIC_RELAXED) != 0, 0))
        return (jl_gc_alloc_typed)(ptls, sz, ty);
    gc_alloc_pool_t *p = &a->pools[a->class_of[(sz + 23) >> 4]];
    uintptr_t cell = p->free;
    if (cell != GC_HDR_FREE) {
        uintptr_t next = __atomic_load_n((const uintptr_t *)cell, __ATOMIC_RELAXED);
        p->free = next;
        __builtin_prefetch((const void *)next);
        gc_compat_zero_payload(cell, p->cell);
    }
    else if (p->bump < p->bump_end) {
        cell = p->bump;
        p->bump = cell + p->cell;
    }
    else {
        return (jl_gc_alloc_typed)(ptls, sz, ty);
    }
    uintptr_t obj = cell + 8;
    __atomic_store_n((uintptr_t *)cell, (uintptr_t)ty, __ATOMIC_RELEASE);
    uint64_t idx = ((uint64_t)((obj & (GC_PAGE_SIZE - 1)) - GC_FIRST_PAYLOAD) * p->magic) >> 32;
    uint64_t *w = &p->bits[idx >> 6];
    __atomic_store_n(w, __atomic_load_n(w, __ATOMIC_RELAXED) | ((uint64_t)1 << (idx & 63)),
                     __ATOMIC_RELEASE);
    a->objects++;
    a->bytes += p->cell;
    a->countdown--;
    return (void *)obj;
}

/* jl_gc_wb / jl_gc_wb_back: the out-of-line barrier only when an old object that is not
 * yet remembered gets a young child. */
static inline void gc_compat_wb(void *parent, void *ptr)
{
    if (parent && ptr &&
        (GC_COMPAT_HDR(parent) & (GC_HDR_OLD | GC_HDR_REMEMBERED)) == GC_HDR_OLD &&
        !(GC_COMPAT_HDR(ptr) & GC_HDR_OLD))
        (jl_gc_wb)(parent, ptr);
}

static inline void gc_compat_wb_back(void *ptr)
{
    if (ptr && (GC_COMPAT_HDR(ptr) & (GC_HDR_OLD | GC_HDR_REMEMBERED)) == GC_HDR_OLD)
        (jl_gc_wb_back)(ptr);
}

/* jl_typeof: NULL for a free cell (bit 3 of its header: a free-list link, never a type),
 * so that the seed's check jl_gc_internal_obj_base_ptr(jl_typeof(obj)) != NULL rejects
 * the reserved cells jl_gc_is_internal_obj_alloc reports. */
static inline jl_value_t *gc_compat_typeof(jl_value_t *v)
{
    if (!v)
        return NULL;
    uintptr_t h = GC_COMPAT_HDR(v);
    return (jl_value_t *)((h & GC_HDR_FREE) ? 0 : (h & ~GC_HDR_TAG_BITS));
}

#define jl_get_ptls_states() gc_compat_get_ptls()
#define jl_gc_alloc_typed(ptls, sz, ty) gc_compat_alloc_typed((ptls), (sz), (ty))
#define jl_gc_mark_queue_obj(ptls, obj) gc_compat_mark_queue_obj((ptls), (obj))
#define jl_gc_wb(parent, ptr) gc_compat_wb((parent), (ptr))
#define jl_gc_wb_back(ptr) gc_compat_wb_back((ptr))
#define jl_typeof(v) gc_compat_typeof((v))

#endif /* GC_CORE_CHECKED */

#ifdef __cplusplus
}
#endif

#endif /* JULIA_GCEXT_COMPAT_H */
