/* Misuse of the C API that crashed or corrupted the collector before (a user trial):
 *   foreign-thread  Py_DECREF to 0 of a GC object on a thread with no bridge entered:
 *                   left alone with an error (it stays in its bridge's list, whose
 *                   collector frees it once), never deallocated twice
 *   other-bridge    the last reference of an object of one bridge dropped while another
 *                   bridge is entered on the thread: left alone, the collector unharmed
 *   gc-args         NULL, a non-GC object or a size that overflows given to the GC entry
 *                   points: an error, no crash
 *   negative-size   PyType_Ready of a negative tp_basicsize: refused (it was read as a
 *                   huge size, the allocations failing "out of memory")
 *   foreign-free    PyMem_Free / PyObject_Free / PyMem_Realloc of a malloc'd block: an
 *                   error, the block left alone (a SIGSEGV before)
 *   double-free     a second PyObject_GC_Del or PyMem_Free: an error, the pool unharmed
 *                   (the second free put the block on its free list twice: the next two
 *                   allocations shared it)
 *   debug-double    a second PyObject_GC_Del in debug mode: a use-after-free report (it
 *                   was "not of a GC type", and no report)
 * Prints "<case>: ok"; exit status 0 iff every check held. */
#include <Python.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;
#define CHECK(cond, ...)                                                              \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);           \
            fprintf(stderr, __VA_ARGS__);                                             \
            fprintf(stderr, "\n");                                                    \
            failures++;                                                               \
        }                                                                             \
    } while (0)

static int n_dealloc;
typedef struct {
    PyObject_HEAD
    PyObject *a;
} Node;
static int Node_traverse(Node *s, visitproc visit, void *arg)
{
    Py_VISIT(s->a);
    return 0;
}
static int Node_clear(Node *s)
{
    Py_CLEAR(s->a);
    return 0;
}
static void Node_dealloc(Node *s)
{
    PyObject_GC_UnTrack(s);
    n_dealloc++;
    Py_CLEAR(s->a);
    Py_TYPE(s)->tp_free((PyObject *)s);
}
static PyTypeObject NodeType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "t.Node",
    .tp_basicsize = sizeof(Node),
    .tp_itemsize = 3,
    .tp_dealloc = (destructor)Node_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)Node_traverse,
    .tp_clear = (inquiry)Node_clear,
};
typedef struct {
    PyObject_HEAD
} Leaf;
static void Leaf_dealloc(Leaf *s) { PyObject_Del(s); }
static PyTypeObject LeafType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "t.Leaf",
    .tp_basicsize = sizeof(Leaf),
    .tp_dealloc = (destructor)Leaf_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
};

static PyObject *node(void)
{
    Node *n = PyObject_GC_New(Node, &NodeType);
    if (!n) {
        fprintf(stderr, "alloc failed: %s\n", rb_last_error());
        exit(3);
    }
    n->a = NULL;
    PyObject_GC_Track(n);
    return (PyObject *)n;
}

static const char *err(void)
{
    const char *e = rb_last_error();
    return e ? e : "(none)";
}

static PyObject *shared;
static char thread_error[512];

static void *decref_without_bridge(void *arg)
{
    (void)arg;
    Py_DECREF(shared);
    snprintf(thread_error, sizeof thread_error, "%s", err());
    return NULL;
}

static void foreign_thread(void)
{
    n_dealloc = 0;
    PyObject *keep = node();
    shared = node();
    pthread_t t;
    pthread_create(&t, NULL, decref_without_bridge, NULL);
    pthread_join(t, NULL);
    CHECK(n_dealloc == 0, "deallocated on a thread with no bridge: %d", n_dealloc);
    CHECK(strstr(thread_error, "no refbridge entered") != NULL, "%s", thread_error);
    /* Still in the owner's list at count 0: its collector frees it, once. */
    PyGC_Collect();
    CHECK(n_dealloc == 1, "after the owner's collection: %d deallocations", n_dealloc);
    PyGC_Collect();
    CHECK(n_dealloc == 1, "deallocated again: %d", n_dealloc);
    Py_DECREF(keep);
    CHECK(n_dealloc == 2, "the other object: %d", n_dealloc);
    CHECK(rb_tracked_objects() == 0, "tracked %zd", rb_tracked_objects());
    printf("foreign-thread: ok\n");
}

static void other_bridge(void)
{
    /* An object of the first bridge outlives it; a new bridge is entered when its last
     * reference goes. */
    PyObject *old = node();
    CHECK(rb_fini() >= 0, "fini");
    CHECK(rb_init(0) == 0, "re-init: %s", err());
    n_dealloc = 0;
    Py_DECREF(old);
    CHECK(strstr(err(), "another bridge") != NULL, "%s", err());
    PyObject *mine = node();
    Py_DECREF(mine);
    CHECK(n_dealloc >= 1, "own object not freed");
    CHECK(PyGC_Collect() >= 0, "collect");
    CHECK(rb_tracked_objects() == 0, "tracked %zd", rb_tracked_objects());
    printf("other-bridge: ok\n");
}

