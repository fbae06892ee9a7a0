/*
 * minigap.c: the kernel's public API (minigap.h): initialisation, threads, eval,
 * statistics, the live-bag check, host objects and host roots, and the two GC
 * scenarios the tests run (young counting; a bag held only on a stopped thread's stack).
 */
#include <time.h>
#include <pthread.h>

static Obj ScenarioOld, ScenarioYoung;
static int Initialised;

/* ---- check_live: a traversal from the global bags, with the mark functions ---- */
static UInt *VisitSet;
static UInt VisitCap, VisitCount;
static Bag *VisitStack;
static UInt VisitTop, VisitStackCap;
static UInt VisitExt;

static void TraverseVisit(Bag b)
{
    UInt h = ((UInt)b >> 4) * 0x9E3779B97F4A7C15ull;
    UInt i = h & (VisitCap - 1);
    while (VisitSet[i]) {
        if (VisitSet[i] == (UInt)b)
            return;
        i = (i + 1) & (VisitCap - 1);
    }
    VisitSet[i] = (UInt)b;
    VisitCount++;
    if (VisitTop == VisitStackCap) {
        VisitStackCap = VisitStackCap * 2 + 1024;
        VisitStack = realloc(VisitStack, VisitStackCap * sizeof(Bag));
    }
    VisitStack[VisitTop++] = b;
}

static UInt CountReachable(void)
{
    VisitCap = 1;
    while (VisitCap < 4 * (BagsAllocated - BagsFreed + 1024))
        VisitCap <<= 1;
    VisitSet = calloc(VisitCap, sizeof(UInt));
    VisitCount = VisitTop = VisitExt = 0;
    Traversing = 1;
    for (int g = 0; g < GlobalCount; g++)
        MarkBag(*GlobalAddr[g]);
    while (VisitTop > 0) {
        Bag b = VisitStack[--VisitTop];
        if (!PTR_BAG(b))
            continue;
        if (TNUM_BAG(b) == T_INTEXT)
            VisitExt++;
        MarkFuncBags f = TabMarkFuncBags[TNUM_BAG(b)];
        if (f)
            f(b);
    }
    Traversing = 0;
    free(VisitSet);
    VisitSet = NULL;
    return VisitCount;
}

/* ---- public API ---- */
void MG(config_default)(mg_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->conservative = 1;
    cfg->switch_interval_us = 5000;
}

static int Fail_(const char *msg)
{
    snprintf(ErrorMsg, sizeof ErrorMsg, "%s", msg);
    return -1;
}

const char *MG(last_error)(void) { return ErrorMsg; }

static Obj NewTestBagWithValue(Int v)
{
    Obj b = NewBag(T_TEST, sizeof(Obj));
    ADDR_OBJ(b)[0] = INTOBJ_INT(v);
    return b;
}

int MG(init)(const mg_config *cfg)
{
    if (Initialised)
        return Fail_("minigap: init called twice (one kernel per backend per process)");
    Config = *cfg;
    InitMarkFuncBags(T_INTPOS, NULL);
    InitMarkFuncBags(T_INTNEG, NULL);
    InitMarkFuncBags(T_INTEXT, NULL);
    InitFreeFuncBag(T_INTEXT, FreeIntExt);
    InitMarkFuncBags(T_PLIST, MarkPlist);
    InitMarkFuncBags(T_REC, MarkRec);
    InitMarkFuncBags(T_FUNCTION, MarkFirstThree);
    InitMarkFuncBags(T_LVARS, MarkAllSubBags);
    InitMarkFuncBags(T_BODY, MarkSecond);
    InitFreeFuncBag(T_BODY, FreeBody);
    InitMarkFuncBags(T_GROUP, MarkFirstTwo);
    InitFreeFuncBag(T_HOST, FreeHost);
    InitMarkFuncBags(T_TEST, MarkFirst);
    InitMarkFuncBags(T_RAT, MarkFirstTwo);
    InitFreeFuncBag(T_TEST, FreeTestBag);
    InitGlobalBag(&True, "True");
    InitGlobalBag(&False, "False");
    InitGlobalBag(&Fail, "Fail");
    InitGlobalBag(&ThreadContexts, "ThreadContexts");
    InitGlobalBag(&HostRoots, "HostRoots");
    InitGlobalBag(&Builtins, "Builtins");
    InitGlobalBag(&EmptyString, "EmptyString");
    InitGlobalBag(&ScenarioOld, "ScenarioOld");
    InitGlobalBag(&ScenarioYoung, "ScenarioYoung");
    static Obj CharList;
    InitGlobalBag(&CharList, "CharList");
    GasmanInit(cfg);
    if (GasmanThreadAttach() < 0)
        return -1;
    GasmanEnter();
    True = NewBool(1);
    False = NewBool(0);
    Fail = NewBool(2);
    CharList = NEW_PLIST(256);
    for (int c = 0; c < 256; c++) {
        Obj ch = NewBag(T_CHAR, sizeof(Int));
        *(Int *)ADDR_OBJ(ch) = c;
        AssPlist(CharList, c + 1, ch);
    }
    for (int c = 0; c < 256; c++)
        CharBags[c] = ELM_PLIST(CharList, c + 1);
    ThreadContexts = NEW_PLIST(8);
    HostRoots = NEW_PLIST(8);
    Builtins = NEW_PLIST(64);
    EmptyString = MakeString("", 0);
    InitBuiltins();
    GasmanLeave();
    GasmanThreadDetach();
    Initialised = 1;
    return 0;
}

