/*
 * dynamic_bench.c - issue 7's benchmarks, fusec side: CUDA Graph replay and
 * dynamic shapes (docs/PERF.md, "Graphs and dynamic shapes").
 *
 *   ninja dynamic_bench && ./dynamic_bench [workload ...]
 *   (run from the source root, or set FUSEC_SRC)
 *
 * Workloads (default: all):
 *   gpt2     examples/gpt2_block_bf16.ir at B=1, T=64: time per forward,
 *            graphs on and off
 *   gpt2_8x1024  the same block at B=8, T=1024 (issue 8's; not in the default list)
 *   mlp8     an 8-layer MLP (32 x 256, bias, relu), bf16: the same
 *   replay20 a 20-launch program (20 adds, unfused): host time of one fc_run
 *            with the same pointers, with new pointers at every call (the
 *            patching), and launch by launch; as a chain (x read by the first
 *            kernel only: 2 nodes to patch) and as a fan (x read by all 20)
 *   sweep    the GPT-2 block as one dynamic program (B=1, T symbolic):
 *            every T from 1 to 1024 through the dynamic variant (first call,
 *            second call, steady state), and for a sample of T every call
 *            from the miss until the specialization serves one (it lands
 *            while the calls go on), then its steady state beside a static
 *            compile of that T (SWEEP_VARIANT_ONLY=1: the variant's part alone)
 *   regraph  a static GPT-2 block's host time per call right after eight
 *            (then one) other programs' graphs ran on the stream, against
 *            its steady host time (why a dynamic program's miss is slow)
 *   variant  the GPT-2 block's variant alone (B=1, T symbolic) at the T's
 *            of $VARIANT_TS (default 1,64,300,450,700,1000): a steady call
 *            (calls back to back) at each, for comparing builds of the variant
 *            (FUSEC_VARIANT_GEMM, FUSEC_SKINNY); under ncu,
 *            VARIANT_TS=700 profiles one T's kernels
 *   trace    a static program's kernels as its graph replays, from CUPTI's
 *            activity records (built when the toolkit has CUPTI): per
 *            kernel of one forward, its median time on the GPU and the
 *            median gap before it, over TRACE_ITERS (200) replays back to
 *            back. TRACE_IR (examples/gpt2_block_bf16.ir) and TRACE_BIND
 *            ("B=1,T=64") say what
 *   reserve  the variant's first call after fc_program_reserve (T = 1024),
 *            three programs (also at the start of sweep)
 *   newshape a new shape's host time, enough calls to profile: the variant
 *            at a new T every call (NEWSHAPE_CALLS, 20000), then at one T;
 *            host time and latency of each (bench_newshape)
 *   ab       the variant's sweep (T = 1..1024, each new) in two builds of
 *            the variant in one process, A compiled under $AB_ENV (e.g.
 *            FUSEC_VARIANT_GEMM=cublaslt) and B without, T by T, the order
 *            alternating: first call and steady call of each (bench_ab)
 *   vgemm    one bf16 GEMM [M, K] x [K, N] as a dynamic program (M symbolic,
 *            variant only), the variant's GEMM as cuBLASLt
 *            (FUSEC_VARIANT_GEMM=cublaslt) and as the generated kernel, at
 *            GPT-2's N, K and M from 1 to 8192: wall time per call (graph
 *            replays back to back), both in this run
 *
 * "Per forward" is wall time: N calls back to back on one stream, then a
 * synchronize, divided by N (what torch.compile's reduce-overhead numbers
 * in bench/graphs_torch.py measure too). Host time is the fc_run call alone
 * (no synchronize), median of 2000.
 *
 * Every result is one line: RESULT fusec <workload> <key>=<value> ...
 */
#define _GNU_SOURCE /* RUSAGE_THREAD */
#include "ir/ir.h"
#include "ir/timing.h"
#include "runtime/cuda/cublaslt.h"
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/program.h"

#ifdef FC_HAVE_CUPTI
#include <cupti.h>
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

/* The sweep's numbers are kept in microseconds. */
static double now_us(void) { return fc_now_ms() * 1e3; }

static fc_context *ctx;
static fc_cuda_device *dev;

#define DIE(...)                                                                                                      \
    do {                                                                                                              \
        fprintf(stderr, __VA_ARGS__);                                                                                 \
        fprintf(stderr, "\n  fusec: %s\n", fc_last_error(ctx));                                                      \
        exit(1);                                                                                                      \
    } while (0)

/* A device buffer of random values in [-a, a] for tensor t (bf16, f32). */
static void *random_buffer(const fc_tensor *t, double a) {
    size_t n = (size_t)fc_tensor_numel(t), es = fc_dtype_size(t->dtype);
    uint8_t *h = malloc(n * es + 1);
    for (size_t i = 0; i < n; i++) {
        float v = (float)(a * (2.0 * rand() / RAND_MAX - 1.0));
        if (t->dtype == FC_BF16) ((uint16_t *)h)[i] = fc_f32_to_bf16(v);
        else if (t->dtype == FC_F16) ((uint16_t *)h)[i] = fc_f32_to_f16(v);
        else if (t->dtype == FC_F32) ((float *)h)[i] = v;
        else memset(h + i * es, 0, es);
    }
    CUdeviceptr d = 0;
    if (fc_cuda_alloc(dev, n * es + 256, &d) != FC_OK || fc_cuda_upload(dev, d, h, n * es) != FC_OK)
        DIE("cannot allocate %zu bytes", n * es);
    free(h);
    return (void *)(uintptr_t)d;
}

static fc_graph *parse_file(const char *rel, const fc_binding *b, int nb) {
    const char *src = getenv("FUSEC_SRC");
    char path[600];
    snprintf(path, sizeof path, "%s/%s", src && *src ? src : ".", rel);
    fc_graph *g = NULL;
    if (fc_parse_file(ctx, path, NULL, b, nb, &g) != FC_OK) DIE("parse %s", path);
    return g;
}

/* Buffers for p's parameters and results at its static shapes. */
/* Sized for a whole model's weights (GPT-2 124M has 149 parameters). */
enum { BUFS_MAX_IN = 1024, BUFS_MAX_OUT = 16 };
typedef struct bufs {
    int nin, nout;
    void *in[BUFS_MAX_IN], *out[BUFS_MAX_OUT];
} bufs;

static void make_bufs(fc_program *p, bufs *b) {
    b->nin = fc_program_num_inputs(p);
    b->nout = fc_program_num_outputs(p);
    if (b->nin > BUFS_MAX_IN || b->nout > BUFS_MAX_OUT)
        DIE("%d inputs and %d outputs: at most %d and %d", b->nin, b->nout, BUFS_MAX_IN, BUFS_MAX_OUT);
    for (int i = 0; i < b->nin; i++) {
        fc_tensor t;
        const char *name = NULL;
        fc_program_input(p, i, &t, &name);
        b->in[i] = random_buffer(&t, name && strstr(name, "_w") && t.rank == 2 ? 0.02 : 1.0);
    }
    for (int k = 0; k < b->nout; k++) {
        fc_tensor t;
        fc_program_output(p, k, &t);
        b->out[k] = random_buffer(&t, 0);
    }
}

static void free_bufs(bufs *b) {
    for (int i = 0; i < b->nin; i++) fc_cuda_free(dev, (CUdeviceptr)(uintptr_t)b->in[i]);
    for (int k = 0; k < b->nout; k++) fc_cuda_free(dev, (CUdeviceptr)(uintptr_t)b->out[k]);
}

static void run(fc_program *p, const bufs *b) {
    if (fc_run(p, b->in, b->nin, b->out, b->nout, dev->stream) != FC_OK) DIE("fc_run");
}

