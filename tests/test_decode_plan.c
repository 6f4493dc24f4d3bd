/*
 * test_decode_plan.c - the CUDA launch plan of a decode step (docs/DECODE.md,
 * "Launches of a step"), made without a GPU: the small GPT-2 and
 * Llama-style models of tests/decode/ at B = 1, T = 1.
 *
 *  - no copy kernel for a view: the heads' permutes move only the dim of
 *    size 1 (canonicalize makes them reshapes), the attention's result is
 *    read by the output projection as an alias of its buffer, and the new
 *    keys, values and queries are read by update_slice and cache_attention
 *    straight from the QKV projection's result, through strides; the
 *    reduce_max over the one position is a reshape;
 *  - the cache updates run inside the attention kernel that reads them
 *    (it writes the new rows into the caches and reads them from the
 *    projection's buffer): no update_slice launch where that holds, and
 *    the fused launch writes the two inout caches;
 *  - the launch counts of both (golden: a change to fusion shows here);
 *  - a bf16 Llama-style model (llama_bf16.ir): its GEMMs are GEMVs, and
 *    the layers' GEMVs of one shape and epilogue are one kernel (the GEMV
 *    source holds no group id): as many distinct GEMV kernels as distinct
 *    GEMV summaries;
 *  - the decode kernels are programmatic dependents (they wait for the
 *    kernel before them), and their source has the wait;
 *  - a cache_attention of several parts of the keys merges them in a
 *    thread-block cluster (sm 90): its kernel has __cluster_dims__, and no
 *    module-scope partial results or counters (the merge through global
 *    memory) are left; at the Llama-1B shape, its parts at B = 8 and 1.
 *
 * The numerics of the same rules are test_decode's (16 steps against the
 * whole sequence recomputed, on the CPU and, with a GPU, CUDA).
 */
#include "check.h"
#include "test_util.h"
#include "runtime/cuda/program.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static fc_context *ctx;

static fc_program *compile_at(const char *file, int T) {
    const char *src = getenv("FUSEC_SRC");
    char path[512];
    snprintf(path, sizeof path, "%s/tests/decode/%s", src ? src : ".", file);
    fc_binding b[2] = {{"B", 1}, {"T", T}};
    fc_graph *g = NULL;
    if (fc_parse_file(ctx, path, NULL, b, 2, &g) != FC_OK) {
        printf("%s: %s\n", path, fc_last_error(ctx));
        return NULL;
    }
    fc_compile_options o;
    fc_compile_options_default(&o);
    o.device = FC_DEVICE_CUDA;
    fc_program *p = NULL;
    if (fc_compile(g, &o, &p) != FC_OK) printf("compile %s: %s\n", file, fc_last_error(ctx));
    fc_graph_free(g);
    return p;
}

static fc_program *compile_step(const char *file) { return compile_at(file, 1); }


/* Is a launch's summary "pointwise: " followed by view ops alone? */
static bool copies_a_view(const fc_launch *l) {
    if (l->kind != FC_LAUNCH_KERNEL || strncmp(l->summary, "pointwise: ", 11)) return false;
    char ops[160];
    snprintf(ops, sizeof ops, "%s", l->summary + 11);
    for (char *t = strtok(ops, ","); t; t = strtok(NULL, ","))
        if (strcmp(t, "reshape") && strcmp(t, "permute") && strcmp(t, "split") && strcmp(t, "slice")) return false;
    return true;
}

/* How many cache updates cache_attention launch l runs (its summary). */
static int fused_updates(const fc_launch *l) {
    if (!strstr(l->summary, "cache_attention with the")) return 0;
    return strstr(l->summary, "keys' and values' updates") ? 2 : 1;
}

/* Every write of launch l past its result is an inout parameter's buffer
 * (a cache), and there are `want` of them. */
static void check_cache_writes(const fc_program_desc *d, const fc_launch *l, int want) {
    CHECK_EQ_INT(l->nargs - l->nreads, 1 + want);
    for (int a = l->nreads + 1; a < l->nargs; a++) {
        const fc_store *st = &d->store[l->args[a]];
        CHECK(st->kind == FC_STORE_INPUT && d->params[st->index].inout);
    }
}

