/*
 * generate.c - greedy text generation with a key/value cache, from C
 * (docs/DECODE.md). The model is an .ir graph written for decoding, as
 * bench/models/decode_irgen.py writes them: parameters %input_ids i64[B, T]
 * and %pos i64[], one inout cache per layer and per k/v, then the weights.
 *
 *   example_generate MODEL.ir [--weights W.safetensors] [--device cpu|cuda]
 *                    [--graph NAME] [--prompt 1,2,3] [--tokens N] [--bench N]
 *                    [--batch B] [--prefill-bench N] [--force 5,6,7]
 *
 * The graph is compiled twice from the same text: with T bound to the
 * prompt's length (prefill) and with T = 1 (a decode step). Both programs
 * get the same buffers: the weights, and the caches, which the programs
 * write in place, so the cache persists from one call to the next in the
 * caller's memory. A step writes its token and position into two small
 * buffers that stay where they are, so on CUDA the program replays its
 * CUDA Graph with the same pointers every step (nothing to patch).
 *
 * Weights come from a safetensors file of the parameters' names, or are
 * random (a fixed seed; the rotary tables rope.cos and rope.sin, when the
 * graph has them, are the real tables). Prints the generated ids and the
 * time per token; --bench N then times N more decode steps at the cache's
 * last position (attention over the whole cache). --batch B decodes B
 * copies of the prompt at once (B bound in both programs; the ids printed
 * are row 0's). --prefill-bench N times N more prefills of the prompt.
 * --force feeds the given ids one step at a time instead of the argmax
 * (teacher forcing) and prints each step's argmax ("argmax: ...").
 *
 * On CUDA the example allocates device memory through the driver API,
 * loaded with dlopen as fusec loads it (so it builds without the CUDA
 * toolkit); fusec works in the device's primary context, which it shares.
 */
#include "fusec.h"

#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DIE(...) (fprintf(stderr, "generate: " __VA_ARGS__), fputc('\n', stderr), exit(1))

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* ---- memory: host buffers for the CPU, device buffers for CUDA ---------- */

static struct {
    bool on;
    int (*Init)(unsigned);
    int (*DeviceGet)(int *, int);
    int (*PrimaryCtxRetain)(void **, int);
    int (*CtxSetCurrent)(void *);
    int (*MemAlloc)(unsigned long long *, size_t);
    int (*HtoD)(unsigned long long, const void *, size_t);
    int (*DtoH)(void *, unsigned long long, size_t);
    int (*Sync)(void);
} cu;

static void cu_open(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) DIE("cannot load libcuda.so.1: %s", dlerror());
#define SYM(f, n) *(void **)&cu.f = dlsym(h, n)
    SYM(Init, "cuInit");
    SYM(DeviceGet, "cuDeviceGet");
    SYM(PrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    SYM(CtxSetCurrent, "cuCtxSetCurrent");
    SYM(MemAlloc, "cuMemAlloc_v2");
    SYM(HtoD, "cuMemcpyHtoD_v2");
    SYM(DtoH, "cuMemcpyDtoH_v2");
    SYM(Sync, "cuCtxSynchronize");
#undef SYM
    int dev;
    void *ctx;
    if (!cu.Init || cu.Init(0) || cu.DeviceGet(&dev, 0) || cu.PrimaryCtxRetain(&ctx, dev) || cu.CtxSetCurrent(ctx))
        DIE("no CUDA device");
    cu.on = true;
}

static void *mem_alloc(size_t n) {
    if (!cu.on) {
        void *p = calloc(n ? n : 1, 1);
        if (!p) DIE("out of memory");
        return p;
    }
    unsigned long long d;
    if (cu.MemAlloc(&d, n ? n : 1)) DIE("cuMemAlloc of %zu bytes failed", n);
    return (void *)(uintptr_t)d;
}

static void mem_put(void *dst, const void *src, size_t n) {
    if (!cu.on) memcpy(dst, src, n);
    else if (cu.HtoD((unsigned long long)(uintptr_t)dst, src, n)) DIE("cuMemcpyHtoD failed");
}

static void mem_get(void *dst, const void *src, size_t n) {
    if (!cu.on) memcpy(dst, src, n);
    else if (cu.DtoH(dst, (unsigned long long)(uintptr_t)src, n)) DIE("cuMemcpyDtoH failed");
}

static void mem_sync(void) {
    if (cu.on && cu.Sync()) DIE("cuCtxSynchronize failed");
}

/* ---- the model ---------------------------------------------------------- */

