/*
 * program_profile.c - fc_program_profile for CUDA (runtime/profile.h): the
 * warm-up and the plain runs as fc_run makes them (CUDA Graphs and all),
 * then the measured runs under CUPTI (cupti.h), made as fc_run makes them
 * too: replays of the program's CUDA Graph where it has one, each replay
 * tagged with its run, its kernels placed by their order in the graph
 * (fc_cupti_map); launch by launch where it has none (graphs off, or given
 * up), each launch tagged with its run and position so that its kernels (a
 * library call's too) and its driver calls come back as its events. The
 * plain runs' median beside the profiled runs' says what CUPTI costs.
 */
#include "runtime/cuda/program_impl.h"
#include "runtime/cuda/cupti.h"
#include "runtime/profile.h"

/* The copy bandwidth, measured: device-to-device copies of 256 MiB, best
 * of a few, counting bytes read and written (what a kernel's bytes count). */
static double copy_gbps(fc_program *p) {
    fc_cuda_device *d = p->dev;
    const size_t n = (size_t)256 << 20;
    CUdeviceptr a = 0, b = 0;
    fc_cuda_timer t = {0};
    double best = 0;
    if (fc_cuda_alloc(d, n, &a) == FC_OK && fc_cuda_alloc(d, n, &b) == FC_OK && fc_cuda_timer_create(d, &t) == FC_OK)
        for (int i = 0; i < 5; i++) {
            float ms = 0;
            if (fc_cuda_timer_start(d, &t, d->stream) != FC_OK) break;
            if (d->cu->MemcpyDtoDAsync(i % 2 ? a : b, i % 2 ? b : a, n, d->stream) != CUDA_SUCCESS) break;
            if (fc_cuda_timer_stop(d, &t, d->stream, &ms) != FC_OK) break;
            if (i > 0 && ms > 0 && 2.0 * (double)n / (ms * 1e-3) * 1e-9 > best) best = 2.0 * (double)n / (ms * 1e-3) * 1e-9;
        }
    fc_cuda_timer_destroy(d, &t);
    (void)fc_cuda_free(d, a);
    (void)fc_cuda_free(d, b);
    fc_clear_error(p->ctx); /* a failure here only leaves the ceiling unknown */
    return best;
}

/* The dense 16-bit tensor-core rate a large cuBLASLt GEMM reaches, by
 * device (docs/PROFILING.md, "Ceilings"); 0: not known. */
static double flops_ceiling(const char *name) {
    static const struct {
        const char *part;
        double tflops;
    } known[] = {{"H200", 770}, {"H100", 700}, {"A100", 280}, {"L40S", 330}, {"L4", 110}};
    for (size_t i = 0; i < sizeof known / sizeof *known; i++)
        if (strstr(name, known[i].part)) return known[i].tflops;
    return 0;
}

/* One run under CUPTI, tagged as run k: launch by launch when eager, else
 * as fc_run makes it (a replay of the graph when the program has one);
 * its wall time on the records' clock into t0, t1 (NULL: not wanted). */
static fc_status tagged_run(fc_program *p, void *const *in, void *const *out, int k, bool eager, double *t0,
                            double *t1) {
    fc_cuda_device *d = p->dev;
    p->profile_tag = (uint64_t)(k + 1) << FC_CUPTI_RUN_SHIFT;
    p->profile_eager = eager;
    if (t0) *t0 = fc_cupti_now_ms();
    fc_status st = fc_prog_enqueue(p, in, out, d->stream);
    if (st == FC_OK) st = fc_cuda_stream_sync(d, NULL);
    if (t1) *t1 = fc_cupti_now_ms();
    p->profile_tag = 0;
    p->profile_eager = false;
    return st;
}