static void check_step(const char *file, int want_kernels, int want_aliases, int layers, int want_updates) {
    fc_program *p = compile_step(file);
    CHECK(p != NULL);
    if (!p) return;
    const fc_program_desc *d = fc_program_desc_of(p);
    int kernels = 0, aliases = 0, views = 0, updates = 0, attentions = 0, pdl = 0, fused = 0, parted = 0;
    for (int i = 0; i < d->src.nlaunches; i++) {
        const fc_launch *l = &d->src.launches[i];
        kernels += l->kind == FC_LAUNCH_KERNEL;
        aliases += l->kind == FC_LAUNCH_ALIAS;
        views += copies_a_view(l);
        bool upd = strstr(l->name, "fc_update_slice") == l->name, att = strstr(l->name, "fc_cache_attention") == l->name;
        updates += upd;
        attentions += att;
        pdl += (upd || att) && l->pdl;
        if (att) {
            parted += l->grid[1] > 1;
            fused += fused_updates(l);
            check_cache_writes(d, l, fused_updates(l));
        }
    }
    printf("%s: %d kernels, %d aliases, %d view copies, %d update_slice, %d cache_attention (%d programmatic), %d updates "
           "inside the attention\n",
           file, kernels, aliases, views, updates, attentions, pdl, fused);
    CHECK_EQ_INT(views, 0);
    CHECK_EQ_INT(aliases, want_aliases);
    CHECK_EQ_INT(kernels, want_kernels);
    CHECK_EQ_INT(updates, want_updates);
    CHECK_EQ_INT(updates + fused, 2 * layers);
    CHECK_EQ_INT(attentions, layers);
    CHECK_EQ_INT(pdl, updates + attentions);
    /* What each decode kernel does before its wait (fusec --emit=cuda's source). */
    const char *fusec = getenv("FUSEC"), *src = getenv("FUSEC_SRC");
    if (fusec) {
        char cmd[1200], line[4096];
        snprintf(cmd, sizeof cmd, "'%s' '%s/tests/decode/%s' --bind B=1,T=1 --emit=cuda", fusec, src ? src : ".", file);
        FILE *f = popen(cmd, "r");
        CHECK(f != NULL);
        /* In each decode kernel, griddepcontrol.wait comes before it reads
         * the length, an offset or a query, or writes anything (what the
         * kernel before may write or read); only cache rows may be loaded
         * before it (where the caches are parameters and the updates run
         * inside the attention: decode.c, prewait_of). */
        int decode_kernels = 0, waits = 0, cache_writes = 0, early_reads = 0, early_cache = 0, clusters = 0, buffers = 0;
        bool in = false, waited = false;
        while (f && fgets(line, sizeof line, f)) {
            buffers += strstr(line, "__device__ float fc_cache_attention_") || strstr(line, "__device__ unsigned fc_cache_attention_");
            if (strstr(line, "__global__")) {
                clusters += strstr(line, "fc_cache_attention_") && strstr(line, "__cluster_dims__(1, ");
                in = strstr(line, "fc_update_slice_") || strstr(line, "fc_cache_attention_");
                decode_kernels += in;
                waited = false;
                continue;
            }
            if (!in) continue;
            if (strstr(line, "griddepcontrol.wait;")) waits += !waited, waited = true;
            /* a fused update's write of the new rows into its cache */
            cache_writes += strstr(line, "wk[(kvh * S + offk)") || strstr(line, "wv[(kvh * S + offv)");
            if (!waited) {
                early_reads += strstr(line, "*(const ") || strstr(line, "_q(") || strstr(line, "wk[") || strstr(line, "wv[") ||
                               strstr(line, "out[");
                early_cache += strstr(line, "fc_dec_load(") != NULL;
            }
        }
        if (f) CHECK_EQ_INT(pclose(f), 0);
        printf("%s: %d cache_attention launches of several parts, %d cluster kernels, %d global merge buffers\n", file,
               parted, clusters, buffers);
        CHECK((clusters > 0) == (parted > 0));
        CHECK_EQ_INT(buffers, 0);
        CHECK(decode_kernels >= 1);
        CHECK_EQ_INT(waits, decode_kernels);
        CHECK_EQ_INT(early_reads, 0);
        CHECK((early_cache > 0) == (fused > 0));
        if (fused) CHECK(cache_writes >= 2);
    } else printf("skipped: the generated source (no $FUSEC)\n");
    fc_program_free(p);
}

