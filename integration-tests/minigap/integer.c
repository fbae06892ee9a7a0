/*
 * integer.c: small integers (immediate), big integers (limbs in the body: T_INTPOS,
 * T_INTNEG; above EXT_LIMBS limbs in a malloc'd buffer owned by a T_INTEXT bag and
 * freed by its free function, as GMP-backed integers are), arithmetic, gcd, factorial.
 *
 * Every operation computes into malloc'd scratch buffers and allocates the result bag
 * last, so no collection runs while a view into an operand's body is in use.
 */
#define EXT_LIMBS 64
/* A collection is requested when the malloc'd limbs allocated since the last one exceed
   the limbs live (as the heap's own growth policy), at least EXT_COLLECT_MIN: the heap
   does not see them, and dead ones are only freed after a collection. */
#define EXT_COLLECT_MIN ((uint64_t)4 << 20)
static volatile uint64_t ExtLiveBytes;

typedef struct IntV {
    int neg;
    size_t n;
    const uint64_t *d;
    uint64_t buf;
} IntV;

typedef struct IntExt {
    Int neg;
    UInt n;
    uint64_t *d;
} IntExt;

static int IsIntObj(Obj o)
{
    if (IS_INTOBJ(o))
        return 1;
    if (!IS_BAG_REF(o))
        return 0;
    Int t = TNUM_BAG(o);
    return t == T_INTPOS || t == T_INTNEG || t == T_INTEXT;
}

static void IntView(Obj o, IntV *v)
{
    if (IS_INTOBJ(o)) {
        Int x = INT_INTOBJ(o);
        v->neg = x < 0;
        v->buf = x < 0 ? (uint64_t)(-(x + 1)) + 1 : (uint64_t)x;
        v->n = v->buf != 0;
        v->d = &v->buf;
        return;
    }
    switch (TNUM_BAG(o)) {
    case T_INTPOS:
    case T_INTNEG:
        v->neg = TNUM_BAG(o) == T_INTNEG;
        v->n = SIZE_BAG(o) / 8;
        v->d = (const uint64_t *)ADDR_OBJ(o);
        return;
    case T_INTEXT: {
        IntExt *e = (IntExt *)ADDR_OBJ(o);
        v->neg = (int)e->neg;
        v->n = e->n;
        v->d = e->d;
        return;
    }
    }
    ErrorQuit("internal: not an integer");
}

/* Dead buffers waiting for free(), linked through their first limb. The free function
   runs inside the collector's pause (gc-core sweeps scheduled objects with the world
   stopped): it only pushes the buffer here, and the mutator frees the list after the
   pause, at its next LimbAlloc or CollectBags (as Boehm runs finalizers outside its
   pauses). A lock-free push and a take-all exchange: no ABA, any thread may do either. */
static uint64_t *DeferredLimbs;

static void FreeIntExt(Bag bag)
{
    IntExt *e = (IntExt *)ADDR_OBJ(bag);
    uint64_t *d = e->d;
    e->d = NULL;
    if (!d)
        return;
    __atomic_fetch_sub(&ExtLiveBytes, e->n * 8, __ATOMIC_RELAXED);
    uint64_t *head = __atomic_load_n(&DeferredLimbs, __ATOMIC_RELAXED);
    do
        *(uint64_t **)d = head;
    while (!__atomic_compare_exchange_n(&DeferredLimbs, &head, d, 1, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED));
}

/* Frees the buffers of dead integers found by the collections so far (out of line and
   cold: LimbAlloc is inlined into the arithmetic's hot loops). */
static __attribute__((noinline, cold)) void FreeDeferredLimbs(void)
{
    uint64_t *d = __atomic_exchange_n(&DeferredLimbs, NULL, __ATOMIC_ACQUIRE);
    uint64_t n = 0;
    while (d) {
        uint64_t *next = *(uint64_t **)d;
        free(d);
        d = next;
        n++;
    }
    if (n)
        __atomic_fetch_add(&ExtFrees, n, __ATOMIC_RELAXED);
}

