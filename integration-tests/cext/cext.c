/*
 * cext.c: a C extension written in CPython's C-API style, compiled unchanged against
 * CPython 3.11's Python.h (as part of the real extension module `cext`, with
 * cext_module.c) and against refbridge's Python.h (refbridge/include/compat), where
 * elf-loader loads it into a Rust host whose managed objects live on gc-core.
 *
 * Two types:
 *   cext.Container  a GC container: a growable array of references (PyMem_Malloc'd),
 *                   tp_traverse / tp_clear, so cycles through it can be collected;
 *   cext.Leaf       not GC: owns a PyMem_Malloc buffer of a given size.
 * Every object has an id; deallocations are logged (id order), so a host can tell which
 * objects were freed when.
 */
#include <Python.h>
#include <string.h>

typedef struct {
    PyObject_HEAD
    long id;
    Py_ssize_t len;
    Py_ssize_t cap;
    PyObject **items;
} Container;

typedef struct {
    PyObject_HEAD
    long id;
    Py_ssize_t size;
    unsigned char *buf;
} Leaf;

#define CEXT_LOG_MAX 65536
static long freed_log[CEXT_LOG_MAX];
static long freed_n;
static long live_n;

static void log_freed(long id) {
    if (freed_n < CEXT_LOG_MAX) freed_log[freed_n] = id;
    freed_n++;
    live_n--;
}

static int Container_traverse(Container *self, visitproc visit, void *arg) {
    for (Py_ssize_t i = 0; i < self->len; i++) Py_VISIT(self->items[i]);
    return 0;
}

static int Container_clear(Container *self) {
    for (Py_ssize_t i = 0; i < self->len; i++) Py_CLEAR(self->items[i]);
    self->len = 0;
    return 0;
}

static void Container_dealloc(Container *self) {
    PyObject_GC_UnTrack(self);
    Container_clear(self);
    PyMem_Free(self->items);
    log_freed(self->id);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject ContainerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cext.Container",
    .tp_basicsize = sizeof(Container),
    .tp_itemsize = 0,
    .tp_dealloc = (destructor)Container_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)Container_traverse,
    .tp_clear = (inquiry)Container_clear,
};

static void Leaf_dealloc(Leaf *self) {
    PyMem_Free(self->buf);
    log_freed(self->id);
    PyObject_Del(self);
}

static PyTypeObject LeafType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "cext.Leaf",
    .tp_basicsize = sizeof(Leaf),
    .tp_itemsize = 0,
    .tp_dealloc = (destructor)Leaf_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
};

/* The operations a host drives (the module glue wraps them for Python). */

int cext_init(void) {
    if (PyType_Ready(&ContainerType) < 0) return -1;
    if (PyType_Ready(&LeafType) < 0) return -1;
    return 0;
}

PyTypeObject *cext_container_type(void) { return &ContainerType; }
PyTypeObject *cext_leaf_type(void) { return &LeafType; }

/* A new container (new reference), or NULL with the error set. */
PyObject *cext_container_new(long id) {
    Container *c = PyObject_GC_New(Container, &ContainerType);
    if (c == NULL) return NULL;
    c->id = id;
    c->len = 0;
    c->cap = 0;
    c->items = NULL;
    live_n++;
    PyObject_GC_Track(c);
    return (PyObject *)c;
}

/* A new leaf owning `size` bytes (new reference; a negative size counts as 0), or NULL
 * with the error set. */
PyObject *cext_leaf_new(long id, Py_ssize_t size) {
    if (size < 0) size = 0;
    Leaf *l = PyObject_New(Leaf, &LeafType);
    if (l == NULL) return NULL;
    l->id = id;
    l->size = size;
    l->buf = PyMem_Malloc(size > 0 ? (size_t)size : 1);
    if (l->buf == NULL) {
        PyObject_Del(l);
#ifndef REFBRIDGE_PYTHON_H
        /* CPython's PyMem_Malloc sets no error; refbridge's sets MemoryError itself. */
        PyErr_NoMemory();
#endif
        return NULL;
    }
    memset(l->buf, (int)(id & 0xff), (size_t)size);
    live_n++;
    return (PyObject *)l;
}

/* Appends a new reference to `item`; 0, or -1 with the error set. */
int cext_container_append(PyObject *self, PyObject *item) {
    Container *c = (Container *)self;
    if (c->len == c->cap) {
        Py_ssize_t cap = c->cap ? 2 * c->cap : 4;
        PyObject **items = PyMem_Realloc(c->items, (size_t)cap * sizeof(PyObject *));
        if (items == NULL) return -1;
        c->items = items;
        c->cap = cap;
    }
    c->items[c->len++] = Py_NewRef(item);
    return 0;
}

/* Drops every reference the container holds. */
void cext_container_clear(PyObject *self) { Container_clear((Container *)self); }

/* Removes and returns the last item (a new reference: the container's own is moved to
   the caller), or NULL if empty. */
PyObject *cext_container_pop(PyObject *self) {
    Container *c = (Container *)self;
    if (c->len == 0) return NULL;
    return c->items[--c->len];
}

Py_ssize_t cext_container_len(PyObject *self) { return ((Container *)self)->len; }

/* Item i, borrowed. */
PyObject *cext_container_get(PyObject *self, Py_ssize_t i) {
    Container *c = (Container *)self;
    return (i >= 0 && i < c->len) ? c->items[i] : NULL;
}

long cext_id(PyObject *op) {
    if (Py_TYPE(op) == &ContainerType) return ((Container *)op)->id;
    if (Py_TYPE(op) == &LeafType) return ((Leaf *)op)->id;
    return -1;
}

/* A leaf's buffer is intact (every byte equals its id's low byte). */
int cext_leaf_check(PyObject *op) {
    Leaf *l = (Leaf *)op;
    for (Py_ssize_t i = 0; i < l->size; i++)
        if (l->buf[i] != (unsigned char)(l->id & 0xff)) return 0;
    return 1;
}

long cext_freed_count(void) { return freed_n; }
long cext_freed_id(long i) { return (i >= 0 && i < freed_n && i < CEXT_LOG_MAX) ? freed_log[i] : -1; }
long cext_live_count(void) { return live_n; }
void cext_freed_reset(void) { freed_n = 0; }
