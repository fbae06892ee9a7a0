/*
 * gasman_ours.c: minigap's memory layer on gc-core + gc-conservative, with interpreter
 * threads serialised by gil. This is the composition a C system can copy:
 *
 * - a bag is a one-word master pointer (foreign type "MPtr") pointing past the header
 *   of its body (foreign types "Bag" / "LargeBag", split at gc_max_internal_obj_size());
 * - the master pointer's mark function marks the body (a leaf for the GC) and runs the
 *   TNUM's mark function over the body's data, counting young children from what
 *   gc_mark_queue_obj answers ("is young"), so CHANGED_BAG is one barrier on the master
 *   pointer: the bag's identity, whose body may be replaced by ResizeBag (marking and
 *   barriers use the inline fast paths of julia_gcext_compat.h, as GAP uses julia.h's;
 *   a per-thread mark cache skips bags already queued; plain lists remember their run
 *   of old elements, which partial collections skip);
 * - malloc'd integer limbs are freed after the pause, not by the free function inside
 *   it, and their growth requests collections (integer.c);
 * - free functions are per TNUM and scheduled once per bag, on the master pointer, at
 *   NewBag; a retype to a TNUM with a free function after that is refused;
 * - global bags are marked by a root scanner; every thread's stack is scanned
 *   conservatively in every collection (partial ones included) by a task scanner that
 *   accepts only words pointing at master pointers (gc_scan_task with a filter);
 * - threads waiting for the GIL, or outside it, are in gc-core GC-safe regions: the
 *   gil's block/unblock hooks enter and leave them, so a collection started by the
 *   thread that holds the GIL never waits for them.
 */
#include "gc_core.h"
#include "gc_conservative.h"
/* The published inline fast paths (as GAP compiles against julia.h's): marking a child
   and the write barriers without a call when nothing is to be remembered or queued out
   of line; they fall back to the checked functions (verify mode included). */
#include "julia_gcext_compat.h"
#include "gil.h"
#include <time.h>

static gc_heap_t *Heap;
static void *MPtrType, *BodyType, *LargeBodyType;
static size_t MaxSmallBody;
static gil_t *Gil;
static __thread gc_mutator_t *M;           /* this thread's mutator */
static __thread int8_t OutsideState;       /* gc_safe_enter's answer while outside */
static __thread int8_t HookStates[8];      /* nested block hooks */
static __thread int HookDepth;
static __thread unsigned PollCounter;
static __thread void *GilCallSP;  /* a live frame below which the gil's code runs */

/* Marking state: set by the master pointer's mark function, used by MarkBag. Per
   thread: gc-core marks in parallel, calling mark functions on any collector thread. */
static __thread gc_mutator_t *MarkM;
static __thread size_t YoungRef;
static uint32_t GcEpoch = 1;
static int Traversing;                 /* check_live's traversal, not a collection */
static int CollectingFull;             /* the running collection is a full one */
static void TraverseVisit(Bag b);

/* GAP's MarkCache (julia_gc.c): a small direct-mapped cache, per collector thread, of
   the bags this collection already queued, with gc_mark_queue_obj's answer for each
   (low bit: young). The answer for one bag is the same for the whole collection (a young
   bag stays young once marked, a promoted or old one stays old), so a hit counts the
   same young children without calling into the collector again: lists sharing elements
   (the array benchmark's pairs all hold the same two strings) mark each shared bag once
   per thread. Cleared lazily per collection (GcEpoch). */
#define MARK_CACHE_BITS 12
#define MARK_CACHE_SLOT(bag) (((UInt)(bag) >> 4) & ((1 << MARK_CACHE_BITS) - 1))
static __thread UInt MarkCache[1 << MARK_CACHE_BITS];
static __thread uint32_t MarkCacheEpoch;

/* Everything but a cache hit: check_live's traversal, the debug mode emulating Julia's
   "newly marked" answer (uncached: it depends on the call order), a miss. */