static uint64_t *LimbAlloc(size_t n)
{
    if (__builtin_expect(__atomic_load_n(&DeferredLimbs, __ATOMIC_RELAXED) != NULL, 0))
        FreeDeferredLimbs();
    uint64_t *p = calloc(n ? n : 1, 8);
    if (!p) {
        fprintf(stderr, "minigap: out of memory (%zu limbs)\n", n);
        abort();
    }
    return p;
}

/* Takes ownership of d (n limbs, malloc'd). */
static Obj MakeInt(int neg, uint64_t *d, size_t n)
{
    while (n > 0 && d[n - 1] == 0)
        n--;
    if (n == 0) {
        free(d);
        return INTOBJ_INT(0);
    }
    if (n == 1) {
        uint64_t x = d[0];
        if (!neg && x <= (uint64_t)INTOBJ_MAX) {
            free(d);
            return INTOBJ_INT((Int)x);
        }
        if (neg && x <= (uint64_t)1 << 60) {
            free(d);
            return INTOBJ_INT(-(Int)x);
        }
    }
    if (n <= EXT_LIMBS) {
        Obj r = NewBag(neg ? T_INTNEG : T_INTPOS, n * 8);
        memcpy(ADDR_OBJ(r), d, n * 8);
        free(d);
        return r;
    }
    Obj r = NewBag(T_INTEXT, sizeof(IntExt));
    IntExt *e = (IntExt *)ADDR_OBJ(r);
    e->neg = neg;
    e->n = n;
    e->d = d;
    ExtMallocs++;
    ExtBytesSinceGC += n * 8;
    __atomic_fetch_add(&ExtLiveBytes, n * 8, __ATOMIC_RELAXED);
    /* live after the last collection: every buffer allocated since is still unfreed */
    uint64_t unfreed = __atomic_load_n(&ExtLiveBytes, __ATOMIC_RELAXED);
    uint64_t live = unfreed > ExtBytesSinceGC ? unfreed - ExtBytesSinceGC : 0;
    if (ExtBytesSinceGC > (live > EXT_COLLECT_MIN ? live : EXT_COLLECT_MIN)) {
        /* malloc'd limbs are invisible to the heap's growth policy: account for them
           (dead ones also wait for a collection to be freed: the peak RSS) */
        ExtBytesSinceGC = 0;
        CollectBags(0);
    }
    return r;
}

static Obj ObjInt(Int i)
{
    if (i >= INTOBJ_MIN && i <= INTOBJ_MAX)
        return INTOBJ_INT(i);
    uint64_t *d = LimbAlloc(1);
    d[0] = i < 0 ? (uint64_t)(-(i + 1)) + 1 : (uint64_t)i;
    return MakeInt(i < 0, d, 1);
}

static int UCmp(const uint64_t *a, size_t na, const uint64_t *b, size_t nb)
{
    if (na != nb)
        return na < nb ? -1 : 1;
    for (size_t i = na; i-- > 0;)
        if (a[i] != b[i])
            return a[i] < b[i] ? -1 : 1;
    return 0;
}

static size_t UAdd(uint64_t *r, const uint64_t *a, size_t na, const uint64_t *b, size_t nb)
{
    if (na < nb) {
        const uint64_t *t = a; a = b; b = t;
        size_t tn = na; na = nb; nb = tn;
    }
    unsigned __int128 c = 0;
    size_t i;
    for (i = 0; i < na; i++) {
        c += a[i];
        if (i < nb)
            c += b[i];
        r[i] = (uint64_t)c;
        c >>= 64;
    }
    r[na] = (uint64_t)c;
    return na + 1;
}

/* r = a - b, a >= b */
static void USub(uint64_t *r, const uint64_t *a, size_t na, const uint64_t *b, size_t nb)
{
    uint64_t borrow = 0;
    for (size_t i = 0; i < na; i++) {
        uint64_t bi = i < nb ? b[i] : 0;
        uint64_t t = a[i] - bi;
        uint64_t b1 = a[i] < bi;
        uint64_t t2 = t - borrow;
        uint64_t b2 = t < borrow;
        r[i] = t2;
        borrow = b1 | b2;
    }
}

