/*
 * A C program against refbridge_python.h alone (through include/compat/Python.h), in
 * CPython's extension style: a GC container type with tp_traverse/tp_clear and a
 * variable-size GC type, a leaf type owning a PyMem_Malloc buffer. It checks counts,
 * cycle collection, errors and the debug mode, and exits non-zero on any failure.
 * Run by tests/it/c_programs.rs, also under valgrind.
 */
#include <Python.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;
#define CHECK(cond)                                                        \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                    \
        }                                                                  \
    } while (0)

static int freed_pairs, freed_leaves, freed_vecs;

typedef struct {
    PyObject_HEAD
    PyObject *first;
    PyObject *second;
} Pair;

static int Pair_traverse(Pair *self, visitproc visit, void *arg) {
    Py_VISIT(self->first);
    Py_VISIT(self->second);
    return 0;
}

static int Pair_clear(Pair *self) {
    Py_CLEAR(self->first);
    Py_CLEAR(self->second);
    return 0;
}

static void Pair_dealloc(Pair *self) {
    PyObject_GC_UnTrack(self);
    Pair_clear(self);
    freed_pairs++;
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject PairType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "capi_test.Pair",
    .tp_basicsize = sizeof(Pair),
    .tp_itemsize = 0,
    .tp_dealloc = (destructor)Pair_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)Pair_traverse,
    .tp_clear = (inquiry)Pair_clear,
};

typedef struct {
    PyObject_VAR_HEAD
    PyObject *items[];
} Vec;

static int Vec_traverse(Vec *self, visitproc visit, void *arg) {
    for (Py_ssize_t i = 0; i < Py_SIZE(self); i++) Py_VISIT(self->items[i]);
    return 0;
}

static int Vec_clear(Vec *self) {
    for (Py_ssize_t i = 0; i < Py_SIZE(self); i++) Py_CLEAR(self->items[i]);
    return 0;
}

static void Vec_dealloc(Vec *self) {
    PyObject_GC_UnTrack(self);
    Vec_clear(self);
    freed_vecs++;
    PyObject_GC_Del(self);
}

static PyTypeObject VecType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "capi_test.Vec",
    .tp_basicsize = sizeof(Vec),
    .tp_itemsize = sizeof(PyObject *),
    .tp_dealloc = (destructor)Vec_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)Vec_traverse,
    .tp_clear = (inquiry)Vec_clear,
};

typedef struct {
    PyObject_HEAD
    char *buf;
    size_t size;
} Leaf;

static void Leaf_dealloc(Leaf *self) {
    PyMem_Free(self->buf);
    freed_leaves++;
    PyObject_Del(self);
}

static PyTypeObject LeafType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "capi_test.Leaf",
    .tp_basicsize = sizeof(Leaf),
    .tp_dealloc = (destructor)Leaf_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
};

static PyObject *new_pair(PyObject *a, PyObject *b) {
    Pair *p = PyObject_GC_New(Pair, &PairType);
    if (p == NULL) return NULL;
    p->first = Py_XNewRef(a);
    p->second = Py_XNewRef(b);
    PyObject_GC_Track(p);
    return (PyObject *)p;
}

static PyObject *new_leaf(size_t size) {
    Leaf *l = PyObject_New(Leaf, &LeafType);
    if (l == NULL) return NULL;
    l->buf = PyMem_Malloc(size);
    if (l->buf == NULL) {
        PyObject_Del(l);
        return NULL;
    }
    memset(l->buf, 7, size);
    l->size = size;
    return (PyObject *)l;
}

