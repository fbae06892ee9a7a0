/*
 * refbridge_python.h: CPython's C API, memory-management subset, over refbridge.
 *
 * C extension types written for CPython compile unchanged against this header (or
 * against include/compat/Python.h, which includes it): the names, types and macro
 * semantics are CPython 3.11's for
 *   PyObject, PyVarObject, PyTypeObject (tp_name, tp_basicsize, tp_itemsize, tp_dealloc,
 *   tp_flags, tp_traverse, tp_clear, tp_free), Py_TPFLAGS_DEFAULT, Py_TPFLAGS_HAVE_GC,
 *   visitproc, traverseproc, inquiry, destructor, freefunc, Py_INCREF, Py_DECREF,
 *   Py_XINCREF, Py_XDECREF, Py_CLEAR, Py_VISIT, Py_REFCNT, Py_TYPE, Py_SIZE,
 *   Py_SET_REFCNT, Py_NewRef, Py_XNewRef, PyObject_GC_New, PyObject_GC_NewVar,
 *   PyObject_GC_Track, PyObject_GC_UnTrack, PyObject_GC_Del, PyObject_New, PyObject_Del,
 *   PyObject_Malloc/Realloc/Free, PyMem_Malloc/Realloc/Free, PyGC_Collect, PyType_Ready,
 *   Py_IncRef, Py_DecRef, _Py_Dealloc,
 * plus the bridge's own functions (rb_ prefix).
 *
 * Objects handed to native code by the managed side are stubs: pointers with bit 63 set
 * (RB_STUB_TAG). The macros untag before dereferencing; code that reads ob_refcnt or
 * ob_type directly instead of through Py_REFCNT/Py_TYPE does not work on stubs.
 *
 * Py_INCREF and Py_DECREF are inline and are CPython 3.11's (one add; one subtract and
 * _Py_Dealloc at 0) on the untagged address: nothing runs when a stub's count crosses
 * RB_MANAGED_REFCNT (the collector reads the counts).
 *
 * A thread uses these functions while a bridge is entered on it (Bridge::enter in Rust,
 * rb_init for a C program). CPython's names fail as CPython's do: NULL or -1 and the
 * pending error, read with rb_last_error(). The rb_* functions that can fail return the
 * workspace's shared status codes (RB_OK, RB_ERR_*: aliases of RT_*). No panic crosses
 * the boundary: it becomes the function's error return and a SystemError.
 *
 * Link with -lrefbridge (librefbridge.so, built from refbridge/capi by
 * `cargo build --release`). refbridge/capi/tests/it/header_drift.rs checks this file
 * against the Rust side.
 */
#ifndef REFBRIDGE_PYTHON_H
#define REFBRIDGE_PYTHON_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

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

typedef ssize_t Py_ssize_t;

/* Constants of the bridge (GraalPy's values). */
#define RB_MANAGED_REFCNT ((Py_ssize_t)10)
#define RB_IMMORTAL_REFCNT ((Py_ssize_t)0xFFFFFFFF)
#define RB_STUB_TAG ((uintptr_t)1 << 63)

/* CPython's type flags (same values). */
#define Py_TPFLAGS_READY (1UL << 12)
#define Py_TPFLAGS_HAVE_GC (1UL << 14)
#define Py_TPFLAGS_HAVE_VERSION_TAG (1UL << 18)
#define Py_TPFLAGS_DEFAULT Py_TPFLAGS_HAVE_VERSION_TAG

typedef struct _typeobject PyTypeObject;

typedef struct _object {
    Py_ssize_t ob_refcnt;
    PyTypeObject *ob_type;
} PyObject;

typedef struct {
    PyObject ob_base;
    Py_ssize_t ob_size;
} PyVarObject;

#define PyObject_HEAD PyObject ob_base;
#define PyObject_VAR_HEAD PyVarObject ob_base;
#define PyObject_HEAD_INIT(type) { 1, (type) },
#define PyVarObject_HEAD_INIT(type, size) { PyObject_HEAD_INIT(type) (size) },

