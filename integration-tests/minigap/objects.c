/*
 * objects.c: the kernel's other types (permutations, plain lists, ranges, strings,
 * records, booleans, characters, groups, host objects), their mark and free functions,
 * generic list access, comparison and arithmetic dispatch.
 */

static Int TNUM_OBJ(Obj o)
{
    if (IS_INTOBJ(o))
        return T_INT;
    return TNUM_BAG(o);
}

static const char *TypeName(Obj o)
{
    static const char *names[NUM_TNUMS] = {
        "integer", "integer", "integer", "integer", "boolean", "character", "permutation",
        "list", "range", "string", "record", "function", "lvars", "code", "group",
        "host object", "test bag", "rational"};
    if (!o)
        return "<unbound>";
    return names[TNUM_OBJ(o)];
}

/* ---- mark functions ---- */
static void MarkAllSubBags(Bag b)
{
    Obj *p = ADDR_OBJ(b);
    UInt n = SIZE_BAG(b) / sizeof(Obj);
    for (UInt i = 0; i < n; i++)
        MarkBag(p[i]);
}
static void MarkPlist(Bag b) { MarkPlistElements(b); }
static void MarkRec(Bag b)
{
    Obj *p = ADDR_OBJ(b);
    UInt n = (UInt)p[0];
    for (UInt i = 0; i < n; i++)
        MarkBag(p[2 + 2 * i]);
}
static void MarkFirstThree(Bag b)
{
    Obj *p = ADDR_OBJ(b);
    MarkBag(p[0]);
    MarkBag(p[1]);
    MarkBag(p[2]);
}
static void MarkSecond(Bag b) { MarkBag(ADDR_OBJ(b)[1]); }
static void MarkFirstTwo(Bag b)
{
    MarkBag(ADDR_OBJ(b)[0]);
    MarkBag(ADDR_OBJ(b)[1]);
}
static void MarkFirst(Bag b) { MarkBag(ADDR_OBJ(b)[0]); }

/* ---- plain lists: data[0] = length (raw), data[1..cap] = elements ---- */
static Obj NEW_PLIST(Int cap)
{
    Obj l = NewBag(T_PLIST, (UInt)(cap + 1) * sizeof(Obj));
    return l;
}
static Int CAP_PLIST(Obj l) { return (Int)(SIZE_BAG(l) / sizeof(Obj)) - 1; }
static Int LEN_PLIST(Obj l) { return (Int)(UInt)ADDR_OBJ(l)[0]; }
static Obj ELM_PLIST(Obj l, Int i) { return ADDR_OBJ(l)[i]; }
static void SET_LEN_PLIST(Obj l, Int n) { ADDR_OBJ(l)[0] = (Obj)(UInt)n; }
static void SET_ELM_PLIST(Obj l, Int i, Obj v)
{
    ADDR_OBJ(l)[i] = v;
    if (IS_BAG_REF(v))
        CHANGED_BAG_ELM(l, (UInt)i);
}
static void GrowPlist(Obj l, Int need)
{
    Int cap = CAP_PLIST(l);
    if (need <= cap)
        return;
    Int good = cap * 5 / 4 + 4;
    ResizeBag(l, (UInt)((need > good ? need : good) + 1) * sizeof(Obj));
}
static void AssPlist(Obj l, Int i, Obj v)
{
    GrowPlist(l, i);
    SET_ELM_PLIST(l, i, v);
    if (i > LEN_PLIST(l))
        SET_LEN_PLIST(l, i);
}
static void PushPlist(Obj l, Obj v) { AssPlist(l, LEN_PLIST(l) + 1, v); }

/* ---- ranges: Int len, low, inc ---- */
static Obj NewRange(Int len, Int low, Int inc)
{
    Obj r = NewBag(T_RANGE, 3 * sizeof(Int));
    Int *p = (Int *)ADDR_OBJ(r);
    p[0] = len;
    p[1] = low;
    p[2] = inc;
    return r;
}
#define RANGE_LEN(r) (((Int *)ADDR_OBJ(r))[0])
#define RANGE_LOW(r) (((Int *)ADDR_OBJ(r))[1])
#define RANGE_INC(r) (((Int *)ADDR_OBJ(r))[2])

