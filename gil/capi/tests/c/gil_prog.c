/* A C program built against include/gil.h and linked with libgil: foreign pthreads use
 * gil_ensure to update unsynchronised state, blocking regions, hooks, actions reaching a
 * waiting thread, a stop request, misuse reported as error codes, and shutdown with
 * threads waiting and polling. Exits 0 and prints "c-abi: all checks passed" on success. */
#define _DEFAULT_SOURCE
#include "gil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "CHECK failed at line %d: %s (last error: %s)\n", __LINE__, \
                    #cond, gil_last_error());                                        \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

#define THREADS 4
#define ROUNDS 300

static gil_t *g;
static long counter;          /* protected by the GIL only */
static long history[THREADS * ROUNDS];
static atomic_int blocks, unblocks;

static void on_block(void *data, uint64_t thread_id, int32_t reason) {
    (void)thread_id;
    CHECK(reason == GIL_BLOCK_WAITING_FOR_GIL || reason == GIL_BLOCK_BLOCKING_REGION);
    atomic_fetch_add(&blocks, 1);
    /* Taking the GIL from a hook is refused (a call that would wait would call the hook
     * again, without end), also where the thread was handed the GIL meanwhile. */
    int acquired = -1;
    int rc = gil_acquire((gil_t *)data, &acquired);
    CHECK(rc == GIL_ERR_INSIDE_HOOK);
    CHECK(strstr(gil_last_error(), "hook") != NULL);
}

static void on_unblock(void *data, uint64_t thread_id, int32_t reason) {
    (void)data;
    (void)thread_id;
    (void)reason;
    atomic_fetch_add(&unblocks, 1);
}

/* A foreign thread: never attached explicitly, uses gil_ensure. */
static void *foreign_worker(void *arg) {
    long me = (long)(intptr_t)arg;
    for (int i = 0; i < ROUNDS; i++) {
        gil_ensure_state_t st;
        CHECK(gil_ensure(g, &st) == GIL_OK);
        CHECK(st.acquired == 1 && st.attached == 1);
        CHECK(gil_holds(g) == 1);
        long c = counter; /* a racy read-modify-write, safe only under the GIL */
        if (i % 50 == 0) {
            int token;
            /* the GIL is released here: nobody may touch counter... */
            CHECK(gil_blocking_enter(g, &token) == GIL_OK);
            CHECK(gil_holds(g) == 0);
            usleep(50);
            CHECK(gil_blocking_leave(g, token) == GIL_OK);
            c = counter; /* ...so re-read after re-taking it */
        }
        history[c] = me;
        counter = c + 1;
        CHECK(gil_poll(g) == GIL_OK);
        CHECK(gil_ensure_release(g, st) == GIL_OK);
    }
    return NULL;
}

static atomic_uint_fast64_t waiter_id;
static atomic_int waiter_result = 1;
static atomic_int action_runs, action_held, freed;

static void count_action(void *data, const gil_action_ctx_t *ctx) {
    atomic_fetch_add((atomic_int *)data, 1);
    if (ctx->holds_gil) atomic_fetch_add(&action_held, 1);
    atomic_fetch_add(&action_runs, 1);
}

static void free_counter(void *data) {
    (void)data;
    atomic_fetch_add(&freed, 1);
}

/* Attaches, publishes its id, then blocks in gil_acquire while main holds the GIL. */
static void *waiter(void *arg) {
    (void)arg;
    uint64_t id;
    CHECK(gil_attach(g, "c-waiter", &id) == GIL_OK);
    atomic_store(&waiter_id, id);
    int acquired = 0;
    int rc = gil_acquire(g, &acquired);
    atomic_store(&waiter_result, rc);
    if (rc == GIL_OK) {
        CHECK(acquired == 1);
        CHECK(gil_release(g, acquired) == GIL_OK);
    }
    CHECK(gil_detach(g) == GIL_OK);
    return NULL;
}

