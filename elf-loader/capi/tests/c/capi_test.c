/* A C program built against include/elf_loader.h: loads the counter fixture twice
 * through the C ABI, checks the copies are independent, and exercises misuse of the
 * API (NULL, deleted and wrong-kind handles, load twice, missing files), which must return error
 * codes with messages, never crash. With a TLS fixture (libtls.so, and the same built
 * with TLS descriptors) it also reaches each copy's thread-local variable through
 * elf_loader_library_tls_sym and elf_loader_tls_get_addr, in the main thread and in
 * other threads, and compares with the library's own accesses.
 * Usage: capi_test /path/to/libcounter.so [libtls.so ...] */
#include "elf_loader.h"
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int failures = 0;
#define CHECK(cond, ...) do { if (!(cond)) { failures++; fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); } } while (0)

typedef int (*int_fn)(void);
typedef void *(*addr_fn)(void);
typedef void (*set_fn)(int);

/* One copy of the TLS fixture: its index for tls_gd and its own accessors. */
struct tls_copy {
    elf_loader_tls_index ti;
    addr_fn gd_addr;
    set_fn gd_set;
    int_fn gd_get;
};

/* In a new thread: the C ABI's address is the library's own, a fresh block (5). */
static void *tls_thread(void *arg) {
    struct tls_copy *c = arg;
    int *p = elf_loader_tls_get_addr(&c->ti);
    CHECK(p != NULL && p == c->gd_addr(), "thread: tls_get_addr %p vs the library's %p", (void *)p, c->gd_addr());
    CHECK(p && *p == 5, "thread: a fresh block");
    if (p) *p = 77;
    CHECK(c->gd_get() == 77, "thread: the library sees the C ABI's write");
    return p;
}

