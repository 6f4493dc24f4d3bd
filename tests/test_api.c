/* test_api.c - every builder of the C API, shape and dtype inference, the
 * sticky-error behaviour, bindings and fault injection. */
#include "check.h"
#include "fusec.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Type of v as text, e.g. "f32[B, 768]". */
static const char *type_of(fc_graph *g, fc_value *v) {
    static char buf[256];
    size_t pos = (size_t)snprintf(buf, sizeof buf, "%s[", fc_dtype_name(fc_value_dtype(v)));
    for (int i = 0; i < fc_value_rank(v); i++) {
        fc_dim d = fc_value_dim(v, i);
        const char *s = fc_sym_name(g, d);
        if (s) pos += (size_t)snprintf(buf + pos, sizeof buf - pos, "%s%s", i ? ", " : "", s);
        else pos += (size_t)snprintf(buf + pos, sizeof buf - pos, "%s%lld", i ? ", " : "", (long long)d);
    }
    snprintf(buf + pos, sizeof buf - pos, "]");
    return buf;
}

static fc_value *param(fc_graph *g, const char *name, fc_dtype dt, int rank, ...) {
    fc_dim dims[FC_MAX_RANK];
    va_list ap;
    va_start(ap, rank);
    for (int i = 0; i < rank; i++) dims[i] = va_arg(ap, fc_dim);
    va_end(ap);
    return fc_param(g, name, dt, rank, dims);
}

