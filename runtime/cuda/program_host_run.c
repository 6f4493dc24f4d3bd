/* program_host_run.c - fc_program_run_host for CUDA: host tensors copied to the device, run, copied back, with the --bench timing. */
#include "runtime/cuda/program_impl.h"

/* ------------------------------------------------------------------ */
/* Running from host memory.                                           */
/* ------------------------------------------------------------------ */

static bool type_matches(const fc_tensor *t, const fc_program_tensor *v) {
    if (t->dtype != v->dtype || t->rank != v->rank) return false;
    for (int d = 0; d < v->rank; d++)
        if (t->shape[d] != v->dims[d]) return false;
    return true;
}

/* "f32[4, 256]", as fc_type_str writes a static type. */
static const char *program_tensor_str(const fc_program_tensor *t, char *buf, size_t n) {
    size_t len = (size_t)snprintf(buf, n, "%s[", fc_dtype_name(t->dtype));
    for (int d = 0; d < t->rank && len < n; d++)
        len += (size_t)snprintf(buf + len, n - len, "%s%lld", d ? ", " : "", (long long)t->dims[d]);
    if (len < n) snprintf(buf + len, n - len, "]");
    return buf;
}

/* Warm up, then time `iters` runs one by one; the median goes to *median. */
static fc_status bench(fc_program *p, void *const *in, void *const *out, int iters, double *median) {
    fc_cuda_device *d = p->dev;
    double *ms = fc_ctx_malloc(p->ctx, sizeof *ms * (size_t)iters);
    if (!ms) return FC_ERR_NOMEM;
    fc_cuda_timer timer = {0};
    fc_status st = fc_cuda_timer_create(d, &timer);
    for (int i = 0; i < BENCH_WARMUP && st == FC_OK; i++) st = fc_prog_enqueue(p, in, out, d->stream);
    for (int i = 0; i < iters && st == FC_OK; i++) {
        st = fc_cuda_timer_start(d, &timer, d->stream);
        if (st == FC_OK) st = fc_prog_enqueue(p, in, out, d->stream);
        float t = 0;
        if (st == FC_OK) st = fc_cuda_timer_stop(d, &timer, d->stream, &t);
        ms[i] = t;
    }
    if (st == FC_OK) *median = fc_median(ms, iters);
    fc_cuda_timer_destroy(d, &timer);
    fc_ctx_freemem(p->ctx, ms);
    return st;
}

/* Device buffers of one host run; freed whatever happens. */
typedef struct host_run {
    CUdeviceptr *in, *out;
    int nin, nout;
} host_run;

fc_status fc_prog_host_buffers(fc_program *p, const fc_tensor *inputs, CUdeviceptr *in, int nin, CUdeviceptr *out,
                               int nout) {
    const fc_program_desc *desc = &p->d;
    fc_cuda_device *d = p->dev;
    for (int i = 0; i < nin; i++) {
        size_t bytes = (size_t)fc_program_tensor_bytes(&desc->params[i]);
        fc_status st = fc_cuda_alloc(d, bytes, &in[i]);
        if (st == FC_OK) st = fc_cuda_upload(d, in[i], inputs[i].data, bytes);
        if (st != FC_OK) return st;
    }
    for (int k = 0; k < nout; k++) {
        fc_status st = fc_cuda_alloc(d, (size_t)fc_program_tensor_bytes(&desc->outputs[k]), &out[k]);
        if (st != FC_OK) return st;
    }
    return FC_OK;
}

static fc_status host_run_body(fc_program *p, host_run *h, const fc_tensor *inputs, fc_tensor *outputs,
                               double *median_ms, int bench_iters) {
    const fc_program_desc *desc = &p->d;
    fc_cuda_device *d = p->dev;
    fc_status bst = fc_prog_host_buffers(p, inputs, h->in, h->nin, h->out, h->nout);
    if (bst != FC_OK) return bst;
    /* fc_run's pointer convention: device addresses as void pointers. */
    void **in = fc_ctx_malloc(p->ctx, sizeof *in * (size_t)(h->nin + h->nout + 1));
    if (!in) return FC_ERR_NOMEM;
    void **out = in + h->nin;
    for (int i = 0; i < h->nin; i++) in[i] = (void *)(uintptr_t)h->in[i];
    for (int k = 0; k < h->nout; k++) out[k] = (void *)(uintptr_t)h->out[k];

    fc_status st = fc_prog_enqueue(p, in, out, d->stream);
    if (st == FC_OK) st = fc_cuda_stream_sync(d, NULL); /* a faulting kernel shows up here */
    if (st == FC_OK && bench_iters > 0) {
        double med = 0;
        st = bench(p, in, out, bench_iters, &med);
        if (st == FC_OK && median_ms) *median_ms = med;
    }
    fc_ctx_freemem(p->ctx, in);
    if (st != FC_OK) return st;

    /* Inout parameters: the program wrote their device copy in place. */
    for (int i = 0; i < h->nin; i++)
        if (desc->params[i].inout &&
            (st = fc_cuda_download(d, inputs[i].data, h->in[i], (size_t)fc_program_tensor_bytes(&desc->params[i]))))
            return st;
    for (int k = 0; k < h->nout; k++) {
        const fc_program_tensor *v = &desc->outputs[k];
        fc_tensor *t = &outputs[k];
        size_t bytes = (size_t)fc_program_tensor_bytes(v);
        t->data = fc_ctx_malloc(p->ctx, bytes); /* malloc: fc_tensor_release frees it */
        if (!t->data) return FC_ERR_NOMEM;
        t->dtype = v->dtype;
        t->rank = v->rank;
        for (int dd = 0; dd < v->rank; dd++) t->shape[dd] = v->dims[dd];
        st = fc_cuda_download(d, t->data, h->out[k], bytes);
        if (st != FC_OK) return st;
    }
    return FC_OK;
}