/* A bf16 Llama-style model whose weights are stored [N, K]: every GEMM of
 * the step a GEMV (codegen/cuda/gemv.c, programmatic), no library call. */
static void check_gemvs(const char *file, int want, int want_distinct) {
    fc_program *p = compile_step(file);
    CHECK(p != NULL);
    if (!p) return;
    const fc_program_desc *d = fc_program_desc_of(p);
    int gemvs = 0, library = 0, gates = 0, pointwise = 0;
    for (int i = 0; i < d->src.nlaunches; i++) {
        const fc_launch *l = &d->src.launches[i];
        library += l->kind == FC_LAUNCH_LIBRARY;
        pointwise += strstr(l->summary, "sigmoid") && strncmp(l->summary, "gemv ", 5);
        if (!strncmp(l->summary, "gemv ", 5)) {
            gemvs++;
            gates += strstr(l->summary, "sigmoid,mul,cast,mul of its halves") != NULL;
            CHECK(l->pdl);
        }
    }
    /* Every layer's SiLU gate runs in its gate and up GEMV's epilogue. */
    printf("%s: %d GEMVs with the SiLU gate in the epilogue, %d gates of their own\n", file, gates, pointwise);
    CHECK_EQ_INT(gates, 2);
    CHECK_EQ_INT(pointwise, 0);
    int distinct = 0, kinds = 0;
    for (int k = 0; k < d->src.nkernels; k++) distinct += !strncmp(d->src.kernels[k].name, "fc_gemv_", 8);
    for (int i = 0; i < d->src.nlaunches; i++) {
        const fc_launch *l = &d->src.launches[i];
        bool first = !strncmp(l->summary, "gemv ", 5);
        for (int j = 0; first && j < i; j++) first = strcmp(d->src.launches[j].summary, l->summary) != 0;
        kinds += first;
    }
    printf("%s: %d gemv launches of %d distinct kernels (%d distinct summaries), %d library calls\n", file, gemvs, distinct, kinds,
           library);
    CHECK_EQ_INT(gemvs, want);
    CHECK_EQ_INT(distinct, want_distinct);
    CHECK_EQ_INT(distinct, kinds);
    CHECK_EQ_INT(library, 0);
    fc_program_free(p);
}

/* A prefill of T new rows: the updates keep their own launches (every
 * query row would read the rows through the source's view), one per cache
 * per layer, and no attention writes a cache. */
static void check_prefill(const char *file, int T, int layers) {
    fc_program *p = compile_at(file, T);
    CHECK(p != NULL);
    if (!p) return;
    const fc_program_desc *d = fc_program_desc_of(p);
    int updates = 0, fused = 0;
    for (int i = 0; i < d->src.nlaunches; i++) {
        const fc_launch *l = &d->src.launches[i];
        updates += strstr(l->name, "fc_update_slice") == l->name;
        if (strstr(l->name, "fc_cache_attention") == l->name) fused += fused_updates(l);
    }
    printf("%s at T=%d: %d update_slice launches, %d updates inside the attention\n", file, T, updates, fused);
    CHECK_EQ_INT(updates, 2 * layers);
    CHECK_EQ_INT(fused, 0);
    fc_program_free(p);
}

/* cache_attention's parts at the Llama-1B shape (32 query and 8 key/value
 * heads, D = 64, a cache of 2048, both updates fused), on the tensor-core
 * kernel, for a GPU of 132 SMs (the plan's count without one): at B = 8
 * the 64 row groups' 8 parts of 4 warps fill 512 of the 528 blocks the GPU
 * holds (one wave), at B = 1 the 8 row groups' 32 parts fold into 8 of 16
 * warps; both merge in a cluster of 8. */
