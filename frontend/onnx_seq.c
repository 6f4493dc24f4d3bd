/* onnx_seq.c - the sequence ops, resolved at import.
 *
 * The IR has no sequence type, but a sequence whose length and positions
 * are known at import is a list of tensors: each op below makes a new list
 * of IR values (SequenceEmpty, SequenceConstruct, SequenceInsert,
 * SequenceErase, SplitToSequence) or takes tensors out of one (SequenceAt,
 * ConcatFromSequence, and SequenceLength, which is known data). Positions
 * must be known: constants, or graph inputs frozen. A sequence that is a
 * graph output, or an input of any other op, is an error.
 */
#include "onnx_ops.h"

#include <stdio.h>
#include <string.h>

#define MAX_SEQ 4096

static const char *const seq_ops[] = {"SequenceEmpty", "SequenceConstruct", "SequenceInsert", "SequenceErase",
                                      "SequenceAt", "SequenceLength", "ConcatFromSequence", "SplitToSequence"};

bool ox_op_is_sequence(const char *op_type) {
    for (size_t i = 0; i < sizeof seq_ops / sizeof *seq_ops; i++)
        if (!strcmp(op_type, seq_ops[i])) return true;
    return false;
}

/* Operand i as a sequence, or NULL (an error is set). */
static const ox_val *seq_in(ox_ctx *ox, int i) {
    if (!has_in(ox, i) || !ox->in[i]->is_seq) {
        ERR("input %d must be a sequence", i);
        return NULL;
    }
    return ox->in[i];
}

/* A position operand: known, one integer, in [0, n] (n + 1 values when
 * `end_ok`, for an insertion), negative counted from the end. */
static fc_status position(ox_ctx *ox, int i, int64_t n, bool end_ok, int64_t def, int64_t *out) {
    if (!has_in(ox, i)) {
        *out = def;
        return FC_OK;
    }
    const ox_const *k = ox->in[i]->k;
    if (!k || k->n != 1 || k->kind || (k->dt != FC_I64 && k->dt != FC_I32))
        return ERR("the position (input %d) must be one integer known at import", i);
    int64_t p = ox_const_int(k, 0);
    if (p < 0) p += n;
    if (p < 0 || p > n || (p == n && !end_ok)) return ERR("position %lld is out of a sequence of %lld", (long long)ox_const_int(k, 0), (long long)n);
    *out = p;
    return FC_OK;
}

/* The result: a new list of n values (copied). */
static fc_status set_seq(ox_ctx *ox, fc_value *const *items, int64_t n) {
    if (n > MAX_SEQ) return ERR("a sequence of more than %d tensors", MAX_SEQ);
    fc_value **s = n ? fc_arena_alloc(&G->arena, sizeof *s * (size_t)n) : NULL;
    if (n && !s) return fc_set_error(ox->ctx, FC_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < n; i++) s[i] = items[i]; /* NULL: a tensor not made (see split_to_sequence) */
    ox->out_is_seq = true;
    ox->out_seq = s;
    ox->out_nseq = (int)n;
    return FC_OK;
}

static fc_status split_to_sequence(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0);
    if (!x) return ERR("needs an input");
    int axis = norm_axis(ai(n, "axis", 0), x->rank);
    if (axis < 0 || axis >= x->rank) return ERR("axis %lld is out of rank %d", (long long)ai(n, "axis", 0), x->rank);
    /* A symbolic dim split by known sizes: the count is known (for
     * SequenceLength), the tensors are not made. */
    bool sym = fc_dim_is_sym(x->dims[axis]);
    if (has_in(ox, 1) && (!ox->in[1]->k || ox->in[1]->k->kind)) return ERR("split must be known at import");
    if (sym && (!has_in(ox, 1) || ox->in[1]->k->rank != 1)) return ERR("the split dim is symbolic; bind it (--bind)");
    int64_t len = x->dims[axis], sizes[MAX_SEQ], ns = 0;
    bool squeeze = false;
    if (has_in(ox, 1)) {
        const ox_const *k = ox->in[1]->k;
        if (k->rank == 0) { /* chunks of one size, the last one shorter */
            int64_t c = ox_const_int(k, 0);
            if (c < 1) return ERR("split must be positive");
            if (c > len) c = len > 0 ? len : 1;
            for (int64_t at = 0; at < len && ns < MAX_SEQ; at += c) sizes[ns++] = at + c <= len ? c : len - at;
        } else {
            int64_t tot = 0;
            for (int64_t i = 0; i < k->n && ns < MAX_SEQ; i++) {
                sizes[ns] = ox_const_int(k, i);
                if (sizes[ns] < 0 || sizes[ns] > ((int64_t)1 << 40) || (!sym && sizes[ns] > len)) return ERR("split sizes must be from 0 to the dim");
                tot += sizes[ns++];
            }
            if (sym) {
                if (ns >= MAX_SEQ) return ERR("a sequence of more than %d tensors", MAX_SEQ);
                fc_value *none[MAX_SEQ] = {NULL};
                return set_seq(ox, none, ns);
            }
            if (tot != len) return ERR("split sums to %lld, the dim is %lld", (long long)tot, (long long)len);
        }
    } else {
        squeeze = ai(n, "keepdims", 1) == 0;
        for (int64_t i = 0; i < len && ns < MAX_SEQ; i++) sizes[ns++] = 1;
    }
    if (ns >= MAX_SEQ) return ERR("a sequence of more than %d tensors", MAX_SEQ);
    fc_value *parts[MAX_SEQ];
    fc_dim d[FC_MAX_RANK];
    for (int64_t i = 0, at = 0; i < ns; at += sizes[i++]) {
        if (sizes[i] < 0) return ERR("split sizes must not be negative");
        parts[i] = fc_slice(G, x, axis, at, at + sizes[i], 1);
        if (squeeze) {
            for (int j = 0, r = 0; j < x->rank; j++)
                if (j != axis) d[r++] = x->dims[j];
            parts[i] = fc_reshape(G, parts[i], x->rank - 1, d);
        }
    }
    return set_seq(ox, parts, ns);
}

