/* random_graph.h - a seeded generator of random .ir graphs for differential
 * tests: elementwise, broadcast, view, reduction and composite ops over
 * random shapes, odd sizes and size-1 dimensions included. The same seed
 * always gives the same text, so a failure is reproduced from its seed.
 *
 *   char *ir = random_graph(seed, &opts);   // malloc'd .ir text
 */
#ifndef FC_TEST_RANDOM_GRAPH_H
#define FC_TEST_RANDOM_GRAPH_H

#include "splitmix.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct rg_opts {
    int max_nodes;  /* ops per graph (default 10) */
    int max_elems;  /* cap on elements of any value (default 4096) */
    bool bf16;      /* sometimes make parameters bf16 */
    bool matmul;    /* include matmul */
} rg_opts;

typedef struct rg_val {
    char name[16];
    int rank;
    int64_t dims[4];
    bool narrow; /* bf16 */
} rg_val;

typedef struct rg {
    uint64_t state;
    char *params, *body;
    size_t plen, pcap, blen, bcap;
    rg_val vals[96];
    int nvals, nparams, ntmp;
} rg;

static uint64_t rg_next(rg *r) { return splitmix64(&r->state); }
static int rg_int(rg *r, int n) { return (int)(rg_next(r) % (uint64_t)n); }

static void rg_append(char **buf, size_t *len, size_t *cap, const char *fmt, ...) {
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (*len + (size_t)n + 1 > *cap) {
        *cap = (*len + (size_t)n + 1) * 2;
        *buf = realloc(*buf, *cap);
    }
    vsnprintf(*buf + *len, (size_t)n + 1, fmt, ap);
    *len += (size_t)n;
    va_end(ap);
}

static int64_t rg_numel(const rg_val *v) {
    int64_t n = 1;
    for (int i = 0; i < v->rank; i++) n *= v->dims[i];
    return n;
}

static void rg_shape_text(const rg_val *v, char *out, size_t n) {
    size_t pos = (size_t)snprintf(out, n, "[");
    for (int i = 0; i < v->rank; i++) pos += (size_t)snprintf(out + pos, n - pos, "%s%lld", i ? ", " : "", (long long)v->dims[i]);
    snprintf(out + pos, n - pos, "]");
}

static rg_val *rg_param(rg *r, const rg_val *shape, bool narrow) {
    rg_val *v = &r->vals[r->nvals++];
    *v = *shape;
    v->narrow = narrow;
    snprintf(v->name, sizeof v->name, "p%d", r->nparams++);
    char s[64];
    rg_shape_text(v, s, sizeof s);
    rg_append(&r->params, &r->plen, &r->pcap, "%s%%%s: %s%s", r->nparams > 1 ? ", " : "", v->name, narrow ? "bf16" : "f32", s);
    return v;
}

/* A new value named t<N> with the given shape; the caller writes its statement. */
static rg_val *rg_new(rg *r, const rg_val *shape) {
    rg_val *v = &r->vals[r->nvals++];
    *v = *shape;
    snprintf(v->name, sizeof v->name, "t%d", r->ntmp++);
    return v;
}

static const int rg_sizes[] = {1, 2, 3, 5, 7, 8, 16, 33};

