/* multipy runner: the seed's `libpython_runner.so`. One copy of this file is compiled
 * per CPython version (against that version's own headers, so PyConfig's layout is
 * right) and loaded by elf-loader into each interpreter's namespace after libpython, so
 * its Py* references bind to that namespace's copy. Its static variables are therefore
 * per interpreter.
 *
 * The Rust side (integration-tests/src/multipy/runner.rs) calls these entry points
 * through function pointers looked up in the loaded copy:
 *   mp_initialize  on the interpreter's own main thread: PyConfig, Py_InitializeFromConfig,
 *                  the host module (the bootstrap: its code object unmarshalled from
 *                  what an earlier copy of this Python compiled, else compiled here and
 *                  handed back marshalled), then the GIL is released;
 *   mp_dispatch    from any thread: under this copy's GIL, calls the host module's
 *                  dispatch(op, *args) and copies the result strings out;
 *   mp_share_buffer exposes host memory as a buffer-protocol object;
 *   mp_call_pickled from any thread: runs a task given as a pickle (protocol 5) whose
 *                  out-of-band buffers are host memory, and lends the host the
 *                  out-of-band buffers of the result's pickle until mp_release_lent;
 *   mp_interrupt   raises KeyboardInterrupt in a thread running in this copy;
 *   mp_finalize    on the main thread: Py_FinalizeEx;
 *   mp_free        frees strings this file allocated.
 * No entry point lets a Python exception or a C++ exception escape: errors are strings. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <marshal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MP_ABI 5
#define MP_FIELDS 8

typedef void (*mp_write_fn)(void *host, int stream, const char *data, size_t len);
typedef void (*mp_release_fn)(void *host, uint64_t id);

struct mp_config {
    uint32_t abi;
    const char *executable;
    int argc;
    char **argv;
    int use_environment;
    int install_signal_handlers;
    int site_import;
    const char *bootstrap;
    /* The bootstrap compiled by an earlier copy of this Python: the 4-byte import magic
     * number of that Python, then the code object as marshal data; NULL if none. Used only
     * when the magic number is this copy's and the data unmarshals to a code object. */
    const char *bootstrap_code;
    size_t bootstrap_code_len;
    void *host;
    mp_write_fn write;
    mp_release_fn release;
};

struct mp_result {
    /* status, stdout, stderr, exception type, message, traceback, exit code, value */
    char *fields[MP_FIELDS];
    size_t lens[MP_FIELDS];
};

static void *g_host;
static mp_write_fn g_write;
static mp_release_fn g_release;
static PyThreadState *g_main;
static PyObject *g_dispatch;

static char *dup_str(const char *s) {
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

/* The pending Python exception as "Type: message" (clears it). GIL held. */
static char *take_error(const char *what) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    const char *name = type ? ((PyTypeObject *)type)->tp_name : "unknown error";
    PyObject *s = value ? PyObject_Str(value) : NULL;
    const char *msg = s ? PyUnicode_AsUTF8(s) : NULL;
    if (!msg) { PyErr_Clear(); msg = ""; }
    size_t n = strlen(what) + strlen(name) + strlen(msg) + 8;
    char *out = malloc(n);
    if (out) snprintf(out, n, "%s: %s: %s", what, name, msg);
    Py_XDECREF(s);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return out;
}

/* _multipy_host.write(stream, data): hands bytes (UTF-8 text, or whatever the Python code
 * wrote to sys.stdout.buffer) to the host's sink. */
static PyObject *host_write(PyObject *self, PyObject *args) {
    int stream;
    const char *data;
    Py_ssize_t len;
    (void)self;
    if (!PyArg_ParseTuple(args, "iy#", &stream, &data, &len)) return NULL;
    if (g_write) g_write(g_host, stream, data, (size_t)len);
    Py_RETURN_NONE;
}