static void UMul(uint64_t *r, const uint64_t *a, size_t na, const uint64_t *b, size_t nb)
{
    memset(r, 0, (na + nb) * 8);
    for (size_t i = 0; i < na; i++) {
        unsigned __int128 c = 0;
        uint64_t ai = a[i];
        if (!ai)
            continue;
        for (size_t j = 0; j < nb; j++) {
            c += (unsigned __int128)ai * b[j] + r[i + j];
            r[i + j] = (uint64_t)c;
            c >>= 64;
        }
        r[i + nb] = (uint64_t)c;
    }
}

static uint64_t UDivSmall(uint64_t *q, const uint64_t *a, size_t n, uint64_t d)
{
    unsigned __int128 rem = 0;
    for (size_t i = n; i-- > 0;) {
        rem = (rem << 64) | a[i];
        q[i] = (uint64_t)(rem / d);
        rem %= d;
    }
    return (uint64_t)rem;
}

/* Knuth's algorithm D: q (nu-nv+1 limbs), r (nv limbs); nv >= 2, v[nv-1] != 0. */
static void UDivMod(uint64_t *q, uint64_t *r, const uint64_t *u, size_t nu, const uint64_t *v, size_t nv)
{
    int s = __builtin_clzll(v[nv - 1]);
    uint64_t *vn = LimbAlloc(nv), *un = LimbAlloc(nu + 1);
    for (size_t i = nv - 1; i > 0; i--)
        vn[i] = (v[i] << s) | (s ? v[i - 1] >> (64 - s) : 0);
    vn[0] = v[0] << s;
    un[nu] = s ? u[nu - 1] >> (64 - s) : 0;
    for (size_t i = nu - 1; i > 0; i--)
        un[i] = (u[i] << s) | (s ? u[i - 1] >> (64 - s) : 0);
    un[0] = u[0] << s;
    const unsigned __int128 B = (unsigned __int128)1 << 64;
    for (size_t jj = nu - nv + 1; jj-- > 0;) {
        size_t j = jj;
        unsigned __int128 num = ((unsigned __int128)un[j + nv] << 64) | un[j + nv - 1];
        unsigned __int128 qhat = num / vn[nv - 1], rhat = num % vn[nv - 1];
        while (qhat >= B || qhat * vn[nv - 2] > ((rhat << 64) | un[j + nv - 2])) {
            qhat--;
            rhat += vn[nv - 1];
            if (rhat >= B)
                break;
        }
        uint64_t qh = (uint64_t)qhat, borrow = 0, carry = 0;
        for (size_t i = 0; i < nv; i++) {
            unsigned __int128 p = (unsigned __int128)qh * vn[i] + carry;
            carry = (uint64_t)(p >> 64);
            uint64_t plo = (uint64_t)p;
            uint64_t t = un[i + j] - plo, b1 = un[i + j] < plo;
            uint64_t t2 = t - borrow, b2 = t < borrow;
            un[i + j] = t2;
            borrow = b1 + b2;
        }
        uint64_t t = un[j + nv] - carry, b1 = un[j + nv] < carry;
        uint64_t t2 = t - borrow, b2 = t < borrow;
        un[j + nv] = t2;
        if (b1 + b2) {
            qh--;
            unsigned __int128 c = 0;
            for (size_t i = 0; i < nv; i++) {
                c += (unsigned __int128)un[i + j] + vn[i];
                un[i + j] = (uint64_t)c;
                c >>= 64;
            }
            un[j + nv] += (uint64_t)c;
        }
        q[j] = qh;
    }
    for (size_t i = 0; i + 1 < nv; i++)
        r[i] = (un[i] >> s) | (s ? un[i + 1] << (64 - s) : 0);
    r[nv - 1] = un[nv - 1] >> s;
    free(vn);
    free(un);
}

static Obj SumInt(Obj a, Obj b)
{
    if (IS_INTOBJ(a) && IS_INTOBJ(b)) {
        Int r;
        if (!__builtin_add_overflow(INT_INTOBJ(a), INT_INTOBJ(b), &r))
            return ObjInt(r);
    }
    IntV x, y;
    IntView(a, &x);
    IntView(b, &y);
    size_t n = (x.n > y.n ? x.n : y.n) + 1;
    uint64_t *r = LimbAlloc(n);
    if (x.neg == y.neg) {
        UAdd(r, x.d, x.n, y.d, y.n);
        return MakeInt(x.neg, r, n);
    }
    if (UCmp(x.d, x.n, y.d, y.n) >= 0) {
        USub(r, x.d, x.n, y.d, y.n);
        return MakeInt(x.neg, r, x.n);
    }
    USub(r, y.d, y.n, x.d, x.n);
    return MakeInt(y.neg, r, y.n);
}

