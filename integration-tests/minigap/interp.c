/*
 * interp.c: the GAP-language subset: scanner, parser (to an AST kept in a malloc'd
 * arena owned by a T_BODY bag, whose free function frees it), and a tree-walking
 * evaluator whose values are bags and immediate integers. Local variables of a function
 * call live in a T_LVARS bag (closures keep their defining T_LVARS alive); C locals
 * hold raw bag references across allocations, which only the conservative stack scan
 * keeps alive, as in GAP's own kernel.
 */

/* ---- errors ---- */
static void ErrorQuit(const char *fmt, ...)
{
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(ErrorMsg, sizeof ErrorMsg, "Error, %s\nnot in any function at %s:%d", msg,
             CurrFile ? CurrFile : "stream", CurrLine);
    longjmp(*ErrorJmp, 1);
}

/* ---- the AST ---- */
enum {
    E_INT, E_CONST, E_TRUE, E_FALSE, E_FAIL, E_CHAR, E_LVAR, E_GVAR, E_LIST, E_RANGE,
    E_REC, E_PERM, E_FUNC, E_CALL, E_ELM, E_RECELM, E_BINOP, E_NOT, E_NEG, E_AND, E_OR,
    E_IN, E_ISBOUND,
    S_ASS, S_CALL, S_IF, S_FOR, S_WHILE, S_REPEAT, S_RETURN, S_BREAK, S_CONTINUE, S_SEQ,
    S_UNBIND
};
enum { OP_SUM, OP_DIFF, OP_PROD, OP_QUO, OP_MOD, OP_POW, OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE };

typedef struct Node Node;
typedef struct FuncInfo {
    int nargs, nlocals;
    char **names;   /* args then locals */
    Node *body;
    int line;
} FuncInfo;

struct Node {
    int kind, line;
    Int ival, ival2;
    Node *a, *b, *c;
    Node **list;
    int n;
    Node **list2;
    int n2;
    Int *ints;
    FuncInfo *fi;
};

typedef struct Arena {
    struct Chunk { struct Chunk *next; size_t used, cap; char data[]; } *chunks;
} Arena;

