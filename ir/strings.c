/* strings.c - the string dtype's rules: which ops take string tensors, the
 * inference of string_normalizer, and its semantics, shared by the
 * reference interpreter and the CPU backend (as ir/scalar.c is for the
 * elementwise ops). docs/IR.md, "Strings". */
#include "ir.h"

#include <stdlib.h>
#include <string.h>

#define NAME(op) (fc_op_table[op].name)

/* String tensors exist for text preprocessing ahead of a network, on the
 * host: graph parameters and results and string_normalizer take them, and
 * every other op refuses them here, once, rather than in each backend's
 * dtype switch. */
bool fc_check_string_use(fc_graph *g, fc_op op, fc_value *const *in, int nin, const fc_dtype *out_dt, int nout) {
    if (op == FC_OP_STRING_NORMALIZER) return true;
    for (int i = 0; i < nin; i++)
        if (in[i]->dtype == FC_STRING) {
            fc_graph_error(g, FC_ERR_INPUT, "%s: operand %d is a string tensor; only string_normalizer takes strings",
                           NAME(op), i);
            return false;
        }
    for (int i = 0; i < nout; i++)
        if (out_dt[i] == FC_STRING) {
            fc_graph_error(g, FC_ERR_INPUT, "%s: cannot make a string tensor; only string_normalizer does", NAME(op));
            return false;
        }
    return true;
}

const fc_value *fc_graph_first_string(const fc_graph *g) {
    for (int i = 0; i < g->nparams; i++)
        if (g->params[i]->dtype == FC_STRING) return g->params[i];
    for (int i = 0; i < g->nnodes; i++)
        for (int k = 0; !g->nodes[i]->dead && k < g->nodes[i]->nout; k++)
            if (g->nodes[i]->out[k]->dtype == FC_STRING) return g->nodes[i]->out[k];
    return NULL;
}

bool fc_infer_string_op(fc_graph *g, fc_op op, fc_value *const *in, const fc_attrs *a, fc_dtype *dt, int *rank,
                        fc_dim *dims) {
    FC_ASSERT(op == FC_OP_STRING_NORMALIZER);
    const fc_value *x = in[0];
    if (x->dtype != FC_STRING) {
        fc_graph_error(g, FC_ERR_INPUT, "string_normalizer: x must be a string tensor, got %s", fc_dtype_name(x->dtype));
        return false;
    }
    if (!(x->rank == 1 || (x->rank == 2 && x->dims[0] == 1))) {
        fc_graph_error(g, FC_ERR_INPUT, "string_normalizer: x must be [C] or [1, C], got rank %d", x->rank);
        return false;
    }
    if (a->nlist != x->rank) {
        fc_graph_error(g, FC_ERR_INPUT, "string_normalizer: shape has %d dims where x has rank %d", a->nlist, x->rank);
        return false;
    }
    for (int i = 0; i < a->nlist; i++)
        if (a->list[i] < 0) {
            fc_graph_error(g, FC_ERR_INPUT,
                           "string_normalizer: shape must be static (how many elements remain depends on the values)");
            return false;
        }
    int64_t n = a->list[a->nlist - 1];
    if ((a->nlist == 2 && a->list[0] != 1) || n < 1 || (x->dims[x->rank - 1] >= 0 && n > x->dims[x->rank - 1] && n != 1)) {
        fc_graph_error(g, FC_ERR_INPUT, "string_normalizer: shape [%s%lld] cannot hold what remains of x",
                       a->nlist == 2 ? "1, " : "", (long long)n);
        return false;
    }
    if (a->mode < 0 || a->mode > 2) {
        fc_graph_error(g, FC_ERR_INPUT, "string_normalizer: mode %lld (0 none, 1 lower, 2 upper)", (long long)a->mode);
        return false;
    }
    *dt = FC_STRING;
    *rank = a->nlist;
    memcpy(dims, a->list, sizeof(fc_dim) * (size_t)a->nlist);
    return true;
}

static int ascii_lower(int c) { return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c; }
static int ascii_upper(int c) { return c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c; }

static bool same_text(const char *s, const char *t, bool case_sensitive) {
    if (case_sensitive) return strcmp(s, t) == 0;
    for (; *s && *t; s++, t++)
        if (ascii_lower((unsigned char)*s) != ascii_lower((unsigned char)*t)) return false;
    return *s == *t;
}

static bool is_stopword(const fc_attrs *a, const char *s) {
    for (int i = 0; i < a->nstrs; i++)
        if (same_text(s, a->strs[i], a->case_sensitive)) return true;
    return false;
}

int64_t fc_string_normalize_count(const fc_attrs *a, const char *const *x, int64_t n) {
    int64_t kept = 0;
    for (int64_t i = 0; i < n; i++) kept += !is_stopword(a, x[i]);
    return kept ? kept : 1; /* every element dropped: one empty string */
}

size_t fc_string_normalize_bytes(const fc_attrs *a, const char *const *x, int64_t n) {
    size_t bytes = 1; /* the empty result's "" */
    for (int64_t i = 0; i < n; i++)
        if (!is_stopword(a, x[i])) bytes += strlen(x[i]) + 1;
    return bytes;
}

void fc_string_normalize(const fc_attrs *a, const char *const *x, int64_t n, const char **y, char *bytes) {
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        if (is_stopword(a, x[i])) continue;
        y[k++] = bytes;
        /* Byte by byte: UTF-8's multi-byte sequences have no byte below
         * 0x80, so changing ASCII letters alone never breaks one. */
        for (const char *s = x[i];; s++) {
            int c = (unsigned char)*s;
            *bytes++ = (char)(a->mode == 1 ? ascii_lower(c) : a->mode == 2 ? ascii_upper(c) : c);
            if (!c) break;
        }
    }
    if (k == 0) {
        y[0] = bytes;
        *bytes = 0;
    }
}

int64_t fc_strings_first_null(const char *const *s, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!s[i]) return i;
    return -1;
}

void *fc_strings_pack(fc_context *ctx, const char *const *s, int64_t n) {
    size_t bytes = 0;
    for (int64_t i = 0; i < n; i++) bytes += strlen(s[i]) + 1;
    size_t head = sizeof(const char *) * (size_t)n;
    char *blk = fc_ctx_malloc(ctx, head + bytes + 1);
    if (!blk) return NULL;
    const char **ptr = (const char **)(void *)blk;
    char *to = blk + head;
    for (int64_t i = 0; i < n; i++) {
        size_t l = strlen(s[i]) + 1;
        memcpy(to, s[i], l);
        ptr[i] = to;
        to += l;
    }
    return blk;
}