static PyMethodDef host_methods[] = {
    {"write", host_write, METH_VARARGS, "write(stream, text): send text to the host's output sink"},
    {NULL, NULL, 0, NULL},
};

/* A buffer-protocol object over host memory; the host keeps the memory alive until
 * release(id) is called from the object's deallocator (or the interpreter is gone). */
typedef struct {
    PyObject_HEAD
    void *ptr;
    Py_ssize_t len;
    int readonly;
    uint64_t id;
} SharedBuffer;

static int sb_getbuffer(PyObject *obj, Py_buffer *view, int flags) {
    SharedBuffer *self = (SharedBuffer *)obj;
    return PyBuffer_FillInfo(view, obj, self->ptr, self->len, self->readonly, flags);
}

static void sb_dealloc(PyObject *obj) {
    SharedBuffer *self = (SharedBuffer *)obj;
    if (g_release) g_release(g_host, self->id);
    Py_TYPE(obj)->tp_free(obj);
}

static PyObject *sb_repr(PyObject *obj) {
    SharedBuffer *self = (SharedBuffer *)obj;
    return PyUnicode_FromFormat("<multipy.SharedBuffer %zd bytes%s>", self->len,
                                self->readonly ? ", read-only" : "");
}

static Py_ssize_t sb_length(PyObject *obj) { return ((SharedBuffer *)obj)->len; }

static PyBufferProcs sb_as_buffer = {sb_getbuffer, NULL};
static PySequenceMethods sb_as_sequence = {sb_length};

static PyTypeObject SharedBufferType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "multipy.SharedBuffer",
    .tp_basicsize = sizeof(SharedBuffer),
    .tp_dealloc = sb_dealloc,
    .tp_repr = sb_repr,
    .tp_as_sequence = &sb_as_sequence,
    .tp_as_buffer = &sb_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Memory owned by the embedding program, shared without copies between interpreters.",
};

static int set_string(PyConfig *config, wchar_t **field, const char *value, char **error) {
    PyStatus st = PyConfig_SetBytesString(config, field, value);
    if (PyStatus_Exception(st)) {
        *error = dup_str(st.err_msg ? st.err_msg : "PyConfig_SetBytesString failed");
        return -1;
    }
    return 0;
}

int mp_abi(void) { return MP_ABI; }

/* The bootstrap's code object: unmarshalled from c->bootstrap_code when that is usable,
 * else compiled from the source, in which case *code_out/*code_len receive the magic
 * number + marshal data (malloc'd) for the host to reuse. NULL with an exception set if
 * the source does not compile. GIL held. */
static PyObject *bootstrap_code(const struct mp_config *c, char **code_out, size_t *code_len) {
    long m = PyImport_GetMagicNumber();
    if (m == -1) PyErr_Clear(); /* then neither reuse nor hand back marshal data */
    uint32_t magic = (uint32_t)m;
    if (m != -1 && c->bootstrap_code && c->bootstrap_code_len > sizeof magic &&
        memcmp(c->bootstrap_code, &magic, sizeof magic) == 0) {
        PyObject *code = PyMarshal_ReadObjectFromString(c->bootstrap_code + sizeof magic,
                                                        (Py_ssize_t)(c->bootstrap_code_len - sizeof magic));
        if (code && PyCode_Check(code)) return code;
        Py_XDECREF(code);
        PyErr_Clear();
    }
    PyObject *code = Py_CompileString(c->bootstrap, "<multipy bootstrap>", Py_file_input);
    if (!code) return NULL;
    PyObject *data = m == -1 ? NULL : PyMarshal_WriteObjectToString(code, Py_MARSHAL_VERSION);
    char *bytes = NULL;
    Py_ssize_t n = 0;
    if (data && PyBytes_AsStringAndSize(data, &bytes, &n) == 0 && (*code_out = malloc(sizeof magic + (size_t)n))) {
        memcpy(*code_out, &magic, sizeof magic);
        memcpy(*code_out + sizeof magic, bytes, (size_t)n);
        *code_len = sizeof magic + (size_t)n;
    }
    PyErr_Clear(); /* no marshal data only means nothing to reuse */
    Py_XDECREF(data);
    return code;
}