/* ---- strings: UInt len, chars (NUL-terminated) ---- */
static Obj MakeString(const char *s, size_t n)
{
    Obj str = NewBag(T_STRING, sizeof(UInt) + n + 1);
    *(UInt *)ADDR_OBJ(str) = n;
    memcpy((char *)ADDR_OBJ(str) + sizeof(UInt), s, n);
    return str;
}
#define STR_LEN(s) (*(UInt *)ADDR_OBJ(s))
#define STR_CHARS(s) ((char *)ADDR_OBJ(s) + sizeof(UInt))

static Int IS_LIST(Obj o)
{
    if (!IS_BAG_REF(o))
        return 0;
    Int t = TNUM_BAG(o);
    return t == T_PLIST || t == T_RANGE || t == T_STRING;
}

static Int LEN_LIST(Obj o)
{
    switch (TNUM_OBJ(o)) {
    case T_PLIST: return LEN_PLIST(o);
    case T_RANGE: return RANGE_LEN(o);
    case T_STRING: return (Int)STR_LEN(o);
    }
    ErrorQuit("Length: <list> must be a list (not a %s)", TypeName(o));
}

static Obj ELM0_LIST(Obj o, Int i)
{
    if (i < 1 || i > LEN_LIST(o))
        return 0;
    switch (TNUM_OBJ(o)) {
    case T_PLIST: return ELM_PLIST(o, i);
    case T_RANGE: return ObjInt(RANGE_LOW(o) + (i - 1) * RANGE_INC(o));
    case T_STRING: return CharBags[(unsigned char)STR_CHARS(o)[i - 1]];
    }
    return 0;
}

static Obj ELM_LIST(Obj o, Int i)
{
    if (!IS_LIST(o))
        ErrorQuit("List Element: <list> must be a list (not a %s)", TypeName(o));
    Obj v = ELM0_LIST(o, i);
    if (!v)
        ErrorQuit("List Element: <list>[%ld] must have an assigned value", (long)i);
    return v;
}

/* Converts a range or string to a plain list in place (for assignments). */
static void PlainList(Obj o)
{
    Int t = TNUM_OBJ(o), n = LEN_LIST(o);
    if (t == T_PLIST)
        return;
    Obj tmp = NEW_PLIST(n);
    for (Int i = 1; i <= n; i++)
        AssPlist(tmp, i, ELM0_LIST(o, i));
    ResizeBag(o, SIZE_BAG(tmp));
    memcpy(ADDR_OBJ(o), ADDR_OBJ(tmp), SIZE_BAG(tmp));
    RetypeBag(o, T_PLIST);
    CHANGED_BAG(o);
}

static void AssList(Obj o, Int i, Obj v)
{
    if (!IS_LIST(o))
        ErrorQuit("List Assignment: <list> must be a list (not a %s)", TypeName(o));
    if (i < 1)
        ErrorQuit("List Assignment: <position> must be a positive integer (not %ld)", (long)i);
    PlainList(o);
    AssPlist(o, i, v);
}

/* ---- booleans and characters ---- */
static Obj NewBool(Int v)
{
    Obj b = NewBag(T_BOOL, sizeof(Int));
    *(Int *)ADDR_OBJ(b) = v;
    return b;
}

/* ---- permutations: uint32 images, 0-based ---- */
static Obj NewPerm(UInt deg)
{
    Obj p = NewBag(T_PERM, deg * sizeof(uint32_t));
    uint32_t *a = (uint32_t *)ADDR_OBJ(p);
    for (UInt i = 0; i < deg; i++)
        a[i] = (uint32_t)i;
    return p;
}
static UInt DEG_PERM(Obj p) { return SIZE_BAG(p) / sizeof(uint32_t); }
static uint32_t *ADDR_PERM(Obj p) { return (uint32_t *)ADDR_OBJ(p); }
static UInt ImagePerm(Obj p, UInt i)
{
    return i <= DEG_PERM(p) ? ADDR_PERM(p)[i - 1] + 1 : i;
}