static void check_tls(const char *tls_so) {
    size_t blocks_before = elf_loader_tls_live_blocks();
    elf_loader_namespace *ns[2] = {elf_loader_namespace_new("c-tls-a"), elf_loader_namespace_new("c-tls-b")};
    elf_loader_library *lib[2] = {NULL, NULL};
    struct tls_copy c[2];
    for (int i = 0; i < 2; i++) {
        CHECK(elf_loader_namespace_load(ns[i], tls_so, &lib[i]) == ELF_LOADER_OK, "load %s: %s", tls_so, elf_loader_last_error());
        if (!lib[i]) return;
        CHECK(elf_loader_library_tls_sym(lib[i], "tls_gd", &c[i].ti) == ELF_LOADER_OK, "tls_sym: %s", elf_loader_last_error());
        CHECK(c[i].ti.module >> 63, "a module id of the loader's");
        c[i].gd_addr = (addr_fn)elf_loader_library_sym(lib[i], "gd_addr");
        c[i].gd_set = (set_fn)elf_loader_library_sym(lib[i], "gd_set");
        c[i].gd_get = (int_fn)elf_loader_library_sym(lib[i], "gd_get");
        CHECK(c[i].gd_addr && c[i].gd_set && c[i].gd_get, "accessors");
        CHECK(elf_loader_library_sym(lib[i], "tls_gd") == NULL, "a TLS symbol has no plain address");
        CHECK(strstr(elf_loader_last_error(), "thread-local") != NULL, "message: %s", elf_loader_last_error());
    }
    CHECK(c[0].ti.module != c[1].ti.module, "each copy is its own module");
    int *p0 = elf_loader_tls_get_addr(&c[0].ti), *p1 = elf_loader_tls_get_addr(&c[1].ti);
    CHECK(p0 && p0 == c[0].gd_addr() && p1 == c[1].gd_addr() && p0 != p1, "main thread: the libraries' own addresses");
    CHECK(p0 && *p0 == 5 && *p1 == 5, "initialised from the init image");
    c[0].gd_set(9);
    CHECK(p0 && *p0 == 9 && *p1 == 5, "copies independent");
    for (int i = 0; i < 2; i++) {
        pthread_t t;
        void *theirs = NULL;
        CHECK(pthread_create(&t, NULL, tls_thread, &c[i]) == 0, "pthread_create");
        pthread_join(t, &theirs);
        CHECK(theirs != NULL && theirs != (void *)(i ? p1 : p0), "each thread its own block");
    }
    CHECK(*p0 == 9 && c[1].gd_get() == 5, "the threads did not touch the main thread's variables");
    CHECK(elf_loader_tls_get_addr(NULL) == NULL, "NULL index");
    elf_loader_tls_index gone = c[1].ti;
    for (int i = 0; i < 2; i++) {
        CHECK(elf_loader_library_delete(lib[i]) == ELF_LOADER_OK, "delete");
        CHECK(elf_loader_namespace_delete(ns[i]) == ELF_LOADER_OK, "delete ns");
    }
    CHECK(elf_loader_tls_get_addr(&gone) == NULL, "an unloaded module's variable");
    CHECK(strstr(elf_loader_last_error(), "not loaded") != NULL, "message: %s", elf_loader_last_error());
    CHECK(elf_loader_tls_live_blocks() == blocks_before, "blocks freed at thread exit and unload");
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s libcounter.so [libtls.so ...]\n", argv[0]); return 2; }
    const char *so = argv[1];
    for (int i = 2; i < argc; i++)
        check_tls(argv[i]);

    /* Seed-style: CustomLibrary::create + add_search_library(global) + load. */
    elf_loader_library *a = elf_loader_library_create(so);
    CHECK(a != NULL, "create: %s", elf_loader_last_error());
    CHECK(elf_loader_library_add_search_system(a, NULL) == ELF_LOADER_OK, "search: %s", elf_loader_last_error());
    CHECK(elf_loader_library_load(a) == ELF_LOADER_OK, "load a: %s", elf_loader_last_error());

    /* Namespace-style. */
    elf_loader_namespace *ns = elf_loader_namespace_new("c-namespace");
    elf_loader_library *b = NULL;
    CHECK(elf_loader_namespace_load(ns, so, &b) == ELF_LOADER_OK, "load b: %s", elf_loader_last_error());

    int_fn bump_a = (int_fn)elf_loader_library_sym(a, "bump");
    int_fn bump_b = (int_fn)elf_loader_library_sym(b, "bump");
    CHECK(bump_a && bump_b && bump_a != bump_b, "two copies of bump");
    bump_a(); bump_a();
    CHECK(bump_a() == 3, "copy a counts its own");
    CHECK(bump_b() == 1, "copy b is independent");
    int *init_a = (int *)elf_loader_library_sym(a, "initialized");
    CHECK(init_a && *init_a == 42, "constructor ran");

    /* Errors: each a code and a message. */
    CHECK(elf_loader_library_sym(a, "no_such_symbol") == NULL, "missing symbol");
    CHECK(strstr(elf_loader_last_error(), "no_such_symbol") != NULL, "message: %s", elf_loader_last_error());
    CHECK(elf_loader_library_load(a) == ELF_LOADER_ERR_STATE, "load twice");
    CHECK(strstr(elf_loader_last_error(), "twice") != NULL, "message: %s", elf_loader_last_error());
    CHECK(elf_loader_library_add_search_system(a, NULL) == ELF_LOADER_ERR_STATE, "search after load");
    elf_loader_library *c = NULL;
    CHECK(elf_loader_namespace_load(ns, "/nonexistent/libx.so", &c) == ELF_LOADER_ERR_LOAD, "missing file");
    CHECK(strstr(elf_loader_last_error(), "/nonexistent/libx.so") != NULL, "message: %s", elf_loader_last_error());
    CHECK(elf_loader_namespace_load(ns, so, NULL) == ELF_LOADER_ERR_ARG, "NULL out");
    CHECK(elf_loader_namespace_load(NULL, so, &c) == ELF_LOADER_ERR_ARG, "NULL namespace");
    CHECK(elf_loader_library_create(NULL) == NULL, "NULL path");
    CHECK(elf_loader_library_load(NULL) == ELF_LOADER_ERR_ARG, "NULL library");
    CHECK(elf_loader_library_load((elf_loader_library *)&failures) == ELF_LOADER_ERR_ARG, "bogus handle");
    CHECK(strstr(elf_loader_last_error(), "invalid library handle") != NULL, "message: %s", elf_loader_last_error());
    /* A handle of the other kind is refused, naming what was expected. */
    CHECK(elf_loader_library_load((elf_loader_library *)ns) == ELF_LOADER_ERR_ARG, "namespace as library (load)");
    CHECK(strstr(elf_loader_last_error(), "a namespace handle where a library handle is expected") != NULL,
          "message: %s", elf_loader_last_error());
    CHECK(elf_loader_library_sym((elf_loader_library *)ns, "bump") == NULL, "namespace as library (sym)");
    CHECK(elf_loader_library_add_search_library(a, (elf_loader_library *)ns) == ELF_LOADER_ERR_ARG,
          "namespace as search library");
    CHECK(elf_loader_library_delete((elf_loader_library *)ns) == ELF_LOADER_ERR_ARG, "namespace as library (delete)");
    CHECK(strstr(elf_loader_last_error(), "library handle is expected") != NULL, "message: %s", elf_loader_last_error());
    CHECK(elf_loader_namespace_load((elf_loader_namespace *)b, so, &c) == ELF_LOADER_ERR_ARG, "library as namespace (load)");
    CHECK(strstr(elf_loader_last_error(), "a library handle where a namespace handle is expected") != NULL,
          "message: %s", elf_loader_last_error());
    CHECK(elf_loader_namespace_delete((elf_loader_namespace *)b) == ELF_LOADER_ERR_ARG, "library as namespace (delete)");
    CHECK(bump_b() == 2, "the library survives being passed as a namespace");
    /* A cycle of search libraries is refused when it is added (a lookup went round it
     * until the stack overflowed). */
    elf_loader_library *x = elf_loader_library_create(so), *y = elf_loader_library_create(so);
    CHECK(elf_loader_library_add_search_library(x, x) == ELF_LOADER_ERR_STATE, "self as search library");
    CHECK(strstr(elf_loader_last_error(), "its own search library") != NULL, "message: %s", elf_loader_last_error());
    CHECK(elf_loader_library_add_search_library(x, y) == ELF_LOADER_OK, "x searches y: %s", elf_loader_last_error());
    CHECK(elf_loader_library_add_search_library(y, x) == ELF_LOADER_ERR_STATE, "y searches x: a cycle");
    CHECK(strstr(elf_loader_last_error(), "cycle of search libraries") != NULL, "message: %s", elf_loader_last_error());
    CHECK(elf_loader_library_sym(x, "bump") == NULL, "a symbol before load");
    CHECK(strstr(elf_loader_last_error(), "not loaded yet") != NULL, "message: %s", elf_loader_last_error());
    CHECK(elf_loader_library_add_search_system(x, NULL) == ELF_LOADER_OK, "x searches the system");
    CHECK(elf_loader_library_load(x) == ELF_LOADER_OK, "load x: %s", elf_loader_last_error());
    CHECK(elf_loader_library_sym(x, "no_such_symbol") == NULL, "missing symbol through search libraries");
    CHECK(elf_loader_library_delete(x) == ELF_LOADER_OK && elf_loader_library_delete(y) == ELF_LOADER_OK, "delete x, y");
    elf_loader_tls_index ti;
    CHECK(elf_loader_library_tls_sym(a, "counter", &ti) == ELF_LOADER_ERR_NOT_FOUND, "not a TLS symbol");

    /* Teardown, then misuse of deleted handles. */
    CHECK(elf_loader_library_delete(a) == ELF_LOADER_OK, "delete a");
    CHECK(elf_loader_library_delete(a) == ELF_LOADER_ERR_ARG, "double delete");
    CHECK(elf_loader_library_delete(b) == ELF_LOADER_OK, "delete b");
    CHECK(elf_loader_namespace_delete(ns) == ELF_LOADER_OK, "delete ns");
    CHECK(elf_loader_namespace_delete(ns) == ELF_LOADER_ERR_ARG, "double delete ns");
    CHECK(elf_loader_tls_live_blocks() == 0, "no TLS blocks");

    if (failures) { fprintf(stderr, "%d failures\n", failures); return 1; }
    printf("capi_test: all checks passed\n");
    return 0;
}