static void *ArenaAlloc(Arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    struct Chunk *c = a->chunks;
    if (!c || c->used + n > c->cap) {
        size_t cap = n > 65536 ? n : 65536;
        c = malloc(sizeof(struct Chunk) + cap);
        c->next = a->chunks;
        c->used = 0;
        c->cap = cap;
        a->chunks = c;
    }
    void *p = c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

static void ArenaFree(Arena *a)
{
    struct Chunk *c = a->chunks;
    while (c) {
        struct Chunk *n = c->next;
        free(c);
        c = n;
    }
    free(a);
}

/* T_BODY: data[0] = Arena* (raw), data[1] = constants (plist) */
static void FreeBody(Bag b)
{
    Arena *a = (Arena *)ADDR_OBJ(b)[0];
    if (a)
        ArenaFree(a);
    ADDR_OBJ(b)[0] = 0;
}

/* ---- global variables: names shared, values per thread ---- */
static char **GVarNames;
static Int GVarCount, GVarCap;
static Obj Builtins;   /* plist indexed by gvar id */

static __thread Int MyThreadIndex;

static Int GVarName(const char *name)
{
    for (Int i = 0; i < GVarCount; i++)
        if (strcmp(GVarNames[i], name) == 0)
            return i + 1;
    if (GVarCount == GVarCap) {
        GVarCap = GVarCap ? GVarCap * 2 : 256;
        GVarNames = realloc(GVarNames, GVarCap * sizeof(char *));
    }
    GVarNames[GVarCount++] = strdup(name);
    return GVarCount;
}

static Obj ThreadGlobals(void) { return ELM_PLIST(ThreadContexts, MyThreadIndex); }

static Obj ValGVar(Int g)
{
    Obj globals = ThreadGlobals();
    Obj v = g <= LEN_PLIST(globals) ? ELM_PLIST(globals, g) : 0;
    if (!v && g <= LEN_PLIST(Builtins))
        v = ELM_PLIST(Builtins, g);
    return v;
}

static void AssGVar(Int g, Obj v)
{
    if (g <= LEN_PLIST(Builtins) && ELM_PLIST(Builtins, g))
        ErrorQuit("Variable: '%s' is read only", GVarNames[g - 1]);
    AssPlist(ThreadGlobals(), g, v);
}

/* ---- scanner ---- */
enum {
    TK_EOF, TK_IDENT, TK_INT, TK_STRING, TK_CHAR, TK_ASSIGN, TK_EQ, TK_NE, TK_LT, TK_LE,
    TK_GT, TK_GE, TK_PLUS, TK_MINUS, TK_STAR, TK_SLASH, TK_CARET, TK_ARROW, TK_DOTDOT,
    TK_DOT, TK_COMMA, TK_SEMI, TK_LPAREN, TK_RPAREN, TK_LBRACK, TK_RBRACK, TK_LBRACE,
    TK_RBRACE, TK_DSEMI,
    /* keywords */
    TK_AND, TK_BREAK, TK_CONTINUE, TK_DO, TK_ELIF, TK_ELSE, TK_END, TK_FALSE, TK_FI, TK_FOR,
    TK_FUNCTION, TK_IF, TK_IN, TK_LOCAL, TK_MOD, TK_NOT, TK_OD, TK_OR, TK_REC, TK_REPEAT,
    TK_RETURN, TK_THEN, TK_TRUE, TK_UNTIL, TK_WHILE, TK_FAIL, TK_ISBOUND, TK_UNBIND
};
static const char *Keywords[] = {"and", "break", "continue", "do", "elif", "else", "end",
    "false", "fi", "for", "function", "if", "in", "local", "mod", "not", "od", "or", "rec",
    "repeat", "return", "then", "true", "until", "while", "fail", "IsBound", "Unbind", NULL};
static const char *TokNames[] = {"end of input", "identifier", "integer", "string",
    "character", ":=", "=", "<>", "<", "<=", ">", ">=", "+", "-", "*", "/", "^", "->", "..",
    ".", ",", ";", "(", ")", "[", "]", "{", "}", ";;"};

typedef struct Parser {
    const char *src, *p, *file;
    int line;
    int tok;
    char *text;  /* identifier / number / string contents */
    size_t textlen, textcap;
    int tokline;
    const char *toklinestart, *tokstart;
    Arena *arena;
    Obj consts;   /* plist of constants (big integers, strings) */
    FuncInfo *scopes[256];
    int nscopes;
    int loopdepth;
} Parser;

static __thread Parser *CurrParser;

static void SyntaxError(Parser *ps, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *ls = ps->toklinestart, *le = ls;
    while (*le && *le != '\n')
        le++;
    int col = (int)(ps->tokstart - ls);
    char caret[300];
    int k = 0;
    for (int i = 0; i < col && k < 290; i++)
        caret[k++] = ' ';
    caret[k++] = '^';
    caret[k] = 0;
    snprintf(ErrorMsg, sizeof ErrorMsg, "Syntax error: %s in %s:%d\n%.*s\n%s", msg,
             ps->file, ps->tokline, (int)(le - ls), ls, caret);
    longjmp(*ErrorJmp, 1);
}

static void TextPut(Parser *ps, char c)
{
    if (ps->textlen + 2 > ps->textcap) {
        ps->textcap = ps->textcap * 2 + 64;
        ps->text = realloc(ps->text, ps->textcap);
    }
    ps->text[ps->textlen++] = c;
    ps->text[ps->textlen] = 0;
}

static const char *LineStart(Parser *ps, const char *p)
{
    while (p > ps->src && p[-1] != '\n')
        p--;
    return p;
}

static char Escape(Parser *ps, char c)
{
    switch (c) {
    case 'n': return '\n';
    case 't': return '\t';
    case 'r': return '\r';
    case '"': return '"';
    case '\'': return '\'';
    case '\\': return '\\';
    case '0': return 0;
    }
    SyntaxError(ps, "unknown escape sequence \\%c", c);
    return 0;
}

static void Next(Parser *ps)
{
    const char *p = ps->p;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n') {
            if (*p == '\n')
                ps->line++;
            p++;
        }
        if (*p == '#') {
            while (*p && *p != '\n')
                p++;
            continue;
        }
        break;
    }
    ps->tokstart = p;
    ps->tokline = ps->line;
    ps->toklinestart = LineStart(ps, p);
    ps->textlen = 0;
    if (ps->text)
        ps->text[0] = 0;
    char c = *p;
    if (!c) {
        ps->tok = TK_EOF;
        ps->p = p;
        return;
    }
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '@' ||
        (c >= '0' && c <= '9')) {
        int alldigits = 1;
        while ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_' || *p == '@' ||
               (*p >= '0' && *p <= '9')) {
            if (!(*p >= '0' && *p <= '9'))
                alldigits = 0;
            TextPut(ps, *p++);
        }
        ps->p = p;
        if (alldigits) {
            ps->tok = TK_INT;
            return;
        }
        for (int k = 0; Keywords[k]; k++)
            if (strcmp(Keywords[k], ps->text) == 0) {
                ps->tok = TK_AND + k;
                return;
            }
        ps->tok = TK_IDENT;
        return;
    }
    if (c == '"') {
        p++;
        while (*p != '"') {
            if (!*p || *p == '\n') {
                ps->p = p;
                SyntaxError(ps, "String must not include <newline>");
            }
            if (*p == '\\') {
                p++;
                TextPut(ps, Escape(ps, *p++));
            } else
                TextPut(ps, *p++);
        }
        ps->p = p + 1;
        ps->tok = TK_STRING;
        return;
    }
    if (c == '\'') {
        p++;
        char ch = *p == '\\' ? (p++, Escape(ps, *p)) : *p;
        p++;
        if (*p != '\'') {
            ps->p = p;
            SyntaxError(ps, "Character literal must not include <newline>");
        }
        ps->p = p + 1;
        ps->text = ps->text ? ps->text : malloc(64);
        ps->textcap = ps->textcap ? ps->textcap : 64;
        ps->text[0] = ch;
        ps->textlen = 1;
        ps->tok = TK_CHAR;
        return;
    }
    p++;
    int t;
    switch (c) {
    case ':':
        if (*p == '=') { p++; t = TK_ASSIGN; }
        else { ps->p = p; SyntaxError(ps, ":= expected"); }
        break;
    case '=': t = TK_EQ; break;
    case '<':
        if (*p == '>') { p++; t = TK_NE; }
        else if (*p == '=') { p++; t = TK_LE; }
        else t = TK_LT;
        break;
    case '>':
        if (*p == '=') { p++; t = TK_GE; } else t = TK_GT;
        break;
    case '+': t = TK_PLUS; break;
    case '-':
        if (*p == '>') { p++; t = TK_ARROW; } else t = TK_MINUS;
        break;
    case '*': t = TK_STAR; break;
    case '/': t = TK_SLASH; break;
    case '^': t = TK_CARET; break;
    case '.':
        if (*p == '.') { p++; t = TK_DOTDOT; } else t = TK_DOT;
        break;
    case ',': t = TK_COMMA; break;
    case ';':
        if (*p == ';') { p++; t = TK_DSEMI; } else t = TK_SEMI;
        break;
    case '(': t = TK_LPAREN; break;
    case ')': t = TK_RPAREN; break;
    case '[': t = TK_LBRACK; break;
    case ']': t = TK_RBRACK; break;
    case '{': t = TK_LBRACE; break;
    case '}': t = TK_RBRACE; break;
    default:
        ps->p = p;
        SyntaxError(ps, "unknown character '%c'", c);
        return;
    }
    ps->p = p;
    ps->tok = t;
}

static const char *TokName(int t)
{
    if (t >= TK_AND)
        return Keywords[t - TK_AND];
    return TokNames[t];
}

static void Expect(Parser *ps, int t)
{
    if (ps->tok != t)
        SyntaxError(ps, "%s expected", TokName(t));
    Next(ps);
}

static Node *NewNode(Parser *ps, int kind)
{
    Node *n = ArenaAlloc(ps->arena, sizeof(Node));
    n->kind = kind;
    n->line = ps->tokline;
    return n;
}

typedef struct NodeVec { Node **v; int n, cap; } NodeVec;
static void VecPush(Parser *ps, NodeVec *vec, Node *x)
{
    if (vec->n == vec->cap) {
        int cap = vec->cap ? vec->cap * 2 : 4;
        Node **nv = ArenaAlloc(ps->arena, cap * sizeof(Node *));
        if (vec->n)
            memcpy(nv, vec->v, vec->n * sizeof(Node *));
        vec->v = nv;
        vec->cap = cap;
    }
    vec->v[vec->n++] = x;
}

static Int AddConst(Parser *ps, Obj c)
{
    PushPlist(ps->consts, c);
    return LEN_PLIST(ps->consts);
}

