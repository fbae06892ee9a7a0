/*
 * Conservative stack scanning seen from C, against julia_gcext_compat.h only.
 *
 *   conservative local on|off     an object referenced only from a C local variable
 *   conservative register on|off  an object referenced only from callee-saved r12
 *   conservative threads          two threads, each holding objects only on its own
 *                                 stack while the other collects
 *   conservative native           gc_conservative.h on an explicit heap: a malloc'd
 *                                 root area scanned with gc_scan_range from a root
 *                                 scanner, and objects kept only by the body of an
 *                                 object whose type is scanned conservatively
 *   conservative unswept          dead objects on pages waiting for their lazy sweep
 *                                 (run with GC_CORE_MARK_THREADS=1 and
 *                                 GC_CORE_SWEEP_THREADS=0: no helper thread sweeps
 *                                 them): jl_gc_internal_obj_base_ptr and
 *                                 gc_base_ptr answer NULL for them before and after the
 *                                 sweep, and find the live objects next to them
 *
 * With "on" the object must survive the collections (its sweep function never runs and
 * its contents are intact); with "off" (conservative scanning never enabled) it must be
 * collected, so the test can fail. Exit status 0 on success.
 */
#define _GNU_SOURCE
#include "julia_gcext_compat.h"
#include "gc_conservative.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAGIC 0xC0FFEE1234567890ULL
typedef struct { uint64_t magic; uint64_t tag; } obj_t;

static jl_datatype_t *ty;
static atomic_int swept;

static void sweep(jl_value_t *o) { (void)o; atomic_fetch_add(&swept, 1); }

static __attribute__((noinline)) void *make(uint64_t tag)
{
    obj_t *o = jl_gc_alloc_typed(jl_get_ptls_states(), sizeof(obj_t), ty);
    if (!o) { fprintf(stderr, "alloc: %s\n", jl_gc_last_error()); exit(2); }
    o->magic = MAGIC;
    o->tag = tag;
    jl_gc_schedule_foreign_sweepfunc(jl_get_ptls_states(), (jl_value_t *)o);
    return o;
}

/* Overwrites the dead stack below the caller, so that only live slots hold pointers. */
__attribute__((noinline, used)) void scrub(void);
__attribute__((noinline, used)) void scrub(void)
{
    volatile char buf[32768];
    memset((char *)buf, 0, sizeof buf);
}

static __attribute__((noinline)) void collect_twice(void)
{
    scrub();
    jl_gc_collect(JL_GC_FULL);
    jl_gc_collect(JL_GC_FULL);
}

/* hold_in_r12(obj, fn): keeps obj only in callee-saved r12 while fn runs, then returns
 * it. The argument register is cleared and the stack scrubbed first. */
void *hold_in_r12(void *obj, void (*fn)(void));
__asm__(
    ".text\n"
    ".globl hold_in_r12\n"
    ".type hold_in_r12, @function\n"
    "hold_in_r12:\n"
    "    push %r12\n"            /* rsp is now 16-byte aligned */
    "    push %r13\n"
    "    sub $8, %rsp\n"
    "    mov %rdi, %r12\n"
    "    mov %rsi, %r13\n"
    "    xor %edi, %edi\n"
    "    call scrub\n"
    "    call *%r13\n"
    "    mov %r12, %rax\n"
    "    add $8, %rsp\n"
    "    pop %r13\n"
    "    pop %r12\n"
    "    ret\n"
    ".size hold_in_r12, .-hold_in_r12\n");

static int check(int on, obj_t *o, const char *what)
{
    int s = atomic_load(&swept);
    if (on) {
        if (s != 0 || o->magic != MAGIC || o->tag != 42) {
            fprintf(stderr, "FAIL %s/on: swept=%d magic=%llx tag=%llu\n", what, s,
                    (unsigned long long)o->magic, (unsigned long long)o->tag);
            return 1;
        }
    } else if (s != 1) {
        fprintf(stderr, "FAIL %s/off: the object was not collected (swept=%d)\n", what, s);
        return 1;
    }
    printf("%s %s: ok (swept=%d)\n", what, on ? "on" : "off", s);
    return 0;
}