/* Records a after b's (b's arrays grown; a's freed). */
static fc_status append_records(fc_context *ctx, fc_cupti_records *b, fc_cupti_records *a) {
    fc_cupti_kernel *k = realloc(b->k, sizeof *k * (size_t)(b->nk + a->nk + 1));
    if (k) b->k = k;
    fc_cupti_api *c = k ? realloc(b->a, sizeof *c * (size_t)(b->na + a->na + 1)) : NULL;
    if (c) b->a = c;
    fc_cupti_ext *e = c ? realloc(b->e, sizeof *e * (size_t)(b->ne + a->ne + 1)) : NULL;
    if (e) b->e = e;
    if (!e) {
        fc_cupti_records_free(a);
        return fc_set_error(ctx, FC_ERR_NOMEM, "out of memory (CUPTI records)");
    }
    if (a->nk) memcpy(b->k + b->nk, a->k, sizeof *k * (size_t)a->nk);
    if (a->na) memcpy(b->a + b->na, a->a, sizeof *c * (size_t)a->na);
    if (a->ne) memcpy(b->e + b->ne, a->e, sizeof *e * (size_t)a->ne);
    b->nk += a->nk;
    b->na += a->na;
    b->ne += a->ne;
    fc_cupti_records_free(a);
    return FC_OK;
}

/* The end of a capture whose runs went as st says: its records appended
 * to *all. */
static fc_status end_capture(fc_program *p, fc_status st, fc_cupti_records *all) {
    fc_cupti_records rec = {0};
    const fc_status est = fc_cupti_end(p->ctx, &rec);
    if (st == FC_OK) st = est;
    if (st == FC_OK) return append_records(p->ctx, all, &rec);
    fc_cupti_records_free(&rec);
    return st;
}

/*
 * The measured runs as replays of the program's graph, in two captures.
 * First, with the driver calls and tags recorded, one run launch by launch
 * (run r->runs): it says which kernels each launch runs, and it is the run
 * whose first records cost more. Then, with the kernels alone recorded
 * (CUPTI's records of API calls would cost every run host time), one
 * replay (not measured), then the measured replays, each kernel of a run
 * placed by its start in the run's span. *why says why the replays' records
 * did not become r's events.
 */
static fc_status capture_replays(fc_program *p, void *const *in, void *const *out, fc_profile_rec *r, char *why,
                                 size_t nwhy) {
    fc_cupti_records all = {0};
    const int learn = r->runs;
    fc_status st = fc_cupti_begin(p->ctx, true);
    if (st != FC_OK) return st;
    st = end_capture(p, tagged_run(p, in, out, learn, true, NULL, NULL), &all);
    if (st == FC_OK) st = fc_cupti_begin(p->ctx, false);
    if (st != FC_OK) {
        fc_cupti_records_free(&all);
        return st;
    }
    st = tagged_run(p, in, out, learn + 1, false, NULL, NULL);
    const uint64_t before = p->stats.graph_replays;
    for (int k = 0; k < r->runs && st == FC_OK; k++)
        st = tagged_run(p, in, out, k, false, &r->run_start[k], &r->run_end[k]);
    const uint64_t replays = p->stats.graph_replays - before;
    st = end_capture(p, st, &all);
    if (st == FC_OK && replays != (uint64_t)r->runs)
        snprintf(why, nwhy, "%d of %d runs replayed the graph (%.120s)", (int)replays, r->runs,
                 p->stats.graph_skip_reason);
    else if (st == FC_OK) st = fc_cupti_map(r, learn, true, &all, why, nwhy);
    fc_cupti_records_free(&all);
    return st;
}

/* The measured runs launch by launch, in one capture, after one run not
 * measured (CUPTI's first records cost more). */
static fc_status capture_eager(fc_program *p, void *const *in, void *const *out, fc_profile_rec *r) {
    fc_cupti_records all = {0};
    fc_status st = fc_cupti_begin(p->ctx, true);
    if (st != FC_OK) return st;
    st = tagged_run(p, in, out, r->runs, true, NULL, NULL);
    for (int k = 0; k < r->runs && st == FC_OK; k++)
        st = tagged_run(p, in, out, k, true, &r->run_start[k], &r->run_end[k]);
    st = end_capture(p, st, &all);
    char why[8];
    if (st == FC_OK) st = fc_cupti_map(r, -1, false, &all, why, sizeof why);
    fc_cupti_records_free(&all);
    return st;
}