/* Wall time per call of `iters` calls back to back, in ms. */
static double per_call_ms(fc_program *p, const bufs *b, int iters) {
    for (int i = 0; i < 50; i++) run(p, b);
    fc_cuda_stream_sync(dev, NULL);
    double t0 = now_us();
    for (int i = 0; i < iters; i++) run(p, b);
    fc_cuda_stream_sync(dev, NULL);
    return (now_us() - t0) / iters * 1e-3;
}

/* Median host time of one fc_run (no synchronize), in us; alternate
 * between two sets of buffers when b2 is given (every call patches). */
static double host_us(fc_program *p, const bufs *b, const bufs *b2, int iters) {
    double *t = malloc(sizeof *t * (size_t)iters);
    for (int i = 0; i < 20; i++) run(p, i % 2 && b2 ? b2 : b);
    fc_cuda_stream_sync(dev, NULL);
    for (int i = 0; i < iters; i++) {
        const bufs *x = i % 2 && b2 ? b2 : b;
        double t0 = now_us();
        run(p, x);
        t[i] = now_us() - t0;
        /* Keep the queue short, so no call waits for the GPU. */
        if (i % 64 == 63) fc_cuda_stream_sync(dev, NULL);
    }
    fc_cuda_stream_sync(dev, NULL);
    double m = fc_median(t, iters);
    free(t);
    return m;
}

static fc_program *compile(fc_graph *g, bool graphs) {
    fc_compile_options o;
    fc_compile_options_default(&o);
    o.cuda_graphs = graphs;
    fc_program *p = NULL;
    if (fc_compile(g, &o, &p) != FC_OK) DIE("compile %s", fc_graph_name(g));
    return p;
}

static void print_stats(const char *wl, fc_program *p) {
    fc_run_stats s;
    fc_program_stats(p, &s);
    printf("RESULT fusec %s stats runs=%llu captures=%llu replays=%llu patches=%llu skips=%llu skip_reason=\"%s\"\n", wl,
           (unsigned long long)s.runs, (unsigned long long)s.graph_captures, (unsigned long long)s.graph_replays,
           (unsigned long long)s.graph_patches, (unsigned long long)s.graph_skips, s.graph_skip_reason);
}

/* Per forward, graphs on and off, and host time per call. */
static void forward_bench(const char *wl, fc_graph *g, int iters) {
    fc_program *on = compile(g, true), *off = compile(g, false);
    int k = 0, l = 0;
    fc_program_count_launches(on, &k, &l, NULL);
    bufs b;
    make_bufs(on, &b);
    double ms_on = per_call_ms(on, &b, iters), ms_off = per_call_ms(off, &b, iters);
    double us_on = host_us(on, &b, NULL, 2000), us_off = host_us(off, &b, NULL, 2000);
    printf("RESULT fusec %s kernels=%d library=%d per_call_ms=%.5f host_us=%.2f eager_per_call_ms=%.5f "
           "eager_host_us=%.2f\n",
           wl, k, l, ms_on, us_on, ms_off, us_off);
    print_stats(wl, on);
    free_bufs(&b);
    fc_program_free(on);
    fc_program_free(off);
}

static void bench_gpt2(void) {
    fc_binding b[2] = {{"B", 1}, {"T", 64}};
    fc_graph *g = parse_file("examples/gpt2_block_bf16.ir", b, 2);
    forward_bench("gpt2", g, 2000);
    fc_graph_free(g);
}

/* Issue 8's block: B=8, T=1024 (attention fused into one kernel). */
static void bench_gpt2_large(void) {
    fc_binding b[2] = {{"B", 8}, {"T", 1024}};
    fc_graph *g = parse_file("examples/gpt2_block_bf16.ir", b, 2);
    forward_bench("gpt2_8x1024", g, 200);
    fc_graph_free(g);
}

static void bench_mlp8(void) {
    fc_graph *g = fc_graph_new(ctx, "mlp8");
    fc_dim xd[2] = {32, 256}, wd[2] = {256, 256}, bd[1] = {256};
    fc_value *y = fc_param(g, "x", FC_BF16, 2, xd);
    for (int i = 0; i < 8; i++) {
        char wn[16], bn[16];
        snprintf(wn, sizeof wn, "w%d_w", i);
        snprintf(bn, sizeof bn, "b%d_b", i);
        fc_value *w = fc_param(g, wn, FC_BF16, 2, wd), *bias = fc_param(g, bn, FC_BF16, 1, bd);
        y = fc_relu(g, fc_add(g, fc_matmul(g, y, w), bias));
    }
    fc_graph_return(g, 1, &y);
    forward_bench("mlp8", g, 2000);
    fc_graph_free(g);
}

/* 20 launches (fusion off: one kernel an add). In the chain only the first
 * kernel reads x and only the last writes the result, so new pointers patch
 * two nodes; in the fan variant every kernel reads x, so all 20 are patched. */
static void replay20_one(const char *label, bool fan) {
    fc_graph *g = fc_graph_new(ctx, "chain20");
    fc_dim d[1] = {4096};
    fc_value *x = fc_param(g, "x", FC_F32, 1, d), *y = x;
    for (int i = 0; i < 20; i++) y = fc_add(g, y, fan ? x : fc_scalar(g, 1.0));
    fc_graph_return(g, 1, &y);
    fc_compile_options o;
    fc_compile_options_default(&o);
    o.fuse = false;
    fc_program *on = NULL, *off = NULL;
    if (fc_compile(g, &o, &on) != FC_OK) DIE("compile chain20");
    o.cuda_graphs = false;
    if (fc_compile(g, &o, &off) != FC_OK) DIE("compile chain20");
    int k = 0;
    fc_program_count_launches(on, &k, NULL, NULL);
    bufs b1, b2;
    make_bufs(on, &b1);
    make_bufs(on, &b2);
    double same = host_us(on, &b1, NULL, 2000), moving = host_us(on, &b1, &b2, 2000);
    double eager = host_us(off, &b1, NULL, 2000);
    printf("RESULT fusec %s launches=%d host_us_same_ptrs=%.2f host_us_new_ptrs=%.2f host_us_eager=%.2f\n", label, k,
           same, moving, eager);
    print_stats(label, on);
    free_bufs(&b1);
    free_bufs(&b2);
    fc_program_free(on);
    fc_program_free(off);
    fc_graph_free(g);
}

static void bench_replay20(void) {
    replay20_one("replay20", false);
    replay20_one("replay20_fan", true);
}

/* ---- the T sweep ---------------------------------------------------------------- */

typedef struct sweep_bufs {
    fc_tensor in[16], out[1];
    int nin;
} sweep_bufs;

/* Inputs of the dynamic GPT-2 block at the largest T; a smaller T uses a
 * prefix of x and y (contiguous [1, T, 768]). */
static void sweep_alloc(fc_program *p, sweep_bufs *s, int64_t tmax) {
    s->nin = fc_program_num_inputs(p);
    for (int i = 0; i < s->nin; i++) {
        fc_tensor t;
        const char *name = NULL;
        fc_program_input(p, i, &t, &name);
        for (int d = 0; d < t.rank; d++)
            if (t.shape[d] < 0) t.shape[d] = d == 0 ? 1 : tmax;
        t.data = random_buffer(&t, name && strstr(name, "_w") && t.rank == 2 ? 0.02 : 1.0);
        s->in[i] = t;
    }
    fc_tensor o = {FC_BF16, 3, {1, tmax, 768}, NULL};
    o.data = random_buffer(&o, 0);
    s->out[0] = o;
}

static void sweep_set_t(sweep_bufs *s, int64_t T) {
    s->in[0].shape[1] = T;
    s->out[0].shape[1] = T;
}

static double shaped_call_ms(fc_program *p, sweep_bufs *s) {
    double t0 = now_us();
    if (fc_run_shaped(p, s->in, s->nin, s->out, 1, dev->stream) != FC_OK) DIE("fc_run_shaped");
    fc_cuda_stream_sync(dev, NULL);
    return (now_us() - t0) * 1e-3;
}

/* One call on its own, as shaped_call_ms, with its host part (the call
 * without the synchronize) in *host_ms. */
