/* host_exec.c - the slots the host backends' tables share (host_exec.h). */
#include "runtime/host_exec.h"

#include "ir/ir.h"
#include "ir/timing.h"

#include <stdlib.h>
#include <string.h>

static const fc_host_exec *host(const fc_program *p) { return (const fc_host_exec *)(const void *)p; }

void fc_host_exec_stats(const fc_program *p, fc_run_stats *out) { *out = host(p)->stats; }
const fc_program_desc *fc_host_exec_desc(const fc_program *p) { return &host(p)->d; }
fc_context *fc_host_exec_context(const fc_program *p) { return host(p)->ctx; }
void fc_host_exec_times(const fc_program *p, fc_compile_times *out) { *out = host(p)->times; }

fc_host_exec *fc_host_exec_new(fc_context *ctx, const fc_backend *b, size_t size) {
    fc_host_exec *h = fc_ctx_malloc(ctx, size);
    if (!h) return NULL;
    memset(h, 0, size);
    h->head.backend = b;
    h->ctx = ctx;
    return h;
}

fc_status fc_host_exec_finish(fc_host_exec *h, fc_graph *g, double t0, fc_status st, fc_program **out) {
    if (st == FC_OK) st = fc_program_desc_signature(h->ctx, g, &h->d);
    if (st == FC_OK && !(h->d.graph_text = fc_print(g))) st = FC_ERR_NOMEM;
    h->times.origin = FC_PROGRAM_COMPILED;
    h->times.compile_ms = fc_now_ms() - t0;
    if (st != FC_OK) {
        h->head.backend->free((fc_program *)(void *)h);
        return st;
    }
    *out = (fc_program *)(void *)h;
    return FC_OK;
}

void fc_host_exec_release(fc_host_exec *h) {
    fc_program_desc_release(&h->d);
    fc_ctx_freemem(h->ctx, h);
}

/* The static type of parameter or result t, with data. */
static fc_tensor tensor_at(const fc_program_tensor *t, void *data) {
    fc_tensor r = {t->dtype, t->rank, {0}, data};
    for (int d = 0; d < t->rank; d++) r.shape[d] = t->dims[d];
    return r;
}

fc_status fc_host_exec_run(fc_program *p, void *const *inputs, int nin, void *const *outputs, int nout, void *stream,
                           fc_status (*run_shaped)(fc_program *, const fc_tensor *, int, const fc_tensor *, int, void *)) {
    const fc_host_exec *h = host(p);
    const fc_program_desc *d = &h->d;
    fc_status st = fc_program_desc_check_call(h->ctx, d, inputs, nin, outputs, nout);
    if (st != FC_OK) return st;
    fc_tensor small[16], *t = nin + nout <= 16 ? small : malloc(sizeof *t * (size_t)(nin + nout));
    if (!t) return fc_set_error(h->ctx, FC_ERR_NOMEM, "out of memory");
    for (int i = 0; i < nin; i++) t[i] = tensor_at(&d->params[i], inputs[i]);
    for (int k = 0; k < nout; k++) t[nin + k] = tensor_at(&d->outputs[k], outputs[k]);
    st = run_shaped(p, t, nin, t + nin, nout, stream);
    if (t != small) free(t);
    return st;
}