/* i^(a*b) = (i^a)^b */
static Obj ProdPerm(Obj a, Obj b)
{
    UInt da = DEG_PERM(a), db = DEG_PERM(b), d = da > db ? da : db;
    Obj r = NewPerm(d);
    uint32_t *pr = ADDR_PERM(r), *pa = ADDR_PERM(a), *pb = ADDR_PERM(b);
    for (UInt i = 0; i < d; i++) {
        UInt j = i < da ? pa[i] : i;
        pr[i] = (uint32_t)(j < db ? pb[j] : j);
    }
    return r;
}

static Obj InvPerm(Obj a)
{
    UInt d = DEG_PERM(a);
    Obj r = NewPerm(d);
    uint32_t *pr = ADDR_PERM(r), *pa = ADDR_PERM(a);
    for (UInt i = 0; i < d; i++)
        pr[pa[i]] = (uint32_t)i;
    return r;
}

static int IsIdentityPerm(Obj p)
{
    UInt d = DEG_PERM(p);
    uint32_t *a = ADDR_PERM(p);
    for (UInt i = 0; i < d; i++)
        if (a[i] != i)
            return 0;
    return 1;
}

static UInt LargestMovedPoint(Obj p)
{
    UInt d = DEG_PERM(p);
    uint32_t *a = ADDR_PERM(p);
    while (d > 0 && a[d - 1] == d - 1)
        d--;
    return d;
}

static int CmpPerm(Obj a, Obj b)
{
    UInt da = DEG_PERM(a), db = DEG_PERM(b), d = da > db ? da : db;
    uint32_t *pa = ADDR_PERM(a), *pb = ADDR_PERM(b);
    for (UInt i = 0; i < d; i++) {
        UInt x = i < da ? pa[i] : i, y = i < db ? pb[i] : i;
        if (x != y)
            return x < y ? -1 : 1;
    }
    return 0;
}

static Obj OrderPerm(Obj p)
{
    UInt d = DEG_PERM(p);
    char *seen = calloc(d + 1, 1);
    Obj ord = INTOBJ_INT(1);
    for (UInt i = 0; i < d; i++) {
        if (seen[i])
            continue;
        UInt len = 0;
        for (UInt j = i; !seen[j]; j = ADDR_PERM(p)[j]) {
            seen[j] = 1;
            len++;
        }
        if (len > 1)
            ord = LcmInt(ord, INTOBJ_INT((Int)len));
    }
    free(seen);
    return ord;
}

static Obj PowPermInt(Obj p, Obj e)
{
    if (!IS_INTOBJ(e))
        ErrorQuit("PowPerm: exponent too large");
    Int n = INT_INTOBJ(e);
    if (n < 0) {
        p = InvPerm(p);
        n = -n;
    }
    Obj r = NewPerm(0);
    Obj base = p;
    while (n > 0) {
        if (n & 1)
            r = ProdPerm(r, base);
        n >>= 1;
        if (n)
            base = ProdPerm(base, base);
    }
    return r;
}

/* ---- records: data[0] = length (raw), then (rnam raw, value) pairs ---- */
static char **RNamNames;
static Int RNamCount, RNamCap;

static Int RNamName(const char *name)
{
    for (Int i = 0; i < RNamCount; i++)
        if (strcmp(RNamNames[i], name) == 0)
            return i + 1;
    if (RNamCount == RNamCap) {
        RNamCap = RNamCap ? 2 * RNamCap : 64;
        RNamNames = realloc(RNamNames, RNamCap * sizeof(char *));
    }
    RNamNames[RNamCount++] = strdup(name);
    return RNamCount;
}
static const char *NameRNam(Int rnam) { return RNamNames[rnam - 1]; }