static void check_parts(int B, unsigned want_x, unsigned want_y, unsigned want_threads) {
    static const char ir[] =
        "graph step(%q: bf16[B, 32, 1, 64], %knew: bf16[B, 8, 1, 64], %vnew: bf16[B, 8, 1, 64], %pos: i64[],\n"
        "           %kc: inout bf16[B, 8, 2048, 64], %vc: inout bf16[B, 8, 2048, 64]) {\n"
        "  %k = update_slice(%kc, %knew, %pos, axis=2) : bf16[B, 8, 2048, 64]\n"
        "  %v = update_slice(%vc, %vnew, %pos, axis=2) : bf16[B, 8, 2048, 64]\n"
        "  %len = add(%pos, 1) : i64[]\n"
        "  %y = cache_attention(%q, %k, %v, %len) : bf16[B, 32, 1, 64]\n"
        "  return %y\n"
        "}\n";
    fc_binding b[1] = {{"B", B}};
    fc_graph *g = NULL;
    CHECK(fc_parse(ctx, "parts.ir", ir, sizeof ir - 1, NULL, b, 1, &g) == FC_OK);
    if (!g) return;
    fc_compile_options o;
    fc_compile_options_default(&o);
    o.device = FC_DEVICE_CUDA;
    fc_program *p = NULL;
    CHECK(fc_compile(g, &o, &p) == FC_OK);
    fc_graph_free(g);
    if (!p) return;
    const fc_program_desc *d = fc_program_desc_of(p);
    int found = 0;
    for (int i = 0; i < d->src.nlaunches; i++) {
        const fc_launch *l = &d->src.launches[i];
        if (strstr(l->name, "fc_cache_attention") != l->name) continue;
        found++;
        printf("parts at B = %d: grid (%u, %u), %u threads\n", B, l->grid[0], l->grid[1], l->block[0]);
        CHECK_EQ_INT((int)l->grid[0], (int)want_x);
        CHECK_EQ_INT((int)l->grid[1], (int)want_y);
        CHECK_EQ_INT((int)l->block[0], (int)want_threads);
        CHECK(strstr(d->src.source, "__cluster_dims__(1, 8, 1)") != NULL);
    }
    CHECK_EQ_INT(found, 1);
    fc_program_free(p);
}

int main(void) {
    ctx = fc_context_new();
    check_parts(8, 64, 8, 128);
    check_parts(1, 8, 8, 512);
    /* GPT-2, 2 layers: positions and embeddings (2: the reduce_max over
     * T = 1 is a reshape), per layer 2 layernorms and the cache_attention
     * that writes both caches, the final layernorm; the GEMMs (f32) are
     * library calls; the attention's result reshaped for the projection:
     * an alias. */
    check_step("gpt2_tiny.ir", 9, 2, 2, 0);
    /* Llama: the rotary kernel between the updates and the attention; the
     * new values' buffer outlives the update (passes/memplan.c), so the
     * attention's result never takes it and both updates run inside. */
    check_step("llama_tiny.ir", 13, 2, 2, 0);
    /* The same in bf16 with K = 256: per layer 8 launches (RMSNorm, the
     * QKV GEMV, rotary, the attention with both updates, the out
     * projection, residual and RMSNorm, gate and up with the SiLU gate in
     * its epilogue, the down projection), 4 of them GEMVs, and the LM
     * head's: 7 distinct GEMV kernels for 9 launches (the QKV and the gate
     * and up GEMVs are shared; the last layer's projections have other
     * epilogues). */
    check_step("llama_bf16.ir", 20, 2, 2, 0);
    check_gemvs("llama_bf16.ir", 9, 7);
    check_prefill("gpt2_tiny.ir", 16, 2);
    check_prefill("llama_tiny.ir", 16, 2);
    fc_context_free(ctx);
    return check_report("test_decode_plan");
}