/* Are the sequence's tensors made? */
static fc_status made(ox_ctx *ox, const ox_val *s) {
    for (int i = 0; i < s->nseq; i++)
        if (!s->seq[i]) return ERR("the sequence splits a symbolic dim; bind it (--bind)");
    return FC_OK;
}

static fc_status concat_from_sequence(ox_ctx *ox, const Onnx__NodeProto *n, const ox_val *s) {
    if (s->nseq == 0) return ERR("concatenates an empty sequence");
    fc_status st = made(ox, s);
    if (st) return st;
    const fc_value *x0 = s->seq[0];
    bool new_axis = ai(n, "new_axis", 0) != 0;
    int rank = x0->rank + (new_axis ? 1 : 0);
    int axis = norm_axis(ai(n, "axis", 0), rank);
    if (axis < 0 || axis >= rank) return ERR("axis %lld is out of rank %d", (long long)ai(n, "axis", 0), rank);
    fc_value **parts = s->seq, *tmp[MAX_SEQ];
    if (new_axis) {
        for (int i = 0; i < s->nseq; i++) {
            const fc_value *x = s->seq[i];
            fc_dim d[FC_MAX_RANK];
            for (int j = 0, r = 0; j < rank; j++) d[j] = j == axis ? 1 : x->dims[r++];
            tmp[i] = fc_reshape(G, s->seq[i], rank, d);
        }
        parts = tmp;
    }
    OUT(0, s->nseq == 1 ? parts[0] : fc_concat(G, s->nseq, parts, axis));
    return FC_OK;
}

fc_status ox_op_sequence(ox_ctx *ox) {
    const Onnx__NodeProto *n = ox->node;
    const char *op = n->op_type;
    if (!strcmp(op, "SequenceEmpty")) return set_seq(ox, NULL, 0);
    if (!strcmp(op, "SequenceConstruct")) {
        fc_value *items[MAX_SEQ];
        if (ox->nin > MAX_SEQ) return ERR("too many tensors");
        for (int i = 0; i < ox->nin; i++) items[i] = in(ox, i);
        return set_seq(ox, items, ox->nin);
    }
    if (!strcmp(op, "SplitToSequence")) return split_to_sequence(ox, n);
    const ox_val *s = seq_in(ox, 0);
    if (!s) return FC_ERR_UNSUPPORTED;
    int64_t p;
    fc_status st;
    if (!strcmp(op, "SequenceLength")) {
        ox_const *k = ox_const_new(FC_I64, 0, NULL);
        if (!k) return fc_set_error(ox->ctx, FC_ERR_NOMEM, "out of memory");
        k->i[0] = s->nseq;
        ox->out_k[0] = k;
        return FC_OK;
    }
    if (!strcmp(op, "SequenceAt")) {
        if ((st = position(ox, 1, s->nseq, false, 0, &p))) return st;
        if (!has_in(ox, 1)) return ERR("needs a position");
        if (!s->seq[p]) return made(ox, s);
        OUT(0, s->seq[p]);
        return FC_OK;
    }
    if (!strcmp(op, "ConcatFromSequence")) return concat_from_sequence(ox, n, s);
    if (s->nseq >= MAX_SEQ) return ERR("a sequence of more than %d tensors", MAX_SEQ);
    fc_value *items[MAX_SEQ];
    if (!strcmp(op, "SequenceInsert")) {
        fc_value *t = in(ox, 1);
        if (!t) return ERR("needs a tensor to insert");
        if ((st = position(ox, 2, s->nseq, true, s->nseq, &p))) return st;
        for (int64_t i = 0, j = 0; i <= s->nseq; i++) items[i] = i == p ? t : s->seq[j++];
        return set_seq(ox, items, s->nseq + 1);
    }
    /* SequenceErase */
    if (s->nseq == 0) return ERR("erases from an empty sequence");
    if ((st = position(ox, 1, s->nseq, false, s->nseq - 1, &p))) return st;
    for (int64_t i = 0, j = 0; i < s->nseq; i++)
        if (i != p) items[j++] = s->seq[i];
    return set_seq(ox, items, s->nseq - 1);
}