static __attribute__((noinline)) void MarkBagSlow(Bag bag)
{
    if (Traversing) {
        TraverseVisit(bag);
        return;
    }
    if (!Config.debug_newly_marked) {
        if (MarkCacheEpoch != GcEpoch) {
            memset(MarkCache, 0, sizeof MarkCache);
            MarkCacheEpoch = GcEpoch;
        }
        int young = gc_compat_mark_queue_obj((jl_ptls_t)MarkM, (jl_value_t *)bag) != 0;
        MarkCache[MARK_CACHE_SLOT(bag)] = (UInt)bag | (UInt)young;
        YoungRef += young;
        return;
    }
    int young = gc_compat_mark_queue_obj((jl_ptls_t)MarkM, (jl_value_t *)bag);
    /* Julia's jl_gc_mark_queue_obj: non-zero only if this call newly marked a young
       object; a young child already marked through another path counts 0. */
    Obj *data = PTR_BAG(bag);
    if (data) {
        BagHeader *h = (BagHeader *)data - 1;
        int newly = h->epoch != GcEpoch;
        h->epoch = GcEpoch;
        young = young && newly;
    }
    YoungRef += young != 0;
}

/* Inlined into the mark functions: the cache hit, the common case for shared bags. */
static inline __attribute__((always_inline)) void MarkBag(Bag bag)
{
    if (!IS_BAG_REF(bag))
        return;
    if (__builtin_expect(!Traversing && MarkCacheEpoch == GcEpoch, 1)) {
        UInt e = MarkCache[MARK_CACHE_SLOT(bag)];
        if ((e & ~(UInt)1) == (UInt)bag) {
            YoungRef += e & 1;
            return;
        }
    }
    MarkBagSlow(bag);
}

static size_t MarkMPtr(gc_mutator_t *m, void *obj)
{
    Obj *data = *(Obj **)obj;
    if (!data)
        return 0;  /* between the two allocations of NewBag */
    BagHeader *hdr = (BagHeader *)data - 1;
    size_t young = gc_compat_mark_queue_obj((jl_ptls_t)m, (jl_value_t *)hdr) != 0;
    if (Config.debug_newly_marked && hdr->epoch != GcEpoch)
        hdr->epoch = GcEpoch;
    MarkM = m;
    YoungRef = 0;
    MarkFuncBags f = TabMarkFuncBags[hdr->tnum];
    if (f)
        f((Bag)obj);
    return young + YoungRef;
}

static void SweepMPtr(void *obj)
{
    Obj *data = *(Obj **)obj;
    if (!data)
        return;
    BagHeader *hdr = (BagHeader *)data - 1;
    if (hdr->flags & BF_SWEPT) {
        DoubleSweeps++;
        return;
    }
    hdr->flags |= BF_SWEPT;
    BagsFreed++;
    FreeFuncBags f = TabFreeFuncBags[hdr->tnum];
    if (f) {
        FreeFuncsRun++;
        f((Bag)obj);
    }
}

static void RootScanner(int full)
{
    (void)full;
    gc_mutator_t *m = gc_current_mutator();
    MarkM = m;
    for (int i = 0; i < GlobalCount; i++) {
        Bag b = *GlobalAddr[i];
        if (IS_BAG_REF(b)) {
            YoungRef = 0;
            MarkBag(b);
        }
    }
}

static int OnlyMasterPointers(void *data, void *obj)
{
    (void)data;
    return gc_typeof(obj) == MPtrType;
}

static void TaskScanner(gc_task_t *task, int full)
{
    if (Config.debug_skip_stopped_stacks_in_partial && !full && task != gc_current_task())
        return;  /* the GAP.jl #1032 bug, on purpose */
    gc_scan_task(gc_current_mutator(), task, OnlyMasterPointers, NULL);
}

static void PreGC(int full)
{
    CollectingFull = full;
    GcEpoch++;
    ExtBytesSinceGC = 0;
}

/* The composition: the gil tells us when a thread blocks (waits for the GIL, enters a
   blocking region) and when it runs again; in between it is in a GC-safe region. */
