/*
 * print.c - the canonical .ir text of a graph (form in docs/IR.md).
 *
 * The output is a pure function of the graph: the same graph always prints
 * the same bytes, and the text parses back to a graph that prints the same
 * again. To get there every result gets a name that is valid .ir and unique
 * (user names are kept, the rest become %vN), weak scalars print so they
 * read back with the same value and integer-ness, attributes equal to their
 * default are left out, and every statement carries its type.
 */
#include "lex.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A growing malloc'd string; after a failed allocation it stays failed. */
typedef fc_strbuf Buf;

static void put(Buf *b, const char *s) { fc_strbuf_put(b, s, strlen(s)); }

__attribute__((format(printf, 2, 3)))
static void putf(Buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fc_strbuf_vprintf(b, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------------ */
/* Names                                                                */
/* ------------------------------------------------------------------ */

/* A set of names, open addressing; the strings are not owned. */
typedef struct NameSet {
    const char **slot;
    size_t cap, n;
} NameSet;

static size_t hash_str(const char *s) {
    size_t h = 5381;
    while (*s) h = h * 33 + (unsigned char)*s++;
    return h;
}

static const char **set_find(const NameSet *set, const char *s) {
    size_t i = hash_str(s) & (set->cap - 1);
    while (set->slot[i] && strcmp(set->slot[i], s) != 0) i = (i + 1) & (set->cap - 1);
    return &set->slot[i];
}

static bool set_has(const NameSet *set, const char *s) { return *set_find(set, s) != NULL; }

/* Insert s; the set was sized for every name up front, so it never fills. */
static void set_add(NameSet *set, const char *s) {
    FC_ASSERT(2 * (set->n + 1) <= set->cap);
    *set_find(set, s) = s;
    set->n++;
}

/* A name the lexer reads back as one VALUE token: [A-Za-z0-9_.]+ */
static bool valid_value_name(const char *s) {
    if (!s || !*s) return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' ||
              *s == '.'))
            return false;
    return true;
}

typedef struct Printer {
    fc_graph *g;
    Buf out;
    const char **name; /* by value id; NULL = not printed yet */
    char *fresh;       /* storage of the invented names, 16 bytes each */
    int nfresh;
} Printer;

/*
 * Give every defined value (params, then results of live nodes: the print
 * order) its printed name. The first value to claim a valid user name keeps
 * it; values without one (or with a name taken or not writable in .ir) get
 * the first free %vN, never colliding with a user name printed anywhere in
 * the graph.
 */
static bool assign_names(Printer *pr) {
    fc_graph *g = pr->g;
    fc_context *ctx = g->ctx;
    int total = g->nparams;
    for (int i = 0; i < g->nnodes; i++)
        if (!g->nodes[i]->dead) total += g->nodes[i]->nout;

    fc_value **defs = fc_ctx_malloc(ctx, sizeof *defs * (size_t)total + 1);
    size_t cap = 16;
    while (cap < 2 * (size_t)total + 2) cap *= 2;
    NameSet set = {fc_ctx_malloc(ctx, cap * sizeof(char *)), cap, 0};
    pr->name = fc_ctx_malloc(ctx, sizeof(char *) * (size_t)(g->next_value_id + 1));
    pr->fresh = fc_ctx_malloc(ctx, 16 * (size_t)total + 1);
    bool ok = defs && set.slot && pr->name && pr->fresh;
    if (ok) {
        memset(set.slot, 0, cap * sizeof(char *));
        memset(pr->name, 0, sizeof(char *) * (size_t)(g->next_value_id + 1));
        int n = 0;
        for (int i = 0; i < g->nparams; i++) defs[n++] = g->params[i];
        for (int i = 0; i < g->nnodes; i++)
            for (int j = 0; !g->nodes[i]->dead && j < g->nodes[i]->nout; j++) defs[n++] = g->nodes[i]->out[j];

        for (int i = 0; i < total; i++) {
            fc_value *v = defs[i];
            FC_ASSERT(v->id >= 0 && v->id < g->next_value_id);
            if (valid_value_name(v->name) && !set_has(&set, v->name)) {
                set_add(&set, v->name);
                pr->name[v->id] = v->name;
            }
        }
        int counter = 0;
        for (int i = 0; i < total; i++) {
            fc_value *v = defs[i];
            if (pr->name[v->id]) continue;
            char *s = pr->fresh + 16 * pr->nfresh++;
            do snprintf(s, 16, "v%d", counter++);
            while (set_has(&set, s));
            set_add(&set, s);
            pr->name[v->id] = s;
        }
    }
    fc_ctx_freemem(ctx, defs);
    fc_ctx_freemem(ctx, set.slot);
    return ok;
}