static void test_every_builder(void) {
    fc_context *ctx = fc_context_new();
    fc_graph *g = fc_graph_new(ctx, "all");
    fc_dim B = fc_sym(g, "B");
    fc_value *x = param(g, "x", FC_F32, 2, B, (fc_dim)8);
    fc_value *h = param(g, "h", FC_BF16, 2, B, (fc_dim)8);
    fc_value *i = param(g, "i", FC_I32, 1, (fc_dim)8);
    fc_value *w = param(g, "w", FC_F32, 1, (fc_dim)8);
    fc_value *m = param(g, "m", FC_F32, 2, (fc_dim)8, (fc_dim)4);

    fc_value *(*unary[])(fc_graph *, fc_value *) = {fc_neg, fc_abs, fc_exp, fc_log, fc_sqrt, fc_rsqrt, fc_recip, fc_sin,
                                                     fc_cos, fc_tanh, fc_sigmoid, fc_relu, fc_gelu, fc_gelu_tanh, fc_silu, fc_erf};
    for (size_t k = 0; k < sizeof unary / sizeof unary[0]; k++) CHECK_STR(type_of(g, unary[k](g, x)), "f32[B, 8]");
    CHECK_STR(type_of(g, fc_exp(g, i)), "f32[8]");   /* int -> default float */
    CHECK_STR(type_of(g, fc_neg(g, i)), "i32[8]");   /* neg keeps ints */
    CHECK_STR(type_of(g, fc_sqrt(g, h)), "bf16[B, 8]");

    fc_value *(*binary[])(fc_graph *, fc_value *, fc_value *) = {fc_add, fc_sub, fc_mul, fc_div, fc_max, fc_min, fc_pow};
    for (size_t k = 0; k < sizeof binary / sizeof binary[0]; k++) CHECK_STR(type_of(g, binary[k](g, x, w)), "f32[B, 8]");
    CHECK_STR(type_of(g, fc_add(g, h, w)), "f32[B, 8]");             /* bf16 op f32 -> f32 */
    CHECK_STR(type_of(g, fc_add(g, h, fc_scalar(g, 1.5))), "bf16[B, 8]"); /* weak scalar */
    CHECK_STR(type_of(g, fc_add(g, i, fc_scalar(g, 1.5))), "f32[8]");  /* int + float scalar */
    CHECK_STR(type_of(g, fc_div(g, i, i)), "f32[8]");                  /* true division */
    CHECK_STR(type_of(g, fc_add(g, i, w)), "f32[8]");

    fc_value *(*cmp[])(fc_graph *, fc_value *, fc_value *) = {fc_eq, fc_ne, fc_lt, fc_le, fc_gt, fc_ge};
    for (size_t k = 0; k < sizeof cmp / sizeof cmp[0]; k++) CHECK_STR(type_of(g, cmp[k](g, x, w)), "bool[B, 8]");

    fc_value *c = fc_gt(g, x, fc_scalar(g, 0));
    CHECK_STR(type_of(g, fc_where(g, c, x, fc_scalar(g, 0.0))), "f32[B, 8]");
    CHECK_STR(type_of(g, fc_cast(g, x, FC_BF16)), "bf16[B, 8]");

    int last = -1, both[2] = {0, 1};
    CHECK_STR(type_of(g, fc_reduce_sum(g, x, 1, &last, false)), "f32[B]");
    CHECK_STR(type_of(g, fc_reduce_max(g, x, 1, &last, true)), "f32[B, 1]");
    CHECK_STR(type_of(g, fc_reduce_min(g, x, 2, both, false)), "f32[]");
    CHECK_STR(type_of(g, fc_reduce_mean(g, x, 0, NULL, true)), "f32[1, 1]");
    CHECK_STR(type_of(g, fc_reduce_sum(g, i, 0, NULL, false)), "i64[]");

    CHECK_STR(type_of(g, fc_softmax(g, x, -1)), "f32[B, 8]");
    CHECK_STR(type_of(g, fc_layernorm(g, x, w, w, -1, 1e-5)), "f32[B, 8]");
    CHECK_STR(type_of(g, fc_rmsnorm(g, x, w, 1e-6)), "f32[B, 8]");
    CHECK_STR(type_of(g, fc_matmul(g, x, m)), "f32[B, 4]");
    CHECK_STR(type_of(g, fc_matmul(g, w, m)), "f32[4]"); /* rank-1 promotion */

    fc_value *q = param(g, "q", FC_F32, 4, B, (fc_dim)2, (fc_dim)16, (fc_dim)8);
    fc_value *kv = param(g, "kv", FC_F32, 4, B, (fc_dim)2, (fc_dim)32, (fc_dim)8);
    CHECK_STR(type_of(g, fc_attention(g, q, kv, kv, true, FC_ATTENTION_DEFAULT_SCALE)), "f32[B, 2, 16, 8]");

    fc_dim shp[3] = {B, 2, 4}, inf[2] = {FC_DIM_INFER, 4};
    CHECK_STR(type_of(g, fc_reshape(g, x, 3, shp)), "f32[B, 2, 4]");
    fc_value *flat = fc_reshape(g, m, 2, inf);
    CHECK_STR(type_of(g, flat), "f32[8, 4]");
    fc_dim symrest[2] = {8, FC_DIM_INFER};
    CHECK_STR(type_of(g, fc_reshape(g, x, 2, symrest)), "f32[8, B]");
    int perm[2] = {1, 0};
    CHECK_STR(type_of(g, fc_permute(g, x, 2, perm)), "f32[8, B]");
    fc_dim ex[3] = {3, B, FC_DIM_INFER};
    CHECK_STR(type_of(g, fc_expand(g, x, 3, ex)), "f32[3, B, 8]");
    CHECK_STR(type_of(g, fc_slice(g, m, 0, 1, INT64_MAX, 2)), "f32[4, 4]");
    CHECK_STR(type_of(g, fc_slice(g, m, -1, -3, -1, 1)), "f32[8, 2]");
    fc_value *parts[2] = {m, m};
    CHECK_STR(type_of(g, fc_concat(g, 2, parts, 1)), "f32[8, 8]");
    fc_value *outs[3];
    fc_dim sizes[3] = {2, 2, FC_DIM_INFER};
    CHECK_EQ_INT(fc_split(g, m, 0, 3, sizes, outs), FC_OK);
    CHECK_STR(type_of(g, outs[2]), "f32[4, 4]");
    fc_dim ishape[2] = {4, 4};
    CHECK_STR(type_of(g, fc_iota(g, 2, ishape, 1, FC_I32)), "i32[4, 4]");
    CHECK_STR(type_of(g, fc_full(g, 2, ishape, -1.5, FC_BF16)), "bf16[4, 4]");
    CHECK_STR(type_of(g, fc_gather(g, m, i, 0)), "f32[8, 4]");
    CHECK_EQ_INT(fc_graph_status(g), FC_OK);
    fc_value *ret[1] = {x};
    CHECK_EQ_INT(fc_graph_return(g, 1, ret), FC_OK);
    CHECK_EQ_INT(fc_verify(g), FC_OK);
    fc_graph_free(g);
    fc_context_free(ctx);
}