/* Polls with the GIL until told to stop (by shutdown). */
static atomic_int poller_started;
static void *poller(void *arg) {
    (void)arg;
    CHECK(gil_attach(g, "c-poller", NULL) == GIL_OK);
    int acquired;
    CHECK(gil_acquire(g, &acquired) == GIL_OK);
    atomic_store(&poller_started, 1);
    int rc;
    while ((rc = gil_poll(g)) == GIL_OK) {
    }
    CHECK(rc == GIL_ERR_SHUT_DOWN);
    CHECK(gil_release(g, acquired) == GIL_OK);
    CHECK(gil_detach(g) == GIL_OK);
    return NULL;
}

/* free_data runs when the last reference goes, which may be the target thread's. */
static void wait_freed(int n) {
    for (int i = 0; i < 5000 && atomic_load(&freed) < n; i++) usleep(1000);
}

static uint64_t wait_for_id(void) {
    uint64_t id;
    while ((id = atomic_load(&waiter_id)) == 0) usleep(100);
    return id;
}

int main(void) {
    /* Misuse is reported, not a crash. */
    CHECK(gil_new("c", 5000, NULL) == GIL_ERR_INVALID_ARGUMENT);
    CHECK(strstr(gil_last_error(), "out is NULL") != NULL);
    CHECK(gil_poll(NULL) == GIL_ERR_INVALID_ARGUMENT);
    CHECK(strstr(gil_last_error(), "gil is NULL") != NULL);

    CHECK(gil_new("c-gil", 5000, &g) == GIL_OK);
    CHECK(gil_set_hooks(g, on_block, on_unblock, g) == GIL_OK);
    int acquired = -1;
    CHECK(gil_acquire(g, &acquired) == GIL_ERR_NOT_ATTACHED);
    CHECK(strstr(gil_last_error(), "not attached") != NULL);

    uint64_t main_id = 0;
    CHECK(gil_attach(g, "c-main", &main_id) == GIL_OK && main_id != 0);
    CHECK(gil_attach(g, "again", NULL) == GIL_ERR_ALREADY_ATTACHED);
    CHECK(gil_acquire(g, &acquired) == GIL_OK && acquired == 1);
    int again = -1;
    CHECK(gil_acquire(g, &again) == GIL_OK && again == 0); /* no self-deadlock */
    CHECK(gil_release(g, again) == GIL_OK);
    CHECK(gil_holds(g) == 1);
    CHECK(gil_release(g, acquired) == GIL_OK);
    CHECK(gil_release(g, 1) == GIL_ERR_NOT_HOLDER);
    CHECK(strstr(gil_last_error(), "does not hold") != NULL);
    CHECK(gil_blocking_leave(g, 12345) == GIL_ERR_INVALID_ARGUMENT);
    /* Inside a blocking region the thread is reported blocked: no GIL, no second region. */
    int token = -1, second = -1;
    CHECK(gil_blocking_enter(g, &token) == GIL_OK);
    CHECK(gil_acquire(g, &acquired) == GIL_ERR_INSIDE_REGION && gil_holds(g) == 0);
    CHECK(strstr(gil_last_error(), "inside a blocking region") != NULL);
    CHECK(gil_blocking_enter(g, &second) != GIL_OK);
    CHECK(gil_blocking_leave(g, token) == GIL_OK && gil_holds(g) == 0);
    CHECK(gil_request_stop(g, 999999) == GIL_ERR_UNKNOWN_THREAD);

    /* Foreign threads serialised by the GIL: the racy counter comes out exact. */
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, foreign_worker, (void *)(intptr_t)i) == 0);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    CHECK(counter == THREADS * ROUNDS);
    int per[THREADS] = {0};
    for (int i = 0; i < THREADS * ROUNDS; i++) per[history[i]]++;
    for (int i = 0; i < THREADS; i++) CHECK(per[i] == ROUNDS);
    CHECK(atomic_load(&blocks) > 0 && atomic_load(&blocks) == atomic_load(&unblocks));

    /* An action reaches a thread waiting for the GIL, without it. */
    CHECK(gil_acquire(g, &acquired) == GIL_OK && acquired == 1);
    pthread_t w;
    CHECK(pthread_create(&w, NULL, waiter, NULL) == 0);
    uint64_t wid = wait_for_id();
    static atomic_int one_runs;
    gil_action_t *action = NULL;
    CHECK(gil_submit_action(g, wid, count_action, &one_runs, free_counter, &action) == GIL_OK);
    gil_action_report_t rep;
    CHECK(gil_action_wait(action, 10 * 1000 * 1000, &rep) == GIL_OK);
    CHECK(rep.targets == 1 && rep.ran == 1 && rep.pending == 0);
    CHECK(atomic_load(&one_runs) == 1 && atomic_load(&action_held) == 0);
    gil_action_delete(action);
    wait_freed(1);
    CHECK(atomic_load(&freed) == 1);

    /* A stop request wakes it out of the queue with GIL_ERR_STOPPED. */
    CHECK(gil_request_stop(g, wid) == GIL_OK);
    pthread_join(w, NULL);
    CHECK(atomic_load(&waiter_result) == GIL_ERR_STOPPED);

    /* An all-threads action: main runs it at its poll (holding the GIL). */
    static atomic_int all_runs;
    CHECK(gil_submit_action(g, GIL_ALL_THREADS, count_action, &all_runs, free_counter, &action) == GIL_OK);
    CHECK(gil_poll(g) == GIL_OK);
    CHECK(gil_action_wait(action, 10 * 1000 * 1000, &rep) == GIL_OK);
    CHECK(rep.targets == 1 && rep.ran == 1 && atomic_load(&all_runs) == 1);
    CHECK(atomic_load(&action_held) == 1);
    gil_action_delete(action);
    wait_freed(2);
    CHECK(atomic_load(&freed) == 2);
    CHECK(gil_release(g, acquired) == GIL_OK);

    /* Shutdown with one thread polling while holding the GIL. */
    pthread_t p;
    CHECK(pthread_create(&p, NULL, poller, NULL) == 0);
    while (!atomic_load(&poller_started)) usleep(100);
    gil_shutdown_report_t sr;
    CHECK(gil_shutdown(g, 5 * 1000 * 1000, &sr) == GIL_OK);
    CHECK(sr.stuck == 0 && sr.threads == 2);
    pthread_join(p, NULL);
    CHECK(gil_acquire(g, &acquired) == GIL_ERR_SHUT_DOWN);
    CHECK(strstr(gil_last_error(), "shut down") != NULL);
    CHECK(gil_shutdown(g, 1000, NULL) == GIL_ERR_ALREADY_SHUT_DOWN);
    CHECK(gil_detach(g) == GIL_OK);

    /* Handles are checked: an action handle is not a GIL, a deleted GIL is not a GIL. */
    static atomic_int late_runs;
    gil_action_t *late = NULL;
    gil_t *other = NULL;
    CHECK(gil_new("other", 0, &other) == GIL_OK);
    CHECK(gil_submit_action(other, GIL_ALL_THREADS, count_action, &late_runs, NULL, &late) ==
          GIL_OK);
    CHECK(gil_poll((gil_t *)late) == GIL_ERR_INVALID_ARGUMENT);
    CHECK(strstr(gil_last_error(), "is a action handle where a GIL handle is expected") != NULL);
    CHECK(gil_action_wait((gil_action_t *)other, 0, NULL) == GIL_ERR_INVALID_ARGUMENT);
    gil_action_delete(late);
    gil_action_delete(late); /* twice: reported, not a double free */
    CHECK(strstr(gil_last_error(), "not a live action handle") != NULL);
    CHECK(RT_ERR_ARG == GIL_ERR_INVALID_ARGUMENT && GIL_OK == RT_OK);
    gil_delete(g);
    CHECK(gil_poll(g) == GIL_ERR_INVALID_ARGUMENT); /* deleted: an error, not a crash */
    CHECK(strstr(gil_last_error(), "not a live GIL handle") != NULL);
    gil_delete(g);
    CHECK(gil_holds(g) == 0);
    gil_delete(other);
    printf("c-abi: all checks passed (%d threads x %d rounds, %d blocks)\n", THREADS, ROUNDS,
           atomic_load(&blocks));
    return 0;
}
