/*
 * print.c: GAP's output formatting. Text goes through a per-thread line buffer with
 * GAP's line-break hints: '%>' / '%<' in a format raise / lower the indentation and
 * mark a place to break; a line longer than the screen (80 columns) is split at the
 * best hint, or with a backslash when there is none (long integers). Completed lines
 * are handed to the thread's output function at the end of each Print call, so one
 * thread's Print output is never interleaved with another's.
 */
#define SCREEN_COLS 80
#define MAXHINTS 100
#define MAXLINE 4096

typedef struct Output {
    char line[MAXLINE];
    Int pos;
    Int indent;
    Int hints[3 * MAXHINTS + 3];
    char *done;          /* completed lines not yet handed out */
    size_t done_len, done_cap;
    mg_output_fn fn;
    void *data;
} Output;

static __thread Output *Out;

static void OutAppend(const char *s, size_t n)
{
    Output *o = Out;
    if (o->done_len + n > o->done_cap) {
        o->done_cap = (o->done_len + n) * 2 + 256;
        o->done = realloc(o->done, o->done_cap);
    }
    memcpy(o->done + o->done_len, s, n);
    o->done_len += n;
}

static void PutLine(Int len) { OutAppend(Out->line, (size_t)len); }

static void AddLineBreakHint(Int pos, Int val, Int indentdiff)
{
    Output *s = Out;
    Int nr, i;
    for (nr = 0; nr < MAXHINTS && s->hints[3 * nr] != -1; nr++)
        ;
    if (nr == MAXHINTS) {
        for (i = 0; i < 3 * MAXHINTS - 3; i++)
            s->hints[i] = s->hints[i + 3];
        nr--;
    }
    if (nr > 0 && s->hints[3 * (nr - 1)] == pos)
        nr--;
    if (s->indent < pos && (s->hints[3 * nr] == -1 || val < s->hints[3 * nr + 1])) {
        s->hints[3 * nr] = pos;
        s->hints[3 * nr + 1] = val;
        s->hints[3 * nr + 2] = s->indent;
        s->hints[3 * nr + 3] = -1;
    }
    s->indent += indentdiff;
}

static Int NrLineBreak(void)
{
    Output *s = Out;
    Int nr = -1, min = INT64_MAX, i;
    for (i = 0; s->hints[3 * i] != -1; i++) {
        if (s->hints[3 * i] > 0 && s->hints[3 * i + 1] - s->hints[3 * i] <= min) {
            nr = i;
            min = s->hints[3 * i + 1] - s->hints[3 * i];
        }
    }
    return min < INT64_MAX ? nr : -1;
}

static void PutChr(char ch)
{
    Output *s = Out;
    Int i, hint, spos;
    char str[MAXLINE];
    if (ch == '\01') {
        AddLineBreakHint(s->pos, 16 * s->indent, 1);
    } else if (ch == '\02') {
        AddLineBreakHint(s->pos, 16 * s->indent, -1);
    } else if (ch == '\n') {
        s->line[s->pos++] = ch;
        PutLine(s->pos);
        s->pos = 0;
        for (i = 0; i < s->indent; i++)
            s->line[s->pos++] = ' ';
        s->hints[0] = -1;
    } else if (s->pos < SCREEN_COLS - 2) {
        s->line[s->pos++] = ch;
    } else {
        if ((hint = NrLineBreak()) != -1)
            spos = s->hints[3 * hint];
        else
            spos = 0;
        if (spos == s->pos && ch == ' ') {
            ;
        } else if (spos != 0) {
            s->line[s->pos++] = ch;
            s->line[s->pos] = '\0';
            for (i = spos; i < s->pos; i++)
                str[i - spos] = s->line[i];
            str[i - spos] = '\0';
            s->line[spos++] = '\n';
            PutLine(spos);
            spos--;
            s->pos = 0;
            for (i = 0; i < s->hints[3 * hint + 2]; i++)
                s->line[s->pos++] = ' ';
            spos -= s->hints[3 * hint + 2];
            for (i = 0; str[i] != '\0'; i++)
                s->line[s->pos++] = str[i];
            for (i = hint + 1; s->hints[3 * i] != -1; i++) {
                s->hints[3 * (i - hint - 1)] = s->hints[3 * i] - spos;
                s->hints[3 * (i - hint - 1) + 1] = s->hints[3 * i + 1];
                s->hints[3 * (i - hint - 1) + 2] = s->hints[3 * i + 2];
            }
            s->hints[3 * (i - hint - 1)] = -1;
        } else {
            s->line[s->pos++] = '\\';
            s->line[s->pos++] = '\n';
            PutLine(s->pos);
            s->pos = 0;
            s->line[s->pos++] = ch;
            s->hints[0] = -1;
        }
    }
}

