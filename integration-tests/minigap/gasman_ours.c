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
 *   conservatively in every collection (partial ones included), accepting only words
 *   pointing at master pointers (the runtime's scan filter);
 * - the heap, the GIL and their glue are gc-runtime's (gc_runtime.h): threads waiting
 *   for the GIL, blocked in MicroSleep, or outside the kernel are in gc-core GC-safe
 *   regions (the runtime's GIL hooks and entry points enter and leave them, saving the
 *   caller's registers for the conservative scan), so a collection started by the
 *   thread that holds the GIL never waits for them.
 */
#include "gc_runtime.h"
/* The published inline fast paths (as GAP compiles against julia.h's): marking a child
   and the write barriers without a call when nothing is to be remembered or queued out
   of line; they fall back to the checked functions (verify mode included). */
#include "julia_gcext_compat.h"
#include <time.h>

static gc_runtime_t *Runtime;
static gc_heap_t *Heap;
static void *MPtrType, *BodyType, *LargeBodyType;
static size_t MaxSmallBody;
static __thread gc_mutator_t *M;           /* this thread's mutator */
static __thread unsigned PollCounter;

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

/* Only with the debug mode below: the runtime's task scanner, skipping stopped threads'
   stacks in partial collections. */
static void TaskScanner(gc_task_t *task, int full)
{
    if (!full && task != gc_current_task())
        return;  /* the GAP.jl #1032 bug, on purpose */
    gc_runtime_scan_task(Runtime, task);
}

static void PreGC(int full)
{
    CollectingFull = full;
    GcEpoch++;
    ExtBytesSinceGC = 0;
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
    fprintf(stderr, "minigap: %s failed: %s\n", what, e ? e : gc_runtime_last_error());
    abort();
}

static void GasmanRuntimeFatal(const char *what)
{
    fprintf(stderr, "minigap: %s failed: %s\n", what, gc_runtime_last_error());
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
    gc_runtime_config_t rcfg;
    gc_runtime_config_default(&rcfg);
    rcfg.gil_name = "minigap";
    rcfg.switch_interval_us = cfg->switch_interval_us;
    rcfg.conservative = cfg->conservative && !cfg->debug_skip_stopped_stacks_in_partial;
    rcfg.scan_filter = OnlyMasterPointers;
    Runtime = gc_runtime_new(&gcfg, &rcfg);
    if (!Runtime)
        GasmanRuntimeFatal("gc_runtime_new");
    Heap = gc_runtime_heap(Runtime);
    MaxSmallBody = gc_max_internal_obj_size();
    MPtrType = gc_new_foreign_type(Heap, "MPtr", MarkMPtr, SweepMPtr, 1, 0);
    BodyType = gc_new_foreign_type(Heap, "Bag", NULL, NULL, 0, 0);
    LargeBodyType = gc_new_foreign_type(Heap, "LargeBag", NULL, NULL, 0, 1);
    if (!MPtrType || !BodyType || !LargeBodyType)
        GasmanFatal("gc_new_foreign_type");
    if (gc_set_callback(Heap, GC_CB_ROOT_SCANNER, (void *)RootScanner, 1) < 0 ||
        gc_set_callback(Heap, GC_CB_PRE_GC, (void *)PreGC, 1) < 0)
        GasmanFatal("gc_set_callback");
    if (cfg->conservative && cfg->debug_skip_stopped_stacks_in_partial &&
        gc_set_callback(Heap, GC_CB_TASK_SCANNER, (void *)TaskScanner, 1) < 0)
        GasmanFatal("gc_set_callback(task scanner)");
}

static int GasmanThreadAttach(void)
{
    M = gc_runtime_attach(Runtime, "minigap");
    if (!M) {
        snprintf(ErrorMsg, sizeof ErrorMsg, "gc_runtime_attach: %s", gc_runtime_last_error());
        return -1;
    }
    return 0;
}

static void GasmanThreadDetach(void)
{
    gc_runtime_detach(Runtime);
    M = NULL;
}

static void GasmanEnter(void)
{
    /* GC-safe while waiting for the GIL */
    if (gc_runtime_enter(Runtime) != GC_RUNTIME_OK)
        GasmanRuntimeFatal("gc_runtime_enter");
}

static void GasmanLeave(void)
{
    gc_runtime_leave(Runtime);
}

static void GasmanPoll(void)
{
    if ((++PollCounter & 255) == 0)
        gc_runtime_poll(Runtime);
}

static void GasmanBlockingSleep(uint64_t us)
{
    /* the caller's frame and registers stay roots until the region ends */
    gc_runtime_blocking_begin(Runtime);
    struct timespec ts = { (time_t)(us / 1000000), (long)(us % 1000000) * 1000 };
    nanosleep(&ts, NULL);
    gc_runtime_blocking_end(Runtime);
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
