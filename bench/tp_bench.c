/*
 * tp_bench.c - tensor parallelism on the GPUs of one host (docs/PARALLEL.md),
 * run by bench/tp_bench.sh.
 *
 *   tp_bench model FILE.ir GRAPH B=1,T=1,P=128 DEGREE ITERS [DEVICE]
 *       the graph unsharded on one device (the baseline), then sharded at
 *       DEGREE with one thread per rank; prints both medians, the speedup
 *       and the worst difference of rank 0's results from the baseline's.
 *       P is the value of every integer rank-0 input (the position).
 *   tp_bench shards FILE.ir GRAPH DEGREE ITERS DEVICE BINDS...
 *       a model too large for one device: no baseline, each rank's shards
 *       made directly (random, the replicated parameters the same on every
 *       rank), one thread per rank compiling and running the graph at each
 *       BINDS (B=1,T=1,P=128 ...) on the same weights; prints each
 *       binding's median (the slowest rank), the bytes of parameters per
 *       rank, and whether rank 0's results are finite and equal every
 *       other rank's.
 *   tp_bench allreduce BYTES DEGREE ITERS [DEVICE]
 *       one bf16 all_reduce of BYTES per rank: its median, and the algorithm
 *       and bus bandwidths as nccl-tests reports them (bus = alg * 2(n-1)/n).
 *
 * DEVICE: cuda (the default), cpu or ref (a smoke test without a GPU).
 */
#include "fusec.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RANKS 8
#define MAX_PARAMS 2048

static fc_device device_of(const char *name) {
    return !name || !strcmp(name, "cuda") ? FC_DEVICE_CUDA : !strcmp(name, "cpu") ? FC_DEVICE_CPU : FC_DEVICE_REF;
}

static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

static double load(const fc_tensor *t, int64_t i) {
    if (t->dtype == FC_F32) return ((const float *)t->data)[i];
    if (t->dtype == FC_BF16) return fc_bf16_to_f32(((const uint16_t *)t->data)[i]);
    return NAN;
}

/* Floats uniform in [-a, a) with a = 1/sqrt(fan-in) (the last dim), so
 * activations stay O(1) through the layers; integer tensors token ids
 * below `vocab`, integer scalars `pos`. */
static void fill(fc_graph *g, fc_tensor *in, int64_t pos, int64_t vocab) {
    uint64_t seed = 42;
    for (int i = 0; i < fc_graph_num_params(g); i++) {
        fc_value *p = fc_graph_param(g, i);
        fc_tensor *t = &in[i];
        t->dtype = fc_value_dtype(p);
        t->rank = fc_value_rank(p);
        for (int d = 0; d < t->rank; d++) t->shape[d] = fc_value_dim(p, d);
        int64_t n = fc_tensor_numel(t);
        t->data = calloc((size_t)n + 1, fc_dtype_size(t->dtype));
        double a = t->rank ? 1.0 / sqrt((double)t->shape[t->rank - 1]) : 1.0;
        if (t->rank == 1) a = 1.0; /* norm scales */
        for (int64_t j = 0; j < n; j++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            double u = (double)(seed >> 11) / 9007199254740992.0;
            float f = (float)((2 * u - 1) * a);
            if (t->dtype == FC_F32) ((float *)t->data)[j] = f;
            else if (t->dtype == FC_BF16) ((uint16_t *)t->data)[j] = to_bf16(t->rank == 1 ? 1.0f + 0.1f * f : f);
            else if (t->dtype == FC_I64) ((int64_t *)t->data)[j] = t->rank ? (int64_t)(u * (double)vocab) : pos;
            else if (t->dtype == FC_I32) ((int32_t *)t->data)[j] = t->rank ? (int32_t)(u * (double)vocab) : (int32_t)pos;
        }
    }
}

typedef struct job {
    fc_program *p;
    fc_tensor in[MAX_PARAMS];
    int nin, nout, iters;
    fc_tensor out[4];
    double ms;
    fc_status st;
} job;

static void *run_job(void *arg) {
    job *j = arg;
    j->st = fc_program_run_host(j->p, j->in, j->nin, j->out, j->nout, &j->ms, j->iters);
    return NULL;
}

static int parse_binds(char *s, fc_binding *b, int64_t *pos) {
    int n = 0;
    for (char *save, *t = strtok_r(s, ",", &save); t && n < 8; t = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(t, '=');
        if (!eq) continue;
        *eq = 0;
        if (!strcmp(t, "P")) *pos = atoll(eq + 1);
        else b[n].name = t, b[n++].value = atoll(eq + 1);
    }
    return n;
}

