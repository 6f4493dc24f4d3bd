/* onnx_string.c - ONNX's string tensors: the STRING TensorProtos of graph
 * inputs and test data, and StringNormalizer, the one string op (ir/ops.def,
 * string_normalizer). Strings run on the host backends only; the IR keeps
 * them away from every other op (ir/strings.c). */
#include "onnx_ops.h"

#include <stdlib.h>

/* A STRING TensorProto as an fc_tensor in fusec.h's layout: one block of
 * numel pointers followed by the NUL-terminated bytes, which
 * fc_tensor_release frees whole. */
fc_status ox_string_tensor(fc_context *ctx, const char *file, const Onnx__TensorProto *t, fc_tensor *out) {
    const char *tn = t->name ? t->name : "";
    memset(out, 0, sizeof *out);
    if (t->n_dims > FC_MAX_RANK)
        return fc_set_error(ctx, FC_ERR_UNSUPPORTED, "%s: error: tensor '%s': rank %zu is over %d", file, tn, t->n_dims,
                            FC_MAX_RANK);
    int64_t n = 1;
    for (size_t d = 0; d < t->n_dims; d++) {
        if (t->dims[d] < 0 || (t->dims[d] && n > ((int64_t)1 << 40) / t->dims[d]))
            return fc_set_error(ctx, FC_ERR_INPUT, "%s: error: tensor '%s': bad or too large shape", file, tn);
        n *= t->dims[d];
        out->shape[d] = t->dims[d];
    }
    if ((size_t)n != t->n_string_data)
        return fc_set_error(ctx, FC_ERR_INPUT, "%s: error: tensor '%s': %zu strings, its shape needs %lld", file, tn,
                            t->n_string_data, (long long)n);
    size_t head = sizeof(const char *) * (size_t)n, bytes = 0;
    for (int64_t i = 0; i < n; i++) {
        const ProtobufCBinaryData *s = &t->string_data[i];
        if (s->len && memchr(s->data, 0, s->len))
            return fc_set_error(ctx, FC_ERR_UNSUPPORTED, "%s: error: tensor '%s': string %lld holds a NUL byte "
                                "(fusec's strings end at their NUL)", file, tn, (long long)i);
        bytes += s->len + 1;
    }
    char *blk = malloc(head + bytes + 1);
    if (!blk) return fc_set_error(ctx, FC_ERR_NOMEM, "out of memory");
    const char **ptr = (const char **)(void *)blk;
    char *to = blk + head;
    for (int64_t i = 0; i < n; i++) {
        const ProtobufCBinaryData *s = &t->string_data[i];
        if (s->len) memcpy(to, s->data, s->len);
        to[s->len] = 0;
        ptr[i] = to;
        to += s->len + 1;
    }
    out->dtype = FC_STRING;
    out->rank = (int)t->n_dims;
    out->data = blk;
    return FC_OK;
}

/* The model's declared type of value `name` (a graph output or a
 * value_info), or NULL. */
static const Onnx__TypeProto__Tensor *declared(const ox_ctx *ox, const char *name) {
    const Onnx__GraphProto *gp = ox->root->gp;
    if (!gp || !name) return NULL;
    for (size_t pass = 0; pass < 2; pass++) {
        size_t cnt = pass ? gp->n_value_info : gp->n_output;
        Onnx__ValueInfoProto *const *vi = pass ? gp->value_info : gp->output;
        for (size_t i = 0; i < cnt; i++)
            if (vi[i]->name && !strcmp(vi[i]->name, name) && vi[i]->type &&
                vi[i]->type->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE)
                return vi[i]->type->tensor_type;
    }
    return NULL;
}

/* Locales whose case mapping of ASCII letters is the plain one; fusec has
 * no locale tables, so letters beyond ASCII keep their case, and a locale
 * that maps ASCII differently (Turkish i) is refused. */
