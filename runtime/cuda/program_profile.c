/*
 * program_profile.c - fc_program_profile for CUDA (runtime/profile.h): the
 * warm-up and the plain runs as fc_run makes them (CUDA Graphs and all),
 * then the measured runs launch by launch under CUPTI (cupti.h), each
 * launch tagged with its run and position so that its kernels (a library
 * call's too) and its driver calls come back as its events.
 *
 * Why launch by launch: a CUDA Graph replay is one API call for every
 * kernel, so its records carry one correlation id, and which kernel is
 * which launch would be a guess. The plain runs' median beside the
 * profiled runs' says what launching one by one (and CUPTI) costs.
 */
#include "runtime/cuda/program_impl.h"
#include "runtime/cuda/cupti.h"
#include "runtime/profile.h"

/* Launch i of measured run k is tagged ((k + 1) << TAG_RUN_SHIFT) | i. */
#define TAG_RUN_SHIFT 24

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

static int cmp_ext(const void *a, const void *b) {
    const fc_cupti_ext *x = a, *y = b;
    return (x->correlation > y->correlation) - (x->correlation < y->correlation);
}

static int cmp_u32(const void *a, const void *b) {
    const uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* The tag of correlation id c (0: none). */
static uint64_t tag_of(const fc_cupti_ext *e, int ne, uint32_t c) {
    const fc_cupti_ext key = {c, 0};
    const fc_cupti_ext *f = bsearch(&key, e, (size_t)ne, sizeof *e, cmp_ext);
    return f ? f->id : 0;
}

/* The measured run and launch a correlation id's tag names; false for a
 * record of no measured run. */
static bool tagged(const fc_profile_rec *r, const fc_cupti_ext *e, int ne, uint32_t c, int *run, int *launch) {
    const uint64_t tag = tag_of(e, ne, c);
    *run = (int)(tag >> TAG_RUN_SHIFT) - 1;
    *launch = (int)(tag & ((1u << TAG_RUN_SHIFT) - 1));
    return tag && *run >= 0 && *run < r->runs && *launch < r->nlaunches;
}

/* The records into r's events. */
static fc_status add_events(fc_profile_rec *r, fc_cupti_kernel *k, int nk, fc_cupti_api *a, int na, fc_cupti_ext *e,
                            int ne) {
    qsort(e, (size_t)ne, sizeof *e, cmp_ext);
    uint32_t *kc = malloc(sizeof *kc * (size_t)(nk + 1));
    if (!kc) return fc_set_error(r->ctx, FC_ERR_NOMEM, "out of memory (profile)");
    int nkc = 0;
    for (int i = 0; i < nk; i++) {
        int run, launch;
        if (!tagged(r, e, ne, k[i].correlation, &run, &launch)) continue;
        fc_profile_event *ev = fc_profile_rec_event(r, FC_TRACK_DEVICE, run, launch, k[i].start, k[i].end);
        if (!ev) {
            free(kc);
            return FC_ERR_NOMEM;
        }
        ev->flow = (int)k[i].correlation;
        snprintf(ev->name, sizeof ev->name, "%s", k[i].name);
        kc[nkc++] = k[i].correlation;
    }
    qsort(kc, (size_t)nkc, sizeof *kc, cmp_u32);
    for (int i = 0; i < na; i++) {
        int run, launch;
        if (!tagged(r, e, ne, k[i].correlation, &run, &launch)) continue;
        fc_profile_event *ev = fc_profile_rec_event(r, FC_TRACK_HOST, run, launch, a[i].start, a[i].end);
        if (!ev) {
            free(kc);
            return FC_ERR_NOMEM;
        }
        /* Only a call that launched a kernel starts a flow. */
        if (bsearch(&a[i].correlation, kc, (size_t)nkc, sizeof *kc, cmp_u32)) ev->flow = (int)a[i].correlation;
        snprintf(ev->name, sizeof ev->name, "%s (driver call %u)", r->launches[launch].name, a[i].cbid);
    }
    free(kc);
    return FC_OK;
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

    st = fc_cupti_begin(p->ctx);
    if (st != FC_OK) return st;
    /* One run under CUPTI before the measured ones (its first records
     * cost more), tagged as no measured run. */
    p->profile_tag = (uint64_t)(r->runs + 1) << TAG_RUN_SHIFT;
    st = fc_prog_enqueue(p, in, out, d->stream);
    if (st == FC_OK) st = fc_cuda_stream_sync(d, NULL);
    for (int k = 0; k < r->runs && st == FC_OK; k++) {
        p->profile_tag = (uint64_t)(k + 1) << TAG_RUN_SHIFT;
        r->run_start[k] = fc_cupti_now_ms();
        st = fc_prog_enqueue(p, in, out, d->stream);
        if (st == FC_OK) st = fc_cuda_stream_sync(d, NULL);
        r->run_end[k] = fc_cupti_now_ms();
    }
    p->profile_tag = 0;
    fc_cupti_kernel *k = NULL;
    fc_cupti_api *a = NULL;
    fc_cupti_ext *e = NULL;
    int nk = 0, na = 0, ne = 0;
    fc_status est = fc_cupti_end(p->ctx, &k, &nk, &a, &na, &e, &ne);
    if (st == FC_OK) st = est;
    if (st == FC_OK) st = add_events(r, k, nk, a, na, e, ne);
    free(k);
    free(a);
    free(e);
    return st;
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