static PyTypeObject BadType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "capi_test.Bad",
    .tp_basicsize = sizeof(PyObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, /* no tp_traverse */
};

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1000;
    CHECK(rb_init(RB_DEBUG | RB_NO_AUTO_COLLECT) == 0);
    CHECK(rb_init(0) == RB_ERR_STATE); /* once per thread (a shared status code) */
    CHECK(RB_ERR_STATE == RT_ERR_STATE && RB_OK == RT_OK && RB_ERR_STATE < 0);
    CHECK(rb_last_error() && strstr(rb_last_error(), "already initialised"));
    rb_err_clear();

    /* Errors are values: a GC type without tp_traverse, an unready type. */
    CHECK(PyObject_GC_New(Pair, &PairType) == NULL);
    CHECK(rb_last_error() && strstr(rb_last_error(), "not ready (call PyType_Ready)"));
    rb_err_clear();
    CHECK(PyType_Ready(&BadType) == -1);
    CHECK(rb_last_error() && strstr(rb_last_error(), "Py_TPFLAGS_HAVE_GC but no tp_traverse"));
    rb_err_clear();
    CHECK(PyType_Ready(&PairType) == 0);
    CHECK(PyType_Ready(&VecType) == 0);
    CHECK(PyType_Ready(&LeafType) == 0);
    CHECK(PairType.tp_free == PyObject_GC_Del);
    CHECK(LeafType.tp_free == PyObject_Free);

    /* Counts and refcounting macros. */
    PyObject *leaf = new_leaf(100);
    CHECK(leaf && Py_REFCNT(leaf) == 1 && Py_TYPE(leaf) == &LeafType && !rb_is_stub(leaf));
    PyObject *r = Py_NewRef(leaf);
    CHECK(r == leaf && Py_REFCNT(leaf) == 2);
    Py_XDECREF(r);
    Py_XINCREF((PyObject *)NULL);
    Py_XDECREF((PyObject *)NULL);
    CHECK(Py_XNewRef((PyObject *)NULL) == NULL);
    CHECK(rb_native_bytes() >= 100 + sizeof(Leaf));
    Py_DECREF(leaf);
    CHECK(freed_leaves == 1);

    /* n pairs in one ring, a vector holding a leaf and the ring's head: all garbage once
       released; refcounting alone frees nothing of the ring. */
    PyObject *head = new_pair(NULL, NULL);
    PyObject *prev = head;
    for (int i = 1; i < n; i++) {
        PyObject *p = new_pair(prev, new_leaf(16));
        Py_DECREF(((Pair *)p)->second); /* the pair owns the leaf */
        Py_DECREF(prev);
        prev = p;
    }
    ((Pair *)head)->first = prev; /* closes the ring (steals prev's reference) */
    Vec *v = PyObject_GC_NewVar(Vec, &VecType, 3);
    CHECK(v && Py_SIZE(v) == 3);
    v->items[0] = new_leaf(32);
    v->items[1] = Py_NewRef(head);
    v->items[2] = NULL;
    PyObject_GC_Track(v);
    /* (the loop released our reference to head: p1 and v hold it now) */
    CHECK(rb_tracked_objects() == n + 1);
    CHECK(freed_pairs == 0);
    Py_ssize_t got = PyGC_Collect();
    CHECK(got == 0);                   /* everything reachable from v */
    CHECK(freed_pairs == 0);
    Py_DECREF(v);                      /* the vector goes at once, the ring stays */
    CHECK(freed_vecs == 1 && freed_pairs == 0);
    got = PyGC_Collect();
    CHECK(got == 2 * n - 1);           /* n pairs and n - 1 leaves */
    CHECK(freed_pairs == n && freed_leaves == 1 + 1 + (n - 1));
    CHECK(rb_tracked_objects() == 0);
    CHECK(rb_native_bytes() == 0);

    /* Py_SET_REFCNT on a native object. */
    PyObject *p = new_pair(NULL, NULL);
    Py_SET_REFCNT(p, 3);
    CHECK(Py_REFCNT(p) == 3);
    Py_SET_REFCNT(p, 1);
    Py_DECREF(p);
    CHECK(freed_pairs == n + 1);

    /* PyMem_Realloc keeps the data and the count. */
    char *buf = PyMem_Malloc(10);
    memcpy(buf, "refbridge", 10);
    buf = PyMem_Realloc(buf, 100000);
    CHECK(buf && strcmp(buf, "refbridge") == 0 && rb_native_bytes() == 100000);
    PyMem_Free(buf);
    CHECK(rb_native_bytes() == 0);

    /* Debug mode: a decref of a freed object is reported (the memory is quarantined,
       so this is not a real use after free under valgrind). */
    PyObject *gone = new_pair(NULL, NULL);
    Py_DECREF(gone);
    CHECK(rb_debug_report_count() == 0);
    Py_DECREF(gone);
    CHECK(rb_debug_report_count() == 1);
    CHECK(strstr(rb_debug_report(0), "UseAfterFree") != NULL);
    CHECK(strstr(rb_debug_report(0), "capi_test.Pair") != NULL);

    /* A leak, reported by rb_fini (the object and its bytes). */
    PyObject *leak = new_pair(NULL, NULL);
    (void)leak;
    int leaks = rb_fini();
    CHECK(leaks == 2);
    CHECK(rb_fini() == RB_ERR_STATE);
    CHECK(rb_last_error() && strstr(rb_last_error(), "rb_init was not called"));

    printf("capi_test: %d pairs, %d leaves, %d failures, %s\n", freed_pairs, freed_leaves,
           failures, failures ? "FAILED" : "ok");
    return failures != 0;
}
