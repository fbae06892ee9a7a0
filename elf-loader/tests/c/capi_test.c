/* A C program built against include/elf_loader.h: loads the counter fixture twice
 * through the C ABI, checks the copies are independent, and exercises misuse of the
 * API (NULL, deleted and wrong-kind handles, load twice, missing files), which must return error
 * codes with messages, never crash. Usage: capi_test /path/to/libcounter.so */
#include "elf_loader.h"
#include <stdio.h>
#include <string.h>

static int failures = 0;
#define CHECK(cond, ...) do { if (!(cond)) { failures++; fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); } } while (0)

typedef int (*int_fn)(void);

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s libcounter.so\n", argv[0]); return 2; }
    const char *so = argv[1];

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