static void OnBlock(void *data, uint64_t tid, int32_t reason)
{
    (void)data; (void)tid; (void)reason;
    if (!M || HookDepth >= 8)
        return;
    /* The hook runs deep inside the gil, whose frames below the kernel's come and go
       while the thread waits: record the kernel's frame (GilCall spilled its registers
       there) as the lowest live stack address, not this hook's. */
    HookStates[HookDepth++] = GilCallSP ? gc_safe_enter_sp(M, GilCallSP) : gc_safe_enter(M);
}

static void OnUnblock(void *data, uint64_t tid, int32_t reason)
{
    (void)data; (void)tid; (void)reason;
    if (M && HookDepth > 0)
        gc_safe_leave(M, HookStates[--HookDepth]);
}

/* An allocation the system cannot satisfy (a list of 10^11 entries): a GAP error, as
   GAP's "cannot extend the workspace any more", not the end of the process. Any other
   failure of the collector is fatal. */
static void GasmanOutOfMemory(const char *what, size_t total)
{
    const char *e = gc_last_error();
    if (e && strstr(e, "out of memory"))
        ErrorQuit("cannot extend the workspace any more (%s of %zu bytes)", what, total);
}

static void GasmanFatal(const char *what)
{
    const char *e = gc_last_error();
    fprintf(stderr, "minigap: %s failed: %s\n", what, e ? e : gil_last_error());
    abort();
}

static void GasmanInit(const mg_config *cfg)
{
    gc_config_t gcfg;
    gc_config_default(&gcfg);
    gcfg.stress_every = cfg->gc_stress;
    gcfg.verify = cfg->verify;
    if (cfg->min_interval)
        gcfg.min_interval = cfg->min_interval;
    Heap = gc_heap_new(&gcfg);
    if (!Heap)
        GasmanFatal("gc_heap_new");
    MaxSmallBody = gc_max_internal_obj_size();
    MPtrType = gc_new_foreign_type(Heap, "MPtr", MarkMPtr, SweepMPtr, 1, 0);
    BodyType = gc_new_foreign_type(Heap, "Bag", NULL, NULL, 0, 0);
    LargeBodyType = gc_new_foreign_type(Heap, "LargeBag", NULL, NULL, 0, 1);
    if (!MPtrType || !BodyType || !LargeBodyType)
        GasmanFatal("gc_new_foreign_type");
    if (gc_set_callback(Heap, GC_CB_ROOT_SCANNER, (void *)RootScanner, 1) < 0 ||
        gc_set_callback(Heap, GC_CB_PRE_GC, (void *)PreGC, 1) < 0)
        GasmanFatal("gc_set_callback");
    if (cfg->conservative &&
        gc_set_callback(Heap, GC_CB_TASK_SCANNER, (void *)TaskScanner, 1) < 0)
        GasmanFatal("gc_set_callback(task scanner)");
    if (gil_new("minigap", cfg->switch_interval_us, &Gil) != GIL_OK)
        GasmanFatal("gil_new");
    if (gil_set_hooks(Gil, OnBlock, OnUnblock, NULL) != GIL_OK)
        GasmanFatal("gil_set_hooks");
}

static int GasmanThreadAttach(void)
{
    M = gc_thread_attach(Heap);
    if (!M) {
        snprintf(ErrorMsg, sizeof ErrorMsg, "gc_thread_attach: %s", gc_last_error());
        return -1;
    }
    if (gil_attach(Gil, "minigap", NULL) != GIL_OK) {
        snprintf(ErrorMsg, sizeof ErrorMsg, "gil_attach: %s", gil_last_error());
        gc_thread_detach();
        M = NULL;
        return -1;
    }
    OutsideState = gc_safe_enter(M);
    return 0;
}

static void GasmanThreadDetach(void)
{
    gil_detach(Gil);
    gc_safe_leave(M, OutsideState);
    gc_thread_detach();
    M = NULL;
}

/* Calls into the gil through a frame that stays live while the gil blocks: its callee-
   saved registers (which may hold the caller's bag references) are spilled into it and
   its stack pointer is what the block hook records. */