static Node *ParseExpr(Parser *ps);
static Node *ParseStatements(Parser *ps, int t1, int t2, int t3, int t4);

/* Resolves an identifier to a local of an enclosing function, or a global. */
static Node *Reference(Parser *ps, const char *name)
{
    for (int d = 0; d < ps->nscopes; d++) {
        FuncInfo *fi = ps->scopes[ps->nscopes - 1 - d];
        for (int i = 0; i < fi->nargs + fi->nlocals; i++)
            if (strcmp(fi->names[i], name) == 0) {
                Node *n = NewNode(ps, E_LVAR);
                n->ival = d;
                n->ival2 = i;
                return n;
            }
    }
    Node *n = NewNode(ps, E_GVAR);
    n->ival = GVarName(name);
    return n;
}

static char *ArenaStr(Parser *ps, const char *s)
{
    char *r = ArenaAlloc(ps->arena, strlen(s) + 1);
    strcpy(r, s);
    return r;
}

static Node *ParseFunctionBody(Parser *ps, FuncInfo *fi, int arrow_expr)
{
    if (ps->nscopes >= 255)
        SyntaxError(ps, "functions nested too deeply");
    ps->scopes[ps->nscopes++] = fi;
    int saved_loop = ps->loopdepth;
    ps->loopdepth = 0;
    Node *body;
    if (arrow_expr) {
        Node *ret = NewNode(ps, S_RETURN);
        ret->a = ParseExpr(ps);
        body = NewNode(ps, S_SEQ);
        body->list = ArenaAlloc(ps->arena, sizeof(Node *));
        body->list[0] = ret;
        body->n = 1;
    } else {
        if (ps->tok == TK_LOCAL) {
            Next(ps);
            int cap = fi->nargs + 64;
            char **names = ArenaAlloc(ps->arena, cap * sizeof(char *));
            memcpy(names, fi->names, fi->nargs * sizeof(char *));
            fi->names = names;
            for (;;) {
                if (ps->tok != TK_IDENT)
                    SyntaxError(ps, "identifier expected");
                if (fi->nargs + fi->nlocals >= cap)
                    SyntaxError(ps, "too many local variables");
                for (int i = 0; i < fi->nargs + fi->nlocals; i++)
                    if (strcmp(fi->names[i], ps->text) == 0)
                        SyntaxError(ps, "Name used for two locals");
                fi->names[fi->nargs + fi->nlocals++] = ArenaStr(ps, ps->text);
                Next(ps);
                if (ps->tok != TK_COMMA)
                    break;
                Next(ps);
            }
            Expect(ps, TK_SEMI);
        }
        body = ParseStatements(ps, TK_END, -1, -1, -1);
        Expect(ps, TK_END);
    }
    ps->loopdepth = saved_loop;
    ps->nscopes--;
    fi->body = body;
    return body;
}

static Node *MakeFunc(Parser *ps, FuncInfo *fi)
{
    Node *n = NewNode(ps, E_FUNC);
    n->fi = fi;
    return n;
}

static Node *ParseFunction(Parser *ps)
{
    FuncInfo *fi = ArenaAlloc(ps->arena, sizeof(FuncInfo));
    fi->line = ps->tokline;
    Next(ps);
    Expect(ps, TK_LPAREN);
    char **names = ArenaAlloc(ps->arena, 64 * sizeof(char *));
    while (ps->tok != TK_RPAREN) {
        if (ps->tok != TK_IDENT)
            SyntaxError(ps, "identifier expected");
        if (fi->nargs >= 64)
            SyntaxError(ps, "too many arguments");
        names[fi->nargs++] = ArenaStr(ps, ps->text);
        Next(ps);
        if (ps->tok == TK_COMMA)
            Next(ps);
        else if (ps->tok != TK_RPAREN)
            SyntaxError(ps, ") expected");
    }
    Next(ps);
    fi->names = names;
    Node *n = MakeFunc(ps, fi);
    ParseFunctionBody(ps, fi, 0);
    return n;
}

static Node *ParseList(Parser *ps)
{
    Next(ps);
    NodeVec v = {0};
    if (ps->tok == TK_RBRACK) {
        Next(ps);
        Node *n = NewNode(ps, E_LIST);
        return n;
    }
    Node *first = ParseExpr(ps);
    if (ps->tok == TK_DOTDOT) {
        Next(ps);
        Node *n = NewNode(ps, E_RANGE);
        n->a = first;
        n->b = ParseExpr(ps);
        Expect(ps, TK_RBRACK);
        return n;
    }
    VecPush(ps, &v, first);
    while (ps->tok == TK_COMMA) {
        Next(ps);
        VecPush(ps, &v, ParseExpr(ps));
        if (v.n == 2 && ps->tok == TK_DOTDOT) {
            Next(ps);
            Node *n = NewNode(ps, E_RANGE);
            n->a = v.v[0];
            n->c = v.v[1];
            n->b = ParseExpr(ps);
            Expect(ps, TK_RBRACK);
            return n;
        }
    }
    Expect(ps, TK_RBRACK);
    Node *n = NewNode(ps, E_LIST);
    n->list = v.v;
    n->n = v.n;
    return n;
}

