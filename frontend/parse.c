/*
 * parse.c - the .ir parser: text -> fc_graph (grammar in docs/IR.md).
 *
 * The grammar is flat (graphs hold statements, statements hold operands and
 * attributes, attributes hold at most one level of list), so the parser is a
 * set of plain loops and never recurses: no input can exhaust the stack.
 *
 * Every graph of a file is parsed and built, so an error anywhere in the file
 * is reported; the selected graph is kept and the others are freed. Shapes,
 * dtypes and arity are checked by the builders (fc_build), which report at
 * g->cur_loc; this file reports what only the text knows: syntax, names,
 * attributes, declared types.
 *
 * Errors stop the parse at the first one. Every function that can fail
 * returns false (or NULL) after recording the diagnostic on the context and
 * the status (input error or out of memory) in p->status.
 */
#include "input.h"
#include "lex.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One entry of the value table: a name (without '%', pointing into the
 * source text) and its value. */
typedef struct Slot {
    const char *name;
    size_t len;
    fc_value *v;
} Slot;

typedef struct Parser {
    fc_context *ctx;
    const char *file; /* for diagnostics */
    const char *text;
    size_t len;
    fc_tokens toks;
    int pos;
    fc_status status;

    const fc_binding *binds;
    int nbinds;

    fc_graph *g; /* the graph being built */

    /* Value names of the current graph: open addressing, power-of-two size. */
    Slot *slots;
    size_t nslots, used;

    /* Scratch arrays, reused by every statement. */
    fc_value **ins;
    int cap_ins;
    int64_t *list;
    int cap_list;
    const fc_token **lhs;
    int cap_lhs;
} Parser;

/* ------------------------------------------------------------------ */
/* Errors and tokens                                                    */
/* ------------------------------------------------------------------ */

/* Record a diagnostic at token t. A lexical error token always reports its
 * own message: whatever the parser expected, the text there is malformed. */
__attribute__((format(printf, 3, 4)))
static bool error_at(Parser *p, const fc_token *t, const char *fmt, ...) {
    if (t->kind == TK_ERROR) {
        fc_diag(p->ctx, p->file, p->text, p->len, t->loc, "%s", p->toks.error);
    } else {
        va_list ap;
        va_start(ap, fmt);
        fc_diagv(p->ctx, p->file, p->text, p->len, t->loc, fmt, ap);
        va_end(ap);
    }
    p->status = FC_ERR_INPUT;
    return false;
}

static const fc_token *cur(const Parser *p) { return &p->toks.tok[p->pos]; }
static const fc_token *peek_next(const Parser *p) {
    return cur(p)->kind == TK_EOF ? cur(p) : &p->toks.tok[p->pos + 1];
}

/* Consume the current token and return it; EOF is never stepped over. */
static const fc_token *advance(Parser *p) {
    const fc_token *t = cur(p);
    if (t->kind != TK_EOF) p->pos++;
    return t;
}

static bool expected(Parser *p, const char *what) {
    char found[64];
    fc_tok_describe(cur(p), found, sizeof found);
    return error_at(p, cur(p), "expected %s but found %s", what, found);
}

static bool accept_punct(Parser *p, char c) {
    if (!fc_tok_is_punct(cur(p), c)) return false;
    advance(p);
    return true;
}

static bool expect_punct(Parser *p, char c) {
    if (accept_punct(p, c)) return true;
    char what[8];
    snprintf(what, sizeof what, "'%c'", c);
    return expected(p, what);
}

/* The builders failed (or ran out of memory): their diagnostic is already
 * on the context. */
static bool graph_failed(Parser *p) {
    p->status = p->g->status ? p->g->status : FC_ERR_INPUT;
    return false;
}

static bool oom(Parser *p) {
    p->status = FC_ERR_NOMEM;
    return false;
}

/* Grow a malloc'd scratch array to hold `need` elements. */
static bool grow(Parser *p, void **arr, int *cap, int need, size_t elem) {
    if (need <= *cap) return true;
    int ncap = *cap ? *cap : 16;
    while (ncap < need) ncap *= 2;
    void *q = fc_ctx_realloc(p->ctx, *arr, (size_t)ncap * elem);
    if (!q) return oom(p);
    *arr = q;
    *cap = ncap;
    return true;
}

/* ------------------------------------------------------------------ */
/* Numbers                                                              */
/* ------------------------------------------------------------------ */

/* A bare number: a numeric literal, or the names inf and nan. */
static bool tok_is_number(const fc_token *t) {
    return t->kind == TK_INT || t->kind == TK_FLOAT || fc_tok_is_word(t, "inf") || fc_tok_is_word(t, "nan");
}

/* Token text as a C string, for strtod and strtoll: the source is not
 * NUL-terminated. Returns buf, or a malloc'd copy for long literals. */