static Obj NewRec(Int cap)
{
    return NewBag(T_REC, (UInt)(1 + 2 * cap) * sizeof(Obj));
}
static Obj ElmRec(Obj rec, Int rnam)
{
    Obj *p = ADDR_OBJ(rec);
    UInt n = (UInt)p[0];
    for (UInt i = 0; i < n; i++)
        if ((Int)(UInt)p[1 + 2 * i] == rnam)
            return p[2 + 2 * i];
    return 0;
}
static void AssRec(Obj rec, Int rnam, Obj val)
{
    Obj *p = ADDR_OBJ(rec);
    UInt n = (UInt)p[0];
    for (UInt i = 0; i < n; i++)
        if ((Int)(UInt)p[1 + 2 * i] == rnam) {
            p[2 + 2 * i] = val;
            CHANGED_BAG(rec);
            return;
        }
    UInt cap = (SIZE_BAG(rec) / sizeof(Obj) - 1) / 2;
    if (n == cap)
        ResizeBag(rec, (1 + 2 * (cap * 2 + 2)) * sizeof(Obj));
    p = ADDR_OBJ(rec);
    p[0] = (Obj)(n + 1);
    p[1 + 2 * n] = (Obj)(UInt)rnam;
    p[2 + 2 * n] = val;
    CHANGED_BAG(rec);
}

/* ---- free functions ---- */
static mg_host_release_fn HostRelease;
static void FreeHost(Bag b)
{
    void *h = *(void **)ADDR_OBJ(b);
    if (h && HostRelease) {
        HostRelease(h);
        HostReleases++;
    }
}
static volatile uint64_t TestBagsFreed;
static void FreeTestBag(Bag b)
{
    (void)b;
    TestBagsFreed++;
}


/* ---- rationals: data[0] = numerator, data[1] = denominator (> 1, coprime) ---- */
static int IsRatObj(Obj o) { return IsIntObj(o) || TNUM_OBJ(o) == T_RAT; }
static Obj NumRat(Obj o) { return IsIntObj(o) ? o : ADDR_OBJ(o)[0]; }
static Obj DenRat(Obj o) { return IsIntObj(o) ? INTOBJ_INT(1) : ADDR_OBJ(o)[1]; }

static Obj MakeRat(Obj num, Obj den)
{
    if (SignInt(den) == 0)
        ErrorQuit("Rational operations: <divisor> must not be zero");
    if (SignInt(den) < 0) {
        num = AInvInt(num);
        den = AInvInt(den);
    }
    Obj g = GcdInt(num, den);
    if (!(IS_INTOBJ(g) && INT_INTOBJ(g) == 1)) {
        num = QuoIntObj(num, g);
        den = QuoIntObj(den, g);
    }
    if (IS_INTOBJ(den) && INT_INTOBJ(den) == 1)
        return num;
    Obj r = NewBag(T_RAT, 2 * sizeof(Obj));
    ADDR_OBJ(r)[0] = num;
    ADDR_OBJ(r)[1] = den;
    CHANGED_BAG(r);
    return r;
}

static Obj SumRat(Obj a, Obj b)
{
    Obj n = SumInt(ProdInt(NumRat(a), DenRat(b)), ProdInt(NumRat(b), DenRat(a)));
    return MakeRat(n, ProdInt(DenRat(a), DenRat(b)));
}

static Obj ProdRat(Obj a, Obj b)
{
    return MakeRat(ProdInt(NumRat(a), NumRat(b)), ProdInt(DenRat(a), DenRat(b)));
}

static Obj QuoRat(Obj a, Obj b)
{
    if (SignInt(NumRat(b)) == 0)
        ErrorQuit("Rational operations: <divisor> must not be zero");
    return MakeRat(ProdInt(NumRat(a), DenRat(b)), ProdInt(DenRat(a), NumRat(b)));
}