static Node *ParseAtom(Parser *ps)
{
    Node *n;
    switch (ps->tok) {
    case TK_INT: {
        n = NewNode(ps, E_INT);
        if (ps->textlen <= 18) {
            n->ival = strtoll(ps->text, NULL, 10);
        } else {
            n->kind = E_CONST;
            n->ival = AddConst(ps, IntFromDecimal(ps->text));
        }
        Next(ps);
        return n;
    }
    case TK_STRING:
        n = NewNode(ps, E_CONST);
        n->ival = AddConst(ps, MakeString(ps->text, ps->textlen));
        Next(ps);
        return n;
    case TK_CHAR:
        n = NewNode(ps, E_CHAR);
        n->ival = (unsigned char)ps->text[0];
        Next(ps);
        return n;
    case TK_TRUE: Next(ps); return NewNode(ps, E_TRUE);
    case TK_FALSE: Next(ps); return NewNode(ps, E_FALSE);
    case TK_FAIL: Next(ps); return NewNode(ps, E_FAIL);
    case TK_IDENT: {
        char *name = ArenaStr(ps, ps->text);
        Next(ps);
        if (ps->tok == TK_ARROW) {
            Next(ps);
            FuncInfo *fi = ArenaAlloc(ps->arena, sizeof(FuncInfo));
            fi->line = ps->tokline;
            fi->names = ArenaAlloc(ps->arena, sizeof(char *));
            fi->names[0] = name;
            fi->nargs = 1;
            n = MakeFunc(ps, fi);
            ParseFunctionBody(ps, fi, 1);
            return n;
        }
        return Reference(ps, name);
    }
    case TK_FUNCTION:
        return ParseFunction(ps);
    case TK_LBRACK:
        return ParseList(ps);
    case TK_REC: {
        Next(ps);
        Expect(ps, TK_LPAREN);
        NodeVec v = {0};
        int cap = 16, k = 0;
        Int *names = ArenaAlloc(ps->arena, cap * sizeof(Int));
        while (ps->tok != TK_RPAREN) {
            if (ps->tok != TK_IDENT && ps->tok != TK_INT)
                SyntaxError(ps, "identifier expected");
            if (k == cap) {
                Int *nn = ArenaAlloc(ps->arena, 2 * cap * sizeof(Int));
                memcpy(nn, names, cap * sizeof(Int));
                names = nn;
                cap *= 2;
            }
            names[k++] = RNamName(ps->text);
            Next(ps);
            Expect(ps, TK_ASSIGN);
            VecPush(ps, &v, ParseExpr(ps));
            if (ps->tok == TK_COMMA)
                Next(ps);
            else if (ps->tok != TK_RPAREN)
                SyntaxError(ps, ") expected");
        }
        Next(ps);
        n = NewNode(ps, E_REC);
        n->list = v.v;
        n->n = v.n;
        n->ints = names;
        return n;
    }
    case TK_LPAREN: {
        Next(ps);
        if (ps->tok == TK_RPAREN) {
            Next(ps);
            n = NewNode(ps, E_PERM);
            return n;
        }
        Node *e = ParseExpr(ps);
        if (ps->tok == TK_RPAREN) {
            Next(ps);
            return e;
        }
        /* a permutation in cycle notation */
        NodeVec cycles = {0};
        NodeVec cyc = {0};
        VecPush(ps, &cyc, e);
        for (;;) {
            while (ps->tok == TK_COMMA) {
                Next(ps);
                VecPush(ps, &cyc, ParseExpr(ps));
            }
            Expect(ps, TK_RPAREN);
            Node *c = NewNode(ps, E_LIST);
            c->list = cyc.v;
            c->n = cyc.n;
            VecPush(ps, &cycles, c);
            if (ps->tok != TK_LPAREN)
                break;
            Next(ps);
            cyc = (NodeVec){0};
            VecPush(ps, &cyc, ParseExpr(ps));
        }
        n = NewNode(ps, E_PERM);
        n->list = cycles.v;
        n->n = cycles.n;
        return n;
    }
    case TK_ISBOUND: {
        Next(ps);
        Expect(ps, TK_LPAREN);
        n = NewNode(ps, E_ISBOUND);
        n->a = ParseExpr(ps);
        Expect(ps, TK_RPAREN);
        return n;
    }
    }
    SyntaxError(ps, "expression expected");
    return NULL;
}

static Node *ParsePostfix(Parser *ps)
{
    Node *n = ParseAtom(ps);
    for (;;) {
        if (ps->tok == TK_LPAREN) {
            Node *call = NewNode(ps, E_CALL);
            Next(ps);
            NodeVec v = {0};
            while (ps->tok != TK_RPAREN) {
                VecPush(ps, &v, ParseExpr(ps));
                if (ps->tok == TK_COMMA)
                    Next(ps);
                else if (ps->tok != TK_RPAREN)
                    SyntaxError(ps, ") expected");
            }
            Next(ps);
            call->a = n;
            call->list = v.v;
            call->n = v.n;
            n = call;
        } else if (ps->tok == TK_LBRACK) {
            Node *e = NewNode(ps, E_ELM);
            Next(ps);
            e->a = n;
            e->b = ParseExpr(ps);
            Expect(ps, TK_RBRACK);
            n = e;
        } else if (ps->tok == TK_DOT) {
            Next(ps);
            if (ps->tok != TK_IDENT && ps->tok != TK_INT)
                SyntaxError(ps, "record component name expected");
            Node *e = NewNode(ps, E_RECELM);
            e->a = n;
            e->ival = RNamName(ps->text);
            Next(ps);
            n = e;
        } else
            return n;
    }
}

static Node *Binop(Parser *ps, int op, Node *a, Node *b)
{
    Node *n = NewNode(ps, E_BINOP);
    n->ival = op;
    n->a = a;
    n->b = b;
    return n;
}

static Node *ParseUnary(Parser *ps);

static Node *ParsePow(Parser *ps)
{
    Node *a = ParsePostfix(ps);
    if (ps->tok == TK_CARET) {
        Next(ps);
        Node *b = ParseUnary(ps);
        a = Binop(ps, OP_POW, a, b);
        if (ps->tok == TK_CARET)
            SyntaxError(ps, "'^' is not associative; use parentheses");
    }
    return a;
}

static Node *ParseUnary(Parser *ps)
{
    if (ps->tok == TK_MINUS) {
        Next(ps);
        Node *n = NewNode(ps, E_NEG);
        n->a = ParseUnary(ps);
        return n;
    }
    return ParsePow(ps);
}

static Node *ParseProduct(Parser *ps)
{
    Node *a = ParseUnary(ps);
    for (;;) {
        int op = ps->tok == TK_STAR ? OP_PROD : ps->tok == TK_SLASH ? OP_QUO : ps->tok == TK_MOD ? OP_MOD : -1;
        if (op < 0)
            return a;
        Next(ps);
        a = Binop(ps, op, a, ParseUnary(ps));
    }
}

static Node *ParseSum(Parser *ps)
{
    Node *a = ParseProduct(ps);
    for (;;) {
        int op = ps->tok == TK_PLUS ? OP_SUM : ps->tok == TK_MINUS ? OP_DIFF : -1;
        if (op < 0)
            return a;
        Next(ps);
        a = Binop(ps, op, a, ParseProduct(ps));
    }
}

static Node *ParseCompare(Parser *ps)
{
    Node *a = ParseSum(ps);
    int op;
    switch (ps->tok) {
    case TK_EQ: op = OP_EQ; break;
    case TK_NE: op = OP_NE; break;
    case TK_LT: op = OP_LT; break;
    case TK_LE: op = OP_LE; break;
    case TK_GT: op = OP_GT; break;
    case TK_GE: op = OP_GE; break;
    case TK_IN: {
        Next(ps);
        Node *n = NewNode(ps, E_IN);
        n->a = a;
        n->b = ParseSum(ps);
        return n;
    }
    default: return a;
    }
    Next(ps);
    return Binop(ps, op, a, ParseSum(ps));
}