static double shaped_call_host_ms(fc_program *p, sweep_bufs *s, double *host_ms) {
    double t0 = now_us();
    if (fc_run_shaped(p, s->in, s->nin, s->out, 1, dev->stream) != FC_OK) DIE("fc_run_shaped");
    *host_ms = (now_us() - t0) * 1e-3;
    fc_cuda_stream_sync(dev, NULL);
    return (now_us() - t0) * 1e-3;
}

/* The calling thread's page faults (minor) and context switches (both
 * kinds) so far: what a call's host time may hide. */
static void thread_usage(long *faults, long *switches) {
    struct rusage u;
    memset(&u, 0, sizeof u);
    getrusage(RUSAGE_THREAD, &u);
    *faults = u.ru_minflt + u.ru_majflt;
    *switches = u.ru_nvcsw + u.ru_nivcsw;
}

/* The q-quantile (0..1, nearest rank) of v[0 .. n), n > 0, leaving v as it is. */
static double quantile(const double *v, int n, double q) {
    double *c = malloc(sizeof *c * (size_t)n);
    if (!c) DIE("out of memory");
    memcpy(c, v, sizeof *c * (size_t)n);
    qsort(c, (size_t)n, sizeof *c, fc_cmp_double);
    int k = (int)ceil(q * n) - 1;
    double r = c[k < 0 ? 0 : k >= n ? n - 1 : k];
    free(c);
    return r;
}

/* One line on the distribution of v[0 .. n) (ratios to a steady call):
 * median, p90, the worst and where, how many are over 1.1, 1.2 and 1.3. */
static void print_ratio_spread(const char *what, const double *v, int n, const int64_t *at) {
    int worst = 0, over[3] = {0, 0, 0};
    for (int i = 0; i < n; i++) {
        if (v[i] > v[worst]) worst = i;
        over[0] += v[i] > 1.1;
        over[1] += v[i] > 1.2;
        over[2] += v[i] > 1.3;
    }
    printf("RESULT fusec sweep %s median=%.3f p90=%.3f max=%.2f at_T=%lld over_1.1=%d over_1.2=%d over_1.3=%d of=%d\n",
           what, quantile(v, n, 0.5), quantile(v, n, 0.9), v[worst], (long long)at[worst], over[0], over[1], over[2], n);
}

static double shaped_steady_ms(fc_program *p, sweep_bufs *s, int iters) {
    for (int i = 0; i < 3; i++) shaped_call_ms(p, s);
    double t0 = now_us();
    for (int i = 0; i < iters; i++)
        if (fc_run_shaped(p, s->in, s->nin, s->out, 1, dev->stream) != FC_OK) DIE("fc_run_shaped");
    fc_cuda_stream_sync(dev, NULL);
    return (now_us() - t0) / iters * 1e-3;
}

/* The GPT-2 block (B = 1, T symbolic) as a dynamic program that its
 * variant serves alone (no specializations); *o: its options. */
static fc_program *gpt2_variant(fc_graph **g, fc_compile_options *o) {
    *g = parse_file("examples/gpt2_block_bf16.ir", (fc_binding[]){{"B", 1}}, 1);
    fc_compile_options_default(o);
    o->dynamic = true;
    o->specialize = FC_SPECIALIZE_OFF;
    fc_program *dyn = NULL;
    if (fc_compile(*g, o, &dyn) != FC_OK) DIE("compile dynamic");
    return dyn;
}

/* gpt2_variant, with the sweep's buffers (T up to 1024) in *s. */
static fc_program *gpt2_variant_bufs(fc_graph **g, sweep_bufs *s) {
    fc_compile_options o;
    fc_program *p = gpt2_variant(g, &o);
    sweep_alloc(p, s, 1024);
    return p;
}

static void sweep_free(sweep_bufs *s) {
    for (int i = 0; i < s->nin; i++) fc_cuda_free(dev, (CUdeviceptr)(uintptr_t)s->in[i].data);
    fc_cuda_free(dev, (CUdeviceptr)(uintptr_t)s->out[0].data);
}

/* The sweep's program's first call with the largest shape declared first
 * (fc_program_reserve: the arena mapped, the variant's graph built and
 * uploaded): the first call is then a replay, against a second and a
 * steady call of that T (T = 1024), each with its host part. */
static void reserve_first_call(sweep_bufs *s) {
    sweep_set_t(s, 1024);
    fc_graph *g2 = NULL;
    fc_compile_options o2;
    fc_program *p2 = gpt2_variant(&g2, &o2);
    double r0 = now_us();
    if (fc_program_reserve(p2, (fc_binding[]){{"T", 1024}}, 1) != FC_OK) DIE("fc_program_reserve");
    double reserve = (now_us() - r0) * 1e-3, first_host, second_host, one[9], one_host[9];
    double first = shaped_call_host_ms(p2, s, &first_host), second = shaped_call_host_ms(p2, s, &second_host);
    for (int r = 0; r < 9; r++) one[r] = shaped_call_host_ms(p2, s, &one_host[r]);
    printf("RESULT fusec sweep reserve_ms=%.3f first_call_after_reserve_ms=%.4f (host %.1f us) second_ms=%.4f "
           "(host %.1f us) steady_call_ms=%.4f (host %.1f us) (T = 1024)\n",
           reserve, first, first_host * 1e3, second, second_host * 1e3, fc_median(one, 9), fc_median(one_host, 9) * 1e3);
    fc_program_free(p2);
    fc_graph_free(g2);
}

/* reserve: reserve_first_call three times (each a new program; the kernel
 * cache is warm after the first). */
static void bench_reserve(void) {
    fc_graph *g = NULL;
    sweep_bufs s;
    fc_program *p = gpt2_variant_bufs(&g, &s);
    for (int i = 0; i < 3; i++) reserve_first_call(&s);
    sweep_free(&s);
    fc_program_free(p);
    fc_graph_free(g);
}

/* newshape: where a new shape's host time goes, with enough calls to
 * profile it (perf). The variant (B = 1, T symbolic, reserved for T =
 * 1024) called NEWSHAPE_CALLS times (default 20000), each at a T its
 * instance table no longer holds (T steps by 37 modulo 1024: a new
 * instance and a carrier update every call), synchronized after each as
 * the sweep's first calls are; then as many calls at one T (T = 300).
 * Host time of each call (fc_run_shaped alone) and its latency (call and
 * synchronize): median and p90. NEWSHAPE_ONLY=new or same: that part alone. */
static void bench_newshape(void) {
    fc_graph *g = NULL;
    sweep_bufs s;
    fc_program *p = gpt2_variant_bufs(&g, &s);
    if (fc_program_reserve(p, (fc_binding[]){{"T", 1024}}, 1) != FC_OK) DIE("fc_program_reserve");
    const int n = getenv("NEWSHAPE_CALLS") ? atoi(getenv("NEWSHAPE_CALLS")) : 20000;
    const char *only = getenv("NEWSHAPE_ONLY");
    double *host = malloc(sizeof *host * (size_t)n), *lat = malloc(sizeof *lat * (size_t)n);
    if (!host || !lat) DIE("out of memory");
    for (int part = 0; part < 2; part++) {
        const char *name = part ? "same" : "new";
        if (only && strcmp(only, name)) continue;
        int64_t t = 1;
        for (int i = 0; i < 2048; i++) { /* warm: every T once, twice */
            sweep_set_t(&s, part ? 300 : t);
            shaped_call_ms(p, &s);
            t = 1 + (t - 1 + 37) % 1024;
        }
        for (int i = 0; i < n; i++) {
            sweep_set_t(&s, part ? 300 : t);
            lat[i] = shaped_call_host_ms(p, &s, &host[i]) * 1e3;
            host[i] *= 1e3;
            t = 1 + (t - 1 + 37) % 1024;
        }
        printf("RESULT fusec newshape %s calls=%d host_us median=%.2f p90=%.2f latency_us median=%.2f p90=%.2f\n", name, n,
               quantile(host, n, 0.5), quantile(host, n, 0.9), quantile(lat, n, 0.5), quantile(lat, n, 0.9));
    }
    fc_run_stats st;
    fc_program_stats(p, &st);
    printf("RESULT fusec newshape stats runs=%llu shape_setup_ms=%.2f graph_patches=%llu graph_builds_ms=%.2f\n",
           (unsigned long long)st.runs, st.shape_setup_ms, (unsigned long long)st.graph_patches, st.graph_build_ms);
    free(host);
    free(lat);
    sweep_free(&s);
    fc_program_free(p);
    fc_graph_free(g);
}