static int CmpRat(Obj a, Obj b)
{
    if (IsIntObj(a) && IsIntObj(b))
        return CmpInt(a, b);
    return CmpInt(ProdInt(NumRat(a), DenRat(b)), ProdInt(NumRat(b), DenRat(a)));
}

static Obj PowRat(Obj a, Obj e)
{
    if (!IS_INTOBJ(e))
        ErrorQuit("Rational operations: exponent too large");
    Int n = INT_INTOBJ(e);
    if (n >= 0)
        return MakeRat(PowInt(NumRat(a), e), PowInt(DenRat(a), e));
    if (SignInt(NumRat(a)) == 0)
        ErrorQuit("Rational operations: <divisor> must not be zero");
    Obj m = INTOBJ_INT(-n);
    return MakeRat(PowInt(DenRat(a), m), PowInt(NumRat(a), m));
}

/* ---- comparison ---- */
static int TypeRank(Obj o)
{
    switch (TNUM_OBJ(o)) {
    case T_INT: case T_INTPOS: case T_INTNEG: case T_INTEXT: case T_RAT: return 0;
    case T_PERM: return 2;
    case T_BOOL: return 3;
    case T_CHAR: return 4;
    case T_PLIST: case T_RANGE: case T_STRING: return 5;
    case T_REC: return 6;
    default: return 7;
    }
}

static int CmpObj(Obj a, Obj b);

static int CmpList(Obj a, Obj b)
{
    Int la = LEN_LIST(a), lb = LEN_LIST(b);
    for (Int i = 1; i <= la && i <= lb; i++) {
        Obj x = ELM0_LIST(a, i), y = ELM0_LIST(b, i);
        if (!x || !y) {
            if (x != y)
                return x ? -1 : 1;
            continue;
        }
        int c = CmpObj(x, y);
        if (c)
            return c;
    }
    return (la > lb) - (la < lb);
}

static int CmpObj(Obj a, Obj b)
{
    if (a == b)
        return 0;
    int ra = TypeRank(a), rb = TypeRank(b);
    if (ra != rb)
        return ra < rb ? -1 : 1;
    switch (ra) {
    case 0: return CmpRat(a, b);
    case 2: return CmpPerm(a, b);
    case 3: {
        Int x = *(Int *)ADDR_OBJ(a), y = *(Int *)ADDR_OBJ(b);
        return (x > y) - (x < y);
    }
    case 4: {
        Int x = *(Int *)ADDR_OBJ(a), y = *(Int *)ADDR_OBJ(b);
        return (x > y) - (x < y);
    }
    case 5: return CmpList(a, b);
    case 6: {
        Obj *p = ADDR_OBJ(a);
        UInt n = (UInt)p[0];
        if (n != (UInt)ADDR_OBJ(b)[0])
            return n < (UInt)ADDR_OBJ(b)[0] ? -1 : 1;
        for (UInt i = 0; i < n; i++) {
            Obj y = ElmRec(b, (Int)(UInt)ADDR_OBJ(a)[1 + 2 * i]);
            if (!y)
                return 1;
            int c = CmpObj(ADDR_OBJ(a)[2 + 2 * i], y);
            if (c)
                return c;
        }
        return 0;
    }
    default:
        return (UInt)a < (UInt)b ? -1 : 1;
    }
}

static int EqObj(Obj a, Obj b)
{
    if (a == b)
        return 1;
    if (TypeRank(a) != TypeRank(b))
        return 0;
    if (TypeRank(a) == 7)
        return 0;
    return CmpObj(a, b) == 0;
}

static int LtObj(Obj a, Obj b)
{
    if (TypeRank(a) == 7 || TypeRank(b) == 7)
        ErrorQuit("no 1st choice method found for `<' on 2 arguments (%s, %s)", TypeName(a), TypeName(b));
    return CmpObj(a, b) < 0;
}

/* ---- arithmetic dispatch ---- */
static void NoMethod(const char *op, Obj a, Obj b)
{
    ErrorQuit("no 1st choice method found for `%s' on 2 arguments (%s and %s)", op, TypeName(a), TypeName(b));
}