/* ---- two threads ---- */
static atomic_int phase;
static int thread_failures;

static void *worker(void *arg)
{
    int me = (int)(intptr_t)arg;
    jl_adopt_thread();
    obj_t *volatile mine[64];
    for (int i = 0; i < 64; i++) mine[i] = make(1000 * me + i);
    for (int round = 0; round < 6; round++) {
        if (round % 2 == me) {
            /* My turn: collect while the other thread waits at a safepoint. */
            while (atomic_load(&phase) < 2 * round + 1) jl_gc_safepoint();
            scrub();
            jl_gc_collect(JL_GC_FULL);
            jl_gc_collect(JL_GC_INCREMENTAL);
            atomic_store(&phase, 2 * round + 2);
        } else {
            atomic_store(&phase, 2 * round + 1);
            while (atomic_load(&phase) < 2 * round + 2) jl_gc_safepoint();
        }
        for (int i = 0; i < 64; i++)
            if (mine[i]->magic != MAGIC || mine[i]->tag != (uint64_t)(1000 * me + i)) {
                fprintf(stderr, "FAIL thread %d: object %d corrupted after round %d\n", me, i, round);
                thread_failures++;
            }
    }
    jl_gc_thread_detach();
    return NULL;
}

/* ---- native API ---- */
static gc_heap_t *nheap;
static gc_mutator_t *nmut;
static void **c_roots; /* malloc'd: invisible to the collector except through gc_scan_range */
#define NROOTS 32
static int scans;
static void native_roots(int full)
{
    (void)full;
    ptrdiff_t found = gc_scan_range(nmut, c_roots, c_roots + NROOTS);
    if (found >= 0) scans++;
}

static int native(void)
{
    nheap = gc_heap_new(NULL);
    nmut = gc_thread_attach(nheap);
    if (!nheap || !nmut) { fprintf(stderr, "native: %s\n", gc_last_error()); return 2; }
    void *leaf = gc_new_foreign_type(nheap, "Leaf", NULL, (gc_sweepfunc_t)sweep, 0, 0);
    void *bag = gc_new_conservative_type(nheap, "Bag", NULL, 0);
    if (!leaf || !bag) { fprintf(stderr, "native types: %s\n", gc_last_error()); return 2; }
    c_roots = calloc(NROOTS, sizeof(void *));
    gc_set_callback(nheap, GC_CB_ROOT_SCANNER, (void *)native_roots, 1);
    /* A bag (rooted from malloc'd memory) holding 8 leaves, at odd interior offsets too. */
    void **b = gc_alloc(nmut, 16 * sizeof(void *), bag);
    c_roots[5] = (char *)b + 8; /* an interior pointer is enough */
    for (int i = 0; i < 8; i++) {
        obj_t *l = gc_alloc(nmut, sizeof(obj_t), leaf);
        l->magic = MAGIC;
        l->tag = (uint64_t)i;
        gc_schedule_sweep(nmut, l);
        b[i] = i % 2 ? (void *)((char *)l + 4) : (void *)l;
    }
    /* 8 more leaves only in the malloc'd area, and 8 unreachable ones. */
    for (int i = 0; i < 16; i++) {
        obj_t *l = gc_alloc(nmut, sizeof(obj_t), leaf);
        l->magic = MAGIC;
        l->tag = 100 + (uint64_t)i;
        gc_schedule_sweep(nmut, l);
        if (i < 8) c_roots[8 + i] = l;
    }
    if (gc_base_ptr(nheap, (char *)b + 17) != b || gc_base_ptr(nheap, c_roots) != NULL) {
        fprintf(stderr, "FAIL native: gc_base_ptr\n");
        return 1;
    }
    scrub();
    gc_collect(nmut, GC_COLLECT_FULL);
    gc_collect(nmut, GC_COLLECT_FULL);
    int s = atomic_load(&swept);
    int bad = 0;
    for (int i = 0; i < 8; i++) {
        obj_t *l = gc_base_ptr(nheap, b[i]);
        obj_t *m = c_roots[8 + i];
        if (!l || l->magic != MAGIC || l->tag != (uint64_t)i || m->magic != MAGIC || m->tag != 100 + (uint64_t)i) bad++;
    }
    if (s != 8 || bad || scans != 2) {
        fprintf(stderr, "FAIL native: swept=%d (want the 8 unreachable) bad=%d scans=%d\n", s, bad, scans);
        return 1;
    }
    /* Dropping the malloc'd roots frees everything else. */
    memset(c_roots, 0, NROOTS * sizeof(void *));
    b = NULL;
    scrub();
    gc_collect(nmut, GC_COLLECT_FULL);
    gc_collect(nmut, GC_COLLECT_FULL);
    printf("native: ok (swept %d, then %d after dropping the roots)\n", s, atomic_load(&swept));
    gc_thread_detach();
    free(c_roots);
    if (gc_heap_delete(nheap) != 0) { fprintf(stderr, "delete: %s\n", gc_last_error()); return 1; }
    return 0;
}