static void test_sticky_errors(void) {
    fc_context *ctx = fc_context_new();
    fc_graph *g = fc_graph_new(ctx, "bad");
    fc_dim d1[2] = {4, 768}, d2[2] = {1024, 16};
    fc_value *a = fc_param(g, "a", FC_F32, 2, d1);
    fc_value *b = fc_param(g, "b", FC_F32, 2, d2);
    fc_value *y = fc_matmul(g, a, b);
    CHECK(fc_value_is_poison(y));
    CHECK_EQ_INT(fc_graph_status(g), FC_ERR_INPUT);
    CHECK_STR(fc_last_error(ctx), "matmul: inner dimensions differ (768 vs 1024)");
    /* Every later call is a no-op returning poison; the first error stays. */
    fc_value *z = fc_relu(g, fc_add(g, y, a));
    CHECK(fc_value_is_poison(z));
    fc_value *ok = fc_relu(g, a); /* even valid calls poison now */
    CHECK(fc_value_is_poison(ok));
    CHECK_STR(fc_last_error(ctx), "matmul: inner dimensions differ (768 vs 1024)");
    CHECK_EQ_INT(fc_graph_return(g, 1, &z), FC_ERR_INPUT);
    CHECK_EQ_INT(fc_verify(g), FC_ERR_INPUT);
    fc_graph_free(g);

    /* A few more messages. */
    struct { int which; const char *msg; } cases[] = {
        {0, "add: cannot broadcast dimension 3 with 5 (dimension -1 of the result)"},
        {1, "reduce_sum: axis 2 is out of range for rank 2"},
        {2, "where: the condition must be a bool tensor, got f32"},
        {3, "add: cannot broadcast: symbolic dimensions A and B must be equal (bind them to one value)"},
        {4, "reshape: cannot reshape f32[4, 3] to [5, 2]: element counts differ"},
        {5, "param: shape is too large (element count or byte size overflows 64 bits)"},
        {6, "permute: axis -2 appears twice in perm"},
        {7, "concat: expects at least 1 operand, got 0"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        g = fc_graph_new(ctx, "t");
        fc_dim s43[2] = {4, 3}, s45[2] = {4, 5};
        fc_value *p = fc_param(g, "p", FC_F32, 2, s43);
        fc_value *q = fc_param(g, "q", FC_F32, 2, s45);
        switch (cases[k].which) {
        case 0: fc_add(g, p, q); break;
        case 1: { int ax = 2; fc_reduce_sum(g, p, 1, &ax, false); break; }
        case 2: fc_where(g, p, p, p); break;
        case 3: {
            fc_dim da[1] = {fc_sym(g, "A")}, db[1] = {fc_sym(g, "B")};
            fc_add(g, fc_param(g, "x", FC_F32, 1, da), fc_param(g, "y", FC_F32, 1, db));
            break;
        }
        case 4: { fc_dim s[2] = {5, 2}; fc_reshape(g, p, 2, s); break; }
        case 5: { fc_dim s[3] = {1LL << 40, 1LL << 20, 1LL << 4}; fc_param(g, "big", FC_F32, 3, s); break; }
        case 6: { int pm[2] = {0, -2}; fc_permute(g, p, 2, pm); break; }
        case 7: { fc_value *none[1] = {p}; fc_concat(g, 0, none, 0); break; }
        }
        CHECK_EQ_INT(fc_graph_status(g), FC_ERR_INPUT);
        CHECK_STR(fc_last_error(ctx), cases[k].msg);
        fc_graph_free(g);
    }

    /* Binding two symbols to one value makes them equal. */
    g = fc_graph_new(ctx, "bind");
    CHECK_EQ_INT(fc_graph_bind(g, "A", 4), FC_OK);
    CHECK_EQ_INT(fc_graph_bind(g, "B", 4), FC_OK);
    fc_dim da[1] = {fc_sym(g, "A")}, db[1] = {fc_sym(g, "B")};
    CHECK_EQ_INT(da[0], 4);
    fc_value *s = fc_add(g, fc_param(g, "x", FC_F32, 1, da), fc_param(g, "y", FC_F32, 1, db));
    CHECK_STR(type_of(g, s), "f32[4]");
    CHECK_EQ_INT(fc_graph_status(g), FC_OK);
    fc_graph_free(g);
    fc_context_free(ctx);
}

static void test_alloc_failures(void) {
    /* Fail the Nth allocation for every N until building succeeds: no crash,
     * no leak (ASan checks), and a clean NOMEM status each time. */
    for (long n = 1; n < 200; n++) {
        fc_context *ctx = fc_context_new();
        fc_context_fail_alloc_after(ctx, n);
        fc_graph *g = fc_graph_new(ctx, "oom");
        if (!g) {
            CHECK_EQ_INT(strstr(fc_last_error(ctx), "out of memory") != NULL, 1);
            fc_context_free(ctx);
            continue;
        }
        fc_dim d[2] = {fc_sym(g, "B"), 64};
        fc_value *x = fc_param(g, "x", FC_F32, 2, d);
        for (int k = 0; k < 40; k++) x = fc_tanh(g, fc_add(g, x, fc_scalar(g, 1.0)));
        fc_status st = fc_graph_return(g, 1, &x);
        bool done = st == FC_OK;
        CHECK(st == FC_OK || st == FC_ERR_NOMEM);
        fc_graph_free(g);
        fc_context_free(ctx);
        if (done) break;
    }
}

int main(void) {
    test_every_builder();
    test_sticky_errors();
    test_alloc_failures();
    return check_report("test_api");
}