static char *tok_cstr(Parser *p, const fc_token *t, char *buf, size_t n) {
    char *s = t->len < n ? buf : fc_ctx_malloc(p->ctx, t->len + 1);
    if (!s) return NULL;
    memcpy(s, t->s, t->len);
    s[t->len] = 0;
    return s;
}

static bool tok_double(Parser *p, const fc_token *t, double *out) {
    if (fc_tok_is_word(t, "inf")) *out = INFINITY;
    else if (fc_tok_is_word(t, "nan")) *out = NAN;
    else {
        char buf[64], *s = tok_cstr(p, t, buf, sizeof buf);
        if (!s) return oom(p);
        /* The lexer accepted it, so strtod reads all of it. Overflow rounds
         * to inf, as in C and Python. */
        *out = strtod(s, NULL);
        if (s != buf) fc_ctx_freemem(p->ctx, s);
    }
    return true;
}

static bool tok_int64(Parser *p, const fc_token *t, int64_t *out) {
    char buf[64], *s = tok_cstr(p, t, buf, sizeof buf);
    if (!s) return oom(p);
    errno = 0;
    long long v = strtoll(s, NULL, 10);
    bool range = errno == ERANGE;
    if (s != buf) fc_ctx_freemem(p->ctx, s);
    if (range) return error_at(p, t, "integer %.*s is out of range", (int)(t->len > 40 ? 40 : t->len), t->s);
    *out = (int64_t)v;
    return true;
}

/* ------------------------------------------------------------------ */
/* The value table                                                      */
/* ------------------------------------------------------------------ */

static size_t hash_name(const char *s, size_t n) {
    uint64_t h = 14695981039346656037u; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211u;
    return (size_t)h;
}

/* The slot holding name, or the empty slot where it would go. */
static Slot *find_slot(Slot *slots, size_t nslots, const char *name, size_t len) {
    size_t i = hash_name(name, len) & (nslots - 1);
    while (slots[i].name && (slots[i].len != len || memcmp(slots[i].name, name, len) != 0))
        i = (i + 1) & (nslots - 1);
    return &slots[i];
}

/* A VALUE token names "%name": the table is keyed by the text after '%'. */
static fc_value *lookup(Parser *p, const fc_token *t) {
    if (!p->nslots) return NULL;
    return find_slot(p->slots, p->nslots, t->s + 1, t->len - 1)->v;
}

static bool define(Parser *p, const fc_token *t, fc_value *v) {
    if (2 * (p->used + 1) > p->nslots) {
        size_t n = p->nslots ? 2 * p->nslots : 64;
        Slot *slots = fc_ctx_malloc(p->ctx, n * sizeof *slots);
        if (!slots) return oom(p);
        memset(slots, 0, n * sizeof *slots);
        for (size_t i = 0; i < p->nslots; i++)
            if (p->slots[i].name) *find_slot(slots, n, p->slots[i].name, p->slots[i].len) = p->slots[i];
        fc_ctx_freemem(p->ctx, p->slots);
        p->slots = slots;
        p->nslots = n;
    }
    *find_slot(p->slots, p->nslots, t->s + 1, t->len - 1) = (Slot){t->s + 1, t->len - 1, v};
    p->used++;
    return true;
}

static void clear_values(Parser *p) {
    fc_ctx_freemem(p->ctx, p->slots);
    p->slots = NULL;
    p->nslots = p->used = 0;
}

/* ------------------------------------------------------------------ */
/* Types                                                                */
/* ------------------------------------------------------------------ */

/* type := DTYPE '[' [dim {',' dim}] ']'. Symbols are looked up (or made)
 * in the current graph, so bound symbols come back static. */
static bool parse_type(Parser *p, fc_dtype *dt, int *rank, fc_dim *dims) {
    const fc_token *t = cur(p);
    if (t->kind != TK_NAME) return expected(p, "a type");
    *dt = fc_dtype_from_name(t->s, t->len);
    if (*dt == FC_DTYPE_COUNT)
        return error_at(p, t, "unknown dtype '%.*s'", (int)(t->len > 40 ? 40 : t->len), t->s);
    advance(p);
    if (!expect_punct(p, '[')) return false;
    *rank = 0;
    if (accept_punct(p, ']')) return true;
    for (;;) {
        const fc_token *d = cur(p);
        fc_dim dim;
        if (d->kind == TK_INT) {
            int64_t v;
            if (!tok_int64(p, d, &v)) return false;
            if (v < 0) return error_at(p, d, "dimension %lld is negative", (long long)v);
            dim = v;
        } else if (d->kind == TK_NAME) {
            dim = fc_graph_sym(p->g, d->s, d->len);
            if (p->g->status) return graph_failed(p);
        } else {
            return expected(p, "a dimension (an integer or a symbol)");
        }
        if (*rank == FC_MAX_RANK) return error_at(p, d, "too many dimensions (at most %d)", FC_MAX_RANK);
        dims[(*rank)++] = dim;
        advance(p);
        if (accept_punct(p, ',')) continue;
        if (accept_punct(p, ']')) return true;
        return expected(p, "',' or ']'");
    }
}

