/*
 * Handle misuse from C (gc_core.h): heaps, roots, weak handles and reference queues are
 * handles from ffi-support's registry, so every misuse below is an error return
 * (RT_ERR_ARG, or NULL / 0) with a message naming the function, the parameter and the
 * kind expected, never undefined behaviour. Run under valgrind too (no invalid read:
 * a deleted or freed handle is looked up, never dereferenced).
 *
 *   double delete    of a heap, a root, a weak handle and a reference queue;
 *   stale handle     every kind used after its delete (get, len, register, attach, ...);
 *   wrong kind       a root passed as a heap, a heap as a root, a queue as a weak handle,
 *                    a weak handle as a queue: refused, and the handle still works;
 *   NULL             each delete and getter with NULL;
 *   not a handle     malloc'd memory, then freed memory, passed as a heap;
 *   default heap     gc_heap_delete(gc_default_heap()) is refused;
 *   order            a heap deleted while a root of it lives: the root still answers,
 *                    then is deleted (valgrind: nothing read after its free).
 *
 * Usage: handles. Exit status 0 and "handles: ok" on success; failures print "FAIL ...".
 */
#include "gc_core.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;
#define CHECK(cond, ...)                                                    \
    do {                                                                    \
        if (!(cond)) {                                                      \
            failures++;                                                     \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                   \
            fprintf(stderr, "\n");                                          \
        }                                                                   \
    } while (0)

static const char *last_error(void)
{
    const char *e = gc_last_error();
    return e ? e : "(none)";
}

/* The last call failed with `status`, and its message contains each of the two texts. */
static void expect_error(int line, rt_status status, const char *a, const char *b)
{
    const char *e = last_error();
    if (gc_last_status() != status || !strstr(e, a) || (b && !strstr(e, b))) {
        failures++;
        fprintf(stderr, "FAIL handles.c:%d: want status %d with \"%s\"/\"%s\", got %d: %s\n", line,
                status, a, b ? b : "", gc_last_status(), e);
    }
    gc_clear_error();
}
#define EXPECT(status, a, b) expect_error(__LINE__, status, a, b)