static size_t bytes_of(const fc_value *v) {
    size_t n = fc_dtype_size(fc_value_dtype(v));
    for (int d = 0; d < fc_value_rank(v); d++) n *= (size_t)fc_value_dim(v, d);
    return n;
}

static uint64_t rng = 0x853c49e6748fea9bull;
static float uniform(void) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng >> 40) / 16777216.0) - 0.5f;
}

static void store(fc_dtype dt, void *p, size_t i, float x) {
    if (dt == FC_BF16) ((uint16_t *)p)[i] = fc_f32_to_bf16(x);
    else if (dt == FC_F16) ((uint16_t *)p)[i] = fc_f32_to_f16(x);
    else if (dt == FC_F32) ((float *)p)[i] = x;
    else if (dt == FC_F64) ((double *)p)[i] = x;
}

static float load(fc_dtype dt, const void *p, size_t i) {
    if (dt == FC_BF16) return fc_bf16_to_f32(((const uint16_t *)p)[i]);
    if (dt == FC_F16) return fc_f16_to_f32(((const uint16_t *)p)[i]);
    if (dt == FC_F64) return (float)((const double *)p)[i];
    return ((const float *)p)[i];
}

/* A random weight (norm weights near 1), or the real rotary tables. */
static void *random_weight(const fc_value *v) {
    const char *name = fc_value_name(v);
    fc_dtype dt = fc_value_dtype(v);
    size_t n = bytes_of(v) / fc_dtype_size(dt);
    void *h = calloc(n ? n : 1, fc_dtype_size(dt));
    if (!h) DIE("out of memory");
    bool is_cos = !strcmp(name, "rope.cos"), is_sin = !strcmp(name, "rope.sin");
    /* The name is looked at once, not per element: a 1B model's weights
     * are over a billion elements. */
    const bool is_norm = strstr(name, "norm") || strstr(name, "ln_"), is_bias = strstr(name, "bias") != NULL;
    int64_t D = fc_value_rank(v) == 2 ? fc_value_dim(v, 1) : 1;
    for (size_t i = 0; i < n; i++) {
        float x;
        if (is_cos || is_sin) {
            double pos = (double)(i / (size_t)D), j = (double)((i % (size_t)D) % (size_t)(D / 2));
            double a = pos * pow(10000.0, -2.0 * j / (double)D);
            x = (float)(is_cos ? cos(a) : sin(a));
        } else if (is_norm) {
            x = is_bias ? 0.0f : 1.0f;
        } else {
            x = 0.04f * uniform();
        }
        store(dt, h, i, x);
    }
    return h;
}

static fc_graph *parse(fc_context *ctx, const char *path, const char *graph, int64_t B, int64_t T) {
    fc_binding b[2] = {{"B", B}, {"T", T}};
    fc_graph *g = NULL;
    if (fc_parse_file(ctx, path, graph, b, 2, &g) != FC_OK) DIE("%s", fc_last_error(ctx));
    return g;
}

static fc_program *compile(fc_context *ctx, fc_graph *g, fc_device dev) {
    fc_compile_options o;
    fc_compile_options_default(&o);
    o.device = dev;
    fc_program *p = NULL;
    if (fc_compile(g, &o, &p) != FC_OK) DIE("compile: %s", fc_last_error(ctx));
    return p;
}