static void bench_sweep(void) {
    fc_graph *g = NULL;
    fc_compile_options o;
    double t0 = now_us();
    fc_program *dyn = gpt2_variant(&g, &o);
    printf("RESULT fusec sweep dynamic_compile_ms=%.1f\n", (now_us() - t0) * 1e-3);
    fc_run_stats st;
    fc_program_stats(dyn, &st);
    if (st.dynamic_unavailable[0]) printf("RESULT fusec sweep dynamic_unavailable=\"%s\"\n", st.dynamic_unavailable);
    sweep_bufs s;
    sweep_alloc(dyn, &s, 1024);
    /* The program's very first call opens the device, loads the module and
     * creates the cuBLASLt handle: once per program, reported apart. */
    sweep_set_t(&s, 1024);
    printf("RESULT fusec sweep first_call_of_program_ms=%.3f\n", shaped_call_ms(dyn, &s));
    reserve_first_call(&s);
    /* 1. The dynamic variant alone, every T: first call and steady state. */
    double worst_first = 0, worst_ratio = 0;
    int64_t worst_t = 0;
    static double firsts[1024], steadies[1024], ratios[1024], seconds[1024];
    double worst_second = 0;
    int64_t worst_second_t = 0;
    int with_query = 0;
    FILE *csv = fopen(getenv("SWEEP_CSV") ? getenv("SWEEP_CSV") : "sweep.csv", "w");
    if (csv)
        fprintf(csv, "T,first_ms,first_host_ms,heuristic_queries,second_ms,graph_build_ms,dynamic_ms,dynamic_call_ms,"
                     "first_setup_ms,first_graph_ms,call_host_ms\n");
    static double setups[1024], first_graphs[1024];
    /* Each T's first and second call against a steady call of that T timed
     * the same way (call + synchronize, median of 9), and the host time the
     * first call spends beyond a steady call's. */
    static double first_over_call[1024], second_over_call[1024], extra_host_us[1024];
    static double steady_over_call[1024], steady_extra_host_us[1024];
    static int64_t ts[1024];
    int nsmall = 0;
    long first_faults = 0, first_switches = 0; /* over the first calls' host parts */
    static double lat[1024], lratios[1024];
    double worst_lratio = 0;
    int64_t worst_lt = 0;
    /* SWEEP_SAMPLE_ONLY=1: part 2 alone (the background sample's misses). */
    const int64_t last_t = getenv("SWEEP_SAMPLE_ONLY") ? 0 : 1024;
    for (int64_t T = 1; T <= last_t; T++) {
        sweep_set_t(&s, T);
        long q0 = fc_cublaslt_heuristic_queries_total();
        fc_program_stats(dyn, &st);
        double setup0 = st.shape_setup_ms, gb0 = st.graph_build_ms;
        long f0, c0, f1, c1;
        thread_usage(&f0, &c0);
        double h0 = now_us();
        if (fc_run_shaped(dyn, s.in, s.nin, s.out, 1, dev->stream) != FC_OK) DIE("fc_run_shaped");
        double host = (now_us() - h0) * 1e-3;
        thread_usage(&f1, &c1);
        first_faults += f1 - f0;
        first_switches += c1 - c0;
        fc_cuda_stream_sync(dev, NULL);
        double first = (now_us() - h0) * 1e-3;
        long q = fc_cublaslt_heuristic_queries_total() - q0;
        with_query += q > 0;
        fc_program_stats(dyn, &st);
        /* The first call's host time spent on the new shape: its instance
         * (and the eviction), and the graph work (a re-pointing, or a build). */
        double setup = st.shape_setup_ms - setup0, first_graph = st.graph_build_ms - gb0;
        setups[T - 1] = setup;
        first_graphs[T - 1] = first_graph;
        double build0 = st.graph_build_ms;
        double second = shaped_call_ms(dyn, &s); /* builds the shape's CUDA Graph */
        fc_program_stats(dyn, &st);
        double build = st.graph_build_ms - build0;
        double steady = shaped_steady_ms(dyn, &s, 10);
        /* The steady state of one call on its own (call, then synchronize),
         * timed as the first and second calls are: median of 9, and the
         * median of their host parts. */
        double one[9], one_host[9];
        for (int r = 0; r < 9; r++) one[r] = shaped_call_host_ms(dyn, &s, &one_host[r]);
        double latency = fc_median(one, 9), call_host = fc_median(one_host, 9);
        /* The noise floor of these ratios: one more steady call, a single
         * sample as the first call is, against the same median. */
        double again_host, again = shaped_call_host_ms(dyn, &s, &again_host);
        steady_over_call[T - 1] = again / latency;
        steady_extra_host_us[T - 1] = (again_host - call_host) * 1e3;
        first_over_call[T - 1] = first / latency;
        second_over_call[T - 1] = second / latency;
        extra_host_us[T - 1] = (host - call_host) * 1e3;
        ts[T - 1] = T;
        nsmall += T < 64;
        seconds[T - 1] = second;
        if (second > worst_second) worst_second = second, worst_second_t = T;
        if (csv)
            fprintf(csv, "%lld,%.5f,%.5f,%ld,%.5f,%.5f,%.5f,%.5f,%.5f,%.5f,%.5f\n", (long long)T, first, host, q, second,
                    build, steady, latency, setup, first_graph, call_host);
        if (q > 0 || first > 4 * steady)
            printf("RESULT fusec sweep slow_first T=%lld first_ms=%.4f host_ms=%.4f queries=%ld steady_ms=%.4f\n",
                   (long long)T, first, host, q, steady);
        firsts[T - 1] = first;
        steadies[T - 1] = steady;
        lat[T - 1] = latency;
        ratios[T - 1] = first / steady;
        double worst_call = first > second ? first : second;
        lratios[T - 1] = worst_call / latency;
        if (first / steady > worst_ratio) worst_ratio = first / steady, worst_t = T;
        if (worst_call / latency > worst_lratio) worst_lratio = worst_call / latency, worst_lt = T;
        if (first > worst_first) worst_first = first;
    }
    if (csv) fclose(csv);
    if (last_t) {
        printf("RESULT fusec sweep dynamic_all_T worst_first_over_steady=%.2f at_T=%lld worst_first_ms=%.4f "
               "median_first_ms=%.4f median_second_ms=%.4f worst_second_ms=%.4f at_T=%lld median_steady_ms=%.4f "
               "median_ratio=%.2f Ts_with_heuristic_queries=%d\n",
               worst_ratio, (long long)worst_t, worst_first, fc_median(firsts, 1024), fc_median(seconds, 1024), worst_second,
               (long long)worst_second_t, fc_median(steadies, 1024), fc_median(ratios, 1024), with_query);
        printf("RESULT fusec sweep new_shape_host median_setup_ms=%.4f median_first_graph_ms=%.4f\n", fc_median(setups, 1024),
               fc_median(first_graphs, 1024));
        printf("RESULT fusec sweep dynamic_all_T_latency median_call_ms=%.4f worst_new_shape_call_over_call=%.2f at_T=%lld "
               "median_new_shape_call_over_call=%.2f\n",
               fc_median(lat, 1024), worst_lratio, (long long)worst_lt, fc_median(lratios, 1024));
        print_ratio_spread("first_over_call", first_over_call, 1024, ts);
        print_ratio_spread("first_over_call_T_below_64", first_over_call, nsmall, ts);
        print_ratio_spread("second_over_call", second_over_call, 1024, ts);
        print_ratio_spread("steady_over_call", steady_over_call, 1024, ts);
        print_ratio_spread("steady_over_call_T_below_64", steady_over_call, nsmall, ts);
        printf("RESULT fusec sweep new_shape_extra_host_us median=%.2f p90=%.2f max=%.1f (first call's host time minus a "
               "steady call's) page_faults=%ld context_switches=%ld (in the 1024 first calls)\n",
               quantile(extra_host_us, 1024, 0.5), quantile(extra_host_us, 1024, 0.9), quantile(extra_host_us, 1024, 1.0),
               first_faults, first_switches);
        printf("RESULT fusec sweep steady_extra_host_us median=%.2f p90=%.2f max=%.1f (one more steady call's host time "
               "minus the median steady call's: the noise floor)\n",
               quantile(steady_extra_host_us, 1024, 0.5), quantile(steady_extra_host_us, 1024, 0.9),
               quantile(steady_extra_host_us, 1024, 1.0));
    }
    fc_program_free(dyn);
    /* SWEEP_VARIANT_ONLY: the variant's part alone (comparing its GEMM paths). */
    if (getenv("SWEEP_VARIANT_ONLY")) {
        sweep_free(&s);
        fc_graph_free(g);
        return;
    }

    /* 2. Background specialization on a sample of T: the miss (served by the
     * variant), the variant's steady state, the specialization once it has
     * landed, a static compile of the same T. */
    /* SWEEP_SPECIALIZE=off: the same sample with the variant alone (each
     * T's miss then 20 calls), to tell what the queueing costs a miss. */
    const bool spec_off = getenv("SWEEP_SPECIALIZE") && !strcmp(getenv("SWEEP_SPECIALIZE"), "off");
    o.specialize = spec_off ? FC_SPECIALIZE_OFF : FC_SPECIALIZE_BACKGROUND;
    /* SWEEP_MAX_SPECS: the table's size (8: the sample's 9th T on evict one). */
    o.max_specializations = getenv("SWEEP_MAX_SPECS") ? atoi(getenv("SWEEP_MAX_SPECS")) : 8;
    if (fc_compile(g, &o, &dyn) != FC_OK) DIE("compile dynamic");
    /* SWEEP_RESERVE=1: the largest shape declared first (fc_program_reserve),
     * so that no miss grows the variant's arena. */
    if (getenv("SWEEP_RESERVE") && fc_program_reserve(dyn, (fc_binding[]){{"T", 1024}}, 1) != FC_OK)
        DIE("fc_program_reserve");
    static const int64_t sample[] = {1, 2, 3, 7, 8, 16, 31, 64, 65, 127, 128, 129, 255, 256, 500, 512, 513, 777, 1000, 1024};
    int ns = (int)(sizeof sample / sizeof sample[0]);
    double worst_spec_static = 0, worst_miss_dyn = 0;
    static double spec_steady[32];
    static double during_p99[32], during_worst[32];
    int nduring = 0;
    long during_calls = 0, during_slow = 0;
    double during_extra_us = 0;
    for (int i = 0; i < ns; i++) {
        int64_t T = sample[i];
        sweep_set_t(&s, T);
        fc_program_stats(dyn, &st);
        const double guard0 = st.miss_guard_ms, run0 = st.miss_run_ms, setup0 = st.shape_setup_ms,
                     grow0 = st.arena_grow_ms;
        long mf0, mc0, mf1, mc1;
        thread_usage(&mf0, &mc0);
        double miss_host = 0, miss = shaped_call_host_ms(dyn, &s, &miss_host);
        thread_usage(&mf1, &mc1); /* (the synchronize's included) */
        fc_program_stats(dyn, &st);
        /* The miss's host time by part: the guard (queueing the
         * specialization), the instance, and the whole run. */
        const double miss_guard_us = (st.miss_guard_ms - guard0) * 1e3, miss_run_us = (st.miss_run_ms - run0) * 1e3,
                     miss_setup_us = (st.shape_setup_ms - setup0) * 1e3, miss_grow_us = (st.arena_grow_ms - grow0) * 1e3;
        /* Calls one after another, each timed alone (call, synchronize), as
         * a caller would make them, until one is served by the
         * specialization, which lands meanwhile (nothing waits for it):
         * the variant's second call (its graph build), the variant's calls
         * while the specialization compiles, the first hit. */
        static double before[100000], before_at[100000], before_host[100000];
        int nb = 0;
        double hit1 = 0, w0 = now_us();
        for (;;) {
            fc_program_stats(dyn, &st);
            uint64_t h0 = st.guard_hits;
            const double at = fc_now_ms();
            double host = 0, t = shaped_call_host_ms(dyn, &s, &host);
            fc_program_stats(dyn, &st);
            if (st.guard_hits > h0 || (spec_off && nb == 20)) {
                hit1 = t;
                break;
            }
            if (nb < (int)(sizeof before / sizeof before[0])) {
                before_at[nb] = at;
                before_host[nb] = host;
                before[nb++] = t;
            }
            if (now_us() - w0 > 60e6) DIE("the specialization of T=%lld did not land in 60 s", (long long)T);
        }
        double wait_ms = (now_us() - w0) * 1e-3;
        double second_call = nb > 0 ? before[0] : 0, worst_dyn = 0;
        for (int q = 1; q < nb; q++)
            if (before[q] > worst_dyn) worst_dyn = before[q];
        /* (fc_median sorts: a copy, so that before[] stays in call order.) */
        static double sorted[100000];
        memcpy(sorted, before, sizeof *before * (size_t)nb);
        double dyn_ms = nb > 1 ? fc_median(sorted + 1, nb - 1) : 0;
        double dyn_p99 = nb > 1 ? quantile(before + 1, nb - 1, 0.99) : 0;
        double dyn_host_ms = nb > 1 ? quantile(before_host + 1, nb - 1, 0.5) : 0; /* their host parts */
        /* SWEEP_SLOW_CALLS=1: when each slow one began (fc_now_ms, as
         * FUSEC_LOG=spec stamps the background thread's steps). */
        for (int q = 1; getenv("SWEEP_SLOW_CALLS") && q < nb; q++)
            if (before[q] > 1.5 * dyn_ms)
                printf("RESULT fusec sweep slow_call T=%lld at_ms=%.3f ms=%.4f host_ms=%.4f median_ms=%.4f\n",
                       (long long)T, before_at[q], before[q], before_host[q], dyn_ms);
        /* The variant's calls while the background thread builds the
         * specialization (and frees the one it evicts): how much that work
         * stalls them, against their own median (T = 1 left out: the
         * program's first specialization opens what later ones borrow). */
        if (i > 0 && nb > 1 && dyn_ms > 0) {
            during_p99[nduring] = dyn_p99 / dyn_ms;
            during_worst[nduring++] = worst_dyn / dyn_ms;
            for (int q = 1; q < nb; q++) {
                during_calls++;
                during_slow += before[q] > 1.5 * dyn_ms;
                during_extra_us += before[q] > dyn_ms ? (before[q] - dyn_ms) * 1e3 : 0;
            }
        }
        double hit2 = shaped_call_ms(dyn, &s);
        double spec_ms = shaped_steady_ms(dyn, &s, 50);
        double one[5];
        for (int r = 0; r < 5; r++) one[r] = shaped_call_ms(dyn, &s);
        double spec_call = fc_median(one, 5);
        spec_steady[i] = spec_ms;
        printf("RESULT fusec sweep T=%lld miss_ms=%.4f miss_host_ms=%.4f miss_guard_us=%.1f miss_instance_us=%.1f "
               "miss_grow_us=%.1f miss_run_us=%.1f second_call_ms=%.4f dynamic_call_ms=%.4f dynamic_call_p99_ms=%.4f worst_dynamic_call_ms=%.4f "
               "dynamic_calls=%d first_hit_ms=%.4f second_hit_ms=%.4f specialized_call_ms=%.4f specialized_ms=%.4f "
               "landed_after_ms=%.1f miss_page_faults=%ld miss_context_switches=%ld dynamic_call_host_ms=%.4f\n",
               (long long)T, miss, miss_host, miss_guard_us, miss_setup_us, miss_grow_us, miss_run_us, second_call, dyn_ms,
               dyn_p99, worst_dyn, nb, hit1, hit2, spec_call, spec_ms, wait_ms, mf1 - mf0, mc1 - mc0, dyn_host_ms);
        /* (T = 1's miss is the program's first call: the device, the module, the arena.) */
        if (i > 0 && dyn_ms > 0 && miss / dyn_ms > worst_miss_dyn) worst_miss_dyn = miss / dyn_ms;
    }
    /* The static compiles of the same T's, after the sample: between its
     * misses they churned the host's caches (a compile is megabytes of
     * allocation), which a serving loop does not, and the misses followed
     * them (run 3 of session 8: the miss's host time was the same with
     * specialization off). */
    for (int i = 0; i < ns; i++) {
        int64_t T = sample[i];
        sweep_set_t(&s, T);
        fc_graph *gs = parse_file("examples/gpt2_block_bf16.ir", (fc_binding[]){{"B", 1}, {"T", T}}, 2);
        fc_program *ps = compile(gs, true);
        bufs b = {0};
        b.nin = s.nin;
        b.nout = 1;
        for (int q = 0; q < s.nin; q++) b.in[q] = s.in[q].data;
        b.out[0] = s.out[0].data;
        double static_ms = per_call_ms(ps, &b, 200);
        fc_program_free(ps);
        fc_graph_free(gs);
        printf("RESULT fusec sweep static T=%lld static_ms=%.4f specialized_ms=%.4f specialized_over_static=%.3f\n",
               (long long)T, static_ms, spec_steady[i], spec_steady[i] / static_ms);
        if (spec_steady[i] / static_ms > worst_spec_static) worst_spec_static = spec_steady[i] / static_ms;
    }
    fc_program_stats(dyn, &st);
    if (nduring > 0) {
        double worst = 0;
        for (int q = 0; q < nduring; q++) worst = during_worst[q] > worst ? during_worst[q] : worst;
        printf("RESULT fusec sweep sample during_compile p99_over_median=%.3f (median over T) worst_over_median=%.2f "
               "calls=%ld over_1.5x=%ld extra_us_total=%.0f\n",
               fc_median(during_p99, nduring), worst, during_calls, during_slow, during_extra_us);
    }
    printf("RESULT fusec sweep sample worst_specialized_over_static=%.3f worst_miss_over_dynamic=%.2f hits=%llu "
           "misses=%llu built=%llu evicted=%llu graphs_prebuilt=%llu graph_build_ms=%.2f\n",
           worst_spec_static, worst_miss_dyn, (unsigned long long)st.guard_hits, (unsigned long long)st.guard_misses,
           (unsigned long long)st.specializations_built, (unsigned long long)st.specializations_evicted,
           (unsigned long long)st.graph_prebuilt, st.graph_build_ms);
    sweep_free(&s);
    fc_program_free(dyn);
    fc_graph_free(g);
}