/* Compile the graph of `path` (sharded at degree when grp is set) for
 * each rank in its own context, and run every rank at once. */
static int run_ranks(const char *path, const char *name, const fc_binding *b, int nb, fc_device dev, int degree,
                     fc_tp_group *grp, const fc_tensor *full, int iters, job *jobs, fc_context **cs) {
    for (int r = 0; r < degree; r++) {
        cs[r] = fc_context_new();
        fc_graph *g = NULL, *s = NULL;
        if (fc_parse_file(cs[r], path, name, b, nb, &g) != FC_OK) goto fail;
        if (grp && fc_graph_shard(g, degree, &s) != FC_OK) goto fail;
        fc_graph *use = grp ? s : g;
        jobs[r].nin = fc_graph_num_params(use);
        jobs[r].nout = fc_graph_num_outputs(use);
        jobs[r].iters = iters;
        for (int i = 0; i < jobs[r].nin; i++)
            if (fc_tensor_shard(cs[r], &full[i], grp ? fc_graph_param_shard_axis(use, i) : -1, degree, r,
                                &jobs[r].in[i]) != FC_OK)
                goto fail;
        fc_compile_options o;
        fc_compile_options_default(&o);
        o.device = dev;
        o.tp = grp;
        o.tp_rank = r;
        if (fc_compile(use, &o, &jobs[r].p) != FC_OK) goto fail;
        fc_graph_free(s);
        fc_graph_free(g);
        continue;
    fail:
        fprintf(stderr, "tp_bench: rank %d: %s\n", r, fc_last_error(cs[r]));
        return 1;
    }
    pthread_t th[MAX_RANKS];
    for (int r = 0; r < degree; r++) pthread_create(&th[r], NULL, run_job, &jobs[r]);
    for (int r = 0; r < degree; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < degree; r++)
        if (jobs[r].st != FC_OK) {
            fprintf(stderr, "tp_bench: rank %d: %s\n", r, fc_last_error(fc_program_context(jobs[r].p)));
            return 1;
        }
    return 0;
}

static void free_jobs(job *jobs, fc_context **cs, int n) {
    for (int r = 0; r < n; r++) {
        for (int k = 0; k < jobs[r].nout; k++) fc_tensor_release(&jobs[r].out[k]);
        for (int i = 0; i < jobs[r].nin; i++) fc_tensor_release(&jobs[r].in[i]);
        fc_program_free(jobs[r].p);
        fc_context_free(cs[r]);
    }
}

static int model(char **argv, int argc) {
    const char *path = argv[2], *name = argv[3];
    int degree = atoi(argv[5]), iters = atoi(argv[6]);
    fc_device dev = device_of(argc > 7 ? argv[7] : NULL);
    fc_binding b[8];
    int64_t pos = 0;
    char *binds = strdup(argv[4]);
    int nb = parse_binds(binds, b, &pos);
    if (degree < 1 || degree > MAX_RANKS) return fprintf(stderr, "tp_bench: degree 1 .. %d\n", MAX_RANKS), 2;
    fc_context *ctx = fc_context_new();
    fc_graph *g = NULL;
    if (fc_parse_file(ctx, path, name, b, nb, &g) != FC_OK) return fprintf(stderr, "%s\n", fc_last_error(ctx)), 1;
    int np = fc_graph_num_params(g);
    if (np > MAX_PARAMS) return 1;
    static fc_tensor full[MAX_PARAMS];
    int64_t vocab = 2;
    for (int i = 0; i < np; i++) /* the first gather table's rows: the embedding */
        if (fc_value_rank(fc_graph_param(g, i)) == 2 && vocab == 2 && fc_value_dtype(fc_graph_param(g, i)) != FC_I64)
            vocab = fc_value_dim(fc_graph_param(g, i), 0);
    fill(g, full, pos, vocab);
    static job base[1], ranks[MAX_RANKS];
    fc_context *bc[1] = {NULL}, *rc[MAX_RANKS] = {NULL};
    fc_tp_group *grp = NULL;
    int rc_ = run_ranks(path, name, b, nb, dev, 1, NULL, full, iters, base, bc);
    if (!rc_ && fc_tp_group_create(ctx, dev, degree, &grp) != FC_OK)
        rc_ = fprintf(stderr, "tp_bench: %s\n", fc_last_error(ctx)) > 0;
    if (!rc_) rc_ = run_ranks(path, name, b, nb, dev, degree, grp, full, iters, ranks, rc);
    if (!rc_) {
        double worst = 0, big = 0;
        const fc_tensor *w = &base[0].out[0], *y = &ranks[0].out[0];
        for (int64_t i = 0; i < fc_tensor_numel(w); i++) big = fmax(big, fabs(load(w, i)));
        for (int64_t i = 0; fc_tensor_numel(w) == fc_tensor_numel(y) && i < fc_tensor_numel(w); i++) {
            double e = fabs(load(y, i) - load(w, i)) / (big > 0 ? big : 1);
            worst = e > worst || isnan(e) ? e : worst;
        }
        if (fc_tensor_numel(w) != fc_tensor_numel(y)) worst = INFINITY;
        double ms = 0;
        for (int r = 0; r < degree; r++) ms = fmax(ms, ranks[r].ms);
        printf("tp_bench model=%s graph=%s binds=%s tp=%d base_ms=%.4f tp_ms=%.4f speedup=%.2f maxdiff=%.2e\n",
               path, name, argv[4], degree, base[0].ms, ms, base[0].ms / ms, worst);
        if (!(worst <= 5e-2)) rc_ = 1;
    }
    free_jobs(base, bc, 1);
    free_jobs(ranks, rc, degree);
    fc_tp_group_free(grp);
    for (int i = 0; i < np; i++) free(full[i].data);
    fc_graph_free(g);
    fc_context_free(ctx);
    free(binds);
    return rc_;
}