static bool ascii_locale(const char *l) {
    return !*l || !strcmp(l, "C") || !strcmp(l, "POSIX") || !strncmp(l, "C.", 2) || !strncmp(l, "en", 2);
}

fc_status ox_op_string_normalizer(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0);
    if (!x) return ERR("needs its input X");
    if (x->dtype != FC_STRING) return ERR("X must be a STRING tensor, got %s", fc_dtype_name(x->dtype));
    if (!(x->rank == 1 || (x->rank == 2 && x->dims[0] == 1)))
        return ERR("X must be [C] or [1, C] (rank %d given)", x->rank);
    fc_attrs a;
    fc_attrs_defaults(FC_OP_STRING_NORMALIZER, &a);
    const Onnx__AttributeProto *cca = attr(n, "case_change_action");
    if (cca && cca->has_s) {
        const ProtobufCBinaryData *s = &cca->s;
        if (s->len == 4 && !memcmp(s->data, "NONE", 4)) a.mode = 0;
        else if (s->len == 5 && !memcmp(s->data, "LOWER", 5)) a.mode = 1;
        else if (s->len == 5 && !memcmp(s->data, "UPPER", 5)) a.mode = 2;
        else return ERR("case_change_action '%.*s' (LOWER, UPPER or NONE)", (int)(s->len > 32 ? 32 : s->len),
                        (const char *)s->data);
    }
    a.case_sensitive = ai(n, "is_case_sensitive", 0) != 0;
    const Onnx__AttributeProto *loc = attr(n, "locale");
    if (loc && loc->has_s) {
        char l[64];
        size_t len = loc->s.len < sizeof l - 1 ? loc->s.len : sizeof l - 1;
        memcpy(l, loc->s.data, len);
        l[len] = 0;
        if (!ascii_locale(l))
            return ERR("locale '%s' is not supported (fusec changes the case of ASCII letters "
                       "only: C, POSIX, en_*)", l);
    }
    const Onnx__AttributeProto *sw = attr(n, "stopwords");
    size_t nsw = sw ? sw->n_strings : 0;
    const char **strs = nsw ? fc_arena_alloc(&G->arena, sizeof *strs * nsw) : NULL;
    if (nsw && !strs) return fc_set_error(ox->ctx, FC_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < nsw; i++) {
        const ProtobufCBinaryData *s = &sw->strings[i];
        if (s->len && memchr(s->data, 0, s->len)) return ERR("stop word %zu holds a NUL byte", i);
        if (!(strs[i] = fc_arena_strndup(&G->arena, (const char *)s->data, s->len)))
            return fc_set_error(ox->ctx, FC_ERR_NOMEM, "out of memory");
    }
    a.strs = strs;
    a.nstrs = (int)nsw;
    /* The result's length depends on the values unless no word can be
     * dropped: then it is X's, else the model must declare it. */
    fc_dim shape[2] = {1, x->dims[x->rank - 1]};
    if (nsw) {
        const Onnx__TypeProto__Tensor *tt = declared(ox, n->n_output ? n->output[0] : NULL);
        const Onnx__TensorShapeProto__Dimension *last =
            tt && tt->shape && (int)tt->shape->n_dim == x->rank ? tt->shape->dim[x->rank - 1] : NULL;
        if (!last || last->value_case != ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE)
            return ERR("how many strings remain after the stop words depends on the values, and "
                       "the model does not declare output '%s' with a static shape of rank %d",
                       n->n_output ? n->output[0] : "", x->rank);
        shape[1] = last->dim_value;
    }
    a.list = x->rank == 1 ? &shape[1] : shape;
    a.nlist = x->rank;
    fc_value *ins[1] = {x};
    fc_node *node = fc_build(G, FC_OP_STRING_NORMALIZER, ins, 1, &a);
    if (!node) return FC_OK; /* the builder's error, reported at the node */
    OUT(0, node->out[0]);
    return FC_OK;
}
