/*
 * runtime.c: a C program on gc_runtime.h alone (and the gc_core.h / gil.h calls it
 * allows on the runtime's heap and GIL), with real threads.
 *
 *   runtime threads on|off|reject
 *       Five threads. "blocker" allocates an object, keeps it only in callee-saved
 *       register r12 and blocks in gc_runtime_blocking_begin/end until the collector is
 *       done. "waiter" allocates an object, keeps it only in its stack frame, leaves and
 *       queues for the GIL again (gc_runtime_enter), which the collector holds.
 *       "outsider" holds an object only in r12 when it calls gc_runtime_leave, then
 *       clears r12 and keeps the address only masked, scrubs its dead stack and queues
 *       for the GIL: only the registers the runtime saved at the leave refer to it.
 *       "poller" holds an object on its stack and polls the GIL until the collector is
 *       done: it gives the GIL away at a switch request and waits for it inside
 *       gc_runtime_poll, where only the GIL's hooks make it GC-safe (without them the
 *       collection would wait for it forever: an alarm turns a hang into a failure).
 *       The "collector" runs full collections while all four wait. With "on" the objects
 *       survive (their sweep functions never run, their contents are intact); with
 *       "off" (conservative = 0) and "reject" (a scan filter refusing every object) all
 *       four are collected, so the test can fail.
 *   runtime misuse
 *       Every call with a NULL or bogus handle, from a thread that is not attached, and
 *       in the wrong state returns its error code with a message; gc_core.h and gil.h
 *       calls work on the runtime's heap, mutator and GIL.
 *
 * Exit status 0 on success; "<mode>: ok" on stdout.
 */
#define _GNU_SOURCE
#include "gc_runtime.h"
#include "gc_conservative.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAGIC 0xC0FFEE1234567890ULL
typedef struct { uint64_t magic; uint64_t tag; } obj_t;

static gc_runtime_t *Rt;
static void *HeldType;
static atomic_int Swept, BlockerBlocked, WaiterOutside, OutsiderOutside, PollerReady,
    CollectorReady, Collected;
#define MASK 0x5A5A5A5A5A5A5A5AULL
/* the outsider's object, masked: no word of memory points at it */
volatile uint64_t OutsiderMasked;

static void die(const char *what, int code)
{
    fprintf(stderr, "FAIL %s: code %d: %s\n", what, code, gc_runtime_last_error());
    exit(1);
}