int mp_initialize(const struct mp_config *c, char **error, char **code_out, size_t *code_len) {
    *error = NULL;
    *code_out = NULL;
    *code_len = 0;
    if (c->abi != MP_ABI) {
        *error = dup_str("multipy runner: ABI mismatch between the Rust side and runner.c");
        return -1;
    }
    if (Py_IsInitialized()) {
        *error = dup_str("this libpython copy is already initialised");
        return -1;
    }
    g_host = c->host;
    g_write = c->write;
    g_release = c->release;

    PyConfig config;
    PyConfig_InitPythonConfig(&config);
    config.use_environment = c->use_environment;
    config.user_site_directory = 0;
    config.parse_argv = 0;
    config.install_signal_handlers = c->install_signal_handlers;
    config.configure_c_stdio = 0;
    config.site_import = c->site_import;
    config.pathconfig_warnings = 0;
#if PY_VERSION_HEX >= 0x030B0000
    config.safe_path = 1;
#endif
    if (set_string(&config, &config.executable, c->executable, error) ||
        set_string(&config, &config.program_name, c->executable, error)) {
        PyConfig_Clear(&config);
        return -1;
    }
    PyStatus st = PyConfig_SetBytesArgv(&config, c->argc, c->argv);
    if (!PyStatus_Exception(st)) st = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    if (PyStatus_Exception(st)) {
        const char *m = st.err_msg ? st.err_msg : "Py_InitializeFromConfig failed";
        const char *f = st.func ? st.func : "";
        size_t n = strlen(m) + strlen(f) + 8;
        *error = malloc(n);
        if (*error) snprintf(*error, n, "%s%s%s", f, *f ? ": " : "", m);
        return -1;
    }

    /* The host module: write() in C, the rest in Python (the bootstrap source). */
    PyObject *mod = PyImport_AddModule("_multipy_host"); /* borrowed */
    if (!mod || PyModule_AddFunctions(mod, host_methods) < 0 || PyType_Ready(&SharedBufferType) < 0 ||
        PyModule_AddObjectRef(mod, "SharedBuffer", (PyObject *)&SharedBufferType) < 0) {
        *error = take_error("creating the _multipy_host module");
        g_main = PyEval_SaveThread();
        return -1;
    }
    PyObject *dict = PyModule_GetDict(mod);
    if (PyDict_GetItemString(dict, "__builtins__") == NULL)
        PyDict_SetItemString(dict, "__builtins__", PyEval_GetBuiltins());
    PyObject *code = bootstrap_code(c, code_out, code_len);
    PyObject *r = code ? PyEval_EvalCode(code, dict, dict) : NULL;
    Py_XDECREF(code);
    if (!r) {
        *error = take_error("running the multipy bootstrap");
        g_main = PyEval_SaveThread();
        return -1;
    }
    Py_DECREF(r);
    g_dispatch = PyDict_GetItemString(dict, "dispatch");
    if (!g_dispatch) {
        *error = dup_str("the multipy bootstrap defines no dispatch()");
        g_main = PyEval_SaveThread();
        return -1;
    }
    Py_INCREF(g_dispatch);
    g_main = PyEval_SaveThread();
    return 0;
}

/* Copies result field i out as UTF-8 bytes. Surrogate escapes (bytes written to
 * sys.stdout.buffer that were not UTF-8) become the bytes they stand for; any other lone
 * surrogate (in an exception message, say) is written as a backslash escape. So a field
 * is never lost to a character UTF-8 cannot hold. */