int MG(thread_attach)(const char *name, mg_output_fn out, void *data)
{
    (void)name;
    if (!Initialised)
        return Fail_("minigap: not initialised");
    if (Out)
        return Fail_("minigap: this thread is already attached");
    if (GasmanThreadAttach() < 0)
        return -1;
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
        void *lo;
        size_t size;
        pthread_attr_getstack(&attr, &lo, &size);
        StackLimit = (UInt)lo + (size > (1 << 20) ? 256 * 1024 : size / 4);
        pthread_attr_destroy(&attr);
    }
    Out = calloc(1, sizeof(Output));
    Out->hints[0] = -1;
    Out->fn = out;
    Out->data = data;
    GasmanEnter();
    Obj globals = NEW_PLIST(64);
    Int slot = 0;
    for (Int i = 1; i <= LEN_PLIST(ThreadContexts); i++)
        if (!ELM_PLIST(ThreadContexts, i)) {
            slot = i;
            break;
        }
    if (!slot)
        slot = LEN_PLIST(ThreadContexts) + 1;
    AssPlist(ThreadContexts, slot, globals);
    MyThreadIndex = slot;
    GasmanLeave();
    return 0;
}

int MG(thread_detach)(void)
{
    if (!Out)
        return Fail_("minigap: this thread is not attached");
    GasmanEnter();
    SET_ELM_PLIST(ThreadContexts, MyThreadIndex, 0);
    GasmanLeave();
    GasmanThreadDetach();
    free(Out->done);
    free(Out);
    Out = NULL;
    return 0;
}

int MG(eval)(const char *code, const char *filename)
{
    if (!Out)
        return Fail_("minigap: eval from a thread that is not attached");
    jmp_buf jb;
    ErrorJmp = &jb;
    ErrorMsg[0] = 0;
    GasmanEnter();
    if (setjmp(jb)) {
        PrFlushLines(1);
        CallDepth = 0;
        PrintDepth = 0;
        GasmanLeave();
        ErrorJmp = NULL;
        return -1;
    }
    ReadEvalString(code, filename ? filename : "stream");
    PrFlushLines(1);
    GasmanLeave();
    ErrorJmp = NULL;
    return 0;
}

int MG(collect)(int full)
{
    if (!Out)
        return Fail_("minigap: collect from a thread that is not attached");
    GasmanEnter();
    CollectBags(full);
    GasmanLeave();
    return 0;
}

int MG(stats)(mg_stats *out)
{
    memset(out, 0, sizeof *out);
    GasmanStats(out);
    FreeDeferredLimbs();
    out->bags_allocated = BagsAllocated;
    out->bags_freed = BagsFreed;
    out->free_functions_run = FreeFuncsRun;
    out->double_sweeps = DoubleSweeps;
    out->ext_mallocs = ExtMallocs;
    out->ext_frees = ExtFrees;
    out->host_releases = HostReleases;
    return 0;
}