#define CHECK(call)                                                                      \
    do {                                                                                 \
        int c_ = (call);                                                                 \
        if (c_ != GC_RUNTIME_OK)                                                         \
            die(#call, c_);                                                              \
    } while (0)

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static void sweep_held(void *obj)
{
    (void)obj;
    atomic_fetch_add(&Swept, 1);
}

static int reject_all(void *data, void *obj)
{
    (void)data;
    (void)obj;
    return 0;
}

/* Clears dead stack below the caller, so no stale copy of a pointer is left where a
   later frame could put it back into the scanned range. */
void scrub(void);
__attribute__((noinline, used)) void scrub(void)
{
    volatile char area[16384];
    memset((char *)area, 0, sizeof area);
}

static __attribute__((noinline)) obj_t *make_held(gc_mutator_t *m, uint64_t tag)
{
    obj_t *o = gc_alloc(m, sizeof(obj_t), HeldType);
    if (!o)
        die("gc_alloc", -1);
    o->magic = MAGIC;
    o->tag = tag;
    if (gc_schedule_sweep(m, o) != 0)
        die("gc_schedule_sweep", -1);
    return o;
}

/* hold_in_r12_blocking(obj, rt, wait): keeps obj only in r12 across
   gc_runtime_blocking_begin(rt); wait(); gc_runtime_blocking_end(rt), and returns it. */
void *hold_in_r12_blocking(void *obj, gc_runtime_t *rt, void (*wait)(void));
__asm__(
    ".text\n"
    ".globl hold_in_r12_blocking\n"
    ".type hold_in_r12_blocking, @function\n"
    "hold_in_r12_blocking:\n"
    "    push %r12\n"
    "    push %r13\n"
    "    push %r14\n"               /* rsp is now 16-byte aligned */
    "    mov %rdi, %r12\n"
    "    mov %rsi, %r13\n"
    "    mov %rdx, %r14\n"
    "    xor %edi, %edi\n"
    "    call scrub\n"
    "    mov %r13, %rdi\n"
    "    call gc_runtime_blocking_begin\n"
    "    test %eax, %eax\n"
    "    jnz 1f\n"
    "    call *%r14\n"
    "    mov %r13, %rdi\n"
    "    call gc_runtime_blocking_end\n"
    "    test %eax, %eax\n"
    "    jnz 1f\n"
    "    mov %r12, %rax\n"
    "    jmp 2f\n"
    "1:  xor %eax, %eax\n"
    "2:  pop %r14\n"
    "    pop %r13\n"
    "    pop %r12\n"
    "    ret\n"
    ".size hold_in_r12_blocking, .-hold_in_r12_blocking\n");

/* hold_in_r12_outside(obj, rt, wait): calls gc_runtime_leave(rt) with obj only in r12,
   then keeps it only masked (OutsiderMasked), clears r12, scrubs the dead stack, calls
   wait() and gc_runtime_enter(rt), and returns obj (NULL if a call failed). */
void *hold_in_r12_outside(void *obj, gc_runtime_t *rt, void (*wait)(void));
__asm__(
    ".text\n"
    ".globl hold_in_r12_outside\n"
    ".type hold_in_r12_outside, @function\n"
    "hold_in_r12_outside:\n"
    "    push %r12\n"
    "    push %r13\n"
    "    push %r14\n"               /* rsp is now 16-byte aligned */
    "    mov %rdi, %r12\n"
    "    mov %rsi, %r13\n"
    "    mov %rdx, %r14\n"
    "    xor %edi, %edi\n"
    "    call scrub\n"
    "    mov %r13, %rdi\n"
    "    call gc_runtime_leave\n"
    "    test %eax, %eax\n"
    "    jnz 1f\n"
    "    movabs $0x5A5A5A5A5A5A5A5A, %rax\n"
    "    xor %r12, %rax\n"
    "    mov %rax, OutsiderMasked(%rip)\n"
    "    xor %r12d, %r12d\n"
    "    xor %eax, %eax\n"
    "    call scrub\n"
    "    call *%r14\n"
    "    mov %r13, %rdi\n"
    "    call gc_runtime_enter\n"
    "    test %eax, %eax\n"
    "    jnz 1f\n"
    "    movabs $0x5A5A5A5A5A5A5A5A, %rax\n"
    "    xor OutsiderMasked(%rip), %rax\n"
    "    jmp 2f\n"
    "1:  xor %eax, %eax\n"
    "2:  pop %r14\n"
    "    pop %r13\n"
    "    pop %r12\n"
    "    ret\n"
    ".size hold_in_r12_outside, .-hold_in_r12_outside\n");

static void wait_until_collected(void)
{
    atomic_store(&BlockerBlocked, 1);
    while (!atomic_load(&Collected))
        sleep_ms(1);
}

static int Expect;  /* 1: the held objects must survive */
static atomic_int Failures;

static void check_held(obj_t *o, uint64_t tag, const char *who)
{
    if (Expect && (o->magic != MAGIC || o->tag != tag)) {
        fprintf(stderr, "FAIL %s: object %p lost (magic %llx tag %llu)\n", who, (void *)o,
                (unsigned long long)o->magic, (unsigned long long)o->tag);
        atomic_fetch_add(&Failures, 1);
    }
}

static void *blocker(void *arg)
{
    (void)arg;
    gc_mutator_t *m = gc_runtime_attach(Rt, "blocker");
    if (!m)
        die("gc_runtime_attach(blocker)", -1);
    CHECK(gc_runtime_enter(Rt));
    obj_t *o = hold_in_r12_blocking(make_held(m, 1), Rt, wait_until_collected);
    if (!o)
        die("hold_in_r12_blocking", -1);
    check_held(o, 1, "blocker (register, blocking region)");
    CHECK(gc_runtime_leave(Rt));
    CHECK(gc_runtime_detach(Rt));
    return NULL;
}

static __attribute__((noinline)) void waiter_body(gc_mutator_t *m)
{
    volatile obj_t *held[1];
    held[0] = make_held(m, 2);
    CHECK(gc_runtime_leave(Rt));
    atomic_store(&WaiterOutside, 1);
    while (!atomic_load(&CollectorReady))
        sleep_ms(1);
    /* queues for the GIL, which the collector holds while it collects */
    CHECK(gc_runtime_enter(Rt));
    check_held((obj_t *)held[0], 2, "waiter (stack, waiting for the GIL)");
    held[0] = NULL;
}

static void *waiter(void *arg)
{
    (void)arg;
    gc_mutator_t *m = gc_runtime_attach(Rt, "waiter");
    if (!m)
        die("gc_runtime_attach(waiter)", -1);
    CHECK(gc_runtime_enter(Rt));
    waiter_body(m);
    CHECK(gc_runtime_leave(Rt));
    CHECK(gc_runtime_detach(Rt));
    return NULL;
}

static void wait_for_the_collector(void)
{
    atomic_store(&OutsiderOutside, 1);
    while (!atomic_load(&CollectorReady))
        sleep_ms(1);
}

static void *outsider(void *arg)
{
    (void)arg;
    gc_mutator_t *m = gc_runtime_attach(Rt, "outsider");
    if (!m)
        die("gc_runtime_attach(outsider)", -1);
    CHECK(gc_runtime_enter(Rt));
    obj_t *o = hold_in_r12_outside(make_held(m, 3), Rt, wait_for_the_collector);
    if (!o)
        die("hold_in_r12_outside", -1);
    check_held(o, 3, "outsider (registers saved at leave only)");
    CHECK(gc_runtime_leave(Rt));
    CHECK(gc_runtime_detach(Rt));
    return NULL;
}

static __attribute__((noinline)) void poller_body(gc_mutator_t *m)
{
    volatile obj_t *held[1];
    held[0] = make_held(m, 4);
    atomic_store(&PollerReady, 1);
    /* holds the GIL except inside the polls, where it waits while the collector has it */
    while (!atomic_load(&Collected))
        CHECK(gc_runtime_poll(Rt));
    check_held((obj_t *)held[0], 4, "poller (stack, waiting for the GIL in a poll)");
    held[0] = NULL;
}

static void *poller(void *arg)
{
    (void)arg;
    gc_mutator_t *m = gc_runtime_attach(Rt, "poller");
    if (!m)
        die("gc_runtime_attach(poller)", -1);
    CHECK(gc_runtime_enter(Rt));
    poller_body(m);
    CHECK(gc_runtime_leave(Rt));
    CHECK(gc_runtime_detach(Rt));
    return NULL;
}

static void *collector(void *arg)
{
    (void)arg;
    gc_mutator_t *m = gc_runtime_attach(Rt, "collector");
    if (!m)
        die("gc_runtime_attach(collector)", -1);
    CHECK(gc_runtime_enter(Rt));
    /* let the others run (the poll hands the GIL over) until both wait */
    while (!atomic_load(&BlockerBlocked) || !atomic_load(&WaiterOutside) ||
           !atomic_load(&OutsiderOutside) || !atomic_load(&PollerReady)) {
        CHECK(gc_runtime_poll(Rt));
        sleep_ms(1);
    }
    atomic_store(&CollectorReady, 1);
    sleep_ms(50);  /* the waiter, the outsider and the poller are queued for the GIL */
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < 2000; j++)
            if (!gc_alloc(m, 64, HeldType))
                die("gc_alloc(garbage)", -1);
        if (gc_collect(m, GC_COLLECT_FULL) < 0)
            die("gc_collect", -1);
    }
    atomic_store(&Collected, 1);
    CHECK(gc_runtime_leave(Rt));
    CHECK(gc_runtime_detach(Rt));
    return NULL;
}