static Node *ParseNot(Parser *ps)
{
    if (ps->tok == TK_NOT) {
        Next(ps);
        Node *n = NewNode(ps, E_NOT);
        n->a = ParseNot(ps);
        return n;
    }
    return ParseCompare(ps);
}

static Node *ParseAnd(Parser *ps)
{
    Node *a = ParseNot(ps);
    while (ps->tok == TK_AND) {
        Next(ps);
        Node *n = NewNode(ps, E_AND);
        n->a = a;
        n->b = ParseNot(ps);
        a = n;
    }
    return a;
}

static Node *ParseExpr(Parser *ps)
{
    Node *a = ParseAnd(ps);
    while (ps->tok == TK_OR) {
        Next(ps);
        Node *n = NewNode(ps, E_OR);
        n->a = a;
        n->b = ParseAnd(ps);
        a = n;
    }
    return a;
}

static int IsAssignable(Node *n)
{
    return n->kind == E_LVAR || n->kind == E_GVAR || n->kind == E_ELM || n->kind == E_RECELM;
}

static Node *ParseStatement(Parser *ps)
{
    Node *n;
    switch (ps->tok) {
    case TK_IF: {
        n = NewNode(ps, S_IF);
        NodeVec conds = {0}, bodies = {0};
        Next(ps);
        VecPush(ps, &conds, ParseExpr(ps));
        Expect(ps, TK_THEN);
        VecPush(ps, &bodies, ParseStatements(ps, TK_ELIF, TK_ELSE, TK_FI, -1));
        while (ps->tok == TK_ELIF) {
            Next(ps);
            VecPush(ps, &conds, ParseExpr(ps));
            Expect(ps, TK_THEN);
            VecPush(ps, &bodies, ParseStatements(ps, TK_ELIF, TK_ELSE, TK_FI, -1));
        }
        if (ps->tok == TK_ELSE) {
            Next(ps);
            n->c = ParseStatements(ps, TK_FI, -1, -1, -1);
        }
        Expect(ps, TK_FI);
        n->list = conds.v;
        n->n = conds.n;
        n->list2 = bodies.v;
        n->n2 = bodies.n;
        break;
    }
    case TK_FOR:
        n = NewNode(ps, S_FOR);
        Next(ps);
        if (ps->tok != TK_IDENT)
            SyntaxError(ps, "identifier expected");
        n->a = Reference(ps, ps->text);
        Next(ps);
        Expect(ps, TK_IN);
        n->b = ParseExpr(ps);
        Expect(ps, TK_DO);
        ps->loopdepth++;
        n->c = ParseStatements(ps, TK_OD, -1, -1, -1);
        ps->loopdepth--;
        Expect(ps, TK_OD);
        break;
    case TK_WHILE:
        n = NewNode(ps, S_WHILE);
        Next(ps);
        n->a = ParseExpr(ps);
        Expect(ps, TK_DO);
        ps->loopdepth++;
        n->b = ParseStatements(ps, TK_OD, -1, -1, -1);
        ps->loopdepth--;
        Expect(ps, TK_OD);
        break;
    case TK_REPEAT:
        n = NewNode(ps, S_REPEAT);
        Next(ps);
        ps->loopdepth++;
        n->a = ParseStatements(ps, TK_UNTIL, -1, -1, -1);
        ps->loopdepth--;
        Expect(ps, TK_UNTIL);
        n->b = ParseExpr(ps);
        break;
    case TK_RETURN:
        n = NewNode(ps, S_RETURN);
        Next(ps);
        if (ps->tok != TK_SEMI)
            n->a = ParseExpr(ps);
        break;
    case TK_BREAK:
    case TK_CONTINUE:
        if (ps->loopdepth == 0)
            SyntaxError(ps, "'%s' statement not enclosed in a loop", TokName(ps->tok));
        n = NewNode(ps, ps->tok == TK_BREAK ? S_BREAK : S_CONTINUE);
        Next(ps);
        break;
    case TK_UNBIND:
        n = NewNode(ps, S_UNBIND);
        Next(ps);
        Expect(ps, TK_LPAREN);
        n->a = ParseExpr(ps);
        if (!IsAssignable(n->a))
            SyntaxError(ps, "Unbind: argument must be a variable, list element or record component");
        Expect(ps, TK_RPAREN);
        break;
    default: {
        Node *e = ParseExpr(ps);
        if (ps->tok == TK_ASSIGN) {
            if (!IsAssignable(e))
                SyntaxError(ps, "left hand side of assignment must be a variable, list element or record component");
            n = NewNode(ps, S_ASS);
            Next(ps);
            n->a = e;
            n->b = ParseExpr(ps);
        } else {
            if (e->kind != E_CALL)
                SyntaxError(ps, "; expected");
            n = NewNode(ps, S_CALL);
            n->a = e;
        }
    }
    }
    if (ps->tok == TK_DSEMI)
        Next(ps);
    else
        Expect(ps, TK_SEMI);
    return n;
}

static Node *ParseStatements(Parser *ps, int t1, int t2, int t3, int t4)
{
    NodeVec v = {0};
    while (ps->tok != t1 && ps->tok != t2 && ps->tok != t3 && ps->tok != t4) {
        if (ps->tok == TK_EOF)
            SyntaxError(ps, "%s expected", TokName(t1));
        if (ps->tok == TK_SEMI) {
            Next(ps);
            continue;
        }
        VecPush(ps, &v, ParseStatement(ps));
    }
    Node *n = NewNode(ps, S_SEQ);
    n->list = v.v;
    n->n = v.n;
    return n;
}

/* ---- evaluation ---- */
enum { ST_NORMAL, ST_RETURN, ST_BREAK, ST_CONTINUE };

/* T_FUNCTION: data[0] = body bag, [1] = env lvars, [2] = name, [3] = FuncInfo* raw,
   [4] = builtin index (raw) */
typedef Obj (*BuiltinFn)(Obj *args, int nargs);
typedef struct Builtin { const char *name; int nargs; BuiltinFn fn; } Builtin;
static Builtin BuiltinTable[64];
static int NumBuiltins;
static __thread int CallDepth;
static __thread UInt StackLimit;  /* lowest safe stack address (set at attach) */