static void PutStr(const char *p)
{
    while (*p)
        PutChr(*p++);
}

/* Formats: %d %s %c, %Nd (width), %> %< (with an optional count), %%. */
static void Pr(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    for (const char *p = fmt; *p; p++) {
        if (*p != '%') {
            PutChr(*p);
            continue;
        }
        p++;
        int count = 0;
        while (*p >= '0' && *p <= '9')
            count = count * 10 + (*p++ - '0');
        char buf[64];
        switch (*p) {
        case 'd':
            snprintf(buf, sizeof buf, "%*ld", count, va_arg(ap, long));
            PutStr(buf);
            break;
        case 's':
            PutStr(va_arg(ap, const char *));
            break;
        case 'c':
            PutChr((char)va_arg(ap, int));
            break;
        case '>':
            for (int i = 0; i < (count ? count : 1); i++)
                PutChr('\01');
            break;
        case '<':
            for (int i = 0; i < (count ? count : 1); i++)
                PutChr('\02');
            break;
        case '%':
            PutChr('%');
            break;
        }
    }
    va_end(ap);
}

/* Hands completed lines (and, with all, the partial last line) to the output function. */
static void PrFlushLines(int all)
{
    Output *o = Out;
    if (all && o->pos > 0) {
        OutAppend(o->line, (size_t)o->pos);
        o->pos = 0;
        o->indent = 0;
        o->hints[0] = -1;
    }
    if (o->done_len > 0) {
        if (o->fn)
            o->fn(o->data, o->done, o->done_len);
        o->done_len = 0;
    }
}

static void PrintString(Obj s, int quoted)
{
    if (!quoted) {
        UInt n = STR_LEN(s);
        for (UInt i = 0; i < n; i++)
            PutChr(STR_CHARS(s)[i]);
        return;
    }
    Pr("\"");
    UInt n = STR_LEN(s);
    for (UInt i = 0; i < n; i++) {
        char c = STR_CHARS(s)[i];
        switch (c) {
        case '\n': Pr("\\n"); break;
        case '\t': Pr("\\t"); break;
        case '"': Pr("\\\""); break;
        case '\\': Pr("\\\\"); break;
        default: PutChr(c);
        }
    }
    Pr("\"");
}

static int IsString(Obj o) { return TNUM_OBJ(o) == T_STRING; }
static void PrintFunction(Obj f);

static int CmpNames(const void *a, const void *b)
{
    return strcmp(NameRNam(*(const Int *)a), NameRNam(*(const Int *)b));
}

static int PrintDepth;

