/* conv_desc.c - a conv_cl node as plain data (conv_desc.h), and the check
 * of a description read from bytes. runtime/cuda/cudnn.c maps it to
 * cuDNN's operation graph. */
#include "lower/conv_desc.h"
#include "lower/launch.h"

#include <stdio.h>
#include <string.h>

static const int64_t *epi_of(const fc_node *n) { return n->a.list + n->a.nlist - FC_CONV_EPI_LEN; }

fc_status fc_conv_desc_of(fc_context *ctx, const fc_node *n, const int *arg_ids, int nargs, fc_conv_desc *out) {
    memset(out, 0, sizeof *out);
    if (n->op != FC_OP_CONV_CL || n->a.nlist != 8 + FC_CONV_EPI_LEN || n->nin < 2)
        return fc_set_error(ctx, FC_ERR_UNSUPPORTED, "cuDNN runs conv_cl nodes, not %s", fc_op_table[n->op].name);
    const fc_value *x = n->in[0], *w = n->in[1], *y = n->out[0];
    for (int i = 0; i < 4; i++)
        if (fc_dim_is_sym(x->dims[i]) || fc_dim_is_sym(y->dims[i]))
            return fc_set_error(ctx, FC_ERR_UNSUPPORTED, "conv_cl with symbolic dims: bind every symbol to run it");
    fc_conv_desc d = {.dt = x->dtype, .out = y->dtype};
    d.N = x->dims[0], d.H = x->dims[1], d.W = x->dims[2], d.C = x->dims[3];
    d.M = w->dims[0], d.kh = w->dims[1], d.kw = w->dims[2], d.groups = n->a.groups;
    d.OH = y->dims[1], d.OW = y->dims[2];
    const int64_t *l = n->a.list, *e = epi_of(n);
    for (int i = 0; i < 2; i++) {
        d.stride[i] = l[i];
        d.dilation[i] = l[2 + i];
        d.pad_begin[i] = l[4 + i];
        d.pad_end[i] = l[6 + i];
    }
    d.has_bias = e[FC_CONV_BIAS] != 0;
    d.has_residual = e[FC_CONV_RESIDUAL] != 0;
    d.act = (fc_gemm_act)e[FC_CONV_ACT];
    d.bias_arg = d.residual_arg = -1;
    int *pos[4] = {&d.x_arg, &d.w_arg, d.has_bias ? &d.bias_arg : &d.residual_arg, &d.residual_arg};
    for (int k = 0; k <= n->nin; k++) {
        const fc_value *v = k < n->nin ? n->in[k] : y;
        int a = fc_launch_arg_position(arg_ids, nargs, v->id);
        if (a < 0)
            return fc_set_error(ctx, FC_ERR_USAGE, "conv_cl: the launch has no argument for value %d (%s %d)", v->id,
                                k < n->nin ? "operand" : "the result", k);
        if (k < n->nin) *pos[k] = a;
        else d.out_arg = a;
    }
    *out = d;
    return FC_OK;
}

static bool fail(char *why, size_t n, const char *msg) {
    snprintf(why, n, "%s", msg);
    return false;
}

/* a * b without overflow (both >= 0, at most 2^62); -1 when it would. */
static int64_t mul(int64_t a, int64_t b) {
    if (a < 0 || b < 0) return -1;
    if (a != 0 && b > ((int64_t)1 << 62) / a) return -1;
    return a * b;
}

static int64_t elems4(int64_t a, int64_t b, int64_t c, int64_t d) { return mul(mul(a, b), mul(c, d)); }

/* Argument `arg` exists and holds count elements of dt. */
static bool fits(int arg, int nargs, const int64_t *bytes, int64_t count, fc_dtype dt) {
    int64_t need = mul(count, (int64_t)fc_dtype_size(dt));
    return arg >= 0 && arg < nargs && need >= 0 && bytes[arg] >= need;
}