static Obj Eval(Node *n, Obj lvars, Obj body);
static int Exec(Node *n, Obj lvars, Obj body, Obj *ret);

static Obj *LVarSlot(Obj lvars, Int depth, Int idx)
{
    while (depth-- > 0)
        lvars = ADDR_OBJ(lvars)[1];
    return &ADDR_OBJ(lvars)[2 + idx];
}

static Obj LVarBag(Obj lvars, Int depth)
{
    while (depth-- > 0)
        lvars = ADDR_OBJ(lvars)[1];
    return lvars;
}

static const char *LVarName(Obj lvars, Int depth, Int idx)
{
    Obj f = ADDR_OBJ(LVarBag(lvars, depth))[0];
    FuncInfo *fi = (FuncInfo *)ADDR_OBJ(f)[3];
    return fi->names[idx];
}

static Int IntArg(Obj o, const char *what)
{
    if (!IS_INTOBJ(o))
        ErrorQuit("%s must be a small integer (not a %s)", what, TypeName(o));
    return INT_INTOBJ(o);
}

static Obj BoolObj(int b) { return b ? True : False; }

static int IsTrue(Obj o, const char *what)
{
    if (o == True)
        return 1;
    if (o == False)
        return 0;
    ErrorQuit("%s must be 'true' or 'false' (not a %s)", what, TypeName(o));
}

static Obj MakePerm(Node *n, Obj lvars, Obj body)
{
    /* evaluate every point first (they may allocate), then build */
    Int total = 0;
    for (int i = 0; i < n->n; i++)
        total += n->list[i]->n;
    Int *pts = malloc((total + 1) * sizeof(Int));
    Int k = 0, deg = 0;
    for (int i = 0; i < n->n; i++)
        for (int j = 0; j < n->list[i]->n; j++) {
            Obj v = Eval(n->list[i]->list[j], lvars, body);
            if (!IS_INTOBJ(v) || INT_INTOBJ(v) <= 0) {
                free(pts);
                ErrorQuit("Permutation: <expr> must be a positive small integer (not a %s)", TypeName(v));
            }
            pts[k++] = INT_INTOBJ(v);
            if (INT_INTOBJ(v) > deg)
                deg = INT_INTOBJ(v);
        }
    if (deg > (1 << 24)) {
        free(pts);
        ErrorQuit("Permutation: point %ld is too large", (long)deg);
    }
    Obj p = NewPerm((UInt)deg);
    uint32_t *a = ADDR_PERM(p);
    char *seen = calloc(deg + 1, 1);
    k = 0;
    for (int i = 0; i < n->n; i++) {
        int len = n->list[i]->n;
        for (int j = 0; j < len; j++) {
            Int x = pts[k + j], y = pts[k + (j + 1) % len];
            if (seen[x]) {
                free(seen);
                free(pts);
                ErrorQuit("Permutation: cycles must be disjoint and duplicate-free");
            }
            seen[x] = 1;
            a[x - 1] = (uint32_t)(y - 1);
        }
        k += len;
    }
    free(seen);
    free(pts);
    return p;
}

static Obj NewFunction(Obj body, Obj env, FuncInfo *fi, Int builtin)
{
    Obj f = NewBag(T_FUNCTION, 5 * sizeof(Obj));
    ADDR_OBJ(f)[0] = body;
    ADDR_OBJ(f)[1] = env;
    ADDR_OBJ(f)[2] = 0;
    ADDR_OBJ(f)[3] = (Obj)fi;
    ADDR_OBJ(f)[4] = (Obj)(UInt)builtin;
    CHANGED_BAG(f);
    return f;
}