/* ------------------------------------------------------------------ */
/* Pieces                                                               */
/* ------------------------------------------------------------------ */

static void put_dim(Printer *pr, fc_dim d) {
    const char *sym = fc_sym_name(pr->g, d);
    if (sym) put(&pr->out, sym);
    else putf(&pr->out, "%lld", (long long)d);
}

static void put_type(Printer *pr, const fc_value *v) {
    put(&pr->out, fc_dtype_name(v->dtype));
    put(&pr->out, "[");
    for (int i = 0; i < v->rank; i++) {
        if (i) put(&pr->out, ", ");
        put_dim(pr, v->dims[i]);
    }
    put(&pr->out, "]");
}

static void put_double(Printer *pr, double x) {
    char buf[64];
    fc_format_double(x, buf, sizeof buf);
    put(&pr->out, buf);
}

/* A value used as an operand: its name, or a weak scalar's number. Returns
 * false if it has no name, i.e. it is not defined by a live node before. */
static bool put_operand(Printer *pr, const fc_value *v) {
    if (v->weak) {
        /* An integer literal stays one (it keeps an integer tensor integer);
         * fc_format_double always writes a float literal. */
        if (v->weak_int && isfinite(v->scalar) && v->scalar == trunc(v->scalar)) putf(&pr->out, "%.0f", v->scalar);
        else put_double(pr, v->scalar);
        return true;
    }
    const char *name = v->id >= 0 && v->id < pr->g->next_value_id ? pr->name[v->id] : NULL;
    if (!name) return false;
    put(&pr->out, "%");
    put(&pr->out, name);
    return true;
}

/* A string as the parser reads it back: quoted, with \\ and \" escaped and
 * the control bytes as \xHH; UTF-8 stays as it is. */
static void put_string(Printer *pr, const char *s) {
    put(&pr->out, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') putf(&pr->out, "\\%c", c);
        else if (c < 0x20 || c == 0x7f) putf(&pr->out, "\\x%02x", c);
        else putf(&pr->out, "%c", c);
    }
    put(&pr->out, "\"");
}

/* Attributes in signature order, each left out when equal to its default.
 * List attributes have no defaults, so they always print. */
static void put_attrs(Printer *pr, const fc_node *n, bool first) {
    const fc_attr_spec *specs;
    int nspecs = fc_op_attr_specs(n->op, &specs);
    fc_attrs def;
    fc_attrs_defaults(n->op, &def);
    fc_attrs a = n->a;
    for (int k = 0; k < nspecs; k++) {
        const fc_attr_spec *sp = &specs[k];
        int64_t *ip, *dip;
        bool *bp, *dbp;
        double *fp, *dfp;
        fc_dtype *dp, *ddp;
        fc_attr_field(&a, sp->name, &ip, &bp, &fp, &dp);
        fc_attr_field(&def, sp->name, &dip, &dbp, &dfp, &ddp);
        if (sp->has_default) {
            bool same = (ip && *ip == *dip) || (bp && *bp == *dbp) || (dp && *dp == *ddp) ||
                        (fp && (*fp == *dfp || (isnan(*fp) && isnan(*dfp))) && signbit(*fp) == signbit(*dfp));
            if (same) continue;
        }
        put(&pr->out, first ? "" : ", ");
        first = false;
        put(&pr->out, sp->name);
        put(&pr->out, "=");
        switch (sp->kind) {
        case FC_ATTR_INT: putf(&pr->out, "%lld", (long long)*ip); break;
        case FC_ATTR_BOOL: put(&pr->out, *bp ? "true" : "false"); break;
        case FC_ATTR_FLOAT: put_double(pr, *fp); break;
        case FC_ATTR_DTYPE: put(&pr->out, fc_dtype_name(*dp)); break;
        case FC_ATTR_INTS:
        case FC_ATTR_DIMS:
            put(&pr->out, "[");
            for (int i = 0; i < a.nlist; i++) {
                if (i) put(&pr->out, ", ");
                if (sp->kind == FC_ATTR_DIMS) put_dim(pr, a.list[i]);
                else putf(&pr->out, "%lld", (long long)a.list[i]);
            }
            put(&pr->out, "]");
            break;
        case FC_ATTR_STRS:
            put(&pr->out, "[");
            for (int i = 0; i < a.nstrs; i++) {
                if (i) put(&pr->out, ", ");
                put_string(pr, a.strs[i]);
            }
            put(&pr->out, "]");
            break;
        }
    }
}