/* One bf16 GEMM as a dynamic program's variant: cuBLASLt beside the
 * generated kernel (codegen/cuda/gemm.c), the same inputs, each its own
 * result, compared (rel_err). */
static void bench_vgemm(void) {
    static const int64_t nk[4][2] = {{2304, 768}, {768, 768}, {3072, 768}, {768, 3072}};
    static const int64_t ms[] = {1, 16, 64, 256, 384, 512, 768, 1024, 4096, 8192};
    for (int c = 0; c < 4; c++) {
        int64_t N = nk[c][0], K = nk[c][1];
        char text[256];
        snprintf(text, sizeof text, "graph vg(%%x: bf16[M, %lld], %%w: bf16[%lld, %lld]) {\n  %%y = matmul(%%x, %%w)\n  return %%y\n}\n",
                 (long long)K, (long long)K, (long long)N);
        fc_graph *g = NULL;
        if (fc_parse(ctx, "<vgemm>", text, strlen(text), NULL, NULL, 0, &g) != FC_OK) DIE("parse vgemm");
        fc_program *p[2] = {NULL, NULL};
        for (int v = 0; v < 2; v++) {
            if (v == 0) setenv("FUSEC_VARIANT_GEMM", "cublaslt", 1);
            else unsetenv("FUSEC_VARIANT_GEMM");
            fc_compile_options o;
            fc_compile_options_default(&o);
            o.dynamic = true;
            o.specialize = FC_SPECIALIZE_OFF;
            if (fc_compile(g, &o, &p[v]) != FC_OK) DIE("compile vgemm");
        }
        int64_t mmax = ms[sizeof ms / sizeof ms[0] - 1];
        fc_tensor x = {FC_BF16, 2, {mmax, K}, NULL}, w = {FC_BF16, 2, {K, N}, NULL}, y = {FC_BF16, 2, {mmax, N}, NULL};
        x.data = random_buffer(&x, 1.0);
        w.data = random_buffer(&w, 0.02);
        y.data = random_buffer(&y, 0);
        fc_tensor y2 = y;
        y2.data = random_buffer(&y2, 0);
        size_t ybytes = (size_t)(mmax * N) * 2;
        uint16_t *h[2] = {malloc(ybytes), malloc(ybytes)};
        if (!h[0] || !h[1]) DIE("out of memory");
        for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
            double us[2];
            fc_tensor in[2] = {x, w}, out = y;
            in[0].shape[0] = out.shape[0] = ms[i];
            for (int v = 0; v < 2; v++) {
                out.data = v ? y2.data : y.data; /* each path its own result, compared below */
                for (int r = 0; r < 5; r++)
                    if (fc_run_shaped(p[v], in, 2, &out, 1, dev->stream) != FC_OK) DIE("vgemm run");
                fc_cuda_stream_sync(dev, NULL);
                int iters = 200;
                double t0 = now_us();
                for (int r = 0; r < iters; r++) fc_run_shaped(p[v], in, 2, &out, 1, dev->stream);
                fc_cuda_stream_sync(dev, NULL);
                us[v] = (now_us() - t0) / iters;
            }
            /* The generated result against cuBLASLt's: ||gen - lt|| / ||lt|| (both bf16). */
            size_t nb = (size_t)(ms[i] * N) * 2;
            if (fc_cuda_download(dev, h[0], (CUdeviceptr)(uintptr_t)y.data, nb) != FC_OK ||
                fc_cuda_download(dev, h[1], (CUdeviceptr)(uintptr_t)y2.data, nb) != FC_OK)
                DIE("vgemm download");
            double num = 0, den = 0;
            for (size_t e = 0; e < nb / 2; e++) {
                double a = fc_bf16_to_f32(h[1][e]), b = fc_bf16_to_f32(h[0][e]);
                num += (a - b) * (a - b);
                den += b * b;
            }
            printf("RESULT fusec vgemm N=%lld K=%lld M=%lld cublaslt_us=%.2f generated_us=%.2f generated_over_cublaslt=%.2f "
                   "generated_tflops=%.1f cublaslt_tflops=%.1f rel_err=%.2e\n",
                   (long long)N, (long long)K, (long long)ms[i], us[0], us[1], us[1] / us[0],
                   2.0 * (double)ms[i] * (double)N * (double)K / (us[1] * 1e-6) * 1e-12,
                   2.0 * (double)ms[i] * (double)N * (double)K / (us[0] * 1e-6) * 1e-12, den > 0 ? sqrt(num / den) : num);
        }
        fc_cuda_free(dev, (CUdeviceptr)(uintptr_t)x.data);
        fc_cuda_free(dev, (CUdeviceptr)(uintptr_t)w.data);
        fc_cuda_free(dev, (CUdeviceptr)(uintptr_t)y.data);
        fc_cuda_free(dev, (CUdeviceptr)(uintptr_t)y2.data);
        free(h[0]);
        free(h[1]);
        fc_program_free(p[0]);
        fc_program_free(p[1]);
        fc_graph_free(g);
    }
}