static Obj Eval(Node *n, Obj lvars, Obj body)
{
    CurrLine = n->line;
    switch (n->kind) {
    case E_INT: return ObjInt(n->ival);
    case E_CONST: return ELM_PLIST(ADDR_OBJ(body)[1], n->ival);
    case E_TRUE: return True;
    case E_FALSE: return False;
    case E_FAIL: return Fail;
    case E_CHAR: return CharBags[n->ival];
    case E_LVAR: {
        Obj v = *LVarSlot(lvars, n->ival, n->ival2);
        if (!v)
            ErrorQuit("Variable: '%s' must have an assigned value", LVarName(lvars, n->ival, n->ival2));
        return v;
    }
    case E_GVAR: {
        Obj v = ValGVar(n->ival);
        if (!v)
            ErrorQuit("Variable: '%s' must have a value", GVarNames[n->ival - 1]);
        return v;
    }
    case E_LIST: {
        Obj l = NEW_PLIST(n->n);
        for (int i = 0; i < n->n; i++) {
            Obj v = Eval(n->list[i], lvars, body);
            AssPlist(l, i + 1, v);
        }
        return l;
    }
    case E_RANGE: {
        Obj lo = Eval(n->a, lvars, body);
        Obj second = n->c ? Eval(n->c, lvars, body) : 0;
        Obj hi = Eval(n->b, lvars, body);
        Int low = IntArg(lo, "Range: <first>"), high = IntArg(hi, "Range: <last>");
        Int inc = second ? IntArg(second, "Range: <second>") - low : 1;
        if (inc == 0)
            ErrorQuit("Range: <second> must not be equal to <first> (%ld)", (long)low);
        if ((high - low) % inc != 0)
            ErrorQuit("Range: <last>-<first> (%ld) must be divisible by <inc> (%ld)", (long)(high - low), (long)inc);
        Int len = (high - low) / inc + 1;
        if (len < 0)
            len = 0;
        return NewRange(len, low, inc);
    }
    case E_REC: {
        Obj r = NewRec(n->n);
        for (int i = 0; i < n->n; i++) {
            Obj v = Eval(n->list[i], lvars, body);
            AssRec(r, n->ints[i], v);
        }
        return r;
    }
    case E_PERM:
        return MakePerm(n, lvars, body);
    case E_FUNC:
        return NewFunction(body, lvars, n->fi, 0);
    case E_CALL: {
        Obj f = Eval(n->a, lvars, body);
        Obj args[64];
        if (n->n > 64)
            ErrorQuit("Function Calls: at most 64 arguments");
        for (int i = 0; i < n->n; i++)
            args[i] = Eval(n->list[i], lvars, body);
        CurrLine = n->line;
        return CallFunc(f, args, n->n);
    }
    case E_ELM: {
        Obj l = Eval(n->a, lvars, body);
        Obj i = Eval(n->b, lvars, body);
        if (!IS_LIST(l))
            ErrorQuit("List Element: <list> must be a list (not a %s)", TypeName(l));
        if (!IS_INTOBJ(i) || INT_INTOBJ(i) < 1)
            ErrorQuit("List Element: <position> must be a positive small integer (not a %s)", TypeName(i));
        return ELM_LIST(l, INT_INTOBJ(i));
    }
    case E_RECELM: {
        Obj r = Eval(n->a, lvars, body);
        if (TNUM_OBJ(r) != T_REC)
            ErrorQuit("Record Element: <rec> must be a record (not a %s)", TypeName(r));
        Obj v = ElmRec(r, n->ival);
        if (!v)
            ErrorQuit("Record Element: '<rec>.%s' must have an assigned value", NameRNam(n->ival));
        return v;
    }
    case E_BINOP: {
        Obj a = Eval(n->a, lvars, body);
        Obj b = Eval(n->b, lvars, body);
        CurrLine = n->line;
        switch (n->ival) {
        case OP_SUM: return SumObj(a, b);
        case OP_DIFF: return DiffObj(a, b);
        case OP_PROD: return ProdObj(a, b);
        case OP_QUO: return QuoObj(a, b);
        case OP_MOD: return ModObj(a, b);
        case OP_POW: return PowObj(a, b);
        case OP_EQ: return BoolObj(EqObj(a, b));
        case OP_NE: return BoolObj(!EqObj(a, b));
        case OP_LT: return BoolObj(LtObj(a, b));
        case OP_LE: return BoolObj(!LtObj(b, a));
        case OP_GT: return BoolObj(LtObj(b, a));
        case OP_GE: return BoolObj(!LtObj(a, b));
        }
        return 0;
    }
    case E_NOT: return BoolObj(!IsTrue(Eval(n->a, lvars, body), "not: <expr>"));
    case E_NEG: return AInvObj(Eval(n->a, lvars, body));
    case E_AND:
        if (!IsTrue(Eval(n->a, lvars, body), "<expr> and <expr>: <expr>"))
            return False;
        return BoolObj(IsTrue(Eval(n->b, lvars, body), "<expr> and <expr>: <expr>"));
    case E_OR:
        if (IsTrue(Eval(n->a, lvars, body), "<expr> or <expr>: <expr>"))
            return True;
        return BoolObj(IsTrue(Eval(n->b, lvars, body), "<expr> or <expr>: <expr>"));
    case E_IN: {
        Obj x = Eval(n->a, lvars, body);
        Obj l = Eval(n->b, lvars, body);
        if (!IS_LIST(l))
            ErrorQuit("in: <list> must be a list (not a %s)", TypeName(l));
        Int len = LEN_LIST(l);
        for (Int i = 1; i <= len; i++) {
            Obj e = ELM0_LIST(l, i);
            if (e && EqObj(e, x))
                return True;
        }
        return False;
    }
    case E_ISBOUND: {
        Node *t = n->a;
        if (t->kind == E_LVAR)
            return BoolObj(*LVarSlot(lvars, t->ival, t->ival2) != 0);
        if (t->kind == E_GVAR)
            return BoolObj(ValGVar(t->ival) != 0);
        if (t->kind == E_ELM) {
            Obj l = Eval(t->a, lvars, body);
            Obj i = Eval(t->b, lvars, body);
            return BoolObj(IS_LIST(l) && IS_INTOBJ(i) && ELM0_LIST(l, INT_INTOBJ(i)) != 0);
        }
        if (t->kind == E_RECELM) {
            Obj r = Eval(t->a, lvars, body);
            return BoolObj(TNUM_OBJ(r) == T_REC && ElmRec(r, t->ival) != 0);
        }
        ErrorQuit("IsBound: <expr> must be a variable, list element or record component");
    }
    }
    ErrorQuit("internal: unknown expression kind %d", n->kind);
}

static void Assign(Node *t, Obj v, Obj lvars, Obj body)
{
    switch (t->kind) {
    case E_LVAR: {
        Obj bag = LVarBag(lvars, t->ival);
        ADDR_OBJ(bag)[2 + t->ival2] = v;
        CHANGED_BAG(bag);
        return;
    }
    case E_GVAR:
        AssGVar(t->ival, v);
        return;
    case E_ELM: {
        Obj l = Eval(t->a, lvars, body);
        Obj i = Eval(t->b, lvars, body);
        if (!IS_INTOBJ(i) || INT_INTOBJ(i) < 1)
            ErrorQuit("List Assignment: <position> must be a positive small integer (not a %s)", TypeName(i));
        AssList(l, INT_INTOBJ(i), v);
        return;
    }
    case E_RECELM: {
        Obj r = Eval(t->a, lvars, body);
        if (TNUM_OBJ(r) != T_REC)
            ErrorQuit("Record Assignment: <rec> must be a record (not a %s)", TypeName(r));
        AssRec(r, t->ival, v);
        return;
    }
    }
}

static int ExecSeq(Node *n, Obj lvars, Obj body, Obj *ret)
{
    for (int i = 0; i < n->n; i++) {
        int st = Exec(n->list[i], lvars, body, ret);
        if (st != ST_NORMAL)
            return st;
    }
    return ST_NORMAL;
}