typedef int (*visitproc)(PyObject *, void *);
typedef int (*traverseproc)(PyObject *, visitproc, void *);
typedef int (*inquiry)(PyObject *);
typedef void (*destructor)(PyObject *);
typedef void (*freefunc)(void *);

/* The memory-management subset of CPython's type object (initialise it with
   designated initializers, as CPython extension types do). */
struct _typeobject {
    PyObject_VAR_HEAD
    const char *tp_name;
    Py_ssize_t tp_basicsize;
    Py_ssize_t tp_itemsize;
    destructor tp_dealloc;
    unsigned long tp_flags;
    traverseproc tp_traverse;
    inquiry tp_clear;
    freefunc tp_free;
    void *rb_reserved[4];
};

/* A GC object's header, before the object (CPython's PyGC_Head). */
typedef struct {
    uintptr_t _gc_next;
    uintptr_t _gc_prev;
} PyGC_Head;

/* The stub behind a tagged pointer (24 bytes; read it through the macros only). */
typedef struct {
    PyObject ob_base;
    uint32_t handle;
    uint32_t flags;
} rb_stub;

#define _PyObject_CAST(op) ((PyObject *)(op))
#define _PyVarObject_CAST(op) ((PyVarObject *)(op))

/* Whether a pointer is a stub of a managed object: one test, bit 63. */
static inline int rb_is_stub(const void *op) { return ((uintptr_t)op & RB_STUB_TAG) != 0; }

/* The dereferenceable address behind a possibly tagged pointer. */
static inline PyObject *_rb_untag(const void *op) {
    return (PyObject *)((uintptr_t)op & ~RB_STUB_TAG);
}

/* The one slow path of Py_DECREF: a count reached 0 (deallocate a native object, free a
   stub whose managed object died). */
void _Py_Dealloc(PyObject *op);

static inline Py_ssize_t Py_REFCNT(const PyObject *ob) { return _rb_untag(ob)->ob_refcnt; }
#define Py_REFCNT(ob) Py_REFCNT(_PyObject_CAST(ob))

static inline PyTypeObject *Py_TYPE(const PyObject *ob) { return _rb_untag(ob)->ob_type; }
#define Py_TYPE(ob) Py_TYPE(_PyObject_CAST(ob))

static inline Py_ssize_t Py_SIZE(const PyObject *ob) {
    return ((PyVarObject *)_rb_untag(ob))->ob_size;
}
#define Py_SIZE(ob) Py_SIZE(_PyObject_CAST(ob))

static inline void Py_SET_SIZE(PyVarObject *ob, Py_ssize_t size) {
    ((PyVarObject *)_rb_untag(ob))->ob_size = size;
}
#define Py_SET_SIZE(ob, size) Py_SET_SIZE(_PyVarObject_CAST(ob), (size))

static inline void Py_SET_REFCNT(PyObject *ob, Py_ssize_t refcnt) {
    _rb_untag(ob)->ob_refcnt = refcnt;
}
#define Py_SET_REFCNT(ob, refcnt) Py_SET_REFCNT(_PyObject_CAST(ob), (refcnt))

/* CPython's Py_INCREF and Py_DECREF on the untagged address. A stub's handle-table
   entry is strong while its count is above RB_MANAGED_REFCNT: the collector reads the
   count, so nothing has to run when it crosses RB_MANAGED_REFCNT. */
static inline void Py_INCREF(PyObject *op) { _rb_untag(op)->ob_refcnt++; }
#define Py_INCREF(op) Py_INCREF(_PyObject_CAST(op))

static inline void Py_DECREF(PyObject *op) {
    if (--_rb_untag(op)->ob_refcnt == 0) _Py_Dealloc(op);
}
#define Py_DECREF(op) Py_DECREF(_PyObject_CAST(op))

static inline void Py_XINCREF(PyObject *op) {
    if (op != NULL) Py_INCREF(op);
}
#define Py_XINCREF(op) Py_XINCREF(_PyObject_CAST(op))

static inline void Py_XDECREF(PyObject *op) {
    if (op != NULL) Py_DECREF(op);
}
#define Py_XDECREF(op) Py_XDECREF(_PyObject_CAST(op))

