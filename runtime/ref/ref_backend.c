/*
 * ref_backend.c - the reference interpreter (runtime/ref/interp.c) behind the
 * backend interface (runtime/backend.h): fc_compile with FC_DEVICE_REF
 * keeps a copy of the graph, and a run interprets it in float64, on host
 * pointers. Slow and exact: the oracle the other backends are compared
 * with, and a device every build has.
 */
#include "runtime/collective.h"
#include "runtime/host_exec.h"
#include "runtime/ref/interp.h"
#include "ir/ir.h"
#include "ir/timing.h"

#include <stdlib.h>
#include <string.h>

typedef struct ref_exec {
    fc_host_exec h;
    fc_graph *g; /* fusec's copy, as given */
    const fc_tp_group *tp; /* the collectives' group (fc_compile_options.tp) */
    int tp_rank;
} ref_exec;

static ref_exec *exec_of(fc_program *p) { return (ref_exec *)(void *)p; }

static void ref_free(fc_program *p) {
    ref_exec *x = exec_of(p);
    fc_graph_free(x->g);
    fc_host_exec_release(&x->h);
}

static fc_status ref_compile(fc_graph *g, const fc_compile_options *o, fc_program **out) {
    const double t0 = fc_now_ms();
    /* As every backend: a static program unless a dynamic one is asked for. */
    fc_status st = o->dynamic ? FC_OK : fc_graph_check_static(g);
    if (st == FC_OK) st = fc_tp_check_options(g->ctx, o, FC_DEVICE_REF);
    if (st != FC_OK) return st;
    ref_exec *x = (ref_exec *)(void *)fc_host_exec_new(g->ctx, &fc_backend_ref, sizeof *x);
    if (!x) return FC_ERR_NOMEM;
    x->tp = o->tp;
    x->tp_rank = o->tp_rank;
    if (!(x->g = fc_graph_clone(g))) st = strstr(x->h.ctx->error, "out of memory") ? FC_ERR_NOMEM : FC_ERR_INPUT;
    return fc_host_exec_finish(&x->h, g, t0, st, out);
}

static bool same_type(const fc_tensor *a, const fc_tensor *b) {
    if (a->dtype != b->dtype || a->rank != b->rank) return false;
    for (int d = 0; d < a->rank; d++)
        if (a->shape[d] != b->shape[d]) return false;
    return true;
}

/* Interpret, then copy each result into the caller's outputs[k] (of the
 * result's dtype and shape). */
static fc_status ref_run_shaped(fc_program *p, const fc_tensor *inputs, int nin, const fc_tensor *outputs, int nout,
                                void *stream) {
    (void)stream; /* host code runs on the calling thread */
    ref_exec *x = exec_of(p);
    if (nout > 0 && !outputs) return fc_set_error(x->h.ctx, FC_ERR_USAGE, "fc_run_shaped: outputs is NULL");
    fc_tensor small[16], *got = nout <= 16 ? small : calloc((size_t)nout, sizeof *got);
    if (!got) return fc_set_error(x->h.ctx, FC_ERR_NOMEM, "out of memory");
    fc_status st = fc_ref_run_tensors(x->g, x->tp, x->tp_rank, inputs, nin, got, nout, false);
    for (int k = 0; k < nout && st == FC_OK; k++) {
        if (!same_type(&got[k], &outputs[k]))
            st = fc_set_error(x->h.ctx, FC_ERR_INPUT, "fc_run_shaped: output %d has another dtype or shape than result %d",
                              k, k);
        else if (fc_tensor_numel(&got[k]) > 0)
            memcpy(outputs[k].data, got[k].data, (size_t)fc_tensor_numel(&got[k]) * fc_dtype_size(got[k].dtype));
    }
    if (st == FC_OK) x->h.stats.runs++;
    for (int k = 0; k < nout; k++)
        if (got[k].data) fc_tensor_release(&got[k]);
    if (got != small) free(got);
    return st;
}

static fc_status ref_run(fc_program *p, void *const *inputs, int nin, void *const *outputs, int nout, void *stream) {
    ref_exec *x = exec_of(p);
    if (fc_graph_check_static(x->g) != FC_OK)
        return fc_set_error(x->h.ctx, FC_ERR_USAGE, "fc_run: graph %s has symbolic dims: run it with fc_run_shaped",
                            x->h.d.graph_name);
    return fc_host_exec_run(p, inputs, nin, outputs, nout, stream, ref_run_shaped);
}

/* One run into outputs, then (bench_iters > 0) that many more, timed one
 * by one on the monotonic clock: their median. */
static fc_status ref_run_host(fc_program *p, const fc_tensor *inputs, int nin, fc_tensor *outputs, int nout,
                              double *median_ms, int bench_iters) {
    ref_exec *x = exec_of(p);
    fc_status st = fc_ref_run_tensors(x->g, x->tp, x->tp_rank, inputs, nin, outputs, nout, false);
    if (st != FC_OK || bench_iters <= 0) {
        if (st == FC_OK) x->h.stats.runs++;
        return st;
    }
    double *t = calloc((size_t)bench_iters, sizeof *t);
    fc_tensor *tmp = calloc((size_t)(nout ? nout : 1), sizeof *tmp);
    if (!t || !tmp) st = fc_set_error(x->h.ctx, FC_ERR_NOMEM, "out of memory");
    for (int i = 0; i < bench_iters && st == FC_OK; i++) {
        const double t0 = fc_now_ms();
        st = fc_ref_run_tensors(x->g, x->tp, x->tp_rank, inputs, nin, tmp, nout, false);
        t[i] = fc_now_ms() - t0;
        for (int k = 0; k < nout; k++) fc_tensor_release(&tmp[k]);
    }
    if (st == FC_OK && median_ms) *median_ms = fc_median(t, bench_iters);
    if (st == FC_OK) x->h.stats.runs += 1 + (uint64_t)bench_iters;
    else
        for (int k = 0; k < nout; k++) fc_tensor_release(&outputs[k]);
    free(t);
    free(tmp);
    return st;
}

static char *ref_describe(fc_program *p, fc_describe_kind what) {
    fc_backend_unsupported(p, what == FC_DESCRIBE_PLAN ? "a launch plan" : "generated code");
    return NULL;
}

static bool ref_built(void) { return true; }
static bool ref_present(void) { return true; }

const fc_backend fc_backend_ref = {
    .name = "ref",
    .device = FC_DEVICE_REF,
    .preference = 1,
    FC_HOST_BACKEND_SLOTS(ref),
};