static int Exec(Node *n, Obj lvars, Obj body, Obj *ret)
{
    CurrLine = n->line;
    GasmanPoll();
    switch (n->kind) {
    case S_SEQ:
        return ExecSeq(n, lvars, body, ret);
    case S_ASS: {
        Obj v = Eval(n->b, lvars, body);
        Assign(n->a, v, lvars, body);
        return ST_NORMAL;
    }
    case S_UNBIND: {
        Node *t = n->a;
        if (t->kind == E_GVAR) {
            Obj g = ThreadGlobals();
            if (t->ival <= LEN_PLIST(g))
                SET_ELM_PLIST(g, t->ival, 0);
        } else if (t->kind == E_LVAR) {
            *LVarSlot(lvars, t->ival, t->ival2) = 0;
        } else if (t->kind == E_ELM) {
            Obj l = Eval(t->a, lvars, body);
            Obj i = Eval(t->b, lvars, body);
            if (IS_LIST(l) && IS_INTOBJ(i) && INT_INTOBJ(i) >= 1 && INT_INTOBJ(i) <= LEN_LIST(l)) {
                PlainList(l);
                SET_ELM_PLIST(l, INT_INTOBJ(i), 0);
                while (LEN_PLIST(l) > 0 && !ELM_PLIST(l, LEN_PLIST(l)))
                    SET_LEN_PLIST(l, LEN_PLIST(l) - 1);
            }
        } else
            ErrorQuit("Unbind: record components cannot be unbound by this kernel");
        return ST_NORMAL;
    }
    case S_CALL:
        Eval(n->a, lvars, body);
        return ST_NORMAL;
    case S_IF:
        for (int i = 0; i < n->n; i++)
            if (IsTrue(Eval(n->list[i], lvars, body), "if: <condition>"))
                return Exec(n->list2[i], lvars, body, ret);
        if (n->c)
            return Exec(n->c, lvars, body, ret);
        return ST_NORMAL;
    case S_FOR: {
        Obj l = Eval(n->b, lvars, body);
        if (!IS_LIST(l))
            ErrorQuit("You cannot loop over the object (a %s)", TypeName(l));
        for (Int i = 1; i <= LEN_LIST(l); i++) {
            Obj e = ELM0_LIST(l, i);
            if (!e)
                continue;
            Assign(n->a, e, lvars, body);
            int st = Exec(n->c, lvars, body, ret);
            if (st == ST_BREAK)
                break;
            if (st == ST_RETURN)
                return st;
        }
        return ST_NORMAL;
    }
    case S_WHILE:
        while (IsTrue(Eval(n->a, lvars, body), "while: <condition>")) {
            int st = Exec(n->b, lvars, body, ret);
            if (st == ST_BREAK)
                break;
            if (st == ST_RETURN)
                return st;
        }
        return ST_NORMAL;
    case S_REPEAT:
        for (;;) {
            int st = Exec(n->a, lvars, body, ret);
            if (st == ST_BREAK)
                break;
            if (st == ST_RETURN)
                return st;
            if (IsTrue(Eval(n->b, lvars, body), "until: <condition>"))
                break;
        }
        return ST_NORMAL;
    case S_RETURN:
        *ret = n->a ? Eval(n->a, lvars, body) : 0;
        return ST_RETURN;
    case S_BREAK: return ST_BREAK;
    case S_CONTINUE: return ST_CONTINUE;
    }
    ErrorQuit("internal: unknown statement kind %d", n->kind);
}

static Obj CallFunc(Obj f, Obj *args, int nargs)
{
    if (TNUM_OBJ(f) != T_FUNCTION)
        ErrorQuit("Function Calls: <func> must be a function (not a %s)", TypeName(f));
    Int bi = (Int)(UInt)ADDR_OBJ(f)[4];
    if (bi) {
        Builtin *b = &BuiltinTable[bi - 1];
        if (b->nargs >= 0 && b->nargs != nargs)
            ErrorQuit("Function: number of arguments must be %d (not %d)", b->nargs, nargs);
        return b->fn(args, nargs);
    }
    FuncInfo *fi = (FuncInfo *)ADDR_OBJ(f)[3];
    if (fi->nargs != nargs)
        ErrorQuit("Function: number of arguments must be %d (not %d)", fi->nargs, nargs);
    if (++CallDepth > 5000) {
        CallDepth = 0;
        ErrorQuit("recursion depth trap (5000)");
    }
    char here;
    if (StackLimit && (UInt)&here < StackLimit) {
        int depth = CallDepth;
        CallDepth = 0;
        ErrorQuit("recursion depth trap (the thread's C stack is exhausted at depth %d)", depth);
    }
    Obj lvars = NewBag(T_LVARS, (UInt)(2 + fi->nargs + fi->nlocals) * sizeof(Obj));
    ADDR_OBJ(lvars)[0] = f;
    ADDR_OBJ(lvars)[1] = ADDR_OBJ(f)[1];
    for (int i = 0; i < nargs; i++)
        ADDR_OBJ(lvars)[2 + i] = args[i];
    CHANGED_BAG(lvars);
    Obj body = ADDR_OBJ(f)[0];
    Obj ret = 0;
    int line = CurrLine;
    Exec(fi->body, lvars, body, &ret);
    CurrLine = line;
    CallDepth--;
    return ret;
}

static Obj CallFuncChecked(Obj f, Obj *args, int nargs, const char *who)
{
    Obj r = CallFunc(f, args, nargs);
    if (!r)
        ErrorQuit("%s: <func> must return a value", who);
    return r;
}

/* Parses and runs `code` (the caller has set up error handling). */
static void ReadEvalString(const char *code, const char *file)
{
    Parser ps;
    memset(&ps, 0, sizeof ps);
    ps.src = ps.p = code;
    ps.file = file;
    ps.line = 1;
    ps.arena = calloc(1, sizeof(Arena));
    /* the arena belongs to the T_BODY bag from now on (its free function frees it) */
    Obj body = NewBag(T_BODY, 2 * sizeof(Obj));
    ADDR_OBJ(body)[0] = (Obj)ps.arena;
    Obj consts = NEW_PLIST(4);
    ADDR_OBJ(body)[1] = consts;
    CHANGED_BAG(body);
    ps.consts = consts;
    CurrFile = file;
    CurrParser = &ps;
    /* top-level statements are parsed and run one at a time, as GAP reads them */
    jmp_buf *outer = ErrorJmp;
    jmp_buf here;
    ErrorJmp = &here;
    if (setjmp(here)) {
        free(ps.text);
        ErrorJmp = outer;
        longjmp(*outer, 1);
    }
    Next(&ps);
    while (ps.tok != TK_EOF) {
        if (ps.tok == TK_SEMI || ps.tok == TK_DSEMI) {
            Next(&ps);
            continue;
        }
        Node *st = ParseStatement(&ps);
        Obj ret = 0;
        int status = Exec(st, 0, body, &ret);
        if (status == ST_RETURN)
            break;
        PrFlushLines(0);
    }
    free(ps.text);
    ErrorJmp = outer;
}

/* ---- printing functions (GAP prints their code; this kernel prints the header) ---- */
static void PrintFunction(Obj f)
{
    Int bi = (Int)(UInt)ADDR_OBJ(f)[4];
    if (bi) {
        Pr("function ( arg ) <compiled code> end");
        return;
    }
    FuncInfo *fi = (FuncInfo *)ADDR_OBJ(f)[3];
    Pr("function ( ");
    for (int i = 0; i < fi->nargs; i++)
        Pr(i ? ", %s" : "%s", fi->names[i]);
    Pr(" ) ... end");
}