static void put(struct mp_result *r, int i, PyObject *s) {
    PyObject *b = NULL;
    if (s && PyUnicode_Check(s)) {
        b = PyUnicode_AsEncodedString(s, "utf-8", "surrogateescape");
        if (!b) {
            PyErr_Clear();
            b = PyUnicode_AsEncodedString(s, "utf-8", "backslashreplace");
        }
    }
    if (!b) PyErr_Clear();
    const char *u = b ? PyBytes_AS_STRING(b) : "";
    size_t n = b ? (size_t)PyBytes_GET_SIZE(b) : 0;
    r->fields[i] = malloc(n + 1);
    if (r->fields[i]) {
        memcpy(r->fields[i], u, n);
        r->fields[i][n] = 0;
        r->lens[i] = n;
    }
    Py_XDECREF(b);
}

/* Runs dispatch(op, *args) under this copy's GIL, from any thread. Returns 0 when
 * dispatch returned its tuple (whatever the Python code did), -1 if dispatch itself
 * failed (the message is in fields[4]). */
int mp_dispatch(const char *const *args, const size_t *lens, int nargs, struct mp_result *r) {
    memset(r, 0, sizeof *r);
    PyGILState_STATE g = PyGILState_Ensure();
    int rc = -1;
    PyObject *tuple = PyTuple_New(nargs);
    for (int i = 0; tuple && i < nargs; i++) {
        PyObject *s = PyUnicode_DecodeUTF8(args[i], (Py_ssize_t)lens[i], "surrogateescape");
        if (!s) { Py_CLEAR(tuple); break; }
        PyTuple_SET_ITEM(tuple, i, s);
    }
    PyObject *res = tuple ? PyObject_Call(g_dispatch, tuple, NULL) : NULL;
    Py_XDECREF(tuple);
    if (res && PyTuple_Check(res) && PyTuple_GET_SIZE(res) == MP_FIELDS) {
        for (int i = 0; i < MP_FIELDS; i++) put(r, i, PyTuple_GET_ITEM(res, i));
        rc = 0;
    } else {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "dispatch() returned no 8-tuple");
        char *e = take_error("multipy dispatch");
        r->fields[4] = e;
        r->lens[4] = e ? strlen(e) : 0;
    }
    Py_XDECREF(res);
    PyGILState_Release(g);
    return rc;
}

/* Sets _multipy_host.buffers[name] (and __main__.name) to a SharedBuffer over
 * [ptr, ptr+len). */
int mp_share_buffer(const char *name, void *ptr, size_t len, int readonly, uint64_t id, char **error) {
    *error = NULL;
    PyGILState_STATE g = PyGILState_Ensure();
    int rc = -1;
    SharedBuffer *obj = PyObject_New(SharedBuffer, &SharedBufferType);
    if (obj) {
        obj->ptr = ptr;
        obj->len = (Py_ssize_t)len;
        obj->readonly = readonly;
        obj->id = id;
        PyObject *mod = PyImport_AddModule("_multipy_host");
        PyObject *reg = mod ? PyObject_GetAttrString(mod, "register_buffer") : NULL;
        PyObject *res = reg ? PyObject_CallFunction(reg, "sO", name, (PyObject *)obj) : NULL;
        if (res) rc = 0;
        Py_XDECREF(res);
        Py_XDECREF(reg);
        Py_DECREF(obj);
    }
    if (rc != 0) *error = take_error("sharing a buffer");
    PyGILState_Release(g);
    return rc;
}

/* One out-of-band buffer of a pickled call: host memory lent to this copy (released
 * through the host's release callback with its id when the last view is gone), or this
 * copy's memory lent to the host (held until mp_release_lent(id)). */
struct mp_buffer {
    void *ptr;
    size_t len;
    int readonly;
    uint64_t id;
};

/* A pickled call's answer. status: 0 the task returned, 1 it raised (payload is then
 * the pickled exception), -1 the call could not be made (error says why). payload and
 * buffers are malloc'd (mp_free). */