static Obj AInvInt(Obj a)
{
    if (IS_INTOBJ(a))
        return ObjInt(-INT_INTOBJ(a));
    IntV x;
    IntView(a, &x);
    uint64_t *r = LimbAlloc(x.n);
    memcpy(r, x.d, x.n * 8);
    return MakeInt(!x.neg, r, x.n);
}

static Obj DiffInt(Obj a, Obj b)
{
    if (IS_INTOBJ(a) && IS_INTOBJ(b)) {
        Int r;
        if (!__builtin_sub_overflow(INT_INTOBJ(a), INT_INTOBJ(b), &r))
            return ObjInt(r);
    }
    return SumInt(a, AInvInt(b));
}

static Obj ProdInt(Obj a, Obj b)
{
    if (IS_INTOBJ(a) && IS_INTOBJ(b)) {
        Int r;
        if (!__builtin_mul_overflow(INT_INTOBJ(a), INT_INTOBJ(b), &r))
            return ObjInt(r);
    }
    IntV x, y;
    IntView(a, &x);
    IntView(b, &y);
    if (x.n == 0 || y.n == 0)
        return INTOBJ_INT(0);
    uint64_t *r = LimbAlloc(x.n + y.n);
    UMul(r, x.d, x.n, y.d, y.n);
    return MakeInt(x.neg != y.neg, r, x.n + y.n);
}

/* Truncating division of magnitudes: *q and *r get new objects (signs applied by the
   caller's rule). */
static void QuoRemInt(Obj a, Obj b, Obj *q, Obj *r)
{
    IntV x, y;
    IntView(a, &x);
    IntView(b, &y);
    if (y.n == 0)
        ErrorQuit("Integer operations: <divisor> must be nonzero");
    if (UCmp(x.d, x.n, y.d, y.n) < 0) {
        *q = INTOBJ_INT(0);
        *r = a;
        return;
    }
    uint64_t *qd = LimbAlloc(x.n), *rd = LimbAlloc(y.n);
    size_t nq;
    if (y.n == 1) {
        rd[0] = UDivSmall(qd, x.d, x.n, y.d[0]);
        nq = x.n;
    } else {
        UDivMod(qd, rd, x.d, x.n, y.d, y.n);
        nq = x.n - y.n + 1;
    }
    int qneg = x.neg != y.neg, rneg = x.neg;
    size_t ny = y.n;
    *q = MakeInt(qneg, qd, nq);  /* allocates: x and y are not used after this */
    *r = MakeInt(rneg, rd, ny);
}

static int SignInt(Obj o)
{
    if (IS_INTOBJ(o)) {
        Int x = INT_INTOBJ(o);
        return (x > 0) - (x < 0);
    }
    IntV v;
    IntView(o, &v);
    return v.n == 0 ? 0 : v.neg ? -1 : 1;
}

static int CmpInt(Obj a, Obj b)
{
    if (IS_INTOBJ(a) && IS_INTOBJ(b)) {
        Int x = INT_INTOBJ(a), y = INT_INTOBJ(b);
        return (x > y) - (x < y);
    }
    IntV x, y;
    IntView(a, &x);
    IntView(b, &y);
    if (x.neg != y.neg)
        return x.neg ? -1 : 1;
    int c = UCmp(x.d, x.n, y.d, y.n);
    return x.neg ? -c : c;
}

/* GAP's mod: the remainder in [0, |b|). */
static Obj ModInt(Obj a, Obj b)
{
    if (IS_INTOBJ(a) && IS_INTOBJ(b)) {
        Int x = INT_INTOBJ(a), y = INT_INTOBJ(b);
        if (y == 0)
            ErrorQuit("Integer operations: <divisor> must be nonzero");
        Int r = x % y;
        if (r < 0)
            r += y < 0 ? -y : y;
        return INTOBJ_INT(r);
    }
    Obj q, r;
    QuoRemInt(a, b, &q, &r);
    if (SignInt(r) < 0) {
        r = SignInt(b) < 0 ? DiffInt(r, b) : SumInt(r, b);
    }
    return r;
}