static void bench_variant(void) {
    fc_graph *g = NULL;
    sweep_bufs s;
    fc_program *dyn = gpt2_variant_bufs(&g, &s);
    const char *list = getenv("VARIANT_TS") ? getenv("VARIANT_TS") : "1,64,300,450,700,1000";
    for (const char *at = list; *at;) {
        int64_t T = strtoll(at, NULL, 10);
        if (T < 1 || T > 1024) DIE("VARIANT_TS: each T in 1..1024");
        sweep_set_t(&s, T);
        printf("RESULT fusec variant T=%lld steady_ms=%.4f\n", (long long)T, shaped_steady_ms(dyn, &s, 200));
        while (*at && *at != ',') at++;
        if (*at == ',') at++;
    }
    fc_program_free(dyn);
    sweep_free(&s);
    fc_graph_free(g);
}

/* regraph: does a program's graph cost more host time at its first launch
 * after other programs' graphs ran on the same stream? (A dynamic
 * program's miss, in the sweep's sample, launches the variant's graph after
 * the specializations' graphs ran, and took 40-120 us of host time against
 * ~3 us: runs 28 and 29.) The GPT-2 block at B=1, T=64 (A) and at T=65..72
 * (eight others, as eight specializations), static, graphs on: A's host
 * time per call (call, then synchronize) steady, right after the others ran
 * 5 calls each, and the call after that; then the same with one other. */
