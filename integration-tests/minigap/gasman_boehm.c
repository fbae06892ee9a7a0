/*
 * gasman_boehm.c: the same kernel's memory layer on Boehm GC (as GAP itself can be
 * built): master pointers and bodies are GC_MALLOC'd (bodies of TNUMs without
 * references GC_MALLOC_ATOMIC), everything is found by Boehm's own conservative
 * marking (the mark functions are only used by check_live), free functions are
 * finalizers registered on the master pointer, CHANGED_BAG is a no-op. Threads are
 * registered with Boehm, which stops them with signals; the GIL is the same gil.
 */
#define GC_THREADS
#include <gc.h>
#include "gil.h"
#include <time.h>
#include <pthread.h>

static gil_t *Gil;
static __thread unsigned PollCounter;
static __thread uint64_t AllocCount;
static int Traversing;
static void TraverseVisit(Bag b);
static int TabLeafBags[NUM_TNUMS];
static pthread_mutex_t StatsLock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t PauseTotal, PauseMax, Collections;
static uint64_t PauseSamples[4096];
static int PauseCount;
static struct timespec PauseStart;

static uint64_t NowNs(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void OnCollectionEvent(GC_EventType e)
{
    if (e == GC_EVENT_START) {
        clock_gettime(CLOCK_MONOTONIC, &PauseStart);
        ExtBytesSinceGC = 0;  /* as gasman_ours.c's PreGC: the kernel's trigger restarts */
    } else if (e == GC_EVENT_END) {
        uint64_t start = (uint64_t)PauseStart.tv_sec * 1000000000ull + (uint64_t)PauseStart.tv_nsec;
        uint64_t d = NowNs() - start;
        PauseTotal += d;
        if (d > PauseMax)
            PauseMax = d;
        if (PauseCount < 4096)
            PauseSamples[PauseCount++] = d;
        Collections++;
    }
}

static void MarkBag(Bag bag)
{
    if (IS_BAG_REF(bag) && Traversing)
        TraverseVisit(bag);
}

static void Finalize(void *obj, void *data)
{
    (void)data;
    Obj *body = *(Obj **)obj;
    if (!body)
        return;
    BagHeader *hdr = (BagHeader *)body - 1;
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

static void GasmanInit(const mg_config *cfg)
{
    (void)cfg;
    GC_INIT();
    GC_allow_register_threads();
    GC_set_on_collection_event(OnCollectionEvent);
    for (int t = 0; t < NUM_TNUMS; t++)
        TabLeafBags[t] = 0;
    TabLeafBags[T_INTPOS] = TabLeafBags[T_INTNEG] = TabLeafBags[T_PERM] = 1;
    TabLeafBags[T_STRING] = TabLeafBags[T_RANGE] = TabLeafBags[T_BOOL] = 1;
    TabLeafBags[T_CHAR] = TabLeafBags[T_INTEXT] = TabLeafBags[T_HOST] = 1;
    if (gil_new("minigap", cfg->switch_interval_us, &Gil) != GIL_OK) {
        fprintf(stderr, "minigap: gil_new: %s\n", gil_last_error());
        abort();
    }
}

static __thread int Registered;

static int GasmanThreadAttach(void)
{
    struct GC_stack_base sb;
    if (GC_get_stack_base(&sb) == GC_SUCCESS && GC_register_my_thread(&sb) == GC_SUCCESS)
        Registered = 1;
    if (gil_attach(Gil, "minigap", NULL) != GIL_OK) {
        snprintf(ErrorMsg, sizeof ErrorMsg, "gil_attach: %s", gil_last_error());
        return -1;
    }
    return 0;
}

static void GasmanThreadDetach(void)
{
    gil_detach(Gil);
    if (Registered) {
        GC_unregister_my_thread();
        Registered = 0;
    }
}

static void GasmanEnter(void)
{
    int32_t acquired;
    if (gil_acquire(Gil, &acquired) != GIL_OK) {
        fprintf(stderr, "minigap: gil_acquire: %s\n", gil_last_error());
        abort();
    }
}

static void GasmanLeave(void) { gil_release(Gil, 1); }

static void GasmanPoll(void)
{
    if ((++PollCounter & 255) == 0)
        gil_poll(Gil);
}

static void GasmanBlockingSleep(uint64_t us)
{
    int32_t token;
    gil_blocking_enter(Gil, &token);
    struct timespec ts = { (time_t)(us / 1000000), (long)(us % 1000000) * 1000 };
    nanosleep(&ts, NULL);
    gil_blocking_leave(Gil, token);
}

static void StressTick(void)
{
    if (Config.gc_stress && ++AllocCount % Config.gc_stress == 0)
        GC_gcollect();
}

static Bag NewBag(UInt tnum, UInt size)
{
    StressTick();
    Bag bag = (Bag)GC_MALLOC(sizeof(void *));
    size_t total = sizeof(BagHeader) + size;
    BagHeader *hdr = TabLeafBags[tnum] ? GC_MALLOC_ATOMIC(total) : GC_MALLOC(total);
    if (!bag || !hdr) /* GAP's "cannot extend the workspace", not the end of the process */
        ErrorQuit("cannot extend the workspace any more (a new bag of %zu bytes)", total);
    if (TabLeafBags[tnum])
        memset(hdr, 0, total);
    hdr->size = size;
    hdr->tnum = (uint8_t)tnum;
    *(Obj **)bag = (Obj *)(hdr + 1);
    if (TabFreeFuncBags[tnum] || Config.track_bags) {
        GC_REGISTER_FINALIZER_NO_ORDER(bag, Finalize, NULL, NULL, NULL);
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
    BagHeader *hdr = TabLeafBags[old->tnum] ? GC_MALLOC_ATOMIC(total) : GC_MALLOC(total);
    if (!hdr)
        ErrorQuit("cannot extend the workspace any more (growing a bag to %zu bytes)", total);
    old = BAG_HEADER(bag);
    memset(hdr, 0, total);
    memcpy(hdr, old, sizeof(BagHeader) + old->size);
    hdr->size = new_size;
    *(Obj **)bag = (Obj *)(hdr + 1);
}

static int RetypeBag(Bag bag, UInt new_tnum)
{
    BagHeader *h = BAG_HEADER(bag);
    if (TabFreeFuncBags[new_tnum] && !(h->flags & BF_SWEEP_SCHEDULED))
        return -1;
    if (TabLeafBags[new_tnum] != TabLeafBags[h->tnum] && !TabLeafBags[new_tnum]) {
        /* a body that may now hold references must be scanned: copy to a normal one */
        size_t total = sizeof(BagHeader) + h->size;
        BagHeader *n = GC_MALLOC(total);
        memcpy(n, h, total);
        *(Obj **)bag = (Obj *)(n + 1);
        h = n;
    }
    h->tnum = (uint8_t)new_tnum;
    return 0;
}

static void CHANGED_BAG(Bag bag) { (void)bag; }
static void CHANGED_BAG_ELM(Bag list, UInt i) { (void)list; (void)i; }

static void MarkPlistElements(Bag b)
{
    Obj *p = ADDR_OBJ(b);
    UInt n = (UInt)p[0];
    for (UInt i = 1; i <= n; i++)
        MarkBag(p[i]);
}

static void CollectBags(int full)
{
    (void)full;
    GC_gcollect();
    GC_invoke_finalizers();
    FreeDeferredLimbs();
}

static void GasmanStats(mg_stats *st)
{
    GC_invoke_finalizers();
    pthread_mutex_lock(&StatsLock);
    st->full_collections = Collections;
    st->partial_collections = 0;
    st->total_pause_ns = PauseTotal;
    st->max_pause_ns = PauseMax;
    uint64_t tmp[4096];
    int n = PauseCount;
    memcpy(tmp, PauseSamples, n * sizeof(uint64_t));
    pthread_mutex_unlock(&StatsLock);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && tmp[j - 1] > tmp[j]; j--) {
            uint64_t t = tmp[j]; tmp[j] = tmp[j - 1]; tmp[j - 1] = t;
        }
    st->p50_pause_ns = n ? tmp[n / 2] : 0;
    st->bytes_allocated = GC_get_total_bytes();
    st->heap_bytes = GC_get_heap_size();
    st->live_bytes = GC_get_heap_size() - GC_get_free_bytes();
}

static int GasmanIsYoung(Bag bag) { (void)bag; return -1; }

static void InitMarkFuncBags(UInt tnum, MarkFuncBags f) { TabMarkFuncBags[tnum] = f; }
static void InitFreeFuncBag(UInt tnum, FreeFuncBags f) { TabFreeFuncBags[tnum] = f; }
static void InitGlobalBag(Bag *addr, const char *cookie)
{
    /* static variables: Boehm scans the program's data segments anyway */
    GlobalAddr[GlobalCount] = addr;
    GlobalCookie[GlobalCount] = cookie;
    GlobalCount++;
}
