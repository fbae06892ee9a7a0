/*
 * kernel.h: minigap's internal declarations, shared by every file of one kernel (the
 * files are compiled as one translation unit per backend, so everything is static).
 *
 * Memory model (GAP's): a bag is a one-word master pointer pointing just past the
 * header of the bag's body; code holds the master pointer (the bag's identity), never
 * the body across an allocation, since ResizeBag moves the body.
 *
 *     Bag (master pointer)          body
 *     +------------------+          +---------------------------+-------------------+
 *     | data pointer  ---+--------> | BagHeader: size, TNUM,    | data (size bytes) |
 *     +------------------+          | flags, epoch              |                   |
 *                                   +---------------------------+-------------------+
 */
#ifndef MINIGAP_KERNEL_H
#define MINIGAP_KERNEL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <setjmp.h>
#include <stdarg.h>
#include "minigap.h"

typedef uintptr_t UInt;
typedef intptr_t Int;
typedef struct OpaqueBag *Bag;
typedef Bag Obj;

typedef struct BagHeader {
    uint64_t size;   /* bytes of data */
    uint8_t tnum;    /* type number */
    uint8_t flags;   /* BF_* */
    uint16_t unused;
    union {
        uint32_t epoch;       /* collection in which the bag was last counted as marked
                                 (debug_newly_marked only) */
        uint32_t old_prefix;  /* plain lists on gc-core: elements 1..old_prefix were old
                                 when last marked and have not been written since */
    };
} BagHeader;

enum { BF_SWEEP_SCHEDULED = 1, BF_SWEPT = 2 };

#define PTR_BAG(bag) (*(Obj **)(bag))
#define BAG_HEADER(bag) ((BagHeader *)PTR_BAG(bag) - 1)
#define TNUM_BAG(bag) (BAG_HEADER(bag)->tnum)
#define SIZE_BAG(bag) (BAG_HEADER(bag)->size)
#define ADDR_OBJ(bag) PTR_BAG(bag)

/* Immediate small integers: (v << 2) | 1, as GAP's INTOBJ. */
#define IS_INTOBJ(o) (((UInt)(o)) & 1)
#define IS_BAG_REF(o) ((o) != 0 && (((UInt)(o)) & 3) == 0)
#define INTOBJ_INT(i) ((Obj)((((UInt)(Int)(i)) << 2) | 1))
#define INT_INTOBJ(o) (((Int)(UInt)(o)) >> 2)
#define INTOBJ_MAX ((Int)((((UInt)1) << 60) - 1))
#define INTOBJ_MIN (-(Int)(((UInt)1) << 60))

/* Type numbers. */
enum {
    T_INT = 0,      /* immediate (never a bag) */
    T_INTPOS,       /* big integer, limbs in the body */
    T_INTNEG,
    T_INTEXT,       /* big integer, limbs in a malloc'd buffer freed by the free function */
    T_BOOL,
    T_CHAR,
    T_PERM,
    T_PLIST,
    T_RANGE,
    T_STRING,
    T_REC,
    T_FUNCTION,
    T_LVARS,
    T_BODY,         /* parsed code: owns a malloc'd arena (free function) */
    T_GROUP,
    T_HOST,         /* a host (Rust) object handle (free function releases it) */
    T_TEST,         /* a small bag with a free function, for the scenarios */
    T_RAT,          /* a rational: numerator and denominator (> 1, coprime) */
    NUM_TNUMS
};

typedef void (*MarkFuncBags)(Bag bag);
typedef void (*FreeFuncBags)(Bag bag);

/* ---- gasman: the memory layer (gasman_ours.c / gasman_boehm.c) ---- */
static Bag NewBag(UInt tnum, UInt size);
static void ResizeBag(Bag bag, UInt new_size);
static int RetypeBag(Bag bag, UInt new_tnum);  /* -1: refused (message in *why) */
static void CHANGED_BAG(Bag bag);
static void CHANGED_BAG_ELM(Bag list, UInt i);  /* a plain list's element i was written */
static void MarkPlistElements(Bag list);        /* a plain list's mark function */
static void InitMarkFuncBags(UInt tnum, MarkFuncBags f);
static void InitFreeFuncBag(UInt tnum, FreeFuncBags f);
static void InitGlobalBag(Bag *addr, const char *cookie);
static void MarkBag(Bag bag);
static void CollectBags(int full);
static void GasmanInit(const mg_config *cfg);
static int GasmanThreadAttach(void);
static void GasmanThreadDetach(void);
static void GasmanEnter(void);   /* take the GIL, become a running mutator */
static void GasmanLeave(void);   /* stop being a mutator (GC-safe), release the GIL */
static void GasmanPoll(void);    /* let another thread have the GIL if it asks */
static void GasmanStats(mg_stats *st);
static void GasmanBlockingSleep(uint64_t us);  /* sleep outside the GIL, GC-safe */
static int GasmanIsYoung(Bag bag);
static void FreeDeferredLimbs(void);  /* integer.c: free dead integers' buffers */