static double call_host_us(fc_program *p, const bufs *b) {
    double t0 = now_us();
    run(p, b);
    double us = now_us() - t0;
    fc_cuda_stream_sync(dev, NULL);
    return us;
}

static void bench_regraph(void) {
    enum { NB = 8, ROUNDS = 9 };
    fc_program *a, *others[NB];
    bufs ba, bo[NB];
    fc_graph *g = parse_file("examples/gpt2_block_bf16.ir", (fc_binding[]){{"B", 1}, {"T", 64}}, 2);
    a = compile(g, true);
    fc_graph_free(g);
    make_bufs(a, &ba);
    for (int i = 0; i < NB; i++) {
        g = parse_file("examples/gpt2_block_bf16.ir", (fc_binding[]){{"B", 1}, {"T", 65 + i}}, 2);
        others[i] = compile(g, true);
        fc_graph_free(g);
        make_bufs(others[i], &bo[i]);
    }
    for (int n = NB; n >= 1; n -= NB - 1) {
        double steady[ROUNDS], after[ROUNDS], next[ROUNDS];
        for (int r = 0; r < ROUNDS; r++) {
            for (int i = 0; i < 20; i++) steady[r] = call_host_us(a, &ba);
            for (int o = 0; o < n; o++)
                for (int i = 0; i < 5; i++) call_host_us(others[o], &bo[o]);
            after[r] = call_host_us(a, &ba);
            next[r] = call_host_us(a, &ba);
        }
        printf("RESULT fusec regraph others=%d steady_host_us=%.2f first_after_others_host_us=%.2f second_host_us=%.2f\n", n,
               fc_median(steady, ROUNDS), fc_median(after, ROUNDS), fc_median(next, ROUNDS));
    }
    for (int i = 0; i < NB; i++) {
        fc_program_free(others[i]);
        free_bufs(&bo[i]);
    }
    fc_program_free(a);
    free_bufs(&ba);
}

#ifdef FC_HAVE_CUPTI
/* ------------------------------------------------------------------ */
/* trace: where a forward's GPU time goes, kernel by kernel             */
/* ------------------------------------------------------------------ */

typedef struct trace_kernel {
    uint64_t start, end;
    const char *name; /* CUPTI's, valid for the process */
    int grid;
} trace_kernel;

static trace_kernel *trace_recs;
static size_t trace_n, trace_cap;

static void CUPTIAPI trace_buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *size = 8u << 20;
    *buffer = aligned_alloc(8, *size);
    *max_records = 0;
}

static void CUPTIAPI trace_buffer_completed(CUcontext c, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)c, (void)stream, (void)size;
    CUpti_Activity *rec = NULL;
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
        if (trace_n == trace_cap) {
            trace_cap = trace_cap ? 2 * trace_cap : 4096;
            trace_recs = realloc(trace_recs, trace_cap * sizeof *trace_recs);
        }
        trace_recs[trace_n++] = (trace_kernel){k->start, k->end, k->name, k->gridX * k->gridY * k->gridZ};
    }
    free(buffer);
}

static int trace_by_start(const void *a, const void *b) {
    uint64_t x = ((const trace_kernel *)a)->start, y = ((const trace_kernel *)b)->start;
    return x < y ? -1 : x > y;
}

/* "B=1,T=64" into b (at most n); the count. */
static int parse_bind(const char *v, fc_binding *b, int n, char names[][16]) {
    int k = 0;
    while (v && *v && k < n) {
        const char *eq = strchr(v, '=');
        if (!eq || eq == v || eq - v >= 16) DIE("TRACE_BIND: want SYM=INT,... (%s)", v);
        memcpy(names[k], v, (size_t)(eq - v));
        names[k][eq - v] = 0;
        char *end = NULL;
        b[k].name = names[k];
        b[k].value = strtoll(eq + 1, &end, 10);
        k++;
        v = *end == ',' ? end + 1 : end;
    }
    return k;
}

static void bench_trace(void) {
    const char *ir = getenv("TRACE_IR"), *bind = getenv("TRACE_BIND"), *it = getenv("TRACE_ITERS");
    if (!ir || !*ir) ir = "examples/gpt2_block_bf16.ir";
    if (!bind || !*bind) bind = "B=1,T=64";
    int iters = it && atoi(it) > 0 ? atoi(it) : 200;
    fc_binding b[8];
    char names[8][16];
    int nb = parse_bind(bind, b, 8, names);
    fc_graph *g = parse_file(ir, b, nb);
    fc_program *p = compile(g, true);
    bufs bf;
    make_bufs(p, &bf);
    double ms = per_call_ms(p, &bf, 2000); /* warm, and the time untraced */
    if (cuptiActivityRegisterCallbacks(trace_buffer_requested, trace_buffer_completed) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS)
        DIE("CUPTI: cannot trace kernels");
    for (int i = 0; i < 20; i++) run(p, &bf);
    fc_cuda_stream_sync(dev, NULL);
    cuptiActivityFlushAll(1);
    trace_n = 0; /* the warm-up's records */
    double t0 = now_us();
    for (int i = 0; i < iters; i++) run(p, &bf);
    fc_cuda_stream_sync(dev, NULL);
    double traced = (now_us() - t0) / iters * 1e-3;
    cuptiActivityFlushAll(1);
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    qsort(trace_recs, trace_n, sizeof *trace_recs, trace_by_start);
    size_t per = trace_n / (size_t)iters;
    printf("RESULT fusec trace ir=%s bind=%s per_call_ms=%.5f traced_per_call_ms=%.5f kernels_per_forward=%zu "
           "records=%zu\n",
           ir, bind, ms, traced, per, trace_n);
    if (per == 0 || trace_n % (size_t)iters) {
        printf("RESULT fusec trace error=\"%zu records for %d forwards\"\n", trace_n, iters);
        goto done;
    }
    double *dur = malloc(sizeof *dur * (size_t)iters), *gap = malloc(sizeof *gap * (size_t)iters);
    double *own = malloc(sizeof *own * (size_t)iters);
    double sum_dur = 0, sum_gap = 0;
    for (size_t j = 0; j < per; j++) {
        int n = 0;
        for (int i = 1; i < iters; i++) { /* the first forward has no gap before it */
            const trace_kernel *k = &trace_recs[(size_t)i * per + j], *prev = k - 1;
            dur[n] = (double)(k->end - k->start) * 1e-3;
            gap[n] = ((double)k->start - (double)prev->end) * 1e-3;
            /* Its own time, as --profile's rows count it: from the end of
             * every kernel before it (a programmatic dependent starts while
             * they run and waits inside), when later than its start. */
            uint64_t from = k->start;
            for (const trace_kernel *b = &trace_recs[(size_t)i * per - 1]; b < k; b++)
                if (b->end > from) from = b->end;
            own[n++] = k->end > from ? (double)(k->end - from) * 1e-3 : 0;
        }
        double d = fc_median(dur, n), gp = fc_median(gap, n);
        sum_dur += d;
        sum_gap += gp;
        const trace_kernel *k = &trace_recs[per + j];
        printf("RESULT fusec trace kernel=%zu us=%.2f gap_us=%.2f own_us=%.2f blocks=%d name=%.70s\n", j, d, gp,
               fc_median(own, n), k->grid, k->name ? k->name : "?");
    }
    free(own);
    int n = 0;
    for (int i = 1; i < iters; i++)
        dur[n++] = (double)(trace_recs[(size_t)i * per].start - trace_recs[(size_t)(i - 1) * per].start) * 1e-3;
    printf("RESULT fusec trace sum_kernel_us=%.2f sum_gap_us=%.2f period_us=%.2f\n", sum_dur, sum_gap,
           fc_median(dur, n));
    free(dur);
    free(gap);
done:
    free_bufs(&bf);
    fc_program_free(p);
    fc_graph_free(g);
}
#else
static void bench_trace(void) { printf("RESULT fusec trace error=\"built without CUPTI\"\n"); }
#endif