static bool put_node(Printer *pr, const fc_node *n) {
    put(&pr->out, "  ");
    for (int i = 0; i < n->nout; i++) {
        put(&pr->out, i ? ", %" : "%");
        put(&pr->out, pr->name[n->out[i]->id]);
    }
    put(&pr->out, " = ");
    put(&pr->out, fc_op_table[n->op].name);
    put(&pr->out, "(");
    for (int i = 0; i < n->nin; i++) {
        if (i) put(&pr->out, ", ");
        if (!put_operand(pr, n->in[i])) {
            fc_set_error(pr->g->ctx, FC_ERR_USAGE, "fc_print: graph '%s': operand %d of node %d (%s) is not defined by a live node",
                         pr->g->name, i, n->id, fc_op_table[n->op].name);
            return false;
        }
    }
    put_attrs(pr, n, n->nin == 0);
    put(&pr->out, ") : ");
    for (int i = 0; i < n->nout; i++) {
        if (i) put(&pr->out, ", ");
        put_type(pr, n->out[i]);
    }
    put(&pr->out, "\n");
    return true;
}

static void put_param(Printer *pr, const fc_value *v) {
    put(&pr->out, "%");
    put(&pr->out, pr->name[v->id]);
    put(&pr->out, v->inout ? ": inout " : ": ");
    put_type(pr, v);
}

/* Past this width the header puts one parameter on each line, aligned after
 * the '(': adding or changing a parameter then changes one line of a diff. */
#define HEADER_WIDTH 100

static bool print_graph(Printer *pr) {
    fc_graph *g = pr->g;
    put(&pr->out, "graph ");
    put(&pr->out, g->name);
    put(&pr->out, "(");
    size_t start = pr->out.len, indent = strlen("graph (") + strlen(g->name);
    for (int i = 0; i < g->nparams; i++) {
        if (i) put(&pr->out, ", ");
        put_param(pr, g->params[i]);
    }
    if (!pr->out.oom && indent + (pr->out.len - start) + strlen(") {") > HEADER_WIDTH) {
        pr->out.len = start;
        for (int i = 0; i < g->nparams; i++) {
            if (i) {
                put(&pr->out, ",\n");
                for (size_t k = 0; k < indent; k++) put(&pr->out, " ");
            }
            put_param(pr, g->params[i]);
        }
    }
    put(&pr->out, ") {\n");
    for (int i = 0; i < g->nnodes; i++)
        if (!g->nodes[i]->dead && !put_node(pr, g->nodes[i])) return false;
    put(&pr->out, "  return ");
    for (int i = 0; i < g->noutputs; i++) {
        if (i) put(&pr->out, ", ");
        if (!put_operand(pr, g->outputs[i])) {
            fc_set_error(g->ctx, FC_ERR_USAGE, "fc_print: graph '%s': result %d is not defined by a live node", g->name, i);
            return false;
        }
    }
    put(&pr->out, "\n}\n");
    return true;
}

char *fc_print(fc_graph *g) {
    if (!g) return NULL;
    /* A poisoned graph's error is already on the context; keep it. */
    if (g->status != FC_OK) return NULL;
    if (!g->returned) {
        fc_set_error(g->ctx, FC_ERR_USAGE, "fc_print: graph '%s' has no results (fc_graph_return was not called)",
                     g->name);
        return NULL;
    }
    Printer pr = {.g = g, .out = {.ctx = g->ctx}};
    bool ok = assign_names(&pr) && print_graph(&pr);
    if (ok && pr.out.oom) ok = false; /* the allocation failure is on the context */
    fc_ctx_freemem(g->ctx, pr.name);
    fc_ctx_freemem(g->ctx, pr.fresh);
    if (ok) return pr.out.buf;
    fc_ctx_freemem(g->ctx, pr.out.buf);
    return NULL;
}