int main(void)
{
    gc_heap_t *heap = gc_heap_new(NULL);
    CHECK(heap != NULL, "gc_heap_new: %s", last_error());
    gc_mutator_t *m = gc_thread_attach(heap);
    CHECK(m != NULL, "attach: %s", last_error());
    void *ty = gc_new_layout_type(heap, "Cell", 16, NULL, 0);
    CHECK(ty != NULL, "type: %s", last_error());
    void *obj = gc_alloc(m, 16, ty);
    CHECK(obj != NULL, "alloc: %s", last_error());

    /* Roots: double delete, stale use, NULL. */
    gc_root_t *root = gc_root_new(heap, obj);
    CHECK(root != NULL, "gc_root_new: %s", last_error());
    CHECK(gc_root_get(root) == obj, "gc_root_get");
    CHECK(gc_root_delete(root) == RT_OK, "delete: %s", last_error());
    CHECK(gc_root_delete(root) == RT_ERR_ARG, "double delete of a root");
    EXPECT(RT_ERR_ARG, "gc_root_delete: root: ", "is not a live root handle");
    CHECK(gc_root_get(root) == NULL, "stale root");
    EXPECT(RT_ERR_ARG, "gc_root_get: root: ", "already deleted");
    CHECK(gc_root_delete(NULL) == RT_ERR_ARG, "NULL root");
    EXPECT(RT_ERR_ARG, "gc_root_delete: root is NULL", NULL);
    CHECK(gc_root_get(NULL) == NULL, "NULL root get");
    EXPECT(RT_ERR_ARG, "gc_root_get: root is NULL", NULL);

    /* Wrong kinds: a root as a heap, a heap as a root. Refused, the handles unharmed. */
    root = gc_root_new(heap, obj);
    CHECK(gc_heap_delete((gc_heap_t *)root) == RT_ERR_ARG, "a root deleted as a heap");
    EXPECT(RT_ERR_ARG, "gc_heap_delete: heap: ", "is a root handle where a heap handle is expected");
    CHECK(gc_thread_attach((gc_heap_t *)root) == NULL, "a root attached to as a heap");
    EXPECT(RT_ERR_ARG, "gc_thread_attach: heap: ", "is a root handle where a heap handle");
    CHECK(gc_root_get((gc_root_t *)heap) == NULL, "a heap read as a root");
    EXPECT(RT_ERR_ARG, "gc_root_get: root: ", "is a heap handle where a root handle is expected");
    CHECK(gc_root_delete((gc_root_t *)heap) == RT_ERR_ARG, "a heap deleted as a root");
    EXPECT(RT_ERR_ARG, "gc_root_delete", "is a heap handle where a root handle");
    CHECK(gc_root_get(root) == obj, "the root survived its misuse");
    gc_stats_t stats;
    CHECK(gc_stats(heap, &stats) == RT_OK, "the heap survived its misuse: %s", last_error());

    /* Weak handles: double delete, stale use, a weak handle as a queue and back. */
    gc_weak_handle_t *weak = gc_weak_handle_new(heap, obj);
    CHECK(weak != NULL, "gc_weak_handle_new: %s", last_error());
    CHECK(gc_weak_handle_get(weak) == obj, "gc_weak_handle_get");
    CHECK(gc_refqueue_len((gc_refqueue_t *)weak) == 0, "a weak handle as a queue");
    EXPECT(RT_ERR_ARG, "gc_refqueue_len: queue: ", "is a weak handle where a reference queue handle");
    CHECK(gc_weak_handle_delete((gc_weak_handle_t *)root) == RT_ERR_ARG, "a root as a weak handle");
    EXPECT(RT_ERR_ARG, "gc_weak_handle_delete", "is a root handle where a weak handle");
    CHECK(gc_weak_handle_delete(weak) == RT_OK, "delete: %s", last_error());
    CHECK(gc_weak_handle_delete(weak) == RT_ERR_ARG, "double delete of a weak handle");
    EXPECT(RT_ERR_ARG, "gc_weak_handle_delete: weak handle: ", "is not a live weak handle");
    CHECK(gc_weak_handle_get(weak) == NULL, "stale weak handle");
    EXPECT(RT_ERR_ARG, "gc_weak_handle_get", "already deleted");
    CHECK(gc_weak_handle_delete(NULL) == RT_ERR_ARG, "NULL weak handle");
    EXPECT(RT_ERR_ARG, "gc_weak_handle_delete: weak handle is NULL", NULL);

    /* Reference queues: double delete, stale use, a queue as a weak handle. */
    gc_refqueue_t *queue = gc_refqueue_new(heap);
    CHECK(queue != NULL, "gc_refqueue_new: %s", last_error());
    CHECK(gc_refqueue_register(queue, obj, 7) == RT_OK, "register: %s", last_error());
    CHECK(gc_weak_handle_get((gc_weak_handle_t *)queue) == NULL, "a queue as a weak handle");
    EXPECT(RT_ERR_ARG, "gc_weak_handle_get", "is a reference queue handle where a weak handle");
    CHECK(gc_refqueue_delete(queue) == RT_OK, "delete: %s", last_error());
    CHECK(gc_refqueue_delete(queue) == RT_ERR_ARG, "double delete of a queue");
    EXPECT(RT_ERR_ARG, "gc_refqueue_delete: queue: ", "is not a live reference queue handle");
    CHECK(gc_refqueue_len(queue) == 0, "stale queue len");
    EXPECT(RT_ERR_ARG, "gc_refqueue_len", "already deleted");
    CHECK(gc_refqueue_register(queue, obj, 8) == RT_ERR_ARG, "stale queue register");
    EXPECT(RT_ERR_ARG, "gc_refqueue_register", "already deleted");
    size_t tokens[4];
    CHECK(gc_refqueue_drain(queue, tokens, 4) == 0, "stale queue drain");
    EXPECT(RT_ERR_ARG, "gc_refqueue_drain", "already deleted");
    CHECK(gc_refqueue_delete(NULL) == RT_ERR_ARG, "NULL queue");
    EXPECT(RT_ERR_ARG, "gc_refqueue_delete: queue is NULL", NULL);

    /* Not a handle at all: malloc'd memory, then freed memory (valgrind: never read). */
    void *junk = malloc(64);
    memset(junk, 0xab, 64);
    CHECK(gc_heap_delete((gc_heap_t *)junk) == RT_ERR_ARG, "malloc'd memory as a heap");
    EXPECT(RT_ERR_ARG, "gc_heap_delete: heap: ", "is not a live heap handle");
    volatile uintptr_t freed = (uintptr_t)junk;
    free(junk);
    CHECK(gc_set_verify((gc_heap_t *)freed, 1) == RT_ERR_ARG, "freed memory as a heap");
    EXPECT(RT_ERR_ARG, "gc_set_verify: heap: ", "is not a live heap handle");
    CHECK(gc_heap_delete(NULL) == RT_ERR_ARG, "NULL heap");
    EXPECT(RT_ERR_ARG, "gc_heap_delete: heap is NULL", NULL);

    /* The default heap is never deleted. */
    CHECK(gc_heap_delete(gc_default_heap()) == RT_ERR_ARG, "the default heap deleted");
    EXPECT(RT_ERR_ARG, "gc_heap_delete", "the default heap cannot be deleted");

    /* Heaps: refused while attached; deleted while a root lives (the root keeps
     * answering); then double delete and stale use of the heap. */
    CHECK(gc_heap_delete(heap) == RT_ERR_STATE, "deleted while attached");
    EXPECT(RT_ERR_STATE, "gc_heap_delete", "still attached");
    CHECK(gc_thread_detach() == RT_OK, "detach: %s", last_error());
    CHECK(gc_heap_delete(heap) == RT_OK, "delete: %s", last_error());
    CHECK(gc_root_get(root) == obj, "a root outlives its heap's handle");
    CHECK(gc_heap_delete(heap) == RT_ERR_ARG, "double delete of a heap");
    EXPECT(RT_ERR_ARG, "gc_heap_delete: heap: ", "is not a live heap handle");
    CHECK(gc_thread_attach(heap) == NULL, "attach to a deleted heap");
    EXPECT(RT_ERR_ARG, "gc_thread_attach: heap: ", "already deleted");
    CHECK(gc_root_new(heap, obj) == NULL, "a root in a deleted heap");
    EXPECT(RT_ERR_ARG, "gc_root_new: heap: ", "already deleted");
    CHECK(gc_stats(heap, &stats) == RT_ERR_ARG, "stats of a deleted heap");
    EXPECT(RT_ERR_ARG, "gc_stats: heap: ", "already deleted");
    CHECK(gc_refqueue_new(heap) == NULL, "a queue of a deleted heap");
    EXPECT(RT_ERR_ARG, "gc_refqueue_new: heap: ", "already deleted");
    /* A new heap never takes a deleted heap's address: the stale handle stays stale. */
    gc_heap_t *again = gc_heap_new(NULL);
    CHECK(again != NULL && again != heap, "a new heap reused a deleted heap's handle");
    CHECK(gc_heap_delete(again) == RT_OK, "delete: %s", last_error());
    CHECK(gc_root_delete(root) == RT_OK, "the last root: %s", last_error());
    CHECK(gc_root_get(root) == NULL, "stale root");
    EXPECT(RT_ERR_ARG, "gc_root_get", "already deleted");

    if (failures) return 1;
    printf("handles: ok\n");
    return 0;
}
