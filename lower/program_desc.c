/* program_desc.c - a lowered program's description (program_desc.h): its signature from a graph, its checks, freeing it. */
#include "lower/program_desc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A copy of s through ctx (fault injection applies); NULL on failure. */
static char *dup(fc_context *ctx, const char *s) {
    size_t n = strlen(s);
    char *c = fc_ctx_malloc(ctx, n + 1);
    if (c) memcpy(c, s, n + 1);
    return c;
}

void fc_program_tensor_set_type(fc_program_tensor *t, const fc_value *v) {
    t->dtype = v->dtype;
    t->rank = v->rank;
    for (int d = 0; d < v->rank; d++) t->dims[d] = v->dims[d];
    t->value = v->id;
}

fc_status fc_program_desc_signature(fc_context *ctx, const fc_graph *g, fc_program_desc *d) {
    d->params = fc_ctx_malloc(ctx, sizeof *d->params * (size_t)(g->nparams + 1));
    d->outputs = fc_ctx_malloc(ctx, sizeof *d->outputs * (size_t)(g->noutputs + 1));
    d->graph_name = dup(ctx, g->name);
    if (!d->params || !d->outputs || !d->graph_name) return FC_ERR_NOMEM;
    memset(d->params, 0, sizeof *d->params * (size_t)(g->nparams + 1));
    memset(d->outputs, 0, sizeof *d->outputs * (size_t)(g->noutputs + 1));
    for (int i = 0; i < g->nparams; i++) {
        fc_program_tensor_set_type(&d->params[i], g->params[i]);
        d->nparams = i + 1;
        d->params[i].inout = g->params[i]->inout;
        if (!(d->params[i].name = dup(ctx, g->params[i]->name ? g->params[i]->name : ""))) return FC_ERR_NOMEM;
    }
    for (int k = 0; k < g->noutputs; k++) fc_program_tensor_set_type(&d->outputs[k], g->outputs[k]);
    d->noutputs = g->noutputs;
    return FC_OK;
}

void fc_program_desc_release(fc_program_desc *d) {
    if (!d) return;
    free(d->graph_name);
    free(d->graph_text);
    for (int i = 0; d->params && i < d->nparams; i++) free(d->params[i].name);
    for (int i = 0; d->outputs && i < d->noutputs; i++) free(d->outputs[i].name);
    free(d->params);
    free(d->outputs);
    free(d->store);
    for (int i = 0; d->gemm && i < d->src.nlaunches; i++) fc_gemm_desc_release(&d->gemm[i]);
    free(d->gemm);
    free(d->conv);
    fc_cuda_src_release(&d->src);
    memset(d, 0, sizeof *d);
}

const fc_gemm_desc *fc_program_gemm(const fc_program_desc *d, int i) {
    if (!d || !d->gemm || i < 0 || i >= d->src.nlaunches || !d->gemm[i].op_arg) return NULL;
    return &d->gemm[i];
}

const fc_conv_desc *fc_program_conv(const fc_program_desc *d, int i) {
    if (!d || !d->conv || i < 0 || i >= d->src.nlaunches || d->conv[i].N <= 0) return NULL;
    return &d->conv[i];
}

/* Check launch i's library call (its GEMM g or its convolution c) against
 * the storage of the launch's arguments. */
static fc_status check_library(fc_context *ctx, const fc_program_desc *d, int i, const fc_gemm_desc *g,
                               const fc_conv_desc *c, char *why, size_t n) {
    const fc_launch *l = &d->src.launches[i];
    /* The bytes of each argument's buffer; launch arguments have storage
     * (build_desc and the decoder check that first). */
    int64_t small[16], *bytes = small;
    if (l->nargs > 16 && !(bytes = fc_ctx_malloc(ctx, sizeof *bytes * (size_t)l->nargs))) return FC_ERR_NOMEM;
    for (int a = 0; a < l->nargs; a++) bytes[a] = d->store[l->args[a]].bytes;
    bool ok = l->kind == FC_LAUNCH_LIBRARY &&
              (g ? fc_gemm_desc_valid(g, l->nargs, bytes, why, n) : fc_conv_desc_valid(c, l->nargs, bytes, why, n));
    if (l->kind != FC_LAUNCH_LIBRARY) snprintf(why, n, "a library call's description for a launch that is not one");
    if (bytes != small) fc_ctx_freemem(ctx, bytes);
    return ok ? FC_OK : FC_ERR_INPUT;
}

fc_status fc_program_check_gemm(fc_context *ctx, const fc_program_desc *d, int i, char *why, size_t n) {
    const fc_gemm_desc *g = fc_program_gemm(d, i);
    return g ? check_library(ctx, d, i, g, NULL, why, n) : FC_OK;
}

fc_status fc_program_check_conv(fc_context *ctx, const fc_program_desc *d, int i, char *why, size_t n) {
    const fc_conv_desc *c = fc_program_conv(d, i);
    return c ? check_library(ctx, d, i, NULL, c, why, n) : FC_OK;
}

fc_status fc_program_desc_check_call(fc_context *ctx, const fc_program_desc *d, const void *inputs, int nin,
                                     const void *outputs, int nout) {
    if (nin != d->nparams || nout != d->noutputs)
        return fc_set_error(ctx, FC_ERR_USAGE, "fc_run: graph %s takes %d inputs and %d outputs, not %d and %d",
                            d->graph_name, d->nparams, d->noutputs, nin, nout);
    if ((nin > 0 && !inputs) || (nout > 0 && !outputs))
        return fc_set_error(ctx, FC_ERR_USAGE, "fc_run: inputs or outputs is NULL");
    return FC_OK;
}

int64_t fc_program_tensor_bytes(const fc_program_tensor *t) {
    if (!t || (unsigned)t->dtype >= FC_DTYPE_COUNT || t->rank < 0 || t->rank > FC_MAX_RANK) return 0;
    int64_t n = (int64_t)fc_dtype_size(t->dtype);
    for (int i = 0; i < t->rank; i++) {
        if (t->dims[i] < 0 || (t->dims[i] > 0 && n > INT64_MAX / t->dims[i])) return 0;
        n *= t->dims[i];
    }
    return n;
}