/* ---- A/B of two builds of the variant in one process ---------------------------- */

/* The GPT-2 block's variant compiled twice, A with the environment
 * settings of $AB_ENV (NAME=VALUE[,NAME=VALUE...], set while it compiles and
 * runs, e.g. FUSEC_VARIANT_GEMM=cublaslt: a switch read when the variant is
 * compiled) and B without, each T from 1 to 1024 new to both: the first
 * call of A and of B (the order alternating with T), then a steady call of
 * each (call + synchronize, median of 7, alternating). The host's speed
 * drifts by 2x between sweeps of one device call (docs/PERF.md, "Session
 * 10"); within one T both builds see the same host. Per build: first /
 * steady call (median, p90, below T = 64, T's over 1.1x) and the first
 * call's extra host time. */
typedef struct ab_side {
    fc_program *p;
    double first[1024], host[1024], steady[1024], steady_host[1024];
} ab_side;

static void ab_env(const char *spec, bool set) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", spec ? spec : "");
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        char *eq = strchr(tok, '=');
        if (!eq) continue;
        *eq = 0;
        if (set) setenv(tok, eq + 1, 1);
        else unsetenv(tok);
    }
}

static void ab_first(ab_side *a, sweep_bufs *s, int64_t T, const char *env) {
    ab_env(env, true);
    double host;
    a->first[T - 1] = shaped_call_host_ms(a->p, s, &host);
    a->host[T - 1] = host;
    ab_env(env, false);
}

static void ab_steady(ab_side *a, ab_side *b, sweep_bufs *s, int64_t T, const char *env) {
    double ta[7], ha[7], tb[7], hb[7];
    for (int r = 0; r < 7; r++) {
        ab_env(env, true);
        ta[r] = shaped_call_host_ms(a->p, s, &ha[r]);
        ab_env(env, false);
        tb[r] = shaped_call_host_ms(b->p, s, &hb[r]);
    }
    a->steady[T - 1] = fc_median(ta, 7);
    a->steady_host[T - 1] = fc_median(ha, 7);
    b->steady[T - 1] = fc_median(tb, 7);
    b->steady_host[T - 1] = fc_median(hb, 7);
}

static void ab_report(const char *name, const ab_side *a) {
    static double r[1024], x[1024];
    static int64_t ts[1024];
    for (int i = 0; i < 1024; i++) {
        r[i] = a->first[i] / a->steady[i];
        x[i] = (a->host[i] - a->steady_host[i]) * 1e3;
        ts[i] = i + 1;
    }
    char what[96];
    snprintf(what, sizeof what, "ab[%s] first_over_call", name);
    print_ratio_spread(what, r, 1024, ts);
    snprintf(what, sizeof what, "ab[%s] first_over_call_T_below_64", name);
    print_ratio_spread(what, r, 63, ts);
    printf("RESULT fusec sweep ab[%s] extra_host_us median=%.2f p90=%.2f steady_call_ms median=%.4f steady_host_us "
           "median=%.2f\n",
           name, quantile(x, 1024, 0.5), quantile(x, 1024, 0.9), quantile(a->steady, 1024, 0.5),
           quantile(a->steady_host, 1024, 0.5) * 1e3);
}

static void bench_ab(void) {
    const char *env = getenv("AB_ENV");
    static ab_side a, b;
    fc_graph *ga = NULL, *gb = NULL;
    fc_compile_options o;
    ab_env(env, true);
    a.p = gpt2_variant(&ga, &o);
    ab_env(env, false);
    b.p = gpt2_variant(&gb, &o);
    sweep_bufs s;
    sweep_alloc(a.p, &s, 1024);
    sweep_set_t(&s, 1024);
    ab_first(&a, &s, 1024, env); /* each program's first call (device, module, graph), left out */
    ab_first(&b, &s, 1024, NULL);
    for (int64_t T = 1; T <= 1024; T++) {
        sweep_set_t(&s, T);
        if (T % 2) {
            ab_first(&a, &s, T, env);
            ab_first(&b, &s, T, NULL);
        } else {
            ab_first(&b, &s, T, NULL);
            ab_first(&a, &s, T, env);
        }
        ab_steady(&a, &b, &s, T, env);
    }
    ab_report(env ? env : "A", &a);
    ab_report("default", &b);
    fc_program_free(a.p);
    fc_program_free(b.p);
    sweep_free(&s);
    fc_graph_free(ga);
    fc_graph_free(gb);
}

int main(int argc, char **argv) {
    ctx = fc_context_new();
    if (fc_cuda_device_open(ctx, 0, &dev) != FC_OK) DIE("no CUDA device");
    srand(1);
    const char *all[] = {"gpt2", "mlp8", "replay20", "sweep"};
    int n = argc > 1 ? argc - 1 : 4;
    for (int i = 0; i < n; i++) {
        const char *w = argc > 1 ? argv[i + 1] : all[i];
        if (!strcmp(w, "gpt2")) bench_gpt2();
        else if (!strcmp(w, "mlp8")) bench_mlp8();
        else if (!strcmp(w, "gpt2_8x1024")) bench_gpt2_large();
        else if (!strcmp(w, "replay20")) bench_replay20();
        else if (!strcmp(w, "sweep")) bench_sweep();
        else if (!strcmp(w, "vgemm")) bench_vgemm();
        else if (!strcmp(w, "variant")) bench_variant();
        else if (!strcmp(w, "regraph")) bench_regraph();
        else if (!strcmp(w, "trace")) bench_trace();
        else if (!strcmp(w, "ab")) bench_ab();
        else if (!strcmp(w, "reserve")) bench_reserve();
        else if (!strcmp(w, "newshape")) bench_newshape();
        else {
            fprintf(stderr, "unknown workload %s (gpt2 gpt2_8x1024 mlp8 replay20 sweep variant vgemm regraph trace ab reserve)\n", w);
            return 2;
        }
        fflush(stdout);
    }
    fc_cuda_device_close(dev);
    fc_context_free(ctx);
    return 0;
}