static char *random_graph(uint64_t seed, const rg_opts *o) {
    rg r = {.state = seed * 0x2545F4914F6CDD1Dull + 1};
    int max_nodes = o && o->max_nodes ? o->max_nodes : 10;
    int max_elems = o && o->max_elems ? o->max_elems : 4096;
    /* first parameter */
    rg_val shape = {.rank = 1 + rg_int(&r, 3)};
    for (int i = 0; i < shape.rank; i++) shape.dims[i] = rg_sizes[rg_int(&r, 8)];
    rg_param(&r, &shape, o && o->bf16 && rg_int(&r, 3) == 0);
    static const char *unary[] = {"neg", "abs", "tanh", "sigmoid", "relu", "gelu", "gelu_tanh", "silu", "hardswish", "erf", "sin", "cos"};
    static const char *binary[] = {"add", "sub", "mul", "max", "min"};
    for (int step = 0; step < max_nodes && r.nvals < 90; step++) {
        rg_val *a = &r.vals[rg_int(&r, r.nvals)];
        char s[64];
        int kind = rg_int(&r, 12);
        if (kind <= 3) { /* unary */
            rg_val *v = rg_new(&r, a);
            rg_append(&r.body, &r.blen, &r.bcap, "  %%%s = %s(%%%s)\n", v->name, unary[rg_int(&r, 11)], a->name);
        } else if (kind <= 6) { /* binary with broadcasting */
            rg_val bs = *a;
            int mode = rg_int(&r, 4);
            if (mode == 1 && bs.rank > 0) bs.dims[rg_int(&r, bs.rank)] = 1;
            if (mode == 2 && bs.rank > 1) { /* drop leading dims */
                int drop = 1 + rg_int(&r, bs.rank - 1);
                memmove(bs.dims, bs.dims + drop, sizeof(int64_t) * (size_t)(bs.rank - drop));
                bs.rank -= drop;
            }
            rg_val *b = NULL;
            for (int i = 0; i < r.nvals && !b; i++)
                if (&r.vals[i] != a && r.vals[i].rank == bs.rank && !memcmp(r.vals[i].dims, bs.dims, sizeof(int64_t) * (size_t)bs.rank) && rg_int(&r, 2))
                    b = &r.vals[i];
            if (!b) b = rg_param(&r, &bs, o && o->bf16 && rg_int(&r, 3) == 0);
            if (mode == 3) { /* a weak scalar */
                rg_val *v = rg_new(&r, a);
                rg_append(&r.body, &r.blen, &r.bcap, "  %%%s = %s(%%%s, %d.5)\n", v->name, binary[rg_int(&r, 5)], a->name, rg_int(&r, 5) - 2);
                continue;
            }
            rg_val *v = rg_new(&r, a);
            v->narrow = a->narrow && b->narrow;
            rg_append(&r.body, &r.blen, &r.bcap, "  %%%s = %s(%%%s, %%%s)\n", v->name, binary[rg_int(&r, 5)], a->name, b->name);
        } else if (kind == 7 && a->rank > 0) { /* reduction */
            int ax = rg_int(&r, a->rank);
            bool keep = rg_int(&r, 2);
            rg_val out = *a;
            if (keep) out.dims[ax] = 1;
            else {
                memmove(out.dims + ax, out.dims + ax + 1, sizeof(int64_t) * (size_t)(a->rank - ax - 1));
                out.rank--;
            }
            rg_val *v = rg_new(&r, &out);
            rg_append(&r.body, &r.blen, &r.bcap, "  %%%s = %s(%%%s, axes=[%d], keepdim=%s)\n", v->name,
                      rg_int(&r, 2) ? "reduce_sum" : "reduce_max", a->name, ax - (rg_int(&r, 2) ? a->rank : 0), keep ? "true" : "false");
        } else if (kind == 8 && a->rank >= 2) { /* permute */
            int perm[4];
            for (int i = 0; i < a->rank; i++) perm[i] = i;
            for (int i = a->rank - 1; i > 0; i--) {
                int j = rg_int(&r, i + 1), t = perm[i];
                perm[i] = perm[j];
                perm[j] = t;
            }
            rg_val out = *a;
            char ps[64];
            size_t pos = (size_t)snprintf(ps, sizeof ps, "[");
            for (int i = 0; i < a->rank; i++) {
                out.dims[i] = a->dims[perm[i]];
                pos += (size_t)snprintf(ps + pos, sizeof ps - pos, "%s%d", i ? ", " : "", perm[i]);
            }
            snprintf(ps + pos, sizeof ps - pos, "]");
            rg_val *v = rg_new(&r, &out);
            rg_append(&r.body, &r.blen, &r.bcap, "  %%%s = permute(%%%s, perm=%s)\n", v->name, a->name, ps);
        } else if (kind == 9 && a->rank >= 2) { /* reshape: merge the last two dims */
            rg_val out = *a;
            out.dims[a->rank - 2] *= a->dims[a->rank - 1];
            out.rank--;
            rg_val *v = rg_new(&r, &out);
            rg_shape_text(&out, s, sizeof s);
            rg_append(&r.body, &r.blen, &r.bcap, "  %%%s = reshape(%%%s, shape=%s)\n", v->name, a->name, s);
        } else if (kind == 10 && a->rank > 0) { /* slice with a step, or concat with itself */
            int ax = rg_int(&r, a->rank);
            rg_val out = *a;
            if (a->dims[ax] >= 3 && rg_int(&r, 2)) {
                out.dims[ax] = (a->dims[ax] - 1 + 1) / 2;
                rg_val *v = rg_new(&r, &out);
                rg_append(&r.body, &r.blen, &r.bcap, "  %%%s = slice(%%%s, axis=%d, start=1, step=2)\n", v->name, a->name, ax);
            } else if (rg_numel(a) * 2 <= max_elems) {
                out.dims[ax] *= 2;
                rg_val *v = rg_new(&r, &out);
                rg_append(&r.body, &r.blen, &r.bcap, "  %%%s = concat(%%%s, %%%s, axis=%d)\n", v->name, a->name, a->name, ax);
            }
        } else if (kind == 11 && a->rank > 0 && a->dims[a->rank - 1] > 1) { /* composites */
            rg_val *v = rg_new(&r, a);
            if (rg_int(&r, 2)) rg_append(&r.body, &r.blen, &r.bcap, "  %%%s = softmax(%%%s)\n", v->name, a->name);
            else {
                rg_val ws = {.rank = 1, .dims = {a->dims[a->rank - 1]}};
                rg_val *w = rg_param(&r, &ws, false);
                rg_append(&r.body, &r.blen, &r.bcap, "  %%%s = rmsnorm(%%%s, %%%s)\n", v->name, a->name, w->name);
            }
        }
    }
    /* Return the last value and, sometimes, another one. */
    rg_val *last = &r.vals[r.nvals - 1];
    char *out = NULL;
    size_t len = 0, cap = 0;
    rg_append(&out, &len, &cap, "graph rand%llu(%s) {\n%s", (unsigned long long)seed, r.params ? r.params : "", r.body ? r.body : "");
    if (r.nvals > 2 && rg_int(&r, 2)) {
        rg_val *other = &r.vals[1 + rg_int(&r, r.nvals - 1)];
        if (other != last) {
            rg_append(&out, &len, &cap, "  return %%%s, %%%s\n}\n", last->name, other->name);
            free(r.params);
            free(r.body);
            return out;
        }
    }
    rg_append(&out, &len, &cap, "  return %%%s\n}\n", last->name);
    free(r.params);
    free(r.body);
    return out;
}

#endif