static void PrintObj(Obj o)
{
    if (++PrintDepth > 64) {
        PrintDepth--;
        Pr("~");
        return;
    }
    switch (TNUM_OBJ(o)) {
    case T_INT:
        Pr("%>%d%<", (long)INT_INTOBJ(o));
        break;
    case T_INTPOS: case T_INTNEG: case T_INTEXT: {
        char *s = IntToString(o);
        Pr("%>%s%<", s);
        free(s);
        break;
    }
    case T_BOOL: {
        Int v = *(Int *)ADDR_OBJ(o);
        Pr("%s", v == 1 ? "true" : v == 0 ? "false" : "fail");
        break;
    }
    case T_CHAR: {
        char c = (char)*(Int *)ADDR_OBJ(o);
        if (c == '\n') Pr("'\\n'");
        else if (c == '\'') Pr("'\\''");
        else if (c == '\\') Pr("'\\\\'");
        else Pr("'%c'", c);
        break;
    }
    case T_PERM: {
        UInt deg = LargestMovedPoint(o);
        const char *fmt1, *fmt2;
        if (deg < 10) { fmt1 = "%>(%>%1d%<"; fmt2 = ",%>%1d%<"; }
        else if (deg < 100) { fmt1 = "%>(%>%2d%<"; fmt2 = ",%>%2d%<"; }
        else if (deg < 1000) { fmt1 = "%>(%>%3d%<"; fmt2 = ",%>%3d%<"; }
        else if (deg < 10000) { fmt1 = "%>(%>%4d%<"; fmt2 = ",%>%4d%<"; }
        else { fmt1 = "%>(%>%5d%<"; fmt2 = ",%>%5d%<"; }
        char *seen = calloc(deg + 1, 1);
        int isId = 1;
        uint32_t *pt = ADDR_PERM(o);
        for (UInt p = 0; p < deg; p++) {
            if (!seen[p] && pt[p] != p) {
                seen[p] = 1;
                isId = 0;
                Pr(fmt1, (long)(p + 1));
                for (UInt q = pt[p]; q != p; q = pt[q]) {
                    seen[q] = 1;
                    Pr(fmt2, (long)(q + 1));
                }
                Pr("%<)");
            }
        }
        free(seen);
        if (isId)
            Pr("()");
        break;
    }
    case T_PLIST: {
        Int n = LEN_PLIST(o);
        Pr("%2>[ %2>");
        for (Int i = 1; i <= n; i++) {
            Obj e = ELM_PLIST(o, i);
            if (e) {
                if (i > 1)
                    Pr("%<,%< %2>");
                PrintObj(e);
            } else if (i > 1) {
                Pr("%2<,%2>");
            }
        }
        Pr(" %4<]");
        break;
    }
    case T_RANGE:
        Pr("%2>[ %2>%d", (long)RANGE_LOW(o));
        if (RANGE_INC(o) != 1)
            Pr("%<,%< %2>%d", (long)(RANGE_LOW(o) + RANGE_INC(o)));
        Pr("%2< .. %2>%d %4<]", (long)(RANGE_LOW(o) + (RANGE_LEN(o) - 1) * RANGE_INC(o)));
        break;
    case T_STRING:
        PrintString(o, 1);
        break;
    case T_REC: {
        UInt n = (UInt)ADDR_OBJ(o)[0];
        Int *names = malloc((n + 1) * sizeof(Int));
        for (UInt i = 0; i < n; i++)
            names[i] = (Int)(UInt)ADDR_OBJ(o)[1 + 2 * i];
        qsort(names, n, sizeof(Int), CmpNames);
        if (n == 0) {
            Pr("rec( )");
            free(names);
            break;
        }
        Pr("%2>rec(\n%2>");
        for (UInt i = 0; i < n; i++) {
            if (i > 0)
                Pr("%2<,\n%2>");
            Pr("%s%< := %>", NameRNam(names[i]));
            PrintObj(ElmRec(o, names[i]));
        }
        Pr(" %4<)");
        free(names);
        break;
    }
    case T_FUNCTION:
        PrintFunction(o);
        break;
    case T_RAT:
        Pr("%>");
        PrintObj(ADDR_OBJ(o)[0]);
        Pr("%</%>");
        PrintObj(ADDR_OBJ(o)[1]);
        Pr("%<");
        break;
    case T_GROUP:
        Pr("Group(");
        PrintObj(ADDR_OBJ(o)[0]);
        Pr(")");
        break;
    case T_HOST:
        Pr("<host object>");
        break;
    default:
        Pr("<%s>", TypeName(o));
    }
    PrintDepth--;
}

static void PrintTop(Obj o)
{
    if (IsString(o))
        PrintString(o, 0);
    else if (TNUM_OBJ(o) == T_CHAR)
        PutChr((char)*(Int *)ADDR_OBJ(o));
    else
        PrintObj(o);
}
