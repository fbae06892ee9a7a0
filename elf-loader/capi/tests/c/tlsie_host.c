/* Initial-exec TLS with initialised data (.tdata) through the C ABI: the program loads
 * the fixture twice (two copies, two parts of the loader's static pool), checks the init
 * image in its own thread, changes its copies, then starts threads, which must each see
 * the init image (given to them by glibc from the loader's TLS init image) and their own
 * copies. With "threads-first" a thread started before the load (which the loader
 * reaches with a signal) checks the image too; with "blocked" that thread blocks every
 * signal, and the load must be refused naming it.
 * Usage: tlsie_host /path/to/libtlsie_data.so [threads-first|blocked] */
#include "elf_loader.h"
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

static int failures = 0;
#define CHECK(cond, ...) do { if (!(cond)) { failures++; fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); } } while (0)

struct copy {
    int (*bump)(void);
    long (*word)(int);
    void (*set_word)(int, long);
    int (*self_ok)(void);
    long (*zero_sum)(void);
    void *(*counter_addr)(void);
    void *(*gd_addr)(void);
    int (*gd_get)(void);
    elf_loader_tls_index ti;
};

static void bind(elf_loader_library *lib, struct copy *c) {
    *(void **)&c->bump = elf_loader_library_sym(lib, "ie_bump");
    *(void **)&c->word = elf_loader_library_sym(lib, "ie_word");
    *(void **)&c->set_word = elf_loader_library_sym(lib, "ie_set_word");
    *(void **)&c->self_ok = elf_loader_library_sym(lib, "ie_self_ok");
    *(void **)&c->zero_sum = elf_loader_library_sym(lib, "ie_zero_sum");
    *(void **)&c->counter_addr = elf_loader_library_sym(lib, "ie_counter_addr");
    *(void **)&c->gd_addr = elf_loader_library_sym(lib, "ie_gd_addr");
    *(void **)&c->gd_get = elf_loader_library_sym(lib, "ie_gd_get");
    CHECK(c->bump && c->word && c->set_word && c->self_ok && c->zero_sum && c->counter_addr && c->gd_addr && c->gd_get,
          "symbols: %s", elf_loader_last_error());
    CHECK(elf_loader_library_tls_sym(lib, "ie_counter", &c->ti) == ELF_LOADER_OK, "tls_sym: %s", elf_loader_last_error());
}

/* A copy as a thread that never used it sees it: the init image. */
static void check_fresh(struct copy *c, const char *who) {
    CHECK(c->word(0) == 10 && c->word(1) == 20 && c->word(2) == 30 && c->word(3) == 40,
          "%s: words %ld %ld %ld %ld", who, c->word(0), c->word(1), c->word(2), c->word(3));
    CHECK(c->self_ok(), "%s: the relocated pointer in the image", who);
    CHECK(c->zero_sum() == 0, "%s: the zero-initialised part", who);
    CHECK(c->gd_get() == 7, "%s: the general-dynamic variable %d", who, c->gd_get());
    long gap = (char *)c->gd_addr() - (char *)c->counter_addr();
    CHECK(gap > -128 && gap < 128, "%s: the general-dynamic variable is in the same static block (%ld bytes away)", who, gap);
    void *p = elf_loader_tls_get_addr(&c->ti);
    CHECK(p == c->counter_addr(), "%s: the C ABI's address %p, the library's %p", who, p, c->counter_addr());
    int first = c->bump();
    CHECK(first == 42, "%s: first bump %d (init 41)", who, first);
}

static struct copy copies[2];

static void *thread_main(void *arg) {
    (void)arg;
    for (int i = 0; i < 2; i++) {
        check_fresh(&copies[i], i ? "thread, copy b" : "thread, copy a");
        copies[i].set_word(2, 1000 + i);
        CHECK(copies[i].word(2) == 1000 + i, "thread: its own write");
    }
    return NULL;
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int loaded = 0, ready = 0;

/* Started before the load; checks both copies once they exist. */
static void *early(void *arg) {
    if (arg) {
        sigset_t all;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, NULL);
    }
    pthread_mutex_lock(&lock);
    ready = 1;
    pthread_cond_broadcast(&cond);
    while (!loaded) pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
    if (loaded > 0) thread_main(NULL);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: tlsie_host libtlsie_data.so [threads-first]\n");
        return 2;
    }
    const char *mode = argc > 2 ? argv[2] : "";
    int blocked = strcmp(mode, "blocked") == 0;
    pthread_t first;
    if (blocked || strcmp(mode, "threads-first") == 0) {
        pthread_create(&first, NULL, early, blocked ? (void *)1 : NULL);
        pthread_mutex_lock(&lock);
        while (!ready) pthread_cond_wait(&cond, &lock);
        pthread_mutex_unlock(&lock);
    }
    elf_loader_namespace *ns[2] = {elf_loader_namespace_new("ie-a"), elf_loader_namespace_new("ie-b")};
    elf_loader_library *lib[2] = {NULL, NULL};
    if (blocked) {
        int rc = elf_loader_namespace_load(ns[0], argv[1], &lib[0]);
        const char *err = elf_loader_last_error();
        CHECK(rc != ELF_LOADER_OK && lib[0] == NULL, "the load must be refused: a thread blocks every signal");
        CHECK(err && strstr(err, "did not take signal") && strstr(err, "libtlsie_data"), "error: %s", err ? err : "(none)");
        printf("refused: %s\n", err ? err : "(none)");
    } else {
        for (int i = 0; i < 2; i++) {
            CHECK(elf_loader_namespace_load(ns[i], argv[1], &lib[i]) == ELF_LOADER_OK, "load: %s", elf_loader_last_error());
            if (!lib[i]) return 1;
            bind(lib[i], &copies[i]);
        }
        CHECK(copies[0].counter_addr() != copies[1].counter_addr(), "two copies, two parts of the pool");
        check_fresh(&copies[0], "main, copy a");
        check_fresh(&copies[1], "main, copy b");
        copies[0].set_word(0, -1);
        CHECK(copies[0].word(0) == -1 && copies[1].word(0) == 10, "copies are independent");
        pthread_t t[3];
        for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, thread_main, NULL);
        for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
        CHECK(copies[0].word(0) == -1 && copies[0].word(2) == 30 && copies[0].bump() == 43,
              "main: its own copy, untouched by the threads");
    }
    if (blocked || strcmp(mode, "threads-first") == 0) {
        pthread_mutex_lock(&lock);
        loaded = blocked ? -1 : 1;
        pthread_cond_broadcast(&cond);
        pthread_mutex_unlock(&lock);
        pthread_join(first, NULL);
    }
    for (int i = 0; i < 2; i++) {
        if (lib[i]) elf_loader_library_delete(lib[i]);
        elf_loader_namespace_delete(ns[i]);
    }
    if (failures) {
        fprintf(stderr, "%d checks failed\n", failures);
        return 1;
    }
    printf("all checks passed\n");
    return 0;
}