/* ---- dead objects on pages waiting for their sweep ---- */
#define NKEPT 16
static jl_value_t *kept[NKEPT]; /* rooted by a root scanner (no conservative scanning) */
static void kept_roots(int full)
{
    (void)full;
    jl_ptls_t ptls = jl_get_ptls_states();
    for (int i = 0; i < NKEPT; i++)
        if (kept[i]) jl_gc_mark_queue_obj(ptls, kept[i]);
}

/* Checks the dead objects (addresses only) and the live ones (kept[from..to)); `swept`:
 * whether their pages must have been swept already (else: must still wait). */
static int check_unswept(const char *when, const uintptr_t *dead, int ndead, int from, int to,
                         int swept_now)
{
    int bad = 0;
    for (int i = 0; i < ndead; i++) {
        uintptr_t p = dead[i];
        uintptr_t h = ((const uintptr_t *)p)[-1]; /* the cell's header word */
        /* Waiting: the header still names the type; swept: a free-list link (bit 3), the
         * page keeping live neighbours. */
        int waiting = (h & ~(uintptr_t)15) == (uintptr_t)ty;
        if (waiting == swept_now) {
            fprintf(stderr, "FAIL unswept/%s: dead %#lx header %#lx: the page %s\n", when,
                    (unsigned long)p, (unsigned long)h, swept_now ? "still waits" : "was swept");
            return 2;
        }
        for (int off = 0; off <= (int)sizeof(obj_t); off += 4) {
            if (jl_gc_internal_obj_base_ptr((void *)(p + off)) != NULL ||
                gc_base_ptr(gc_default_heap(), (void *)(p + off)) != NULL) {
                fprintf(stderr, "FAIL unswept/%s: dead object %#lx (+%d) found\n", when,
                        (unsigned long)p, off);
                bad++;
            }
        }
        /* Swept: a free cell, memory reserved for objects whose type field is never a
         * valid type (the seed's check rejects it). Waiting: its type field still names
         * the dead object's type, so it is not reported as reserved memory either. */
        if (jl_gc_is_internal_obj_alloc((jl_value_t *)p) != swept_now) {
            fprintf(stderr, "FAIL unswept/%s: jl_gc_is_internal_obj_alloc(dead %#lx) = %d\n", when,
                    (unsigned long)p, !swept_now);
            bad++;
        }
        if (swept_now && jl_gc_internal_obj_base_ptr(jl_typeof((jl_value_t *)p)) != NULL) {
            fprintf(stderr, "FAIL unswept/%s: free cell %#lx passes the type check\n", when,
                    (unsigned long)p);
            bad++;
        }
    }
    for (int i = from; i < to; i++) {
        char *o = (char *)kept[i];
        for (int off = 0; off <= (int)sizeof(obj_t); off += 4)
            if (jl_gc_internal_obj_base_ptr(o + off) != (jl_value_t *)o ||
                gc_base_ptr(gc_default_heap(), o + off) != o) {
                fprintf(stderr, "FAIL unswept/%s: live object %p (+%d) not found\n", when, o, off);
                bad++;
            }
        if (!jl_gc_is_internal_obj_alloc((jl_value_t *)o)) bad++;
    }
    return bad ? 1 : 0;
}