#define Py_CLEAR(op)                                  \
    do {                                              \
        PyObject *_py_tmp = _PyObject_CAST(op);       \
        if (_py_tmp != NULL) {                        \
            (op) = NULL;                              \
            Py_DECREF(_py_tmp);                       \
        }                                             \
    } while (0)

static inline PyObject *_Py_NewRef(PyObject *obj) {
    Py_INCREF(obj);
    return obj;
}
#define Py_NewRef(obj) _Py_NewRef(_PyObject_CAST(obj))

static inline PyObject *_Py_XNewRef(PyObject *obj) {
    Py_XINCREF(obj);
    return obj;
}
#define Py_XNewRef(obj) _Py_XNewRef(_PyObject_CAST(obj))

#define Py_VISIT(op)                                          \
    do {                                                      \
        if (op) {                                             \
            int vret = visit(_PyObject_CAST(op), arg);        \
            if (vret) return vret;                            \
        }                                                     \
    } while (0)

/* Out-of-line reference counting (CPython exports these too; they accept NULL). */
void Py_IncRef(PyObject *op);
void Py_DecRef(PyObject *op);

/* Memory: counted by the entered bridge (native memory pressure forces collections).
 * The frees and reallocs refuse (SystemError pending, the pointer left alone) what is
 * not a live block of these allocators: memory from malloc (CPython would pass it on to
 * free()), a block freed already. */
void *PyMem_Malloc(size_t size);
void *PyMem_Realloc(void *ptr, size_t size);
void PyMem_Free(void *ptr);
void *PyObject_Malloc(size_t size);
void *PyObject_Realloc(void *ptr, size_t size);
void PyObject_Free(void *ptr);

/* Objects. */
PyObject *_PyObject_GC_New(PyTypeObject *tp);
PyVarObject *_PyObject_GC_NewVar(PyTypeObject *tp, Py_ssize_t n);
PyObject *_PyObject_New(PyTypeObject *tp);
#define PyObject_GC_New(type, typeobj) ((type *)_PyObject_GC_New(typeobj))
#define PyObject_GC_NewVar(type, typeobj, n) ((type *)_PyObject_GC_NewVar((typeobj), (n)))
#define PyObject_New(type, typeobj) ((type *)_PyObject_New(typeobj))
#define PyObject_Del PyObject_Free
void PyObject_GC_Track(void *op);
void PyObject_GC_UnTrack(void *op);
/* A second PyObject_GC_Del of an object is refused (SystemError pending) while its
 * memory is not reused; in debug mode it is reported as a use after free. */
void PyObject_GC_Del(void *op);
int PyType_Ready(PyTypeObject *tp);
/* Runs the cycle collector. Returns the number of native objects it deallocated (the
 * cycles' members and what their deallocation freed in turn), where CPython returns the
 * number of unreachable objects it found; -1 on error. */
Py_ssize_t PyGC_Collect(void);

/* The bridge's own functions. */
void rb_default_dealloc(PyObject *op);
const char *rb_last_error(void);
void rb_err_set(const char *msg);
void rb_err_clear(void);
size_t rb_native_bytes(void);
Py_ssize_t rb_tracked_objects(void);
uint64_t rb_deallocs(void);
size_t rb_debug_report_count(void);
const char *rb_debug_report(size_t i);
size_t rb_debug_check(void);
#define RB_DEBUG 1
#define RB_NO_AUTO_COLLECT 2
/* rb_init and rb_fini return the workspace's shared status codes (the rt_status block
 * above): RB_OK, or RB_ERR_STATE (rb_init twice on a thread, rb_fini without rb_init),
 * RB_ERR_INIT (the heap or bridge could not be made), RB_ERR_PANIC; rb_last_error() has
 * the message. rb_fini returns the number of leak reports (>= 0) on success. */
#define RB_OK RT_OK
#define RB_ERR_STATE RT_ERR_STATE
#define RB_ERR_INIT RT_ERR_CONFIG
#define RB_ERR_PANIC RT_ERR_PANIC
int rb_init(int flags);
int rb_fini(void);

#ifdef __cplusplus
}
#endif

#endif /* REFBRIDGE_PYTHON_H */