static bool same_type(const fc_value *v, fc_dtype dt, int rank, const fc_dim *dims) {
    if (v->dtype != dt || v->rank != rank) return false;
    for (int i = 0; i < rank; i++)
        if (v->dims[i] != dims[i]) return false;
    return true;
}

/* ------------------------------------------------------------------ */
/* Attributes                                                           */
/* ------------------------------------------------------------------ */

static const char *kind_desc(fc_attr_kind k) {
    switch (k) {
    case FC_ATTR_INT: return "an integer";
    case FC_ATTR_INTS: return "a list of integers";
    case FC_ATTR_DIMS: return "a list of dimensions";
    case FC_ATTR_BOOL: return "true or false";
    case FC_ATTR_FLOAT: return "a number";
    case FC_ATTR_DTYPE: return "a dtype";
    case FC_ATTR_STRS: return "a list of strings";
    }
    FC_UNREACHABLE("bad attribute kind");
}

static bool wrong_kind(Parser *p, fc_op op, const fc_attr_spec *sp, const fc_token *t) {
    char found[64];
    fc_tok_describe(t, found, sizeof found);
    return error_at(p, t, "%s: attribute '%s' expects %s but found %s", fc_op_table[op].name, sp->name,
                    kind_desc(sp->kind), found);
}

/* A list attribute: '[' [elem {',' elem}] ']', elements integers (ints) or
 * integers, symbols and -1 (dims). The list goes to p->list. Lists never
 * nest, so a '[' inside one is an error rather than a reason to recurse. */
static bool parse_list(Parser *p, fc_op op, const fc_attr_spec *sp, fc_attrs *a) {
    if (!fc_tok_is_punct(cur(p), '[')) return wrong_kind(p, op, sp, cur(p));
    advance(p);
    int n = 0;
    if (!accept_punct(p, ']')) {
        for (;;) {
            const fc_token *t = cur(p);
            int64_t v;
            if (fc_tok_is_punct(t, '['))
                return error_at(p, t, "%s: nested lists are not allowed in attributes", fc_op_table[op].name);
            if (t->kind == TK_INT) {
                if (!tok_int64(p, t, &v)) return false;
                /* Symbols are encoded as dims <= -2: a literal there would
                 * silently turn into a symbol. */
                if (sp->kind == FC_ATTR_DIMS && v < FC_DIM_INFER)
                    return error_at(p, t, "%s: invalid dimension %lld in '%s' (a size, a symbol or -1)",
                                    fc_op_table[op].name, (long long)v, sp->name);
            } else if (t->kind == TK_NAME && sp->kind == FC_ATTR_DIMS) {
                v = fc_graph_sym(p->g, t->s, t->len);
                if (p->g->status) return graph_failed(p);
            } else {
                return wrong_kind(p, op, sp, t);
            }
            if (!grow(p, (void **)&p->list, &p->cap_list, n + 1, sizeof *p->list)) return false;
            p->list[n++] = v;
            advance(p);
            if (accept_punct(p, ',')) continue;
            if (accept_punct(p, ']')) break;
            return expected(p, "',' or ']'");
        }
    }
    a->list = p->list;
    a->nlist = n;
    return true;
}