struct mp_pickled {
    int status;
    char *payload;
    size_t payload_len;
    struct mp_buffer *buffers;
    size_t nbuffers;
    char *error;
};

/* The result buffers lent to the host: each a Py_buffer held until released. */
typedef struct {
    uint64_t id;
    Py_buffer view;
} Lent;
static Lent *g_lent;
static size_t g_nlent, g_caplent;
static uint64_t g_next_lent = 1;

/* Releases the lent buffers with these ids (unknown ids are ignored). GIL held. */
static void release_lent(const uint64_t *ids, size_t n) {
    for (size_t k = 0; k < n; k++) {
        for (size_t i = 0; i < g_nlent; i++) {
            if (g_lent[i].id == ids[k]) {
                PyBuffer_Release(&g_lent[i].view);
                g_lent[i] = g_lent[--g_nlent];
                break;
            }
        }
    }
}

/* Lends the buffer of `obj` (a contiguous memoryview) to the host: out receives its
 * address, length, read-only flag and id. GIL held; 0 or -1 with an exception. */
static int lend(PyObject *obj, struct mp_buffer *out) {
    if (g_nlent == g_caplent) {
        size_t cap = g_caplent ? 2 * g_caplent : 16;
        Lent *n = realloc(g_lent, cap * sizeof *n);
        if (!n) {
            PyErr_NoMemory();
            return -1;
        }
        g_lent = n;
        g_caplent = cap;
    }
    Lent *l = &g_lent[g_nlent];
    if (PyObject_GetBuffer(obj, &l->view, PyBUF_SIMPLE) < 0) return -1;
    l->id = g_next_lent++;
    g_nlent++;
    out->ptr = l->view.buf;
    out->len = (size_t)l->view.len;
    out->readonly = l->view.readonly;
    out->id = l->id;
    return 0;
}

/* Runs _multipy_host.call_pickled(payload, buffers) under this copy's GIL, from any
 * thread; first releases the lent buffers listed in `release`. Returns out->status. */