typedef int32_t (*GilFn)(gil_t *, void *);
static __attribute__((noinline)) int32_t GilCall(GilFn fn, void *arg)
{
    __builtin_unwind_init();
    void *sp;
    __asm__ volatile("mov %%rsp, %0" : "=r"(sp));
    void *saved = GilCallSP;
    GilCallSP = sp;
    int32_t r = fn(Gil, arg);
    GilCallSP = saved;
    __asm__ volatile("" ::: "memory");
    return r;
}
static int32_t GilAcquireFn(gil_t *g, void *arg) { return gil_acquire(g, (int32_t *)arg); }
static int32_t GilPollFn(gil_t *g, void *arg) { (void)arg; return gil_poll(g); }

static void GasmanEnter(void)
{
    int32_t acquired;
    /* Still GC-safe while waiting: the hooks nest inside our own region. */
    if (GilCall(GilAcquireFn, &acquired) != GIL_OK) {
        fprintf(stderr, "minigap: gil_acquire: %s\n", gil_last_error());
        abort();
    }
    gc_safe_leave(M, OutsideState);
}

static void GasmanLeave(void)
{
    OutsideState = gc_safe_enter(M);
    gil_release(Gil, 1);
}

static void GasmanPoll(void)
{
    if ((++PollCounter & 255) == 0)
        GilCall(GilPollFn, NULL);
}

static __attribute__((noinline)) void GasmanBlockingSleep(uint64_t us)
{
    int32_t token;
    /* the blocking region lasts beyond gil_blocking_enter: keep this frame (with the
       caller's registers spilled) as the live bottom of the stack until it ends */
    __builtin_unwind_init();
    void *sp;
    __asm__ volatile("mov %%rsp, %0" : "=r"(sp));
    void *saved = GilCallSP;
    GilCallSP = sp;
    gil_blocking_enter(Gil, &token);
    struct timespec ts = { (time_t)(us / 1000000), (long)(us % 1000000) * 1000 };
    nanosleep(&ts, NULL);
    gil_blocking_leave(Gil, token);
    GilCallSP = saved;
    __asm__ volatile("" ::: "memory");
}

static Bag NewBag(UInt tnum, UInt size)
{
    /* The master pointer first: from here on it is on this stack, the only kind of word
       the stack scan accepts, so a collection in the body's allocation keeps it. */
    Bag bag = (Bag)gc_alloc(M, sizeof(void *), MPtrType);
    if (!bag)
        GasmanFatal("gc_alloc(master pointer)");
    size_t total = sizeof(BagHeader) + size;
    BagHeader *hdr = (BagHeader *)gc_alloc(M, total, total <= MaxSmallBody ? BodyType : LargeBodyType);
    if (!hdr) {
        GasmanOutOfMemory("a new bag", total);
        GasmanFatal("gc_alloc(body)");
    }
    hdr->size = size;
    hdr->tnum = (uint8_t)tnum;
    *(Obj **)bag = (Obj *)(hdr + 1);
    gc_compat_wb(bag, hdr);
    if (TabFreeFuncBags[tnum] || Config.track_bags) {
        gc_schedule_sweep(M, bag);
        hdr->flags |= BF_SWEEP_SCHEDULED;
    }
    BagsAllocated++;
    return bag;
}

static void ResizeBag(Bag bag, UInt new_size)
{
    BagHeader *old = BAG_HEADER(bag);
    if (new_size <= old->size) {
        memset((char *)(old + 1) + new_size, 0, old->size - new_size);
        old->size = new_size;
        return;
    }
    size_t total = sizeof(BagHeader) + new_size;
    BagHeader *hdr = (BagHeader *)gc_alloc(M, total, total <= MaxSmallBody ? BodyType : LargeBodyType);
    if (!hdr) {
        GasmanOutOfMemory("growing a bag", total);
        GasmanFatal("gc_alloc(resize)");
    }
    old = BAG_HEADER(bag);  /* the bag kept its body alive during the allocation */
    memcpy(hdr, old, sizeof(BagHeader) + old->size);
    hdr->size = new_size;
    *(Obj **)bag = (Obj *)(hdr + 1);
    gc_compat_wb(bag, hdr);
}