bool fc_conv_desc_valid(const fc_conv_desc *d, int nargs, const int64_t *arg_bytes, char *why, size_t n) {
    bool dt_ok = d->dt == FC_F32 || d->dt == FC_F16 || d->dt == FC_BF16;
    if (!dt_ok || (d->out != d->dt && d->out != FC_F32)) return fail(why, n, "dtypes cuDNN does not take here");
    const int64_t lim = (int64_t)1 << 30;
    int64_t sizes[] = {d->N, d->H, d->W, d->C, d->M, d->kh, d->kw, d->groups, d->OH, d->OW};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i] < 1 || sizes[i] > lim) return fail(why, n, "a size out of range");
    for (int i = 0; i < 2; i++)
        if (d->stride[i] < 1 || d->dilation[i] < 1 || d->pad_begin[i] < 0 || d->pad_end[i] < 0 ||
            d->stride[i] > lim || d->dilation[i] > lim || d->pad_begin[i] > lim || d->pad_end[i] > lim)
            return fail(why, n, "a stride, dilation or pad out of range");
    if (d->C % d->groups || d->M % d->groups) return fail(why, n, "groups do not divide the channels");
    /* The output size the geometry gives (ir/window.c's rule). */
    int64_t in[2] = {d->H, d->W}, k[2] = {d->kh, d->kw}, o[2] = {d->OH, d->OW};
    for (int i = 0; i < 2; i++) {
        int64_t span = d->dilation[i] * (k[i] - 1) + 1, padded = in[i] + d->pad_begin[i] + d->pad_end[i];
        if (padded < span || (padded - span) / d->stride[i] + 1 != o[i])
            return fail(why, n, "the output size does not follow from the geometry");
    }
    if ((unsigned)d->act > FC_GEMM_ACT_GELU_TANH) return fail(why, n, "a bad activation");
    if (d->has_bias != (d->bias_arg >= 0) || d->has_residual != (d->residual_arg >= 0))
        return fail(why, n, "the operand flags and positions disagree");
    if (!fits(d->x_arg, nargs, arg_bytes, elems4(d->N, d->H, d->W, d->C), d->dt) ||
        !fits(d->w_arg, nargs, arg_bytes, elems4(d->M, d->kh, d->kw, d->C / d->groups), d->dt) ||
        !fits(d->out_arg, nargs, arg_bytes, elems4(d->N, d->OH, d->OW, d->M), d->out) ||
        (d->has_bias && !fits(d->bias_arg, nargs, arg_bytes, d->M, d->out)) ||
        (d->has_residual && !fits(d->residual_arg, nargs, arg_bytes, elems4(d->N, d->OH, d->OW, d->M), d->out)))
        return fail(why, n, "an operand is outside its buffer");
    return true;
}

double fc_conv_desc_flops(const fc_conv_desc *d) {
    return 2.0 * (double)d->N * (double)d->OH * (double)d->OW * (double)d->M * (double)d->kh * (double)d->kw *
           (double)(d->C / d->groups);
}

const char *fc_conv_describe(const fc_node *n, char *buf, size_t size) {
    const fc_value *w = n->in[1];
    const int64_t *l = n->a.list, *e = epi_of(n);
    static const char *const acts[] = {"", "relu", "gelu_tanh"};
    char flags[64] = "";
    size_t len = 0;
    const char *parts[3] = {e[FC_CONV_BIAS] ? "bias" : "", e[FC_CONV_RESIDUAL] ? "residual" : "",
                            e[FC_CONV_ACT] > 0 && e[FC_CONV_ACT] <= 2 ? acts[e[FC_CONV_ACT]] : ""};
    for (int i = 0; i < 3; i++) {
        if (!parts[i][0]) continue;
        len += (size_t)snprintf(flags + len, sizeof flags - len, "%s%s", len ? "," : "", parts[i]);
        if (len >= sizeof flags) len = sizeof flags - 1;
    }
    char groups[32] = "";
    if (n->a.groups > 1) snprintf(groups, sizeof groups, " g%lld", (long long)n->a.groups);
    snprintf(buf, size, "conv_cl %lldx%lld/s%lld%s%s%s%s -> %s", (long long)w->dims[1], (long long)w->dims[2],
             (long long)l[0], groups, len ? " [" : "", flags, len ? "]" : "", fc_dtype_name(n->out[0]->dtype));
    return buf;
}
