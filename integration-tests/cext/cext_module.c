/*
 * cext_module.c: the CPython-only glue of the `cext` extension module: a module object
 * whose functions wrap cext.c's operations for Python code. Built with cext.c into
 * cext.cpython-311-x86_64-linux-gnu.so; the refbridge build uses cext.c alone.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

int cext_init(void);
PyObject *cext_container_new(long id);
PyObject *cext_leaf_new(long id, Py_ssize_t size);
int cext_container_append(PyObject *self, PyObject *item);
void cext_container_clear(PyObject *self);
PyObject *cext_container_pop(PyObject *self);
Py_ssize_t cext_container_len(PyObject *self);
PyObject *cext_container_get(PyObject *self, Py_ssize_t i);
long cext_id(PyObject *op);
int cext_leaf_check(PyObject *op);
long cext_freed_count(void);
long cext_freed_id(long i);
long cext_live_count(void);
void cext_freed_reset(void);
PyTypeObject *cext_container_type(void);

static PyObject *m_container(PyObject *mod, PyObject *args) {
    long id;
    if (!PyArg_ParseTuple(args, "l", &id)) return NULL;
    return cext_container_new(id);
}

static PyObject *m_leaf(PyObject *mod, PyObject *args) {
    long id;
    Py_ssize_t size;
    if (!PyArg_ParseTuple(args, "ln", &id, &size)) return NULL;
    return cext_leaf_new(id, size);
}

static int is_container(PyObject *o) {
    if (Py_TYPE(o) != cext_container_type()) {
        PyErr_SetString(PyExc_TypeError, "expected a cext.Container");
        return 0;
    }
    return 1;
}

static PyObject *m_append(PyObject *mod, PyObject *args) {
    PyObject *c, *x;
    if (!PyArg_ParseTuple(args, "OO", &c, &x) || !is_container(c)) return NULL;
    if (cext_container_append(c, x) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *m_clear(PyObject *mod, PyObject *c) {
    if (!is_container(c)) return NULL;
    cext_container_clear(c);
    Py_RETURN_NONE;
}

static PyObject *m_pop(PyObject *mod, PyObject *c) {
    if (!is_container(c)) return NULL;
    PyObject *x = cext_container_pop(c);
    if (x == NULL) Py_RETURN_NONE;
    return x;
}

static PyObject *m_len(PyObject *mod, PyObject *c) {
    if (!is_container(c)) return NULL;
    return PyLong_FromSsize_t(cext_container_len(c));
}

static PyObject *m_get(PyObject *mod, PyObject *args) {
    PyObject *c;
    Py_ssize_t i;
    if (!PyArg_ParseTuple(args, "On", &c, &i) || !is_container(c)) return NULL;
    PyObject *x = cext_container_get(c, i);
    if (x == NULL) {
        PyErr_SetString(PyExc_IndexError, "index out of range");
        return NULL;
    }
    return Py_NewRef(x);
}

static PyObject *m_id(PyObject *mod, PyObject *o) { return PyLong_FromLong(cext_id(o)); }
static PyObject *m_leaf_ok(PyObject *mod, PyObject *o) { return PyBool_FromLong(cext_leaf_check(o)); }

static PyObject *m_freed(PyObject *mod, PyObject *unused) {
    long n = cext_freed_count();
    PyObject *l = PyList_New(n);
    if (l == NULL) return NULL;
    for (long i = 0; i < n; i++) PyList_SET_ITEM(l, i, PyLong_FromLong(cext_freed_id(i)));
    cext_freed_reset();
    return l;
}

static PyObject *m_live(PyObject *mod, PyObject *unused) { return PyLong_FromLong(cext_live_count()); }

static PyMethodDef methods[] = {
    {"container", m_container, METH_VARARGS, "container(id): a new cext.Container"},
    {"leaf", m_leaf, METH_VARARGS, "leaf(id, size): a new cext.Leaf owning size bytes"},
    {"append", m_append, METH_VARARGS, "append(container, x)"},
    {"clear", m_clear, METH_O, "clear(container)"},
    {"pop", m_pop, METH_O, "pop(container): the last item, or None"},
    {"length", m_len, METH_O, "length(container)"},
    {"get", m_get, METH_VARARGS, "get(container, i)"},
    {"ident", m_id, METH_O, "ident(obj): the id of a container or leaf"},
    {"leaf_ok", m_leaf_ok, METH_O, "leaf_ok(leaf): its buffer is intact"},
    {"freed", m_freed, METH_NOARGS, "freed(): ids deallocated since the last call"},
    {"live", m_live, METH_NOARGS, "live(): objects alive"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "cext", NULL, -1, methods};

PyMODINIT_FUNC PyInit_cext(void) {
    if (cext_init() < 0) return NULL;
    return PyModule_Create(&module);
}