static int RetypeBag(Bag bag, UInt new_tnum)
{
    BagHeader *h = BAG_HEADER(bag);
    if (TabFreeFuncBags[new_tnum] && !(h->flags & BF_SWEEP_SCHEDULED))
        return -1;  /* scheduling now could sweep twice: refused, as GAP does */
    h->tnum = (uint8_t)new_tnum;
    if (!Config.debug_newly_marked)
        h->old_prefix = 0;  /* what the data means changed: no run of old elements known */
    return 0;
}

/* The old prefix of plain lists (BagHeader.old_prefix): a partial collection marks only
   young bags, so an old list rescanned from the remembered set (every partial collection
   while it is being filled, as List() fills its result) needs only the elements after
   its leading run of old ones; old bags stay old, so the run stays valid until one of
   its elements is written (CHANGED_BAG_ELM shortens it, CHANGED_BAG clears it). Full
   collections mark old bags too: they scan everything. */
static void CHANGED_BAG(Bag bag)
{
    if (!Config.debug_newly_marked)
        BAG_HEADER(bag)->old_prefix = 0;
    gc_compat_wb_back(bag);
}

static void CHANGED_BAG_ELM(Bag list, UInt i)
{
    BagHeader *h = BAG_HEADER(list);
    if (i <= h->old_prefix && !Config.debug_newly_marked)
        h->old_prefix = (uint32_t)(i - 1);
    gc_compat_wb_back(list);
}

static void MarkPlistElements(Bag b)
{
    Obj *p = ADDR_OBJ(b);
    UInt n = (UInt)p[0];
    if (Traversing || Config.debug_newly_marked) {
        for (UInt i = 1; i <= n; i++)
            MarkBag(p[i]);
        return;
    }
    BagHeader *h = (BagHeader *)p - 1;
    UInt i = 1;
    if (!CollectingFull)
        i = h->old_prefix < n ? (UInt)h->old_prefix + 1 : n + 1;
    UInt prefix = i - 1;
    /* extend the run while the elements are old (a call adding nothing to YoungRef) */
    for (; i <= n; i++) {
        size_t before = YoungRef;
        MarkBag(p[i]);
        if (YoungRef != before) {
            i++;
            break;
        }
        prefix = i;
    }
    for (; i <= n; i++)
        MarkBag(p[i]);
    h->old_prefix = prefix > UINT32_MAX ? UINT32_MAX : (uint32_t)prefix;
}

static void CollectBags(int full)
{
    gc_collect(M, full ? GC_COLLECT_FULL : GC_COLLECT_PARTIAL);
    FreeDeferredLimbs();
}

static void GasmanStats(mg_stats *st)
{
    gc_stats_t s;
    gc_stats(Heap, &s);
    st->full_collections = s.full_collections;
    st->partial_collections = s.partial_collections;
    st->total_pause_ns = s.total_pause_ns;
    st->max_pause_ns = s.max_pause_ns;
    st->p50_pause_ns = s.p50_pause_ns;
    st->bytes_allocated = s.bytes_allocated;
    st->live_bytes = s.live_bytes;
    st->heap_bytes = s.live_bytes;
    st->verify_errors = s.verify_errors;
}

static int GasmanIsYoung(Bag bag)
{
    return gc_is_young(bag);
}

static void InitMarkFuncBags(UInt tnum, MarkFuncBags f) { TabMarkFuncBags[tnum] = f; }
static void InitFreeFuncBag(UInt tnum, FreeFuncBags f) { TabFreeFuncBags[tnum] = f; }
static void InitGlobalBag(Bag *addr, const char *cookie)
{
    GlobalAddr[GlobalCount] = addr;
    GlobalCookie[GlobalCount] = cookie;
    GlobalCount++;
}