int mp_call_pickled(const char *payload, size_t len, const struct mp_buffer *in, size_t nin,
                    const uint64_t *release, size_t nrelease, struct mp_pickled *out) {
    memset(out, 0, sizeof *out);
    out->status = -1;
    PyGILState_STATE g = PyGILState_Ensure();
    /* Keep this thread's thread state in this copy from one call to the next (one
     * extra count, never given back): PyGILState_Release would otherwise delete it and
     * the next call make it again, most of a small call's cost. It goes with the
     * interpreter at finalisation. */
    static __thread int pinned;
    if (!pinned) {
        PyGILState_Ensure();
        pinned = 1;
    }
    release_lent(release, nrelease);
    PyObject *mod = PyImport_AddModule("_multipy_host"); /* borrowed */
    PyObject *f = mod ? PyObject_GetAttrString(mod, "call_pickled") : NULL;
    PyObject *data = f ? PyBytes_FromStringAndSize(payload, (Py_ssize_t)len) : NULL;
    PyObject *bufs = data ? PyList_New((Py_ssize_t)nin) : NULL;
    size_t wrapped = 0;
    for (; bufs && wrapped < nin; wrapped++) {
        SharedBuffer *b = PyObject_New(SharedBuffer, &SharedBufferType);
        if (!b) {
            Py_CLEAR(bufs);
            break;
        }
        b->ptr = in[wrapped].ptr;
        b->len = (Py_ssize_t)in[wrapped].len;
        b->readonly = in[wrapped].readonly;
        b->id = in[wrapped].id;
        PyList_SET_ITEM(bufs, (Py_ssize_t)wrapped, (PyObject *)b);
    }
    /* A buffer wrapped in an object is given back by its deallocator; the others now. */
    for (size_t j = bufs ? nin : wrapped; j < nin; j++)
        if (g_release) g_release(g_host, in[j].id);
    PyObject *res = bufs ? PyObject_CallFunctionObjArgs(f, data, bufs, NULL) : NULL;
    Py_XDECREF(bufs);
    Py_XDECREF(data);
    Py_XDECREF(f);
    PyObject *status = NULL, *pickled = NULL, *views = NULL;
    if (res && PyTuple_Check(res) && PyTuple_GET_SIZE(res) == 3) {
        status = PyTuple_GET_ITEM(res, 0);
        pickled = PyTuple_GET_ITEM(res, 1);
        views = PyTuple_GET_ITEM(res, 2);
    }
    if (status && PyBytes_Check(pickled) && PyList_Check(views)) {
        Py_ssize_t n = PyList_GET_SIZE(views);
        out->buffers = calloc((size_t)n + 1, sizeof *out->buffers);
        out->payload = malloc((size_t)PyBytes_GET_SIZE(pickled) + 1);
        int ok = out->buffers && out->payload;
        for (Py_ssize_t i = 0; ok && i < n; i++) {
            if (lend(PyList_GET_ITEM(views, i), &out->buffers[i]) < 0) ok = 0;
            else out->nbuffers++;
        }
        if (ok) {
            memcpy(out->payload, PyBytes_AS_STRING(pickled), (size_t)PyBytes_GET_SIZE(pickled));
            out->payload_len = (size_t)PyBytes_GET_SIZE(pickled);
            out->status = (int)PyLong_AsLong(status);
        } else {
            for (size_t i = 0; i < out->nbuffers; i++) release_lent(&out->buffers[i].id, 1);
            free(out->buffers);
            free(out->payload);
            out->buffers = NULL;
            out->payload = NULL;
            out->nbuffers = 0;
            if (!PyErr_Occurred()) PyErr_NoMemory();
        }
    } else if (res && !PyErr_Occurred()) {
        PyErr_SetString(PyExc_TypeError, "call_pickled() returned no (status, bytes, list)");
    }
    Py_XDECREF(res);
    if (out->status == -1) out->error = take_error("multipy pickled call");
    PyGILState_Release(g);
    return out->status;
}

/* Releases the lent buffers with these ids, under this copy's GIL. */
void mp_release_lent(const uint64_t *ids, size_t n) {
    PyGILState_STATE g = PyGILState_Ensure();
    release_lent(ids, n);
    PyGILState_Release(g);
}

/* Raises KeyboardInterrupt asynchronously in the thread `ident` (a threading.get_ident()
 * value) of this copy, at its next bytecode boundary. Returns the number of threads
 * found (0 or 1). */
int mp_interrupt(unsigned long ident) {
    PyGILState_STATE g = PyGILState_Ensure();
    int n = PyThreadState_SetAsyncExc(ident, PyExc_KeyboardInterrupt);
    PyGILState_Release(g);
    return n;
}

/* On the main thread: takes the GIL back and finalises. Returns Py_FinalizeEx's result;
 * *live_threads is the number of Python threads other than the main one still running
 * just before finalisation (daemon threads: they may still be inside this copy). */
int mp_finalize(int *live_threads) {
    PyEval_RestoreThread(g_main);
    *live_threads = 0;
    PyObject *mod = PyImport_AddModule("_multipy_host");
    PyObject *f = mod ? PyObject_GetAttrString(mod, "before_finalize") : NULL;
    PyObject *n = f ? PyObject_CallNoArgs(f) : NULL;
    if (n) *live_threads = (int)PyLong_AsLong(n);
    PyErr_Clear();
    Py_XDECREF(n);
    Py_XDECREF(f);
    Py_CLEAR(g_dispatch);
    for (size_t i = 0; i < g_nlent; i++) PyBuffer_Release(&g_lent[i].view);
    free(g_lent);
    g_lent = NULL;
    g_nlent = g_caplent = 0;
    int rc = Py_FinalizeEx();
    g_main = NULL;
    return rc;
}

void mp_free(void *p) { free(p); }