static int hex_digit(int c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* The bytes of string token t (quotes included) into the graph's arena:
 * \\ \" \n \t and \xHH escapes, as the printer writes them; a NUL
 * byte is refused (a string element ends at its NUL). */
static char *string_value(Parser *p, const fc_token *t) {
    char *out = fc_arena_alloc(&p->g->arena, t->len);
    if (!out) return p->status = FC_ERR_NOMEM, NULL;
    size_t n = 0;
    for (size_t i = 1; i + 1 < t->len; i++) {
        int c = (unsigned char)t->s[i];
        if (c == '\\') {
            int e = (unsigned char)t->s[++i];
            if (e == 'n') c = '\n';
            else if (e == 't') c = '\t';
            else if (e == '\\' || e == '"') c = e;
            else if (e == 'x' && i + 3 < t->len && hex_digit(t->s[i + 1]) >= 0 && hex_digit(t->s[i + 2]) >= 0) {
                c = hex_digit(t->s[i + 1]) * 16 + hex_digit(t->s[i + 2]);
                i += 2;
            } else {
                error_at(p, t, "unknown escape '\\%c' in a string (\\\\, \\\", \\n, \\t, \\xHH)", e);
                return NULL;
            }
            if (c == 0) {
                error_at(p, t, "a string cannot hold a NUL byte");
                return NULL;
            }
        }
        out[n++] = (char)c;
    }
    out[n] = 0;
    return out;
}

/* A list of strings: '[' [STRING {',' STRING}] ']', kept in the graph's
 * arena (fc_build copies it again, as it does every list). */
static bool parse_strs(Parser *p, fc_op op, const fc_attr_spec *sp, fc_attrs *a) {
    if (!fc_tok_is_punct(cur(p), '[')) return wrong_kind(p, op, sp, cur(p));
    advance(p);
    int n = 0, cap = 0;
    const char **strs = NULL;
    if (!accept_punct(p, ']')) {
        for (;;) {
            const fc_token *t = cur(p);
            if (t->kind != TK_STRING) return wrong_kind(p, op, sp, t);
            if (n == cap) {
                cap = cap ? 2 * cap : 8;
                const char **g = fc_arena_alloc(&p->g->arena, sizeof *g * (size_t)cap);
                if (!g) return p->status = FC_ERR_NOMEM, false;
                if (n) memcpy(g, strs, sizeof *g * (size_t)n);
                strs = g;
            }
            if (!(strs[n++] = string_value(p, t))) return false;
            advance(p);
            if (accept_punct(p, ',')) continue;
            if (accept_punct(p, ']')) break;
            return expected(p, "',' or ']'");
        }
    }
    a->strs = strs;
    a->nstrs = n;
    return true;
}

/* NAME '=' attr, checked against op's signature. `seen` marks the
 * attributes already given. */
static bool parse_attr(Parser *p, fc_op op, fc_attrs *a, bool *seen) {
    const char *opname = fc_op_table[op].name;
    const fc_attr_spec *specs;
    int nspecs = fc_op_attr_specs(op, &specs);
    const fc_token *nt = advance(p);
    advance(p); /* '=', checked by the caller */

    int k = 0;
    while (k < nspecs && !(strlen(specs[k].name) == nt->len && memcmp(specs[k].name, nt->s, nt->len) == 0)) k++;
    int shown = (int)(nt->len > 40 ? 40 : nt->len);
    if (k == nspecs) return error_at(p, nt, "%s: unknown attribute '%.*s'", opname, shown, nt->s);
    if (seen[k]) return error_at(p, nt, "%s: duplicate attribute '%.*s'", opname, shown, nt->s);
    seen[k] = true;

    const fc_attr_spec *sp = &specs[k];
    if (sp->kind == FC_ATTR_INTS || sp->kind == FC_ATTR_DIMS) return parse_list(p, op, sp, a);
    if (sp->kind == FC_ATTR_STRS) return parse_strs(p, op, sp, a);

    int64_t *ip;
    bool *bp;
    double *fp;
    fc_dtype *dp;
    fc_attr_field(a, sp->name, &ip, &bp, &fp, &dp);
    const fc_token *t = cur(p);
    switch (sp->kind) {
    case FC_ATTR_INT:
        if (t->kind != TK_INT) return wrong_kind(p, op, sp, t);
        if (!tok_int64(p, t, ip)) return false;
        break;
    case FC_ATTR_FLOAT:
        if (!tok_is_number(t)) return wrong_kind(p, op, sp, t);
        if (!tok_double(p, t, fp)) return false;
        break;
    case FC_ATTR_BOOL:
        if (fc_tok_is_word(t, "true")) *bp = true;
        else if (fc_tok_is_word(t, "false")) *bp = false;
        else return wrong_kind(p, op, sp, t);
        break;
    case FC_ATTR_DTYPE:
        if (t->kind != TK_NAME) return wrong_kind(p, op, sp, t);
        *dp = fc_dtype_from_name(t->s, t->len);
        if (*dp == FC_DTYPE_COUNT)
            return error_at(p, t, "unknown dtype '%.*s'", (int)(t->len > 40 ? 40 : t->len), t->s);
        break;
    default:
        FC_UNREACHABLE("list kinds are handled above");
    }
    advance(p);
    return true;
}

/* ------------------------------------------------------------------ */
/* Statements                                                           */
/* ------------------------------------------------------------------ */

static const char *plural(int n) { return n == 1 ? "" : "s"; }

/* The declared types after ':' of a statement that built `node`. */
static bool parse_declared_types(Parser *p, const fc_node *node) {
    const fc_token *colon = advance(p);
    int n = 0;
    for (;;) {
        const fc_token *t = cur(p);
        fc_dtype dt;
        int rank;
        fc_dim dims[FC_MAX_RANK];
        if (!parse_type(p, &dt, &rank, dims)) return false;
        if (n < node->nout && !same_type(node->out[n], dt, rank, dims)) {
            const fc_value *v = node->out[n];
            char want[256], got[256];
            fc_type_str(p->g, dt, rank, dims, want, sizeof want);
            fc_type_str(p->g, v->dtype, v->rank, v->dims, got, sizeof got);
            return error_at(p, t, "declared type %s does not match inferred type %s", want, got);
        }
        n++;
        if (!accept_punct(p, ',')) break;
    }
    if (n != node->nout)
        return error_at(p, colon, "%s has %d result%s but %d type%s declared", fc_op_table[node->op].name,
                        node->nout, plural(node->nout), n, n == 1 ? " is" : "s are");
    return true;
}

/* stmt := VALUE {',' VALUE} '=' NAME '(' [arg {',' arg}] ')' [':' type {',' type}] */
static bool parse_stmt(Parser *p) {
    /* Results. */
    int nlhs = 0;
    for (;;) {
        const fc_token *t = cur(p);
        if (t->kind != TK_VALUE) return expected(p, "a value name");
        bool dup = lookup(p, t) != NULL;
        for (int i = 0; i < nlhs && !dup; i++) dup = p->lhs[i]->len == t->len && !memcmp(p->lhs[i]->s, t->s, t->len);
        if (dup) return error_at(p, t, "value %.*s is already defined", (int)t->len, t->s);
        if (!grow(p, (void **)&p->lhs, &p->cap_lhs, nlhs + 1, sizeof *p->lhs)) return false;
        p->lhs[nlhs++] = advance(p);
        if (!accept_punct(p, ',')) break;
    }
    if (!expect_punct(p, '=')) return false;

    /* The op. */
    const fc_token *optok = cur(p);
    if (optok->kind != TK_NAME) return expected(p, "an op name");
    fc_op op = fc_op_from_name(optok->s, optok->len);
    if (op == FC_OP_COUNT)
        return error_at(p, optok, "unknown op '%.*s'", (int)(optok->len > 40 ? 40 : optok->len), optok->s);
    advance(p);
    if (!expect_punct(p, '(')) return false;

    /* Operands, then attributes. */
    const char *opname = fc_op_table[op].name;
    fc_attrs attrs;
    fc_attrs_defaults(op, &attrs);
    bool seen[FC_MAX_ATTRS] = {false};
    bool in_attrs = false;
    int nin = 0;
    if (!accept_punct(p, ')')) {
        for (;;) {
            const fc_token *t = cur(p);
            if (t->kind == TK_NAME && fc_tok_is_punct(peek_next(p), '=')) {
                if (!parse_attr(p, op, &attrs, seen)) return false;
                in_attrs = true;
            } else if (t->kind == TK_VALUE || tok_is_number(t)) {
                if (in_attrs) return error_at(p, t, "%s: operands must come before attributes", opname);
                fc_value *v;
                if (t->kind == TK_VALUE) {
                    v = lookup(p, t);
                    if (!v) return error_at(p, t, "use of undefined value %.*s", (int)t->len, t->s);
                } else {
                    double d;
                    if (!tok_double(p, t, &d)) return false;
                    v = fc_scalar(p->g, d);
                    if (p->g->status) return graph_failed(p);
                    v->weak_int = t->kind == TK_INT;
                }
                if (!grow(p, (void **)&p->ins, &p->cap_ins, nin + 1, sizeof *p->ins)) return false;
                p->ins[nin++] = v;
                advance(p);
            } else {
                return expected(p, "an operand or an attribute");
            }
            if (accept_punct(p, ',')) continue;
            if (accept_punct(p, ')')) break;
            return expected(p, "',' or ')'");
        }
    }
    const fc_attr_spec *specs;
    int nspecs = fc_op_attr_specs(op, &specs);
    for (int k = 0; k < nspecs; k++)
        if (!specs[k].has_default && !seen[k])
            return error_at(p, optok, "%s: missing required attribute '%s'", opname, specs[k].name);

    /* Build: shapes, dtypes and arity are checked there, at the op name. */
    p->g->cur_loc = optok->loc;
    char why[200];
    if (nin > 0 && p->ins[0] && fc_empty_max_message(op, p->ins[0], &attrs, why, sizeof why))
        return error_at(p, optok, "%s", why);
    fc_node *node = fc_build(p->g, op, p->ins, nin, &attrs);
    if (!node) return graph_failed(p);
    if (nlhs != node->nout)
        return error_at(p, p->lhs[0], "%s produces %d result%s but %d name%s given", opname, node->nout,
                        plural(node->nout), nlhs, nlhs == 1 ? " is" : "s are");
    for (int i = 0; i < nlhs; i++) {
        const fc_token *t = p->lhs[i];
        node->out[i]->name = fc_arena_strndup(&p->g->arena, t->s + 1, t->len - 1);
        if (!node->out[i]->name || !define(p, t, node->out[i])) return oom(p);
    }
    if (fc_tok_is_punct(cur(p), ':')) return parse_declared_types(p, node);
    return true;
}

/* ret := 'return' VALUE {',' VALUE} */
static bool parse_return(Parser *p) {
    const fc_token *ret = advance(p);
    int n = 0;
    for (;;) {
        const fc_token *t = cur(p);
        if (t->kind != TK_VALUE) return expected(p, "a value name");
        fc_value *v = lookup(p, t);
        if (!v) return error_at(p, t, "use of undefined value %.*s", (int)t->len, t->s);
        if (!grow(p, (void **)&p->ins, &p->cap_ins, n + 1, sizeof *p->ins)) return false;
        p->ins[n++] = v;
        advance(p);
        if (!accept_punct(p, ',')) break;
    }
    p->g->cur_loc = ret->loc;
    if (fc_graph_return(p->g, n, p->ins) != FC_OK) return graph_failed(p);
    return true;
}

/* ------------------------------------------------------------------ */
/* Graphs                                                               */
/* ------------------------------------------------------------------ */

/* param := VALUE ':' ['inout'] type */
static bool parse_param(Parser *p) {
    const fc_token *t = cur(p);
    if (t->kind != TK_VALUE) return expected(p, "a parameter (%name: type)");
    if (lookup(p, t)) return error_at(p, t, "value %.*s is already defined", (int)t->len, t->s);
    advance(p);
    if (!expect_punct(p, ':')) return false;
    /* `inout` is a NAME before the dtype (docs/DECODE.md); a dtype cannot
     * be spelled so. */
    const fc_token *io = cur(p);
    bool inout = io->kind == TK_NAME && io->len == 5 && !memcmp(io->s, "inout", 5);
    if (inout) advance(p);
    fc_dtype dt;
    int rank;
    fc_dim dims[FC_MAX_RANK];
    if (!parse_type(p, &dt, &rank, dims)) return false;
    p->g->cur_loc = t->loc;
    fc_value *v = fc_build_param(p->g, t->s + 1, t->len - 1, dt, rank, dims);
    if (p->g->status) return graph_failed(p);
    v->inout = inout;
    return define(p, t, v);
}

/* graph := 'graph' NAME '(' [param {',' param}] ')' '{' stmt* ret '}'
 * Returns the new graph in p->g, or false. */
static bool parse_graph_body(Parser *p) {
    if (!fc_tok_is_word(cur(p), "graph")) return expected(p, "'graph'");
    advance(p);
    const fc_token *name = cur(p);
    if (name->kind != TK_NAME) return expected(p, "a graph name");
    advance(p);

    char buf[64], *cname = tok_cstr(p, name, buf, sizeof buf);
    if (!cname) return oom(p);
    p->g = fc_graph_new(p->ctx, cname);
    if (cname != buf) fc_ctx_freemem(p->ctx, cname);
    if (!p->g) return oom(p);
    fc_graph *g = p->g;
    /* Builders report their errors located in this text. */
    g->src_file = p->file;
    g->src_text = p->text;
    g->src_len = p->len;
    /* Bind before any symbol is seen, so bound symbols become static. */
    for (int i = 0; i < p->nbinds; i++)
        if (fc_graph_bind(g, p->binds[i].name, p->binds[i].value) != FC_OK) return graph_failed(p);

    if (!expect_punct(p, '(')) return false;
    if (!accept_punct(p, ')')) {
        for (;;) {
            if (!parse_param(p)) return false;
            if (accept_punct(p, ',')) continue;
            if (accept_punct(p, ')')) break;
            return expected(p, "',' or ')'");
        }
    }
    if (!expect_punct(p, '{')) return false;

    for (;;) {
        const fc_token *t = cur(p);
        if (t->kind == TK_VALUE) {
            if (!parse_stmt(p)) return false;
        } else if (fc_tok_is_word(t, "return")) {
            break;
        } else if (fc_tok_is_punct(t, '}')) {
            return error_at(p, t, "expected 'return' before '}'");
        } else if (t->kind == TK_EOF) {
            return error_at(p, t, "expected 'return' before end of file");
        } else {
            return expected(p, "a statement or 'return'");
        }
    }
    if (!parse_return(p)) return false;
    return expect_punct(p, '}');
}

static fc_graph *parse_graph(Parser *p) {
    p->g = NULL;
    bool ok = parse_graph_body(p);
    fc_graph *g = p->g;
    clear_values(p);
    p->g = NULL;
    if (ok) return g;
    fc_graph_free(g);
    return NULL;
}

/* ------------------------------------------------------------------ */
/* Files                                                                */
/* ------------------------------------------------------------------ */

/*
 * Find the graphs of the file without parsing them: 'graph' NAME at the top
 * level, then everything up to the first '}' (bodies hold no braces). Used
 * to list names and to check them before building anything. Stores the
 * index of each name token in *names (malloc'd) and sets *complete when
 * the whole file had this shape; otherwise the full parse finds the error.
 */
static bool skim(Parser *p, int **names, int *n, bool *complete) {
    const fc_token *tok = p->toks.tok;
    int i = 0, cap = 0;
    *names = NULL;
    *n = 0;
    *complete = false;
    for (;;) {
        if (tok[i].kind == TK_EOF) {
            *complete = true;
            return true;
        }
        if (!fc_tok_is_word(&tok[i], "graph") || tok[i + 1].kind != TK_NAME) return true;
        if (!grow(p, (void **)names, &cap, *n + 1, sizeof **names)) {
            fc_ctx_freemem(p->ctx, *names);
            *names = NULL;
            return false;
        }
        (*names)[(*n)++] = i + 1;
        int j = i + 2;
        while (tok[j].kind != TK_EOF && tok[j].kind != TK_ERROR && !fc_tok_is_punct(&tok[j], '}')) j++;
        if (!fc_tok_is_punct(&tok[j], '}')) return true;
        i = j + 1;
    }
}

/* A graph name and its token index, sorted by text, then by position. */
typedef struct NameRef {
    const char *s;
    size_t len;
    int index;
} NameRef;

static int by_name(const void *pa, const void *pb) {
    const NameRef *a = pa, *b = pb;
    int c = memcmp(a->s, b->s, a->len < b->len ? a->len : b->len);
    if (c == 0 && a->len != b->len) c = a->len < b->len ? -1 : 1;
    return c ? c : (a->index > b->index) - (a->index < b->index);
}

/* The skimmed graph names must be unique. The error goes to the first name
 * (in file order) that repeats an earlier one. Sorting keeps this
 * O(n log n) for files of many graphs. */
static bool check_names(Parser *p, const int *names, int n) {
    if (n == 0 && cur(p)->kind == TK_EOF) return error_at(p, cur(p), "file contains no graph");
    NameRef *refs = fc_ctx_malloc(p->ctx, sizeof *refs * (size_t)(n ? n : 1));
    if (!refs) return oom(p);
    for (int i = 0; i < n; i++) {
        const fc_token *t = &p->toks.tok[names[i]];
        refs[i] = (NameRef){t->s, t->len, names[i]};
    }
    qsort(refs, (size_t)n, sizeof *refs, by_name);
    int dup = -1;
    for (int i = 1; i < n; i++)
        if (refs[i].len == refs[i - 1].len && !memcmp(refs[i].s, refs[i - 1].s, refs[i].len) &&
            (dup < 0 || refs[i].index < dup))
            dup = refs[i].index;
    fc_ctx_freemem(p->ctx, refs);
    if (dup < 0) return true;
    const fc_token *t = &p->toks.tok[dup];
    return error_at(p, t, "graph '%.*s' is already defined", (int)(t->len > 40 ? 40 : t->len), t->s);
}

static bool has_name(const Parser *p, const int *names, int n, const char *want) {
    for (int i = 0; i < n; i++) {
        const fc_token *t = &p->toks.tok[names[i]];
        if (strlen(want) == t->len && !memcmp(want, t->s, t->len)) return true;
    }
    return false;
}

static bool unknown_graph(Parser *p, const int *names, int n, const char *want) {
    /* List the names while they fit; a long list ends in "...". */
    char list[400];
    size_t pos = 0;
    list[0] = 0;
    for (int i = 0; i < n; i++) {
        const fc_token *t = &p->toks.tok[names[i]];
        if (pos + t->len + 8 > sizeof list) {
            snprintf(list + pos, sizeof list - pos, "%s...", i ? ", " : "");
            break;
        }
        pos += (size_t)snprintf(list + pos, sizeof list - pos, "%s%.*s", i ? ", " : "", (int)t->len, t->s);
    }
    fc_set_error(p->ctx, FC_ERR_INPUT, "%s: error: no graph named '%.100s' (available: %s)", p->file, want, list);
    p->status = FC_ERR_INPUT;
    return false;
}

/* The graph outlives the caller's text: keep its own copy of the source
 * and file name for later diagnostics, and leave no location behind. */
static bool adopt_source(Parser *p, fc_graph *g) {
    char *text = fc_arena_strndup(&g->arena, p->text ? p->text : "", p->len);
    char *file = fc_arena_strndup(&g->arena, p->file, strlen(p->file));
    if (!text || !file) return oom(p);
    g->src_text = text;
    g->src_file = file;
    g->cur_loc = (fc_loc){0, 0};
    return true;
}

static fc_graph *parse_file(Parser *p, const char *graph_name) {
    int *names, n;
    bool complete;
    if (!skim(p, &names, &n, &complete)) return NULL;
    bool ok = check_names(p, names, n);
    if (ok && graph_name && complete && !has_name(p, names, n, graph_name))
        ok = unknown_graph(p, names, n, graph_name);

    fc_graph *keep = NULL;
    while (ok && cur(p)->kind != TK_EOF) {
        fc_graph *g = parse_graph(p);
        if (!g) ok = false;
        else if (!keep && (!graph_name || !strcmp(graph_name, g->name))) keep = g;
        else fc_graph_free(g);
    }
    /* A complete parse implies a complete skim, which checked the name. */
    if (ok && !keep) ok = unknown_graph(p, names, n, graph_name ? graph_name : "");
    if (ok) ok = adopt_source(p, keep);
    fc_ctx_freemem(p->ctx, names);
    if (ok) return keep;
    fc_graph_free(keep);
    return NULL;
}

static void parser_free(Parser *p) {
    fc_tokens_free(p->ctx, &p->toks);
    clear_values(p);
    fc_ctx_freemem(p->ctx, p->ins);
    fc_ctx_freemem(p->ctx, p->list);
    fc_ctx_freemem(p->ctx, p->lhs);
}

static fc_status parser_init(Parser *p, fc_context *ctx, const char *filename, const char *text, size_t len) {
    memset(p, 0, sizeof *p);
    p->ctx = ctx;
    p->file = filename ? filename : "<input>";
    p->text = text;
    p->len = text ? len : 0;
    return fc_lex(ctx, text, p->len, &p->toks);
}

fc_status fc_parse(fc_context *ctx, const char *filename, const char *text, size_t len, const char *graph_name,
                   const fc_binding *binds, int nbinds, fc_graph **out) {
    if (out) *out = NULL;
    if (!ctx) return FC_ERR_USAGE;
    if (!out || (!text && len) || nbinds < 0 || (nbinds && !binds))
        return fc_set_error(ctx, FC_ERR_USAGE, "fc_parse: bad arguments");
    Parser p;
    fc_status st = parser_init(&p, ctx, filename, text, len);
    if (st != FC_OK) return st;
    p.binds = binds;
    p.nbinds = nbinds;
    *out = parse_file(&p, graph_name);
    st = *out ? FC_OK : p.status;
    parser_free(&p);
    return st;
}

fc_status fc_parse_file(fc_context *ctx, const char *path, const char *graph_name, const fc_binding *binds,
                        int nbinds, fc_graph **out) {
    if (out) *out = NULL;
    if (!ctx) return FC_ERR_USAGE;
    if (!path || !out) return fc_set_error(ctx, FC_ERR_USAGE, "fc_parse_file: bad arguments");
    char *text;
    size_t len;
    fc_status st = fc_read_input(ctx, path, "a .ir file", FC_INPUT_MAX_BYTES, &text, &len);
    if (st != FC_OK) return st;
    st = fc_parse(ctx, strcmp(path, "-") == 0 ? "<stdin>" : path, text, len, graph_name, binds, nbinds, out);
    fc_ctx_freemem(ctx, text);
    return st;
}

/* The skimmed names as malloc'd strings, for fc_parse_graph_names. */
static bool copy_names(Parser *p, const int *idx, int count, char ***out) {
    char **list = fc_ctx_malloc(p->ctx, sizeof *list * (size_t)count);
    if (!list) return oom(p);
    for (int i = 0; i < count; i++) {
        const fc_token *t = &p->toks.tok[idx[i]];
        list[i] = fc_ctx_malloc(p->ctx, t->len + 1);
        if (!list[i]) {
            while (i-- > 0) fc_ctx_freemem(p->ctx, list[i]);
            fc_ctx_freemem(p->ctx, list);
            return oom(p);
        }
        memcpy(list[i], t->s, t->len);
        list[i][t->len] = 0;
    }
    *out = list;
    return true;
}

fc_status fc_parse_graph_names(fc_context *ctx, const char *filename, const char *text, size_t len, char ***names,
                               int *n) {
    if (names) *names = NULL;
    if (n) *n = 0;
    if (!ctx) return FC_ERR_USAGE;
    if (!names || !n || (!text && len)) return fc_set_error(ctx, FC_ERR_USAGE, "fc_parse_graph_names: bad arguments");
    Parser p;
    fc_status st = parser_init(&p, ctx, filename, text, len);
    if (st != FC_OK) return st;

    int *idx = NULL, count = 0;
    bool complete = false;
    bool ok = skim(&p, &idx, &count, &complete) && check_names(&p, idx, count);
    if (ok && !complete) {
        /* The file is malformed at the top level: the full parser reports
         * its first error, exactly as fc_parse would. */
        fc_graph *g = parse_file(&p, NULL);
        FC_ASSERT(!g);
        ok = false;
    }
    if (ok) ok = copy_names(&p, idx, count, names);
    if (ok) *n = count;
    st = ok ? FC_OK : p.status;
    fc_ctx_freemem(ctx, idx);
    parser_free(&p);
    return st;
}