static Obj SumObj(Obj a, Obj b)
{
    if (IsIntObj(a) && IsIntObj(b))
        return SumInt(a, b);
    if (IsRatObj(a) && IsRatObj(b))
        return SumRat(a, b);
    if (IS_LIST(a) && IS_LIST(b)) {
        Int n = LEN_LIST(a) > LEN_LIST(b) ? LEN_LIST(a) : LEN_LIST(b);
        Obj r = NEW_PLIST(n);
        for (Int i = 1; i <= n; i++) {
            Obj x = ELM0_LIST(a, i), y = ELM0_LIST(b, i);
            AssPlist(r, i, x && y ? SumObj(x, y) : x ? x : y);
        }
        return r;
    }
    NoMethod("+", a, b);
    return 0;
}

static Obj AInvObj(Obj a)
{
    if (IsIntObj(a))
        return AInvInt(a);
    if (TNUM_OBJ(a) == T_RAT)
        return MakeRat(AInvInt(NumRat(a)), DenRat(a));
    ErrorQuit("no 1st choice method found for `AdditiveInverse' on 1 argument (%s)", TypeName(a));
}

static Obj DiffObj(Obj a, Obj b)
{
    if (IsIntObj(a) && IsIntObj(b))
        return DiffInt(a, b);
    if (IsRatObj(a) && IsRatObj(b))
        return SumRat(a, AInvObj(b));
    return SumObj(a, AInvObj(b));
}

static Obj ProdObj(Obj a, Obj b)
{
    if (IsIntObj(a) && IsIntObj(b))
        return ProdInt(a, b);
    if (IsRatObj(a) && IsRatObj(b))
        return ProdRat(a, b);
    if (TNUM_OBJ(a) == T_PERM && TNUM_OBJ(b) == T_PERM)
        return ProdPerm(a, b);
    if (IsIntObj(a) && IS_LIST(b)) {
        Obj t = a; a = b; b = t;
    }
    if (IS_LIST(a) && IsIntObj(b)) {
        Int n = LEN_LIST(a);
        Obj r = NEW_PLIST(n);
        for (Int i = 1; i <= n; i++) {
            Obj x = ELM0_LIST(a, i);
            if (x)
                AssPlist(r, i, ProdObj(x, b));
        }
        return r;
    }
    NoMethod("*", a, b);
    return 0;
}

static Obj QuoObj(Obj a, Obj b)
{
    if (IsRatObj(a) && IsRatObj(b))
        return QuoRat(a, b);
    if (TNUM_OBJ(a) == T_PERM && TNUM_OBJ(b) == T_PERM)
        return ProdPerm(a, InvPerm(b));
    NoMethod("/", a, b);
    return 0;
}

static Obj ModObj(Obj a, Obj b)
{
    if (IsIntObj(a) && IsIntObj(b))
        return ModInt(a, b);
    NoMethod("mod", a, b);
    return 0;
}

static Obj PowObj(Obj a, Obj b)
{
    if (IsIntObj(a) && IsIntObj(b) && SignInt(b) >= 0)
        return PowInt(a, b);
    if (IsRatObj(a) && IsIntObj(b))
        return PowRat(a, b);
    if (TNUM_OBJ(a) == T_PERM && IsIntObj(b))
        return PowPermInt(a, b);
    if (IsIntObj(a) && TNUM_OBJ(b) == T_PERM) {
        if (!IS_INTOBJ(a) || INT_INTOBJ(a) <= 0)
            ErrorQuit("Perm. Operations: <point> must be a positive integer");
        return ObjInt((Int)ImagePerm(b, (UInt)INT_INTOBJ(a)));
    }
    if (TNUM_OBJ(a) == T_PERM && TNUM_OBJ(b) == T_PERM)
        return ProdPerm(ProdPerm(InvPerm(b), a), b);
    NoMethod("^", a, b);
    return 0;
}