static fc_status profile_body(fc_program *p, void **ptr, fc_profile_rec *r, double *plain) {
    fc_cuda_device *d = p->dev;
    void *const *in = ptr, *const *out = ptr + p->d.nparams;
    fc_status st = FC_OK;
    for (int k = 0; k < r->warmup + 1 && st == FC_OK; k++) st = fc_prog_enqueue(p, in, out, d->stream);
    if (st == FC_OK) st = fc_cuda_stream_sync(d, NULL);
    for (int k = 0; k < r->runs && st == FC_OK; k++) {
        const double t0 = fc_now_ms();
        st = fc_prog_enqueue(p, in, out, d->stream);
        if (st == FC_OK) st = fc_cuda_stream_sync(d, NULL);
        plain[k] = fc_now_ms() - t0;
    }
    if (st != FC_OK) return st;
    r->plain_wall_ms = fc_median(plain, r->runs);
    r->peak_gbps = copy_gbps(p);
    r->peak_tflops = flops_ceiling(d->info.name);
    snprintf(r->device, sizeof r->device, "%.100s (sm_%d%d)", d->info.name, d->info.cc_major, d->info.cc_minor);
    snprintf(r->peak_source, sizeof r->peak_source, "copy measured (cuMemcpyDtoD, 256 MiB); %s",
             r->peak_tflops > 0 ? "FLOPs: a dense bf16 GEMM's, documented" : "no FLOP ceiling known for this device");

    /* The plain runs replayed the graph when the program has one: so do
     * the profiled runs. */
    if (p->replay) {
        char why[200] = "";
        st = capture_replays(p, in, out, r, why, sizeof why);
        if (st != FC_OK) return st;
        if (!why[0]) {
            r->replayed = true;
            snprintf(r->mode, sizeof r->mode, "replays of the program's CUDA Graph, as fc_run runs it (%s)",
                     fc_cupti_hw_trace() ? "kernel timestamps from the hardware"
                                         : "CUPTI instruments each kernel: its own time stands, the run's grows");
            return FC_OK;
        }
        /* The replays' records could not be told apart: launch by launch
         * (each launch's records tagged with it) instead. */
        snprintf(r->mode, sizeof r->mode, "launch by launch (the replays could not be profiled: %.180s)",
                 why);
    } else {
        snprintf(r->mode, sizeof r->mode, "launch by launch (the program replays no CUDA Graph: %.180s)",
                 p->stats.graph_skip_reason[0] ? p->stats.graph_skip_reason : "none was built");
    }
    return capture_eager(p, in, out, r);
}

fc_status fc_prog_cuda_profile(fc_program *p, const fc_tensor *inputs, int nin, fc_profile_rec *r) {
    if (fc_prog_dyn_of(p))
        return fc_set_error(fc_program_context(p), FC_ERR_UNSUPPORTED,
                            "profile: program %s is dynamic (some dims are symbolic): compile it with its sizes bound",
                            fc_program_desc_of(p)->graph_name ? fc_program_desc_of(p)->graph_name : "?");
    const int nout = p->d.noutputs;
    fc_status st = fc_prog_host_check(p, inputs, nin, nout);
    if (st == FC_OK) st = fc_prog_prepare_run(p);
    if (st == FC_OK) st = fc_profile_rec_init(r, p->d.src.nlaunches);
    for (int i = 0; i < p->d.src.nlaunches && st == FC_OK; i++)
        st = fc_profile_info_from_launch(r, i, &p->d.src.launches[i]);
    if (st != FC_OK) return st;
    CUdeviceptr *buf = calloc((size_t)(nin + nout + 1), sizeof *buf);
    void **ptr = calloc((size_t)(nin + nout + 1), sizeof *ptr);
    double *plain = calloc((size_t)r->runs + 1, sizeof *plain);
    if (!buf || !ptr || !plain) st = fc_set_error(p->ctx, FC_ERR_NOMEM, "out of memory (profile)");
    if (st == FC_OK) st = fc_prog_host_buffers(p, inputs, buf, nin, buf + nin, nout);
    for (int i = 0; st == FC_OK && i < nin + nout; i++) ptr[i] = (void *)(uintptr_t)buf[i];
    if (st == FC_OK) st = profile_body(p, ptr, r, plain);
    if (st != FC_OK) (void)p->dev->cu->CtxSynchronize();
    for (int i = 0; buf && i < nin + nout; i++)
        if (buf[i]) (void)fc_cuda_free(p->dev, buf[i]);
    free(buf);
    free(ptr);
    free(plain);
    return st;
}