static int run_threads(const char *how)
{
    gc_runtime_config_t cfg;
    CHECK(gc_runtime_config_default(&cfg));
    cfg.gil_name = "runtime-test";
    Expect = strcmp(how, "on") == 0;
    if (strcmp(how, "off") == 0)
        cfg.conservative = 0;
    else if (strcmp(how, "reject") == 0)
        cfg.scan_filter = reject_all;
    else if (!Expect) {
        fprintf(stderr, "usage: runtime threads on|off|reject\n");
        return 2;
    }
    Rt = gc_runtime_new(NULL, &cfg);
    if (!Rt)
        die("gc_runtime_new", -1);
    HeldType = gc_new_foreign_type(gc_runtime_heap(Rt), "Held", NULL, sweep_held, 0, 0);
    if (!HeldType)
        die("gc_new_foreign_type", -1);
    alarm(120);  /* a collection waiting for a thread the runtime left running: fail */
    pthread_t t[5];
    void *(*fns[5])(void *) = { blocker, waiter, outsider, poller, collector };
    for (int i = 0; i < 5; i++)
        if (pthread_create(&t[i], NULL, fns[i], NULL) != 0)
            die("pthread_create", -1);
    for (int i = 0; i < 5; i++)
        pthread_join(t[i], NULL);
    int swept = atomic_load(&Swept);
    if (Expect ? swept != 0 : swept != 4) {
        fprintf(stderr, "FAIL threads %s: %d held object(s) swept\n", how, swept);
        return 1;
    }
    if (atomic_load(&Failures))
        return 1;
    CHECK(gc_runtime_delete(Rt));
    printf("threads %s: ok (swept=%d)\n", how, swept);
    return 0;
}