/* ---- shards: a model that does not fit one device ------------------------- */

#define MAX_BINDS 4

typedef struct shard_job {
    const char *path, *name;
    char *binds[MAX_BINDS];
    int nbinds, rank, degree, iters;
    fc_device dev;
    fc_tp_group *grp;
    double ms[MAX_BINDS], bytes;
    fc_tensor out0[MAX_BINDS]; /* each binding's first result */
    int fail;
} shard_job;

/* t filled from a table of 65536 values uniform in [-a, a) (a = 1 /
 * sqrt(fan-in), norm scales near 1) made from `seed`, tiled: random enough
 * to time a model whose values nobody checks, at memcpy's speed. */
static int fill_fast(fc_tensor *t, uint64_t seed, int64_t pos, int64_t vocab) {
    int64_t n = fc_tensor_numel(t);
    size_t es = fc_dtype_size(t->dtype);
    t->data = malloc((size_t)n * es + 1);
    if (!t->data) return 1;
    enum { TILE = 65536 };
    static _Thread_local unsigned char tile[TILE * 8];
    double a = t->rank ? 1.0 / sqrt((double)t->shape[t->rank - 1]) : 1.0;
    for (int j = 0; j < TILE; j++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(seed >> 11) / 9007199254740992.0;
        float f = (float)((2 * u - 1) * a);
        if (t->dtype == FC_BF16) ((uint16_t *)tile)[j] = to_bf16(t->rank == 1 ? 1.0f + 0.1f * f : f);
        else if (t->dtype == FC_F32) ((float *)tile)[j] = t->rank == 1 ? 1.0f + 0.1f * f : f;
        else if (t->dtype == FC_I64) ((int64_t *)tile)[j] = t->rank ? (int64_t)(u * (double)vocab) : pos;
        else if (t->dtype == FC_I32) ((int32_t *)tile)[j] = t->rank ? (int32_t)(u * (double)vocab) : (int32_t)pos;
        else memset(tile + (size_t)j * es, 0, es);
    }
    for (int64_t i = 0; i < n; i += TILE) {
        int64_t k = n - i < TILE ? n - i : TILE;
        memcpy((char *)t->data + (size_t)i * es, tile, (size_t)k * es);
    }
    return 0;
}