static int unswept(void)
{
    jl_gc_set_cb_root_scanner(kept_roots, 1);
    /* Old objects: dead, live, dead, ... side by side on one page; a full collection. */
    uintptr_t dead[8];
    for (int i = 0; i < 4; i++) {
        dead[2 * i] = (uintptr_t)make(i);
        kept[i] = make(42);
        dead[2 * i + 1] = (uintptr_t)make(i);
    }
    jl_gc_collect(JL_GC_FULL);
    int r = check_unswept("full", dead, 8, 0, 4, 0);
    if (r) return r;
    if (atomic_load(&swept) != 8) {
        fprintf(stderr, "FAIL unswept: %d sweep functions ran, not 8\n", atomic_load(&swept));
        return 1;
    }
    gc_stats_t st;
    gc_stats(gc_default_heap(), &st); /* completes the sweep */
    if ((r = check_unswept("full, swept", dead, 8, 0, 4, 1))) return r;
    /* Young objects (the old ones are promoted by the second collection): a partial one. */
    jl_gc_collect(JL_GC_INCREMENTAL);
    gc_stats(gc_default_heap(), &st);
    for (int i = 0; i < 4; i++) {
        dead[2 * i] = (uintptr_t)make(i);
        kept[4 + i] = make(42);
        dead[2 * i + 1] = (uintptr_t)make(i);
    }
    jl_gc_collect(JL_GC_INCREMENTAL);
    if ((r = check_unswept("partial", dead, 8, 0, 8, 0))) return r;
    gc_stats(gc_default_heap(), &st);
    if ((r = check_unswept("partial, swept", dead, 8, 0, 8, 1))) return r;
    printf("unswept: ok (%d sweep functions)\n", atomic_load(&swept));
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "local";
    int on = argc > 2 ? strcmp(argv[2], "off") != 0 : 1;
    if (strcmp(mode, "native") == 0) return native();
    if (strcmp(mode, "unswept") == 0) on = 0; /* roots through a root scanner only */
    if (on) jl_gc_enable_conservative_scanning(); /* before jl_init, as the seed allows */
    jl_init();
    ty = jl_new_foreign_type(jl_symbol("Obj"), NULL, NULL, NULL, sweep, 0, 0);
    if (!ty) { fprintf(stderr, "type: %s\n", jl_gc_last_error()); return 2; }
    if (strcmp(mode, "unswept") == 0) return unswept();

    if (strcmp(mode, "local") == 0) {
        obj_t *volatile local = make(42);
        collect_twice();
        int r = check(on, on ? (obj_t *)local : NULL, "local");
        local = NULL;
        return r;
    }
    if (strcmp(mode, "register") == 0) {
        obj_t *o = hold_in_r12(make(42), collect_twice);
        return check(on, o, "register");
    }
    if (strcmp(mode, "threads") == 0) {
        if (!on) return 2;
        /* The main thread waits in a GC-safe region while the workers collect. */
        pthread_t a, b;
        pthread_create(&a, NULL, worker, (void *)0);
        pthread_create(&b, NULL, worker, (void *)1);
        int8_t st = jl_gc_safe_enter(jl_get_ptls_states());
        pthread_join(a, NULL);
        pthread_join(b, NULL);
        jl_gc_safe_leave(jl_get_ptls_states(), st);
        if (thread_failures || atomic_load(&swept) != 0) {
            fprintf(stderr, "FAIL threads: %d corrupted, %d swept\n", thread_failures, atomic_load(&swept));
            return 1;
        }
        /* With both threads gone, their objects are garbage. */
        scrub();
        jl_gc_collect(JL_GC_FULL);
        jl_gc_collect(JL_GC_FULL);
        printf("threads: ok (%d of 128 collected after the threads ended)\n", atomic_load(&swept));
        return 0;
    }
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
}