static MarkFuncBags TabMarkFuncBags[NUM_TNUMS];
static FreeFuncBags TabFreeFuncBags[NUM_TNUMS];
static Bag *GlobalAddr[256];
static const char *GlobalCookie[256];
static int GlobalCount;
static mg_config Config;

/* Counters (updated under the GIL or with the world stopped). */
static volatile uint64_t BagsAllocated, BagsFreed, FreeFuncsRun, DoubleSweeps;
static volatile uint64_t ExtMallocs, ExtFrees, HostReleases;
static volatile uint64_t ExtBytesSinceGC;

/* ---- errors ---- */
static __thread jmp_buf *ErrorJmp;
static __thread char ErrorMsg[1024];
static __thread int CurrLine;
static __thread const char *CurrFile;
static void ErrorQuit(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

/* ---- objects ---- */
static Obj True, False, Fail;
static Obj CharBags[256];
static Obj ThreadContexts;   /* plist: one globals list per attached thread */
static Obj HostRoots;        /* plist: bags held by the host */
static Obj EmptyString;

static Int TNUM_OBJ(Obj o);
static const char *TypeName(Obj o);
static Obj NEW_PLIST(Int cap);
static Int LEN_PLIST(Obj l);
static Obj ELM_PLIST(Obj l, Int i);
static void SET_ELM_PLIST(Obj l, Int i, Obj v);
static void SET_LEN_PLIST(Obj l, Int n);
static void PushPlist(Obj l, Obj v);
static void AssPlist(Obj l, Int i, Obj v);
static Int IS_LIST(Obj o);
static Int LEN_LIST(Obj o);
static Obj ELM0_LIST(Obj o, Int i);  /* 0 if unbound or out of range */
static Obj ELM_LIST(Obj o, Int i);   /* error if unbound */
static Obj MakeString(const char *s, size_t n);
static Obj ObjInt(Int i);
static Obj SumObj(Obj a, Obj b);
static Obj DiffObj(Obj a, Obj b);
static Obj ProdObj(Obj a, Obj b);
static Obj QuoObj(Obj a, Obj b);
static Obj ModObj(Obj a, Obj b);
static Obj PowObj(Obj a, Obj b);
static Obj AInvObj(Obj a);
static int EqObj(Obj a, Obj b);
static int LtObj(Obj a, Obj b);
static int IsIntObj(Obj o);
static Obj GcdInt(Obj a, Obj b);
static Obj FactorialInt(Int n);
static Obj LcmInt(Obj a, Obj b);
static int SignInt(Obj o);

/* permutations */
static Obj NewPerm(UInt deg);
static UInt DEG_PERM(Obj p);
static uint32_t *ADDR_PERM(Obj p);
static Obj ProdPerm(Obj a, Obj b);
static Obj InvPerm(Obj a);
static int IsIdentityPerm(Obj p);
static Obj OrderPerm(Obj p);
static UInt ImagePerm(Obj p, UInt i);  /* 1-based */

/* records */
static Int RNamName(const char *name);
static const char *NameRNam(Int rnam);
static Obj NewRec(Int cap);
static Obj ElmRec(Obj rec, Int rnam);  /* 0 if unbound */
static void AssRec(Obj rec, Int rnam, Obj val);

/* printing (GAP's Pr with line-break hints) */
static void Pr(const char *fmt, ...);
static void PrintObj(Obj o);
static void PrintTop(Obj o);   /* Print's rule: strings and chars raw */
static void PrFlushLines(int all);

/* groups */
static Obj SizeGroup(Obj group);

/* interpreter */
static Obj CallFunc(Obj f, Obj *args, int nargs);
static Int GVarName(const char *name);
static Obj ThreadGlobals(void);

#endif