/* One fc_run_shaped of dynamic program p on device buffers t[0..nin+nout),
 * waited for. */
static fc_status shaped_once(fc_program *p, fc_cuda_device *d, const fc_tensor *t, int nin, int nout) {
    fc_status st = fc_run_shaped(p, t, nin, t + nin, nout, d->stream);
    return st == FC_OK ? fc_cuda_stream_sync(d, d->stream) : st;
}

/*
 * A dynamic program from host memory: the results' shapes from the
 * inputs' (fc_program_infer_outputs), the inputs copied to the device, one
 * fc_run_shaped on a device handle of this call's (the primary context, as
 * the program's own), the results copied back. --bench times whole calls,
 * each waited for (a dynamic program's call includes its guard).
 */
static fc_status run_host_dynamic(fc_program *p, const fc_tensor *inputs, int nin, fc_tensor *outputs, int nout,
                                  double *median_ms, int bench_iters) {
    fc_context *ctx = fc_program_context(p);
    const fc_program_desc *desc = fc_program_desc_of(p);
    if (nout > 0 && !outputs) return fc_set_error(ctx, FC_ERR_USAGE, "run: outputs is NULL");
    for (int k = 0; k < nout; k++) memset(&outputs[k], 0, sizeof outputs[k]);
    if (nin != desc->nparams || nout != desc->noutputs)
        return fc_set_error(ctx, FC_ERR_USAGE, "run: graph %s takes %d inputs and %d outputs, not %d and %d",
                            desc->graph_name, desc->nparams, desc->noutputs, nin, nout);
    if ((nin > 0 && !inputs) || bench_iters < 0) return fc_set_error(ctx, FC_ERR_USAGE, "run: bad arguments");
    for (int i = 0; i < nin; i++)
        if (!inputs[i].data && fc_tensor_numel(&inputs[i]) != 0)
            return fc_set_error(ctx, FC_ERR_USAGE, "run: input %d has no data", i);
    fc_tensor *t = fc_ctx_malloc(ctx, sizeof *t * (size_t)(nin + nout + 1));
    double *ms = bench_iters > 0 ? fc_ctx_malloc(ctx, sizeof *ms * (size_t)bench_iters) : NULL;
    if (!t || (bench_iters > 0 && !ms)) {
        fc_ctx_freemem(ctx, t);
        return FC_ERR_NOMEM;
    }
    memset(t, 0, sizeof *t * (size_t)(nin + nout + 1));
    fc_status st = fc_program_infer_outputs(p, inputs, nin, t + nin, nout);
    fc_cuda_device *d = NULL;
    if (st == FC_OK) st = fc_cuda_device_open(ctx, 0, &d);
    for (int i = 0; i < nin + nout && st == FC_OK; i++) {
        if (i < nin) t[i] = inputs[i];
        size_t bytes = (size_t)fc_tensor_numel(&t[i]) * fc_dtype_size(t[i].dtype);
        CUdeviceptr dp = 0;
        st = fc_cuda_alloc(d, bytes ? bytes : 16, &dp);
        if (st == FC_OK && i < nin && bytes) st = fc_cuda_upload(d, dp, inputs[i].data, bytes);
        t[i].data = st == FC_OK ? (void *)(uintptr_t)dp : NULL;
        if (st != FC_OK && dp) (void)fc_cuda_free(d, dp);
    }
    if (st == FC_OK) st = shaped_once(p, d, t, nin, nout);
    for (int i = 0; i < BENCH_WARMUP && st == FC_OK && bench_iters > 0; i++) st = shaped_once(p, d, t, nin, nout);
    for (int i = 0; i < bench_iters && st == FC_OK; i++) {
        double t0 = fc_now_ms();
        st = shaped_once(p, d, t, nin, nout);
        ms[i] = fc_now_ms() - t0;
    }
    if (st == FC_OK && bench_iters > 0 && median_ms) *median_ms = fc_median(ms, bench_iters);
    /* Inout parameters: the program wrote their device copy in place. */
    for (int i = 0; i < nin && st == FC_OK; i++) {
        size_t bytes = (size_t)fc_tensor_numel(&t[i]) * fc_dtype_size(t[i].dtype);
        if (desc->params[i].inout && bytes)
            st = fc_cuda_download(d, inputs[i].data, (CUdeviceptr)(uintptr_t)t[i].data, bytes);
    }
    for (int k = 0; k < nout && st == FC_OK; k++) {
        const fc_tensor *r = &t[nin + k];
        size_t bytes = (size_t)fc_tensor_numel(r) * fc_dtype_size(r->dtype);
        outputs[k] = *r;
        if (!(outputs[k].data = fc_ctx_malloc(ctx, bytes ? bytes : 1))) st = FC_ERR_NOMEM;
        else if (bytes) st = fc_cuda_download(d, outputs[k].data, (CUdeviceptr)(uintptr_t)r->data, bytes);
    }
    for (int i = 0; d && i < nin + nout; i++)
        if (t[i].data) (void)fc_cuda_free(d, (CUdeviceptr)(uintptr_t)t[i].data);
    fc_cuda_device_close(d);
    if (st != FC_OK)
        for (int k = 0; k < nout; k++) fc_tensor_release(&outputs[k]);
    fc_ctx_freemem(ctx, ms);
    fc_ctx_freemem(ctx, t);
    return st;
}