static void *run_shards(void *arg) {
    shard_job *j = arg;
    fc_context *c = fc_context_new();
    fc_tensor in[MAX_PARAMS] = {{0}};
    int np = 0;
    for (int b = 0; b < j->nbinds && !j->fail; b++) {
        fc_binding bs[8];
        int64_t pos = 0;
        char *copy = strdup(j->binds[b]);
        int nb = parse_binds(copy, bs, &pos);
        fc_graph *g = NULL, *s = NULL;
        fc_program *p = NULL;
        j->fail = fc_parse_file(c, j->path, j->name, bs, nb, &g) != FC_OK || fc_graph_shard(g, j->degree, &s) != FC_OK;
        int n = j->fail ? 0 : fc_graph_num_params(s);
        j->fail = j->fail || n > MAX_PARAMS;
        int64_t vocab = 2;
        for (int i = 0; !j->fail && i < n; i++) /* the embedding's rows, as fill() */
            if (fc_value_rank(fc_graph_param(g, i)) == 2 && vocab == 2 && fc_value_dtype(fc_graph_param(g, i)) != FC_I64)
                vocab = fc_value_dim(fc_graph_param(g, i), 0);
        /* Same shape as the last binding's: the same weights (and caches). */
        for (int i = 0; !j->fail && i < n; i++) {
            fc_value *v = fc_graph_param(s, i);
            fc_tensor want = {.dtype = fc_value_dtype(v), .rank = fc_value_rank(v)};
            for (int d = 0; d < want.rank; d++) want.shape[d] = fc_value_dim(v, d);
            bool same = i < np && in[i].dtype == want.dtype && in[i].rank == want.rank &&
                        !memcmp(in[i].shape, want.shape, sizeof want.shape[0] * (size_t)want.rank);
            if (same && fc_value_rank(v) > 0) continue;
            if (i < np) free(in[i].data);
            in[i] = want;
            uint64_t seed = 1000003ull * (uint64_t)(i + 1) + (fc_graph_param_shard_axis(s, i) >= 0 ? (uint64_t)j->rank : 0);
            j->fail = fill_fast(&in[i], seed, pos, vocab);
        }
        np = n > np ? n : np;
        fc_compile_options o;
        fc_compile_options_default(&o);
        o.device = j->dev;
        o.tp = j->grp;
        o.tp_rank = j->rank;
        if (!j->fail) j->fail = fc_compile(s, &o, &p) != FC_OK;
        if (!j->fail) {
            fc_tensor out[4] = {{0}};
            int nout = fc_graph_num_outputs(s);
            j->fail = nout > 4 || fc_program_run_host(p, in, n, out, nout, &j->ms[b], j->iters) != FC_OK;
            if (!j->fail) j->out0[b] = out[0];
            for (int k = j->fail ? 0 : 1; k < nout && k < 4; k++) fc_tensor_release(&out[k]);
        }
        if (j->fail) fprintf(stderr, "tp_bench: rank %d, %s: %s\n", j->rank, j->binds[b], fc_last_error(c));
        if (b == 0)
            for (int i = 0; i < n && !j->fail; i++)
                if (fc_value_rank(fc_graph_param(s, i)) >= 2) j->bytes += (double)fc_tensor_numel(&in[i]) * (double)fc_dtype_size(in[i].dtype);
        fc_program_free(p);
        fc_graph_free(s);
        fc_graph_free(g);
        free(copy);
    }
    for (int i = 0; i < np; i++) free(in[i].data);
    fc_context_free(c);
    return NULL;
}

static int shards(char **argv, int argc) {
    static shard_job jobs[MAX_RANKS];
    int degree = atoi(argv[4]), iters = atoi(argv[5]);
    fc_device dev = device_of(argv[6]);
    if (degree < 1 || degree > MAX_RANKS || argc - 7 > MAX_BINDS) return 2;
    fc_context *ctx = fc_context_new();
    fc_tp_group *grp = NULL;
    if (fc_tp_group_create(ctx, dev, degree, &grp) != FC_OK) return fprintf(stderr, "tp_bench: %s\n", fc_last_error(ctx)), 1;
    pthread_t th[MAX_RANKS];
    for (int r = 0; r < degree; r++) {
        jobs[r] = (shard_job){.path = argv[2], .name = argv[3], .nbinds = argc - 7, .rank = r, .degree = degree,
                              .iters = iters, .dev = dev, .grp = grp};
        for (int b = 0; b < jobs[r].nbinds; b++) jobs[r].binds[b] = argv[7 + b];
        pthread_create(&th[r], NULL, run_shards, &jobs[r]);
    }
    int rc = 0;
    for (int r = 0; r < degree; r++) {
        pthread_join(th[r], NULL);
        rc |= jobs[r].fail;
    }
    for (int b = 0; !rc && b < jobs[0].nbinds; b++) {
        double ms = 0;
        bool finite = true, agree = true;
        const fc_tensor *y = &jobs[0].out0[b];
        for (int64_t i = 0; i < fc_tensor_numel(y); i++) finite &= isfinite(load(y, i));
        for (int r = 0; r < degree; r++) {
            ms = fmax(ms, jobs[r].ms[b]);
            agree &= fc_tensor_numel(&jobs[r].out0[b]) == fc_tensor_numel(y) &&
                     !memcmp(jobs[r].out0[b].data, y->data, (size_t)fc_tensor_numel(y) * fc_dtype_size(y->dtype));
        }
        printf("tp_bench shards model=%s graph=%s binds=%s tp=%d tp_ms=%.4f param_gb_per_rank=%.1f finite=%d ranks_agree=%d\n",
               argv[2], argv[3], jobs[0].binds[b], degree, ms, jobs[0].bytes / 1e9, finite, agree);
        rc |= !finite || !agree;
    }
    for (int r = 0; r < degree; r++)
        for (int b = 0; b < jobs[r].nbinds; b++) fc_tensor_release(&jobs[r].out0[b]);
    fc_tp_group_free(grp);
    fc_context_free(ctx);
    return rc;
}