static __attribute__((noinline)) void CollectFromCleanFrame(void)
{
    /* clobber some stack below the callers' frames before collecting */
    volatile UInt scratch[512];
    for (int i = 0; i < 512; i++)
        scratch[i] = 0;
    (void)scratch[0];
    CollectBags(1);
}

int MG(check_live)(mg_live_report *out)
{
    if (!Out)
        return Fail_("minigap: check_live from a thread that is not attached");
    if (!Config.track_bags)
        return Fail_("minigap: check_live needs track_bags");
    GasmanEnter();
    CollectFromCleanFrame();
    CollectFromCleanFrame();
    out->live_bags = BagsAllocated - BagsFreed;
    out->reachable_bags = CountReachable();
    out->ext_live = ExtMallocs - ExtFrees;
    out->ext_reachable = VisitExt;
    GasmanLeave();
    return 0;
}

int MG(set_host_release)(mg_host_release_fn release)
{
    HostRelease = release;
    return 0;
}

static int Guarded(void)
{
    return Out != NULL;
}

int MG(bind_host)(const char *name, void *handle)
{
    if (!Guarded())
        return Fail_("minigap: bind_host from a thread that is not attached");
    jmp_buf jb;
    ErrorJmp = &jb;
    GasmanEnter();
    if (setjmp(jb)) {
        GasmanLeave();
        return -1;
    }
    Obj h = NewBag(T_HOST, sizeof(void *));
    *(void **)ADDR_OBJ(h) = handle;
    AssGVar(GVarName(name), h);
    GasmanLeave();
    return 0;
}

int64_t MG(root_global)(const char *name)
{
    if (!Guarded())
        return Fail_("minigap: root_global from a thread that is not attached");
    GasmanEnter();
    Obj v = ValGVar(GVarName(name));
    if (!v) {
        GasmanLeave();
        snprintf(ErrorMsg, sizeof ErrorMsg, "Variable: '%s' must have a value", name);
        return -1;
    }
    Int slot = 0;
    for (Int i = 1; i <= LEN_PLIST(HostRoots); i++)
        if (!ELM_PLIST(HostRoots, i)) {
            slot = i;
            break;
        }
    if (!slot)
        slot = LEN_PLIST(HostRoots) + 1;
    AssPlist(HostRoots, slot, v);
    GasmanLeave();
    return slot;
}

int MG(root_to_global)(int64_t root, const char *name)
{
    if (!Guarded())
        return Fail_("minigap: root_to_global from a thread that is not attached");
    GasmanEnter();
    if (root < 1 || root > LEN_PLIST(HostRoots) || !ELM_PLIST(HostRoots, root)) {
        GasmanLeave();
        snprintf(ErrorMsg, sizeof ErrorMsg, "minigap: no host root %ld", (long)root);
        return -1;
    }
    jmp_buf jb;
    ErrorJmp = &jb;
    if (setjmp(jb)) {
        GasmanLeave();
        return -1;
    }
    AssGVar(GVarName(name), ELM_PLIST(HostRoots, root));
    GasmanLeave();
    return 0;
}

int MG(root_release)(int64_t root)
{
    if (!Guarded())
        return Fail_("minigap: root_release from a thread that is not attached");
    GasmanEnter();
    if (root < 1 || root > LEN_PLIST(HostRoots) || !ELM_PLIST(HostRoots, root)) {
        GasmanLeave();
        snprintf(ErrorMsg, sizeof ErrorMsg, "minigap: no host root %ld", (long)root);
        return -1;
    }
    SET_ELM_PLIST(HostRoots, root, 0);
    GasmanLeave();
    return 0;
}

int64_t MG(root_count)(void)
{
    if (!Guarded())
        return Fail_("minigap: root_count from a thread that is not attached");
    GasmanEnter();
    int64_t n = 0;
    for (Int i = 1; i <= LEN_PLIST(HostRoots); i++)
        n += ELM_PLIST(HostRoots, i) != 0;
    GasmanLeave();
    return n;
}

/* ---- scenario: young counting (an old bag, a young bag reachable from it and from a
   root, a partial collection, the root dropped) ---- */