static Obj QuoIntObj(Obj a, Obj b)
{
    if (IS_INTOBJ(a) && IS_INTOBJ(b)) {
        Int y = INT_INTOBJ(b);
        if (y == 0)
            ErrorQuit("Integer operations: <divisor> must be nonzero");
        if (!(INT_INTOBJ(a) == INTOBJ_MIN && y == -1))
            return INTOBJ_INT(INT_INTOBJ(a) / y);
    }
    Obj q, r;
    QuoRemInt(a, b, &q, &r);
    return q;
}

static Obj AbsInt(Obj a)
{
    return SignInt(a) < 0 ? AInvInt(a) : a;
}

static Obj GcdInt(Obj a, Obj b)
{
    a = AbsInt(a);
    b = AbsInt(b);
    while (SignInt(b) != 0) {
        Obj r = ModInt(a, b);
        a = b;
        b = r;
    }
    return a;
}

static Obj LcmInt(Obj a, Obj b)
{
    if (SignInt(a) == 0 || SignInt(b) == 0)
        return INTOBJ_INT(0);
    Obj g = GcdInt(a, b);
    return AbsInt(ProdInt(QuoIntObj(a, g), b));
}

static Obj PowInt(Obj a, Obj e)
{
    if (!IS_INTOBJ(e))
        ErrorQuit("Integer operations: exponent too large");
    Int n = INT_INTOBJ(e);
    if (n < 0)
        ErrorQuit("internal: PowInt with a negative exponent");
    Obj r = INTOBJ_INT(1);
    Obj base = a;
    while (n > 0) {
        if (n & 1)
            r = ProdInt(r, base);
        n >>= 1;
        if (n)
            base = ProdInt(base, base);
    }
    return r;
}

/* n! by repeated multiplication, one new integer per step (the seed's benchmark). */
static Obj FactorialInt(Int n)
{
    if (n < 0)
        ErrorQuit("Factorial: <n> must be a non-negative integer (not %ld)", (long)n);
    Obj r = INTOBJ_INT(1);
    for (Int i = 2; i <= n; i++) {
        r = ProdInt(r, INTOBJ_INT(i));
        GasmanPoll();
    }
    return r;
}

/* Decimal digits of an integer (malloc'd). */
static char *IntToString(Obj o)
{
    if (IS_INTOBJ(o)) {
        char *s = malloc(32);
        snprintf(s, 32, "%ld", (long)INT_INTOBJ(o));
        return s;
    }
    IntV v;
    IntView(o, &v);
    size_t n = v.n;
    uint64_t *t = LimbAlloc(n);
    memcpy(t, v.d, n * 8);
    int neg = v.neg;
    size_t cap = n * 20 + 24, len = 0;
    char *rev = malloc(cap);
    const uint64_t P = 10000000000000000000ull;  /* 10^19 */
    while (n > 0) {
        uint64_t rem = UDivSmall(t, t, n, P);
        while (n > 0 && t[n - 1] == 0)
            n--;
        for (int k = 0; k < 19; k++) {
            if (n == 0 && rem == 0)
                break;
            rev[len++] = (char)('0' + rem % 10);
            rem /= 10;
        }
    }
    free(t);
    char *s = malloc(len + 2);
    size_t p = 0;
    if (neg)
        s[p++] = '-';
    for (size_t i = len; i-- > 0;)
        s[p++] = rev[i];
    s[p] = 0;
    free(rev);
    return s;
}

static Obj IntFromDecimal(const char *s)
{
    size_t len = strlen(s);
    size_t n = len / 19 + 2;
    uint64_t *d = LimbAlloc(n);
    size_t used = 0;
    for (size_t i = 0; i < len; i++) {
        /* d = d * 10 + digit */
        unsigned __int128 c = (unsigned)(s[i] - '0');
        for (size_t k = 0; k < used; k++) {
            c += (unsigned __int128)d[k] * 10;
            d[k] = (uint64_t)c;
            c >>= 64;
        }
        if (c)
            d[used++] = (uint64_t)c;
    }
    return MakeInt(0, d, n);
}