fc_status fc_prog_host_check(fc_program *p, const fc_tensor *inputs, int nin, int nout) {
    if (fc_prog_dyn_of(p))
        return fc_set_error(fc_program_context(p), FC_ERR_USAGE,
                            "run: program %s is dynamic (some dims are symbolic): run it with fc_run_shaped, "
                            "which takes the shapes",
                            fc_program_desc_of(p)->graph_name ? fc_program_desc_of(p)->graph_name : "?");
    const fc_program_desc *desc = &p->d;
    if (nin != desc->nparams || nout != desc->noutputs)
        return fc_set_error(p->ctx, FC_ERR_USAGE, "run: graph %s takes %d inputs and %d outputs, not %d and %d",
                            desc->graph_name, desc->nparams, desc->noutputs, nin, nout);
    if (nin > 0 && !inputs) return fc_set_error(p->ctx, FC_ERR_USAGE, "run: inputs is NULL");
    for (int i = 0; i < nin; i++) {
        const fc_program_tensor *v = &desc->params[i];
        if (!type_matches(&inputs[i], v)) {
            char want[128];
            program_tensor_str(v, want, sizeof want);
            return fc_set_error(p->ctx, FC_ERR_INPUT, "run: input %d (%%%s) must be %s", i,
                                v->name && v->name[0] ? v->name : "?", want);
        }
        if (!inputs[i].data && fc_program_tensor_bytes(v) > 0)
            return fc_set_error(p->ctx, FC_ERR_USAGE, "run: input %d has no data", i);
    }
    return FC_OK;
}

fc_status fc_prog_cuda_run_host(fc_program *p, const fc_tensor *inputs, int nin, fc_tensor *outputs, int nout,
                               double *median_ms, int bench_iters) {
    if (!p) return FC_ERR_USAGE;
    if (fc_prog_dyn_of(p)) return run_host_dynamic(p, inputs, nin, outputs, nout, median_ms, bench_iters);
    if (nout > 0 && !outputs) return fc_set_error(p->ctx, FC_ERR_USAGE, "run: outputs is NULL");
    for (int k = 0; k < nout; k++) memset(&outputs[k], 0, sizeof outputs[k]);
    if (bench_iters < 0) return fc_set_error(p->ctx, FC_ERR_USAGE, "run: bench_iters %d < 0", bench_iters);
    fc_status st = fc_prog_host_check(p, inputs, nin, nout);
    if (st == FC_OK) st = fc_prog_prepare_run(p);
    if (st != FC_OK) return st;

    host_run h = {NULL, NULL, nin, nout};
    h.in = fc_ctx_malloc(p->ctx, sizeof *h.in * (size_t)(nin + nout + 1));
    if (!h.in) return FC_ERR_NOMEM;
    memset(h.in, 0, sizeof *h.in * (size_t)(nin + nout + 1));
    h.out = h.in + nin;
    st = host_run_body(p, &h, inputs, outputs, median_ms, bench_iters);

    /* Free the buffers without losing the first error's message. */
    if (st != FC_OK) (void)p->dev->cu->CtxSynchronize();
    for (int i = 0; i < nin + nout; i++) {
        if (!h.in[i]) continue;
        if (st != FC_OK) (void)p->dev->cu->MemFree(h.in[i]);
        else st = fc_cuda_free(p->dev, h.in[i]);
    }
    fc_ctx_freemem(p->ctx, h.in);
    if (st != FC_OK)
        for (int k = 0; k < nout; k++) fc_tensor_release(&outputs[k]);
    return st;
}