#define SCENARIO_CHILDREN 64

static __attribute__((noinline)) void MakeYoungChild(void)
{
    Obj y = NEW_PLIST(SCENARIO_CHILDREN);
    for (Int i = 1; i <= SCENARIO_CHILDREN; i++) {
        Obj t = NewTestBagWithValue(i);
        AssPlist(y, i, t);
    }
    ScenarioYoung = y;                 /* the root */
    AssPlist(ScenarioOld, 1, y);      /* the old bag's reference, with CHANGED_BAG */
}

static __attribute__((noinline)) void ClobberStack(void)
{
    /* overwrite stale words the previous collection's frames left below us, so that a
       stale copy of the young bag cannot keep it alive conservatively */
    volatile UInt scratch[16384];
    for (int i = 0; i < 16384; i++)
        scratch[i] = (UInt)i * 8 + 3;
    (void)scratch[0];
}

static __attribute__((noinline)) int YoungCountingBody(void)
{
    ScenarioOld = NEW_PLIST(1);
    CollectBags(0);
    CollectBags(0);
    if (GasmanIsYoung(ScenarioOld) == 1) {
        snprintf(ErrorMsg, sizeof ErrorMsg, "scenario: the old bag was not promoted");
        return -1;
    }
    MakeYoungChild();
    ClobberStack();
    uint64_t freed_before = TestBagsFreed;
    CollectBags(0);                    /* root first, then the remembered old bag */
    ScenarioYoung = 0;                 /* drop the root */
    ClobberStack();
    CollectBags(0);
    CollectBags(0);
    CollectBags(0);
    Obj y = ELM_PLIST(ScenarioOld, 1);
    int lost = TestBagsFreed != freed_before;
    if (!lost) {
        for (Int i = 1; i <= SCENARIO_CHILDREN; i++) {
            Obj t = ELM_PLIST(y, i);
            if (TNUM_BAG(t) != T_TEST || ADDR_OBJ(t)[0] != INTOBJ_INT(i))
                lost = 1;
        }
    }
    ScenarioOld = 0;
    return lost;
}

int MG(scenario_young_counting)(void)
{
    if (!Guarded())
        return Fail_("minigap: scenario from a thread that is not attached");
    GasmanEnter();
    int r = YoungCountingBody();
    GasmanLeave();
    return r;
}

/* ---- scenario: a young bag held only in this thread's stack frame while the thread
   waits for the GIL (in_gil_wait) or sleeps in a GC-safe region, and another thread
   runs partial collections ---- */
static __attribute__((noinline)) int StoppedStackBody(uint64_t hold_us, int in_gil_wait)
{
    volatile Obj held[4];
    Obj l = NEW_PLIST(SCENARIO_CHILDREN);
    for (Int i = 1; i <= SCENARIO_CHILDREN; i++) {
        Obj t = NewTestBagWithValue(i);
        AssPlist(l, i, t);
    }
    held[0] = l;
    l = 0;
    uint64_t freed_before = TestBagsFreed;
    if (in_gil_wait) {
        /* give the GIL away and queue for it again at once: the other thread holds it
           (and collects) for at least a switch interval */
        GasmanLeave();
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
        GasmanEnter();
        (void)hold_us;
    } else {
        GasmanBlockingSleep(hold_us);
    }
    Obj back = held[0];
    int lost = TestBagsFreed != freed_before;
    if (!lost && TNUM_BAG(back) == T_PLIST) {
        for (Int i = 1; i <= SCENARIO_CHILDREN; i++) {
            Obj t = ELM_PLIST(back, i);
            if (!t || TNUM_BAG(t) != T_TEST || ADDR_OBJ(t)[0] != INTOBJ_INT(i))
                lost = 1;
        }
    } else
        lost = 1;
    held[0] = 0;
    return lost;
}

int MG(scenario_stopped_stack_hold)(uint64_t hold_us, int in_gil_wait)
{
    if (!Guarded())
        return Fail_("minigap: scenario from a thread that is not attached");
    GasmanEnter();
    int r = StoppedStackBody(hold_us, in_gil_wait);
    GasmanLeave();
    return r;
}