int main(int argc, char **argv) {
    const char *path = NULL, *weights_path = NULL, *graph = NULL, *prompt = "1,2,3,4", *device = "cuda";
    const char *force = NULL;
    int ntokens = 16, bench = 0, batch = 1, prefill_bench = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--weights") && v) weights_path = argv[++i];
        else if (!strcmp(a, "--graph") && v) graph = argv[++i];
        else if (!strcmp(a, "--prompt") && v) prompt = argv[++i];
        else if (!strcmp(a, "--device") && v) device = argv[++i];
        else if (!strcmp(a, "--tokens") && v) ntokens = atoi(argv[++i]);
        else if (!strcmp(a, "--bench") && v) bench = atoi(argv[++i]);
        else if (!strcmp(a, "--batch") && v) batch = atoi(argv[++i]);
        else if (!strcmp(a, "--prefill-bench") && v) prefill_bench = atoi(argv[++i]);
        else if (!strcmp(a, "--force") && v) force = argv[++i];
        else if (a[0] != '-' && !path) path = a;
        else DIE("usage: example_generate MODEL.ir [--weights W.safetensors] [--device cpu|cuda] [--graph NAME] "
                 "[--prompt 1,2,3] [--tokens N] [--bench N] [--batch B] [--prefill-bench N] [--force 5,6,7]");
    }
    if (batch < 1 || batch > 1024) DIE("--batch %d: from 1 to 1024", batch);
    int64_t forced[4096];
    int nforced = 0;
    for (const char *s = force; s && *s && nforced < 4096;) {
        forced[nforced++] = strtoll(s, (char **)&s, 10);
        while (*s == ',' || *s == ' ') s++;
    }
    if (!path) DIE("no model (.ir) given");
    fc_device dev;
    if (!fc_device_from_name(device, &dev) || dev == FC_DEVICE_REF) DIE("unknown device '%s' (cpu or cuda)", device);
    if (dev == FC_DEVICE_CUDA) cu_open();

    int64_t ids[4096];
    int nprompt = 0;
    for (const char *s = prompt; *s && nprompt < 4096;) {
        ids[nprompt++] = strtoll(s, (char **)&s, 10);
        while (*s == ',' || *s == ' ') s++;
    }
    if (nprompt < 1) DIE("an empty prompt");

    fc_context *ctx = fc_context_new();
    if (force) ntokens = nforced + 1;
    fc_graph *gp = parse(ctx, path, graph, batch, nprompt), *gd = parse(ctx, path, graph, batch, 1);
    int np = fc_graph_num_params(gd);
    int i_ids = -1, i_pos = -1;
    int64_t ctx_len = 0;
    for (int i = 0; i < np; i++) {
        const fc_value *v = fc_graph_param(gd, i);
        if (!strcmp(fc_value_name(v), "input_ids")) i_ids = i;
        else if (!strcmp(fc_value_name(v), "pos")) i_pos = i;
        else if (fc_value_is_inout(v) && fc_value_rank(v) == 4) ctx_len = fc_value_dim(v, 2);
    }
    /* Every row of a batch is the prompt: B copies, row-major [B, T]. */
    int64_t *rows = malloc(sizeof(int64_t) * (size_t)batch * (size_t)nprompt);
    if (!rows) DIE("out of memory");
    for (int b = 0; b < batch; b++) memcpy(rows + (size_t)b * (size_t)nprompt, ids, sizeof(int64_t) * (size_t)nprompt);
    if (i_ids < 0 || i_pos < 0 || !ctx_len) DIE("%s: not a decode graph (%%input_ids, %%pos and inout caches)", path);
    if (nprompt + ntokens > ctx_len)
        DIE("a prompt of %d tokens and %d new ones do not fit the cache of %lld positions", nprompt, ntokens,
            (long long)ctx_len);

    fc_weights *w = NULL;
    fc_tensor *bound = calloc((size_t)np, sizeof *bound);
    bool *have = calloc((size_t)np, sizeof *have);
    if (weights_path) {
        if (fc_weights_load_safetensors(ctx, weights_path, &w) != FC_OK ||
            fc_weights_bind(w, gd, bound, np, have, false, 0) != FC_OK)
            DIE("%s", fc_last_error(ctx));
    }
    /* One buffer per parameter, shared by both programs. */
    void **buf = calloc((size_t)np, sizeof *buf);
    size_t weight_bytes = 0;
    double t0 = now_ms();
    for (int i = 0; i < np; i++) {
        const fc_value *v = fc_graph_param(gd, i);
        size_t n = bytes_of(v);
        if (i == i_ids) n = sizeof(int64_t) * (size_t)batch * (size_t)nprompt;
        buf[i] = mem_alloc(n);
        if (i == i_ids || i == i_pos) continue;
        if (fc_value_is_inout(v)) { /* a cache: zeros */
            void *z = calloc(n, 1);
            mem_put(buf[i], z, n);
            free(z);
            continue;
        }
        void *h = have[i] ? bound[i].data : random_weight(v);
        mem_put(buf[i], h, n);
        if (!have[i]) free(h);
        weight_bytes += n;
    }
    printf("%s: %d parameters, %.1f MB of weights (%s), cache of %lld positions, on %s (%.0f ms to load)\n", path, np,
           weight_bytes / 1e6, weights_path ? weights_path : "random", (long long)ctx_len, device, now_ms() - t0);

    t0 = now_ms();
    fc_program *pp = compile(ctx, gp, dev), *pd = compile(ctx, gd, dev);
    printf("compiled prefill (T=%d) and decode (T=1) at B=%d in %.0f ms\n", nprompt, batch, now_ms() - t0);

    const fc_value *lv = fc_graph_output(gd, 0);
    fc_dtype ldt = fc_value_dtype(lv);
    int64_t V = fc_value_dim(lv, fc_value_rank(lv) - 1);
    size_t row = (size_t)V * fc_dtype_size(ldt);
    void *logits_p = mem_alloc(row * (size_t)nprompt * (size_t)batch), *logits_d = mem_alloc(row * (size_t)batch);
    void *host_row = malloc(row);

    int64_t pos = 0;
    int64_t out_ids[4096];
    double *step_ms = calloc((size_t)ntokens + (size_t)bench + 1, sizeof *step_ms);
    /* Prefill: the prompt at positions 0 .. P-1. */
    t0 = now_ms();
    mem_put(buf[i_ids], rows, sizeof(int64_t) * (size_t)batch * (size_t)nprompt);
    mem_put(buf[i_pos], &pos, sizeof pos);
    void *outp[1] = {logits_p};
    if (fc_run(pp, buf, np, outp, 1, NULL) != FC_OK) DIE("prefill: %s", fc_last_error(ctx));
    mem_get(host_row, (char *)logits_p + row * (size_t)(nprompt - 1), row);
    double prefill_ms = now_ms() - t0;
    if (prefill_bench > 0) {
        /* The same prompt at the same positions again: the cache gets the
         * same rows, so the decode below is unchanged. */
        for (int i = 0; i < 2; i++) fc_run(pp, buf, np, outp, 1, NULL);
        mem_sync();
        double b0 = now_ms();
        for (int i = 0; i < prefill_bench; i++)
            if (fc_run(pp, buf, np, outp, 1, NULL) != FC_OK) DIE("prefill: %s", fc_last_error(ctx));
        mem_sync();
        printf("prefill bench: %d runs of %d tokens at B=%d: %.4f ms/prefill\n", prefill_bench, nprompt, batch,
               (now_ms() - b0) / prefill_bench);
    }
    pos = nprompt;
    void *outd[1] = {logits_d};
    for (int t = 0; t < ntokens; t++) {
        int64_t best = 0;
        for (int64_t k = 1; k < V; k++)
            if (load(ldt, host_row, (size_t)k) > load(ldt, host_row, (size_t)best)) best = k;
        out_ids[t] = best;
        if (t == ntokens - 1) break;
        int64_t feed[1024];
        for (int b = 0; b < batch; b++) feed[b] = force ? forced[t] : best;
        double s0 = now_ms();
        mem_put(buf[i_ids], feed, sizeof(int64_t) * (size_t)batch);
        mem_put(buf[i_pos], &pos, sizeof pos);
        if (fc_run(pd, buf, np, outd, 1, NULL) != FC_OK) DIE("decode at %lld: %s", (long long)pos, fc_last_error(ctx));
        mem_get(host_row, logits_d, row);
        step_ms[t] = now_ms() - s0;
        pos++;
    }
    printf("prompt:");
    for (int i = 0; i < nprompt; i++) printf(" %lld", (long long)ids[i]);
    printf("\n%s:", force ? "argmax" : "generated");
    for (int t = 0; t < ntokens; t++) printf(" %lld", (long long)out_ids[t]);
    double sum = 0;
    for (int t = 0; t + 1 < ntokens; t++) sum += step_ms[t];
    printf("\nprefill %.3f ms; decode %.4f ms/token (mean of %d steps, token and logits copies included)\n",
           prefill_ms, ntokens > 1 ? sum / (ntokens - 1) : 0.0, ntokens - 1);

    if (bench > 0) {
        /* Steps at the last position: attention over the whole cache. The
         * device queue stays full (no copy back between steps). */
        int64_t last = ctx_len - 1;
        mem_put(buf[i_pos], &last, sizeof last);
        for (int i = 0; i < 3; i++) fc_run(pd, buf, np, outd, 1, NULL);
        mem_sync();
        double b0 = now_ms();
        for (int i = 0; i < bench; i++)
            if (fc_run(pd, buf, np, outd, 1, NULL) != FC_OK) DIE("bench: %s", fc_last_error(ctx));
        double host = (now_ms() - b0) / bench; /* the calls alone: on CUDA they only enqueue */
        mem_sync();
        double per = (now_ms() - b0) / bench;
        printf("bench: %d decode steps at position %lld: %.4f ms/token, %.1f GB/s of weights; host %.1f us/step\n",
               bench, (long long)last, per, weight_bytes / (per * 1e6), 1e3 * host);
    }
    fc_program_free(pp);
    fc_program_free(pd);
    fc_graph_free(gp);
    fc_graph_free(gd);
    fc_weights_free(w);
    if (!cu.on) {
        for (int i = 0; i < np; i++) free(buf[i]);
        free(logits_p);
        free(logits_d);
    }
    free(buf);
    free(rows);
    free(bound);
    free(have);
    free(host_row);
    free(step_ms);
    fc_context_free(ctx);
    return 0;
}
