/* A C host that links only libelf_loader and libc (no libm: the test checks the
 * executable's DT_NEEDED list) and runs real CPythons through the C ABI.
 *
 * Usage: python_host /path/libpython3.X.so.1.0 [...]
 *
 * Each libpython given is loaded twice, into two namespaces; both copies are
 * initialised, and each imports and uses math, _decimal, _json, _struct, array, _ctypes,
 * _sqlite3, _socket, unicodedata, zlib and _hashlib, runs Python threads, and is then
 * called from several C threads at once (every copy of every version concurrently).
 * id(None) must differ between all copies and equal each copy's own _Py_NoneStruct.
 * CPython 3.12 and later import _decimal, which no longer lists libm, and take `ceil`
 * from the namespace's global scope (libpython's dependencies), as with glibc.
 * Prints one line per copy and "all checks passed" at the end. */
#include "elf_loader.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;
#define CHECK(cond, ...) do { if (!(cond)) { __atomic_add_fetch(&failures, 1, __ATOMIC_SEQ_CST); \
    fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); fprintf(stderr, __VA_ARGS__); \
    fprintf(stderr, "\n"); } } while (0)

typedef struct py {
    char label[64];
    elf_loader_namespace *ns;
    elf_loader_library *lib;
    void (*initialize)(int);
    void *(*save_thread)(void);
    int (*ensure)(void);
    void (*release)(int);
    int (*run)(const char *);
    void *(*add_module)(const char *);
    void *(*get_attr)(void *, const char *);
    long long (*as_long_long)(void *);
    void (*decref)(void *);
    void *none_struct;
} py;

static int missing = 0;

static void *sym(py *p, const char *name) {
    void *a = elf_loader_library_sym(p->lib, name);
    CHECK(a != NULL, "%s: %s", p->label, elf_loader_last_error());
    if (!a) missing++;
    return a;
}

/* Loads a copy into a namespace of its own and initialises it (then releases the GIL). */
static int load(py *p, const char *path, const char *label) {
    snprintf(p->label, sizeof p->label, "%s", label);
    p->ns = elf_loader_namespace_new(label);
    if (elf_loader_namespace_load(p->ns, path, &p->lib) != ELF_LOADER_OK) {
        CHECK(0, "%s: loading %s: %s", label, path, elf_loader_last_error());
        return 0;
    }
    *(void **)&p->initialize = sym(p, "Py_InitializeEx");
    *(void **)&p->save_thread = sym(p, "PyEval_SaveThread");
    *(void **)&p->ensure = sym(p, "PyGILState_Ensure");
    *(void **)&p->release = sym(p, "PyGILState_Release");
    *(void **)&p->run = sym(p, "PyRun_SimpleString");
    *(void **)&p->add_module = sym(p, "PyImport_AddModule");
    *(void **)&p->get_attr = sym(p, "PyObject_GetAttrString");
    *(void **)&p->as_long_long = sym(p, "PyLong_AsLongLong");
    *(void **)&p->decref = sym(p, "Py_DecRef");
    p->none_struct = sym(p, "_Py_NoneStruct");
    if (missing) return 0;
    p->initialize(0);
    p->save_thread();
    return 1;
}

/* Runs code in __main__ with the GIL and returns __main__.result (or -1). */
static long long eval(py *p, const char *code) {
    int g = p->ensure();
    long long v = -1;
    if (p->run(code) != 0) {
        CHECK(0, "%s: Python code failed (traceback above)", p->label);
    } else {
        void *m = p->add_module("__main__");
        void *r = m ? p->get_attr(m, "result") : NULL;
        CHECK(r != NULL, "%s: no __main__.result", p->label);
        if (r) {
            v = p->as_long_long(r);
            p->decref(r);
        }
    }
    p->release(g);
    return v;
}