static void expect_code(const char *what, int got, int want, const char *needle)
{
    const char *msg = gc_runtime_last_error();
    if (got != want || !msg || !strstr(msg, needle)) {
        fprintf(stderr, "FAIL %s: code %d (want %d), message \"%s\" (want \"%s\")\n", what,
                got, want, msg ? msg : "(null)", needle);
        exit(1);
    }
}

static void *not_attached(void *arg)
{
    gc_runtime_t *rt = arg;
    expect_code("enter from an unattached thread", gc_runtime_enter(rt),
                GC_RUNTIME_ERR_NOT_ATTACHED, "not attached");
    expect_code("poll from an unattached thread", gc_runtime_poll(rt),
                GC_RUNTIME_ERR_NOT_ATTACHED, "not attached");
    expect_code("detach from an unattached thread", gc_runtime_detach(rt),
                GC_RUNTIME_ERR_NOT_ATTACHED, "not attached");
    return NULL;
}

static int run_misuse(void)
{
    expect_code("config_default(NULL)", gc_runtime_config_default(NULL),
                GC_RUNTIME_ERR_INVALID_ARGUMENT, "cfg is NULL");
    expect_code("enter(NULL)", gc_runtime_enter(NULL), GC_RUNTIME_ERR_INVALID_ARGUMENT,
                "runtime is NULL");
    expect_code("blocking_begin(NULL)", gc_runtime_blocking_begin(NULL),
                GC_RUNTIME_ERR_INVALID_ARGUMENT, "runtime is NULL");
    if (gc_runtime_attach(NULL, "x") != NULL || gc_runtime_heap(NULL) != NULL ||
        gc_runtime_gil(NULL) != NULL) {
        fprintf(stderr, "FAIL: a NULL runtime gave a handle\n");
        return 1;
    }
    uint64_t bogus[8] = { 0 };
    expect_code("enter(bogus)", gc_runtime_enter((gc_runtime_t *)bogus),
                GC_RUNTIME_ERR_INVALID_ARGUMENT, "not a live runtime");
    expect_code("delete(bogus)", gc_runtime_delete((gc_runtime_t *)bogus),
                GC_RUNTIME_ERR_INVALID_ARGUMENT, "not a live runtime");

    gc_runtime_t *rt = gc_runtime_new(NULL, NULL);
    if (!rt)
        die("gc_runtime_new(defaults)", -1);
    pthread_t t;
    pthread_create(&t, NULL, not_attached, rt);
    pthread_join(t, NULL);

    gc_mutator_t *m = gc_runtime_attach(rt, NULL);
    if (!m)
        die("gc_runtime_attach", -1);
    if (gc_runtime_attach(rt, "again") != NULL)
        die("attached twice", -1);
    expect_code("attach twice", GC_RUNTIME_ERR_ALREADY_ATTACHED,
                GC_RUNTIME_ERR_ALREADY_ATTACHED, "already attached");
    expect_code("leave while outside", gc_runtime_leave(rt), GC_RUNTIME_ERR_STATE,
                "not inside");
    expect_code("blocking_end without begin", gc_runtime_blocking_end(rt),
                GC_RUNTIME_ERR_STATE, "not in a blocking region");
    expect_code("delete with a thread attached", gc_runtime_delete(rt), GC_RUNTIME_ERR_STATE,
                "still attached");
    gil_t *gil = gc_runtime_gil(rt);
    if (!gil || gil_holds(gil) != 0)
        die("gil_holds outside", -1);

    CHECK(gc_runtime_enter(rt));
    expect_code("enter twice", gc_runtime_enter(rt), GC_RUNTIME_ERR_STATE, "already inside");
    expect_code("detach while inside", gc_runtime_detach(rt), GC_RUNTIME_ERR_STATE,
                "call gc_runtime_leave first");
    if (gil_holds(gil) != 1)
        die("gil_holds inside", -1);
    uint32_t offsets[2] = { 0, 8 };
    void *ty = gc_new_layout_type(gc_runtime_heap(rt), "Pair", 16, offsets, 2);
    if (!ty || !gc_alloc(m, 16, ty))
        die("gc_core.h calls on the runtime's heap", -1);
    if (gc_collect(m, GC_COLLECT_FULL) < 0)
        die("gc_collect", -1);
    CHECK(gc_runtime_poll(rt));
    CHECK(gc_runtime_blocking_begin(rt));
    expect_code("blocking_begin twice", gc_runtime_blocking_begin(rt), GC_RUNTIME_ERR_STATE,
                "already in a blocking region");
    expect_code("enter inside a blocking region", gc_runtime_enter(rt), GC_RUNTIME_ERR_STATE,
                "blocking region");
    if (gil_holds(gil) != 0)
        die("gil_holds in a blocking region", -1);
    CHECK(gc_runtime_blocking_end(rt));
    if (gil_holds(gil) != 1)
        die("gil_holds after the blocking region", -1);
    expect_code("scan_task outside a collection", (int)gc_runtime_scan_task(rt, gc_current_task()),
                GC_RUNTIME_ERR_GC, "gc_runtime_scan_task");
    CHECK(gc_runtime_leave(rt));
    /* a blocking region from outside keeps the thread outside */
    CHECK(gc_runtime_blocking_begin(rt));
    CHECK(gc_runtime_blocking_end(rt));
    if (gil_holds(gil) != 0)
        die("gil_holds after an outside blocking region", -1);
    CHECK(gc_runtime_detach(rt));
    CHECK(gc_runtime_delete(rt));
    printf("misuse: ok\n");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "threads") == 0)
        return run_threads(argv[2]);
    if (argc >= 2 && strcmp(argv[1], "misuse") == 0)
        return run_misuse();
    fprintf(stderr, "usage: runtime threads on|off|reject | runtime misuse\n");
    return 2;
}