static void gc_args(void)
{
    PyObject_GC_Track(NULL);
    CHECK(strstr(err(), "NULL object") != NULL, "%s", err());
    PyObject_GC_UnTrack(NULL);
    CHECK(strstr(err(), "NULL object") != NULL, "%s", err());
    PyObject *l = (PyObject *)PyObject_New(Leaf, &LeafType);
    PyObject_GC_UnTrack(l);
    CHECK(strstr(err(), "not of a GC type") != NULL, "%s", err());
    PyObject_GC_Track(l);
    CHECK(strstr(err(), "not of a GC type") != NULL, "%s", err());
    PyObject_GC_Del(l);
    CHECK(strstr(err(), "not of a GC type") != NULL, "%s", err());
    Py_DECREF(l);
    /* basicsize + n * itemsize fits, its rounding to 8 does not. */
    Py_ssize_t n = (Py_ssize_t)((SIZE_MAX - sizeof(Node) - 2) / 3);
    PyObject *v = (PyObject *)_PyObject_GC_NewVar(&NodeType, n);
    CHECK(v == NULL, "an object of %zd items", n);
    CHECK(rb_tracked_objects() == 0, "tracked %zd", rb_tracked_objects());
    printf("gc-args: ok\n");
}

static void negative_size(void)
{
    static PyTypeObject neg = {PyVarObject_HEAD_INIT(NULL, 0).tp_name = "t.Neg",
                               .tp_basicsize = -16};
    static PyTypeObject neg_gc = {PyVarObject_HEAD_INIT(NULL, 0).tp_name = "t.NegGc",
                                  .tp_basicsize = -8,
                                  .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
                                  .tp_traverse = (traverseproc)Node_traverse};
    CHECK(PyType_Ready(&neg) == -1, "a negative tp_basicsize was accepted");
    CHECK(strstr(err(), "type t.Neg has tp_basicsize -16") != NULL, "%s", err());
    CHECK(PyType_Ready(&neg_gc) == -1, "a negative tp_basicsize was accepted (GC)");
    CHECK(strstr(err(), "type t.NegGc has tp_basicsize -8") != NULL, "%s", err());
    printf("negative-size: ok\n");
}

static void foreign_free(void)
{
    size_t before = rb_native_bytes();
    char *m = malloc(64);
    strcpy(m, "still mine");
    rb_err_clear();
    PyMem_Free(m);
    CHECK(strstr(err(), "PyMem_Free") && strstr(err(), "is not a live block of PyMem_Malloc"),
          "%s", err());
    rb_err_clear();
    PyObject_Free(m);
    CHECK(strstr(err(), "PyObject_Free") && strstr(err(), "is not a live block"), "%s", err());
    rb_err_clear();
    CHECK(PyMem_Realloc(m, 128) == NULL, "realloc of a malloc'd block");
    CHECK(strstr(err(), "PyMem_Realloc") && strstr(err(), "is not a live block"), "%s", err());
    CHECK(strcmp(m, "still mine") == 0, "the block was touched");
    CHECK(rb_native_bytes() == before, "native bytes %zu, before %zu", rb_native_bytes(), before);
    free(m);
    printf("foreign-free: ok\n");
}

static void double_free(void)
{
    size_t before = rb_native_bytes();
    Node *p = PyObject_GC_New(Node, &NodeType);
    p->a = NULL;
    PyObject_GC_Del(p);
    rb_err_clear();
    PyObject_GC_Del(p);
    CHECK(strstr(err(), "PyObject_GC_Del") && strstr(err(), "was already freed"), "%s", err());
    Node *a = PyObject_GC_New(Node, &NodeType);
    Node *b = PyObject_GC_New(Node, &NodeType);
    CHECK(a != b, "two live objects share %p", (void *)a);
    PyObject_GC_Del(a);
    PyObject_GC_Del(b);
    void *m = PyMem_Malloc(40);
    PyMem_Free(m);
    rb_err_clear();
    PyMem_Free(m);
    CHECK(strstr(err(), "PyMem_Free") && strstr(err(), "was already freed"), "%s", err());
    void *x = PyMem_Malloc(40);
    void *y = PyMem_Malloc(40);
    CHECK(x != y, "two live blocks share %p", x);
    PyMem_Free(x);
    PyMem_Free(y);
    CHECK(rb_native_bytes() == before, "native bytes %zu, before %zu", rb_native_bytes(), before);
    printf("double-free: ok\n");
}

static void debug_double(void)
{
    CHECK(rb_fini() >= 0, "fini");
    CHECK(rb_init(RB_DEBUG) == 0, "debug init: %s", err());
    Node *p = PyObject_GC_New(Node, &NodeType);
    p->a = NULL;
    PyObject_GC_Del(p);
    rb_err_clear();
    PyObject_GC_Del(p);
    CHECK(strstr(err(), "PyObject_GC_Del") && strstr(err(), "was already freed"), "%s", err());
    CHECK(rb_debug_report_count() == 1, "%zu reports", rb_debug_report_count());
    const char *r = rb_debug_report(0);
    CHECK(r && strstr(r, "UseAfterFree: PyObject_GC_Del of freed object"), "%s",
          r ? r : "(no report)");
    CHECK(rb_debug_check() == 0, "the quarantine was left poisoned");
    printf("debug-double: ok\n");
}

int main(void)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    if (rb_init(0) != 0 || PyType_Ready(&NodeType) || PyType_Ready(&LeafType)) {
        fprintf(stderr, "init: %s\n", err());
        return 3;
    }
    foreign_thread();
    gc_args();
    other_bridge();
    negative_size();
    foreign_free();
    double_free();
    debug_double();
    int leaks = rb_fini();
    printf(failures ? "misuse: %d FAILED\n" : "misuse: all ok\n", failures);
    (void)leaks;
    return failures != 0;
}
