/* One host, two loaders: does the same thing with glibc's dlopen ("glibc") or with
 * elf-loader's C ABI ("ours") and prints what happened, so that glibc_order.rs can
 * compare the two line by line.
 *
 *   glibc_order_host search  MODE TOP.so FUNCTION
 *       loads TOP.so and prints "result: <what FUNCTION returns>" or "error".
 *       With SEARCH_SETENV set, LD_LIBRARY_PATH is set to its value first (glibc reads
 *       LD_LIBRARY_PATH at start-up only).
 *   glibc_order_host exit     MODE LIB.so THREADS
 *       N threads each call exit_order_use() and exit; prints the library's log of
 *       thread-local destructors and pthread key destructors.
 *   glibc_order_host teardown MODE LIB.so DEP.so CYCLES
 *       CYCLES times: load LIB.so, llvm_like_open(DEP.so), unload LIB.so; the reports
 *       of LIB's static destructor (its dlclose results) are printed.
 *   glibc_order_host teardown-exit MODE LIB.so DEP.so
 *       the same once, but never unloaded: the static destructor runs at exit.
 *   glibc_order_host order MODE unload|exit LIB.so...
 *       loads each LIB.so in turn (one namespace for "ours"), printing "loaded" or
 *       "load failed"; then with "unload" unloads them (dlclose of each, newest first;
 *       the namespace's end) and prints "unloaded", with "exit" returns from main. The
 *       libraries print their initialisers and fini functions as they run.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf_loader.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int ours;
static elf_loader_namespace *ns;
static elf_loader_library *lib;
static void *handle;

static int load(const char *path) {
    if (ours) {
        ns = elf_loader_namespace_new("glibc-order");
        if (!ns) return -1;
        if (elf_loader_namespace_load(ns, path, &lib) != 0) {
            fprintf(stderr, "ours: %s\n", elf_loader_last_error());
            elf_loader_namespace_delete(ns);
            ns = NULL;
            return -1;
        }
        return 0;
    }
    handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        fprintf(stderr, "glibc: %s\n", dlerror());
        return -1;
    }
    return 0;
}

static void *sym(const char *name) {
    return ours ? elf_loader_library_sym(lib, name) : dlsym(handle, name);
}

static void unload(void) {
    if (ours) {
        elf_loader_library_delete(lib);
        elf_loader_namespace_delete(ns);
    } else {
        dlclose(handle);
    }
}

static void *thread_main(void *arg) {
    int (*use)(void) = (int (*)(void))arg;
    if (use() != 0) fprintf(stderr, "exit_order_use failed\n");
    return NULL;
}

static void report(const char *s) { printf("report: %s\n", s); }

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s search|exit|teardown|teardown-exit glibc|ours ...\n", argv[0]);
        return 2;
    }
    const char *what = argv[1];
    ours = strcmp(argv[2], "ours") == 0;
    if (strcmp(what, "search") == 0 && argc == 5) {
        const char *env = getenv("SEARCH_SETENV");
        if (env) setenv("LD_LIBRARY_PATH", env, 1);
        if (load(argv[3]) != 0) {
            printf("error\n");
            return 0;
        }
        const char *(*f)(void) = (const char *(*)(void))sym(argv[4]);
        printf("result: %s\n", f ? f() : "(no such function)");
        return 0;
    }
    if (strcmp(what, "exit") == 0 && argc == 5) {
        if (load(argv[3]) != 0) return 1;
        int (*use)(void) = (int (*)(void))sym("exit_order_use");
        const char *(*log)(void) = (const char *(*)(void))sym("exit_order_log");
        if (!use || !log) return 1;
        int n = atoi(argv[4]);
        for (int i = 0; i < n; i++) {
            pthread_t t;
            if (pthread_create(&t, NULL, thread_main, (void *)use) != 0) return 1;
            pthread_join(t, NULL);
        }
        printf("log: %s\n", log());
        unload();
        printf("done\n");
        return 0;
    }
    if ((strcmp(what, "teardown") == 0 && argc == 6) ||
        (strcmp(what, "teardown-exit") == 0 && argc == 5)) {
        int cycles = strcmp(what, "teardown") == 0 ? atoi(argv[5]) : 1;
        for (int c = 0; c < cycles; c++) {
            if (load(argv[3]) != 0) return 1;
            void (*set_report)(void (*)(const char *)) =
                (void (*)(void (*)(const char *)))sym("llvm_like_set_report");
            int (*open_lib)(const char *) = (int (*)(const char *))sym("llvm_like_open");
            if (!set_report || !open_lib) return 1;
            set_report(report);
            if (open_lib(argv[4]) != 0) {
                printf("llvm_like_open failed\n");
                return 1;
            }
            if (cycles > 1 || strcmp(what, "teardown") == 0) unload();
        }
        printf("done\n");
        fflush(stdout);
        return 0;
    }
    if (strcmp(what, "order") == 0 && argc >= 5) {
        int at_exit = strcmp(argv[3], "exit") == 0;
        void *handles[16];
        int n = 0;
        if (ours) {
            ns = elf_loader_namespace_new("glibc-order");
            if (!ns) return 1;
        }
        for (int i = 4; i < argc && n < 16; i++) {
            int ok;
            if (ours) {
                elf_loader_library *l;
                ok = elf_loader_namespace_load(ns, argv[i], &l) == 0;
                if (ok) handles[n++] = l;
            } else {
                void *h = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
                ok = h != NULL;
                if (ok) handles[n++] = h;
            }
            printf(ok ? "loaded\n" : "load failed\n");
            fflush(stdout);
        }
        if (at_exit) return 0;
        if (ours) {
            for (int i = n - 1; i >= 0; i--) elf_loader_library_delete(handles[i]);
            elf_loader_namespace_delete(ns);
        } else {
            for (int i = n - 1; i >= 0; i--) dlclose(handles[i]);
        }
        printf("unloaded\n");
        return 0;
    }
    fprintf(stderr, "bad arguments\n");
    return 2;
}