static const char *MODULES =
    "import sys, math, _decimal, _json, _struct, array, _ctypes, _sqlite3, _socket\n"
    "import unicodedata, zlib, _hashlib, threading\n"
    "assert math.sqrt(16) == 4.0 and math.ceil(2.5) == 3\n"
    "assert str(_decimal.Decimal(1) / _decimal.Decimal(8)) == '0.125'\n"
    "assert str(_decimal.Decimal(2).sqrt())[:12] == '1.4142135623'\n"
    "assert _json.encode_basestring_ascii('\\u00e9') == '\"\\\\u00e9\"'\n"
    "assert _struct.pack('<I', 1) == b'\\x01\\x00\\x00\\x00'\n"
    "assert array.array('i', [1, 2, 3]).tolist() == [1, 2, 3]\n"
    "import ctypes\n"
    "assert ctypes.c_int(7).value == 7\n"
    "assert ctypes.CDLL(None).strlen(b'abcd') == 4\n"
    "con = _sqlite3.connect(':memory:')\n"
    "assert con.execute('select 6*7').fetchone()[0] == 42\n"
    "s = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM); s.close()\n"
    "assert unicodedata.name('\\u00e9') == 'LATIN SMALL LETTER E WITH ACUTE'\n"
    "assert zlib.decompress(zlib.compress(b'x' * 1000)) == b'x' * 1000\n"
    "assert _hashlib.openssl_sha256(b'abc').hexdigest() == "
    "'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad'\n"
    "assert type(math.sqrt) is type(len), 'math is bound to this copy'\n"
    "out = {}\n"
    "def work(i):\n"
    "    out[i] = (threading.get_ident(), sum(range(i * 1000)))\n"
    "ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]\n"
    "for t in ts: t.start()\n"
    "for t in ts: t.join()\n"
    "assert sorted(v for _, v in out.values()) == [sum(range(i * 1000)) for i in range(4)]\n"
    "assert len({t for t, _ in out.values()}) >= 1\n"
    "result = id(None)\n";

#define MAX_COPIES 16

typedef struct job {
    py *p;
    int rounds;
} job;

static void *thread_main(void *arg) {
    job *j = arg;
    static const char *FIB =
        "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"
        "import threading\n"
        "result = fib(15) * 1000 + (threading.get_ident() != threading.main_thread().ident)";
    for (int i = 0; i < j->rounds; i++)
        CHECK(eval(j->p, FIB) == 610 * 1000 + 1, "%s: fib from a C thread", j->p->label);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s libpython.so [...]\n", argv[0]); return 2; }
    static py copies[MAX_COPIES];
    int n = 0;
    for (int i = 1; i < argc && n + 2 <= MAX_COPIES; i++) {
        const char *base = strrchr(argv[i], '/');
        base = base ? base + 1 : argv[i];
        for (int k = 0; k < 2; k++) {
            char label[64];
            snprintf(label, sizeof label, "%s#%c", base, 'a' + k);
            py *p = &copies[n];
            if (!load(p, argv[i], label)) continue;
            n++;
            char check[128];
            snprintf(check, sizeof check,
                     "import sys\nresult = sys.version_info[0] * 100 + sys.version_info[1]");
            long long ver = eval(p, check);
            long long none = eval(p, MODULES);
            CHECK(none == (long long)(size_t)p->none_struct,
                  "%s: id(None) %llx is this copy's _Py_NoneStruct %p", label, none, p->none_struct);
            printf("%s: python %lld.%lld, modules and threads ok, id(None)=%#llx\n", label,
                   ver / 100, ver % 100, none);
            fflush(stdout);
        }
    }
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            CHECK(copies[i].none_struct != copies[j].none_struct, "%s and %s share None",
                  copies[i].label, copies[j].label);
    /* Every copy called from two C threads at once. */
    pthread_t threads[2 * MAX_COPIES];
    job jobs[2 * MAX_COPIES];
    for (int i = 0; i < 2 * n; i++) {
        jobs[i] = (job){ &copies[i / 2], 3 };
        CHECK(pthread_create(&threads[i], NULL, thread_main, &jobs[i]) == 0, "pthread_create");
    }
    for (int i = 0; i < 2 * n; i++) pthread_join(threads[i], NULL);
    printf("%d copies called from %d C threads at once\n", n, 2 * n);
    if (failures) {
        printf("%d checks failed\n", failures);
        return 1;
    }
    printf("all checks passed\n");
    /* The interpreters stay alive: the process exits here. */
    return 0;
}