static int allreduce(char **argv, int argc) {
    int64_t bytes = atoll(argv[2]);
    int degree = atoi(argv[3]), iters = atoi(argv[4]);
    fc_device dev = device_of(argc > 5 ? argv[5] : NULL);
    if (degree < 1 || degree > MAX_RANKS) return 2;
    fc_context *ctx = fc_context_new();
    fc_tp_group *grp = NULL;
    if (fc_tp_group_create(ctx, dev, degree, &grp) != FC_OK) return fprintf(stderr, "%s\n", fc_last_error(ctx)), 1;
    static job jobs[MAX_RANKS];
    fc_context *cs[MAX_RANKS] = {NULL};
    int64_t n = bytes / 2;
    pthread_t th[MAX_RANKS];
    int rc = 0;
    for (int r = 0; r < degree && !rc; r++) {
        cs[r] = fc_context_new();
        fc_graph *g = fc_graph_new(cs[r], "all_reduce");
        fc_dim dims[1] = {n};
        fc_value *x = fc_param(g, "x", FC_BF16, 1, dims);
        fc_value *y = fc_all_reduce(g, x, degree);
        fc_graph_return(g, 1, &y);
        fc_compile_options o;
        fc_compile_options_default(&o);
        o.device = dev;
        o.tp = grp;
        o.tp_rank = r;
        jobs[r].nin = jobs[r].nout = 1;
        jobs[r].iters = iters;
        jobs[r].in[0] = (fc_tensor){.dtype = FC_BF16, .rank = 1, .shape = {n}, .data = calloc((size_t)n, 2)};
        if (fc_compile(g, &o, &jobs[r].p) != FC_OK) rc = fprintf(stderr, "%s\n", fc_last_error(cs[r])) > 0;
        fc_graph_free(g);
    }
    for (int r = 0; r < degree && !rc; r++) pthread_create(&th[r], NULL, run_job, &jobs[r]);
    for (int r = 0; r < degree && !rc; r++) pthread_join(th[r], NULL);
    double ms = 0;
    for (int r = 0; r < degree && !rc; r++) {
        if (jobs[r].st != FC_OK) rc = fprintf(stderr, "%s\n", fc_last_error(fc_program_context(jobs[r].p))) > 0;
        ms = fmax(ms, jobs[r].ms);
    }
    if (!rc) {
        double alg = (double)bytes / (ms * 1e-3) / 1e9;
        printf("tp_bench allreduce bytes=%lld tp=%d ms=%.4f algbw_GBps=%.1f busbw_GBps=%.1f\n", (long long)bytes,
               degree, ms, alg, alg * 2.0 * (degree - 1) / degree);
    }
    for (int r = 0; r < degree; r++) {
        for (int k = 0; k < jobs[r].nout; k++) fc_tensor_release(&jobs[r].out[k]);
        free(jobs[r].in[0].data);
        fc_program_free(jobs[r].p);
        fc_context_free(cs[r]);
    }
    fc_tp_group_free(grp);
    fc_context_free(ctx);
    return rc;
}

int main(int argc, char **argv) {
    if (argc >= 7 && !strcmp(argv[1], "model")) return model(argv, argc);
    if (argc >= 5 && !strcmp(argv[1], "allreduce")) return allreduce(argv, argc);
    if (argc >= 8 && !strcmp(argv[1], "shards")) return shards(argv, argc);
    fprintf(stderr, "usage: tp_bench model FILE.ir GRAPH B=..,T=..,P=.. DEGREE ITERS [DEVICE]\n"
                    "       tp_bench shards FILE.ir GRAPH DEGREE ITERS DEVICE B=..,T=..,P=.. ...\n"
                    "       tp_bench allreduce BYTES DEGREE ITERS [DEVICE]\n");
    return 2;
}
