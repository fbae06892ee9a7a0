/*
 * group.c: permutation groups: Group(gens...), Size by deterministic Schreier-Sims
 * (Holt's SCHREIERSIMS: every Schreier generator of every level is sifted; a
 * non-trivial residue becomes a new strong generator and its levels are rechecked).
 * All permutations are bags, the per-level data plain lists of bags held in C locals
 * (stack arrays): a GC-heavy workload whose temporaries only the conservative stack
 * scan keeps alive. The order is the product of the basic orbit lengths (a big integer
 * for large groups: the Rubik's cube group has 43252003274489856000 elements).
 */
#define MAX_BASE 256

/* T_GROUP: data[0] = generators (plist), data[1] = size (0 until computed) */

static Obj NewGroup(Obj gens)
{
    for (Int i = 1; i <= LEN_LIST(gens); i++) {
        Obj g = ELM0_LIST(gens, i);
        if (!g || TNUM_OBJ(g) != T_PERM)
            ErrorQuit("Group: <gens> must be permutations (generator %ld is a %s)", (long)i, TypeName(g));
    }
    Obj g = NewBag(T_GROUP, 2 * sizeof(Obj));
    ADDR_OBJ(g)[0] = gens;
    CHANGED_BAG(g);
    return g;
}

/* Orbit of level l's base point under S[l], with transversal elements u[p] mapping the
   base point to p (and their inverses). */
static void ComputeOrbit(Obj gens, Int b, UInt n, Obj *orbit, Obj *trans, Obj *transinv)
{
    Obj orb = NEW_PLIST(8);
    Obj t = NEW_PLIST((Int)n);
    Obj ti = NEW_PLIST((Int)n);
    *orbit = orb;
    *trans = t;
    *transinv = ti;
    Obj id = NewPerm(0);
    AssPlist(t, b, id);
    AssPlist(ti, b, id);
    PushPlist(orb, INTOBJ_INT(b));
    for (Int k = 1; k <= LEN_PLIST(orb); k++) {
        Int p = INT_INTOBJ(ELM_PLIST(orb, k));
        for (Int j = 1; j <= LEN_PLIST(gens); j++) {
            Obj s = ELM_PLIST(gens, j);
            Int q = (Int)ImagePerm(s, (UInt)p);
            if (q <= LEN_PLIST(t) && ELM_PLIST(t, q))
                continue;
            Obj u = ProdPerm(ELM_PLIST(t, p), s);
            AssPlist(t, q, u);
            Obj ui = InvPerm(u);
            AssPlist(ti, q, ui);
            PushPlist(orb, INTOBJ_INT(q));
        }
        GasmanPoll();
    }
}

static Obj SizeGroup(Obj group)
{
    if (ADDR_OBJ(group)[1])
        return ADDR_OBJ(group)[1];
    Obj gens = ADDR_OBJ(group)[0];
    UInt n = 0;
    for (Int i = 1; i <= LEN_PLIST(gens); i++) {
        UInt d = LargestMovedPoint(ELM_PLIST(gens, i));
        if (d > n)
            n = d;
    }
    /* The stabiliser chain lives in these stack arrays: every entry is a bag only the
       conservative scan of this thread's stack keeps alive. */
    Int base[MAX_BASE];
    Obj S[MAX_BASE + 1], orbit[MAX_BASE + 1], trans[MAX_BASE + 1], transinv[MAX_BASE + 1];
    memset(S, 0, sizeof S);
    memset(orbit, 0, sizeof orbit);
    memset(trans, 0, sizeof trans);
    memset(transinv, 0, sizeof transinv);
    int k = 0;
    S[0] = NEW_PLIST(8);
    for (Int i = 1; i <= LEN_PLIST(gens); i++) {
        Obj g = ELM_PLIST(gens, i);
        if (IsIdentityPerm(g))
            continue;
        PushPlist(S[0], g);
        int moves = 0;
        for (int l = 0; l < k; l++)
            if (ImagePerm(g, (UInt)base[l]) != (UInt)base[l])
                moves = 1;
        if (!moves) {
            UInt p = 1;
            while (ImagePerm(g, p) == p)
                p++;
            if (k == MAX_BASE)
                ErrorQuit("Size: base longer than %d points", MAX_BASE);
            base[k++] = (Int)p;
        }
    }
    if (k == 0) {
        ADDR_OBJ(group)[1] = INTOBJ_INT(1);
        return INTOBJ_INT(1);
    }
    /* S[l] = generators fixing base[0..l-1] */
    for (int l = 1; l < k; l++) {
        S[l] = NEW_PLIST(8);
        for (Int j = 1; j <= LEN_PLIST(S[0]); j++) {
            Obj g = ELM_PLIST(S[0], j);
            int fixes = 1;
            for (int m = 0; m < l; m++)
                if (ImagePerm(g, (UInt)base[m]) != (UInt)base[m])
                    fixes = 0;
            if (fixes)
                PushPlist(S[l], g);
        }
    }
    for (int l = 0; l < k; l++)
        ComputeOrbit(S[l], base[l], n, &orbit[l], &trans[l], &transinv[l]);
    int i = k - 1;
    while (i >= 0) {
        int restarted = 0;
        for (Int oi = 1; oi <= LEN_PLIST(orbit[i]) && !restarted; oi++) {
            Int beta = INT_INTOBJ(ELM_PLIST(orbit[i], oi));
            for (Int si = 1; si <= LEN_PLIST(S[i]) && !restarted; si++) {
                Obj s = ELM_PLIST(S[i], si);
                Int gamma = (Int)ImagePerm(s, (UInt)beta);
                /* Schreier generator u_beta * s * u_gamma^-1 fixes base[i] */
                Obj h = ProdPerm(ProdPerm(ELM_PLIST(trans[i], beta), s), ELM_PLIST(transinv[i], gamma));
                if (IsIdentityPerm(h))
                    continue;
                /* sift through levels i+1 .. k-1 */
                int j = i + 1;
                while (j < k) {
                    Int pt = (Int)ImagePerm(h, (UInt)base[j]);
                    if (pt > LEN_PLIST(trans[j]) || !ELM_PLIST(trans[j], pt))
                        break;
                    h = ProdPerm(h, ELM_PLIST(transinv[j], pt));
                    j++;
                }
                if (j == k && IsIdentityPerm(h))
                    continue;
                /* new strong generator h for levels i+1 .. j */
                if (j == k) {
                    UInt p = 1;
                    while (ImagePerm(h, p) == p)
                        p++;
                    if (k == MAX_BASE)
                        ErrorQuit("Size: base longer than %d points", MAX_BASE);
                    base[k] = (Int)p;
                    S[k] = NEW_PLIST(4);
                    k++;
                }
                for (int l = i + 1; l <= j; l++) {
                    PushPlist(S[l], h);
                    ComputeOrbit(S[l], base[l], n, &orbit[l], &trans[l], &transinv[l]);
                }
                i = j;
                restarted = 1;
            }
            GasmanPoll();
        }
        if (!restarted)
            i--;
    }
    Obj size = INTOBJ_INT(1);
    for (int l = 0; l < k; l++)
        size = ProdObj(size, INTOBJ_INT(LEN_PLIST(orbit[l])));
    ADDR_OBJ(group)[1] = size;
    CHANGED_BAG(group);
    return size;
}
