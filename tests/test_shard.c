/*
 * test_shard.c - tensor parallelism (docs/PARALLEL.md).
 *
 *  - golden: each .ir file of tests/shard names a degree (`# RUN: shard N`) and
 *    the sharded graph it must give, followed by the parameters' cuts
 *    ("split %name axis A");
 *  - numerics: each of those graphs and the Llama-shaped graphs of
 *    tests/decode/llama_tiny.ir, run at TP = 2 and 4 (where the heads
 *    divide) as simulated ranks (one thread per rank, each its own
 *    program on its shard of the inputs), equal TP = 1 within the
 *    tolerance of the reassociated row-parallel sums, on the reference
 *    interpreter and on the CPU backend; the ranks' key/value caches equal
 *    TP = 1's cache cut by heads;
 *  - the collectives themselves against their definition, and the errors
 *    of the API;
 *  - the plan around the collectives (one all_reduce per attention block
 *    and per MLP, summed in place in its GEMM's buffer, then one kernel:
 *    the residual add with the next norm), through the pipeline and in the
 *    CUDA plans (compiled with NVRTC); on a GPU, every rank's second run
 *    replays a CUDA Graph with its collectives in it.
 */
#include "check.h"
#include "pass_file.h"

#include <math.h>
#include <pthread.h>

static fc_context *ctx;

/* ---- golden ----------------------------------------------------------- */

static char *shard_text(fc_graph *s) {
    char *text = fc_print(s);
    size_t cap = strlen(text) + 4096, len = strlen(text);
    text = realloc(text, cap);
    for (int i = 0; i < fc_graph_num_params(s); i++) {
        int ax = fc_graph_param_shard_axis(s, i);
        if (ax >= 0 && len + 256 < cap)
            len += (size_t)snprintf(text + len, cap - len, "split %%%s axis %d\n",
                                    fc_value_name(fc_graph_param(s, i)), ax);
    }
    return text;
}

static int degree_of(const directives *d) {
    int t = 0;
    return sscanf(d->run, " shard %d", &t) == 1 ? t : 0;
}

static void test_golden(void) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/shard", src_dir());
    char **files = list_ir(dir);
    CHECK(files && files[0]);
    for (int f = 0; files && files[f]; f++) {
        char *text = read_file(files[f], NULL);
        directives d;
        CHECK(text && read_directives(text, &d));
        fc_graph *g = NULL, *s = NULL;
        CHECK(fc_parse_file(ctx, files[f], NULL, NULL, 0, &g) == FC_OK);
        int t = degree_of(&d);
        CHECK(t >= 1);
        if (g && fc_graph_shard(g, t, &s) != FC_OK) fprintf(stderr, "%s: %s\n", files[f], fc_last_error(ctx));
        if (s) {
            char *got = shard_text(s);
            if (strcmp(got, d.expect)) fprintf(stderr, "%s:\n", files[f]);
            CHECK_STR(got, d.expect);
            free(got);
        } else
            CHECK(!"sharded");
        fc_graph_free(s);
        fc_graph_free(g);
        free(d.expect);
        free(text);
    }
    free_list(files);
}

/* ---- numerics: TP = t against TP = 1 ------------------------------------ */

typedef struct graph_case {
    const char *file, *name;
    fc_binding binds[2];
    int nbinds;
} graph_case;

/* Inputs: floats in [-1, 1), integer tensors small indices, an integer
 * scalar (a position) 2. */
static void fill_inputs(fc_graph *g, fc_tensor *in) {
    uint64_t seed = 12345;
    for (int i = 0; i < fc_graph_num_params(g); i++) {
        fc_tensor *t = &in[i];
        param_type(t, fc_graph_param(g, i));
        int64_t n = fc_tensor_numel(t);
        t->data = calloc((size_t)n + 1, fc_dtype_size(t->dtype));
        for (int64_t j = 0; j < n; j++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            double u = (double)(seed >> 11) / 9007199254740992.0;
            if (t->dtype == FC_F32) ((float *)t->data)[j] = (float)(2 * u - 1);
            else if (t->dtype == FC_I64) ((int64_t *)t->data)[j] = t->rank ? (int64_t)(u * 7) : 2;
            else if (t->dtype == FC_I32) ((int32_t *)t->data)[j] = t->rank ? (int32_t)(u * 7) : 2;
        }
    }
}

typedef struct rank_job {
    fc_program *p;
    fc_tensor *in;
    int nin, nout;
    fc_tensor out[4];
    fc_status st;
} rank_job;

/* Twice: the second run replays the launches, collectives included, as a
 * CUDA Graph on a GPU; it writes the same cache rows again. */
static void *run_rank(void *arg) {
    rank_job *j = arg;
    j->st = fc_program_run_host(j->p, j->in, j->nin, j->out, j->nout, NULL, 0);
    for (int k = 0; k < j->nout && j->st == FC_OK; k++) fc_tensor_release(&j->out[k]);
    if (j->st == FC_OK) j->st = fc_program_run_host(j->p, j->in, j->nin, j->out, j->nout, NULL, 0);
    return NULL;
}

static double worst_diff(const fc_tensor *a, const fc_tensor *b) {
    if (a->dtype != FC_F32 || b->dtype != FC_F32 || fc_tensor_numel(a) != fc_tensor_numel(b)) return INFINITY;
    double w = 0;
    for (int64_t i = 0; i < fc_tensor_numel(a); i++) {
        double x = ((const float *)a->data)[i], y = ((const float *)b->data)[i];
        double e = fabs(x - y) / (1 + fabs(y));
        if (!(e <= w)) w = isnan(e) ? INFINITY : e;
    }
    return w;
}

static void free_inputs(fc_tensor *in, int n) {
    for (int i = 0; i < n; i++) free(in[i].data);
}

/* The graph at TP = t on device dev equals it at TP = 1: every rank's
 * results, and every rank's part of each inout parameter after the run. */
static void check_tp(const graph_case *gc, fc_device dev, int t) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/%s", src_dir(), gc->file);
    fc_compile_options o;
    fc_compile_options_default(&o);
    o.device = dev;
    fc_graph *g = NULL;
    CHECK(fc_parse_file(ctx, path, gc->name, gc->binds, gc->nbinds, &g) == FC_OK);
    if (!g) return;
    int np = fc_graph_num_params(g), nout = fc_graph_num_outputs(g);
    fc_tensor full[64] = {{0}}, want[4] = {{0}};
    CHECK(np <= 64 && nout <= 4);
    fill_inputs(g, full);
    fc_program *p1 = NULL;
    CHECK(fc_compile(g, &o, &p1) == FC_OK);
    /* The caches before TP = 1 writes them, for the ranks. */
    fc_tensor before[64] = {{0}};
    for (int i = 0; i < np; i++) CHECK(fc_tensor_shard(ctx, &full[i], -1, 1, 0, &before[i]) == FC_OK);
    CHECK(p1 && fc_program_run_host(p1, full, np, want, nout, NULL, 0) == FC_OK);

    fc_graph *s = NULL;
    fc_tp_group *grp = NULL;
    CHECK(fc_graph_shard(g, t, &s) == FC_OK);
    fc_status gst = fc_tp_group_create(ctx, dev, t, &grp);
    if (gst == FC_ERR_UNSUPPORTED) { /* CUDA: fewer GPUs than ranks, or no NCCL */
        printf("%s TP=%d on %s: skipped (%s)\n", gc->file, t, fc_device_name(dev), fc_last_error(ctx));
        t = 0;
    } else
        CHECK(gst == FC_OK);
    rank_job jobs[8] = {{0}};
    fc_tensor shards[8][64];
    memset(shards, 0, sizeof shards);
    fc_context *rctx[8] = {NULL};
    for (int r = 0; s && grp && r < t; r++) {
        /* Each rank in its own context: the ranks run at once. */
        rctx[r] = fc_context_new();
        fc_graph *gr = NULL, *sr = NULL;
        CHECK(fc_parse_file(rctx[r], path, gc->name, gc->binds, gc->nbinds, &gr) == FC_OK);
        CHECK(gr && fc_graph_shard(gr, t, &sr) == FC_OK);
        for (int i = 0; i < np; i++)
            CHECK(fc_tensor_shard(ctx, &before[i], fc_graph_param_shard_axis(s, i), t, r, &shards[r][i]) == FC_OK);
        o.tp = grp;
        o.tp_rank = r;
        if (sr && fc_compile(sr, &o, &jobs[r].p) != FC_OK) fprintf(stderr, "rank %d: %s\n", r, fc_last_error(rctx[r]));
        CHECK(jobs[r].p != NULL);
        jobs[r].in = shards[r];
        jobs[r].nin = np;
        jobs[r].nout = nout;
        fc_graph_free(sr);
        fc_graph_free(gr);
    }
    pthread_t th[8];
    bool all = s && grp && t > 0;
    for (int r = 0; r < t; r++) all = all && jobs[r].p;
    for (int r = 0; all && r < t; r++) pthread_create(&th[r], NULL, run_rank, &jobs[r]);
    for (int r = 0; all && r < t; r++) pthread_join(th[r], NULL);
    double worst = 0;
    for (int r = 0; all && r < t; r++) {
        CHECK(jobs[r].st == FC_OK);
        if (jobs[r].st != FC_OK) {
            fprintf(stderr, "rank %d: %s\n", r, fc_last_error(fc_program_context(jobs[r].p)));
            continue;
        }
        for (int k = 0; k < nout; k++) {
            double w = worst_diff(&jobs[r].out[k], &want[k]);
            worst = w > worst ? w : worst;
        }
        if (dev == FC_DEVICE_CUDA) { /* the second run replayed a CUDA Graph, its collectives captured */
            fc_run_stats rs;
            fc_program_stats(jobs[r].p, &rs);
            CHECK(rs.graph_replays >= 1 && rs.graph_skips == 0);
            if (rs.graph_replays < 1 || rs.graph_skips) fprintf(stderr, "rank %d: no graph: %s\n", r, rs.graph_skip_reason);
        }
        for (int i = 0; i < np; i++) {
            if (!fc_value_is_inout(fc_graph_param(g, i))) continue;
            fc_tensor cut;
            CHECK(fc_tensor_shard(ctx, &full[i], fc_graph_param_shard_axis(s, i), t, r, &cut) == FC_OK);
            double w = worst_diff(&shards[r][i], &cut);
            worst = w > worst ? w : worst;
            fc_tensor_release(&cut);
        }
    }
    if (t == 0) all = true, worst = 0;
    CHECK(all);
    if (t > 0) printf("%s %s TP=%d on %s: worst relative difference %.2e\n", gc->file, gc->name ? gc->name : "", t,
           fc_device_name(dev), worst);
    CHECK(worst <= 2e-5);
    for (int r = 0; r < t; r++) {
        for (int k = 0; k < nout; k++) fc_tensor_release(&jobs[r].out[k]);
        for (int i = 0; i < np; i++) fc_tensor_release(&shards[r][i]);
        fc_program_free(jobs[r].p);
        fc_context_free(rctx[r]);
    }
    for (int k = 0; k < nout; k++) fc_tensor_release(&want[k]);
    for (int i = 0; i < np; i++) fc_tensor_release(&before[i]);
    free_inputs(full, np);
    fc_tp_group_free(grp);
    fc_graph_free(s);
    fc_program_free(p1);
    fc_graph_free(g);
}

static void test_numerics(void) {
    static const graph_case cases[] = {
        {"shard/llama_block.ir", NULL, {{0}}, 0},
        {"shard/gpt2_block.ir", NULL, {{0}}, 0},
        {"decode/llama_tiny.ir", "llama", {{"B", 1}, {"T", 5}}, 2},
        {"decode/llama_tiny.ir", "llama_decode", {{"B", 1}, {"T", 1}}, 2},
    };
    fc_device devs[3] = {FC_DEVICE_REF, FC_DEVICE_CPU, FC_DEVICE_CUDA};
    for (int d = 0; d < 3; d++) {
        if (!fc_device_available(devs[d])) {
            printf("%s: not available here, skipped\n", fc_device_name(devs[d]));
            continue;
        }
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            /* TP = 1 still runs its collectives (over one rank): on a GPU,
             * through NCCL. */
            check_tp(&cases[c], devs[d], 1);
            check_tp(&cases[c], devs[d], 2);
            /* llama_tiny has 2 key/value heads: TP = 4 gathers them whole. */
            check_tp(&cases[c], devs[d], 4);
        }
    }
}

/* ---- the collectives and the API ----------------------------------------- */

static void test_api_errors(void) {
    fc_graph *g = fc_graph_new(ctx, "e");
    fc_dim dims[2] = {4, 6};
    fc_value *x = fc_param(g, "x", FC_F32, 2, dims);
    fc_value *y = fc_all_reduce(g, x, 2);
    fc_graph_return(g, 1, &y);
    fc_compile_options o;
    fc_compile_options_default(&o);
    o.device = FC_DEVICE_REF;
    fc_program *p = NULL;
    CHECK(fc_compile(g, &o, &p) == FC_OK);
    float data[24] = {0};
    fc_tensor in = {.dtype = FC_F32, .rank = 2, .shape = {4, 6}, .data = data}, out = {0};
    /* Two ranks without a group: an error of the run, naming the fix. */
    CHECK(p && fc_program_run_host(p, &in, 1, &out, 1, NULL, 0) == FC_ERR_USAGE);
    CHECK(strstr(fc_last_error(ctx), "needs a tensor-parallel group") != NULL);
    fc_program_free(p);
    fc_tp_group *grp = NULL;
    CHECK(fc_tp_group_create(ctx, FC_DEVICE_REF, 0, &grp) == FC_ERR_USAGE && !grp);
    CHECK(fc_tp_group_create(ctx, FC_DEVICE_REF, 2, &grp) == FC_OK && fc_tp_group_degree(grp) == 2);
    o.tp = grp;
    o.tp_rank = 2;
    CHECK(fc_compile(g, &o, &p) == FC_ERR_USAGE && !p);
    o.device = FC_DEVICE_CPU;
    o.tp_rank = 0;
    if (fc_device_available(FC_DEVICE_CPU)) CHECK(fc_compile(g, &o, &p) == FC_ERR_USAGE && !p);
    fc_tp_group_free(grp);
    /* Builders: bad ranks, a symbolic or indivisible axis. */
    fc_value *bad = fc_reduce_scatter(g, x, 1, 4);
    CHECK(fc_graph_status(g) == FC_ERR_INPUT && bad);
    CHECK(strstr(fc_last_error(ctx), "not a multiple of ranks") != NULL);
    fc_graph_free(g);
    fc_tensor t = {.dtype = FC_F32, .rank = 2, .shape = {4, 6}, .data = data}, part;
    CHECK(fc_tensor_shard(ctx, &t, 1, 4, 0, &part) == FC_ERR_INPUT);
    CHECK(fc_tensor_shard(ctx, &t, 0, 2, 2, &part) == FC_ERR_USAGE);
    for (int i = 0; i < 24; i++) data[i] = (float)i;
    CHECK(fc_tensor_shard(ctx, &t, 1, 2, 1, &part) == FC_OK);
    CHECK(part.shape[1] == 3 && ((float *)part.data)[0] == 3 && ((float *)part.data)[3] == 9);
    fc_tensor_release(&part);
    /* Weights cut at load time: a set named as the parameters, bound to
     * the sharded graph. */
    {
        fc_graph *wg = fc_graph_new(ctx, "w");
        fc_dim xd[2] = {2, 4}, wd[2] = {4, 6};
        fc_value *xv = fc_param(wg, "x", FC_F32, 2, xd), *wv = fc_param(wg, "w", FC_F32, 2, wd);
        fc_value *yv = fc_matmul(wg, xv, wv);
        fc_graph_return(wg, 1, &yv);
        fc_graph *ws = NULL;
        CHECK(fc_graph_shard(wg, 2, &ws) == FC_OK);
        fc_weights *w = fc_weights_new(), *w1 = NULL;
        fc_tensor wt = {.dtype = FC_F32, .rank = 2, .shape = {4, 6}, .data = data};
        if (w && ws) {
            CHECK(fc_weights_add(w, "w", &wt) == FC_OK);
            CHECK(fc_weights_shard(w, ws, 2, 1, &w1) == FC_OK);
            fc_tensor bound[2] = {{0}};
            CHECK(w1 && fc_weights_bind(w1, ws, bound, 2, NULL, false, 0) == FC_OK);
            CHECK(bound[1].shape[1] == 3 && ((float *)bound[1].data)[0] == 3 && ((float *)bound[1].data)[3] == 9);
        }
        fc_weights_free(w1);
        fc_weights_free(w);
        fc_graph_free(ws);
        fc_graph_free(wg);
    }
    fc_graph *g2 = fc_graph_new(ctx, "e2");
    fc_graph *s2 = NULL;
    CHECK(fc_graph_shard(g2, 2, &s2) == FC_ERR_USAGE && !s2); /* no results */
    CHECK(fc_graph_param_shard_axis(g2, 0) == -1);
    fc_graph_free(g2);
}

/* all_gather and reduce_scatter of 3 ranks on the reference, in threads,
 * against their definitions. */
typedef struct coll_job {
    fc_program *p;
    float in[12];
    fc_tensor out[2];
    fc_status st;
} coll_job;

static void *run_coll(void *arg) {
    coll_job *j = arg;
    fc_tensor t = {.dtype = FC_F32, .rank = 2, .shape = {2, 6}, .data = j->in};
    j->st = fc_program_run_host(j->p, &t, 1, j->out, 2, NULL, 0);
    return NULL;
}

static void test_collectives(void) {
    fc_tp_group *grp = NULL;
    CHECK(fc_tp_group_create(ctx, FC_DEVICE_REF, 3, &grp) == FC_OK);
    coll_job jobs[3] = {{0}};
    fc_context *c[3];
    for (int r = 0; r < 3; r++) {
        c[r] = fc_context_new();
        fc_graph *g = fc_graph_new(c[r], "coll");
        fc_dim dims[2] = {2, 6};
        fc_value *x = fc_param(g, "x", FC_F32, 2, dims);
        fc_value *ys[2] = {fc_all_gather(g, x, 0, 3), fc_reduce_scatter(g, x, 1, 3)};
        fc_graph_return(g, 2, ys);
        fc_compile_options o;
        fc_compile_options_default(&o);
        o.device = FC_DEVICE_REF;
        o.tp = grp;
        o.tp_rank = r;
        CHECK(fc_compile(g, &o, &jobs[r].p) == FC_OK);
        fc_graph_free(g);
        for (int i = 0; i < 12; i++) jobs[r].in[i] = (float)(100 * r + i);
    }
    pthread_t th[3];
    for (int r = 0; r < 3; r++) pthread_create(&th[r], NULL, run_coll, &jobs[r]);
    for (int r = 0; r < 3; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < 3; r++) {
        CHECK(jobs[r].st == FC_OK);
        if (jobs[r].st != FC_OK) continue;
        const float *ag = jobs[r].out[0].data, *rs = jobs[r].out[1].data;
        CHECK(jobs[r].out[0].shape[0] == 6 && jobs[r].out[1].shape[1] == 2);
        bool ok = true;
        for (int q = 0; q < 3; q++)
            for (int i = 0; i < 12; i++) ok &= ag[q * 12 + i] == (float)(100 * q + i);
        for (int row = 0; row < 2; row++)
            for (int j = 0; j < 2; j++) ok &= rs[row * 2 + j] == (float)(300 + 3 * (row * 6 + r * 2 + j));
        CHECK(ok);
        for (int k = 0; k < 2; k++) fc_tensor_release(&jobs[r].out[k]);
        fc_program_free(jobs[r].p);
        fc_context_free(c[r]);
    }
    fc_tp_group_free(grp);
}

/* The launch lines of a plan text, in order (pointers into it; each line
 * ends at its '\n'): how many, at most max. */
static int plan_lines(const char *plan, const char **line, int max) {
    int n = 0;
    for (const char *q = plan; q && n < max && !strncmp(q, "launch ", 7); q = strchr(q, '\n'), q = q ? q + 1 : q)
        line[n++] = q;
    return n;
}

/* Whether launch line l is `what` ("library gemm", "library all_reduce.f32",
 * or the start of its ops, "ops: reduce: add,"). */
static bool launch_is(const char *l, const char *what) {
    const char *end = strchr(l, '\n'), *at = strstr(l, what);
    return at && (!end || at < end);
}

/* The sharded blocks at TP = 2 and 4 on CUDA, f32 and bf16 (compiled,
 * NVRTC included): two all_reduces, each right after its GEMM; the first
 * followed by one kernel, the residual add with the next norm, then the
 * next GEMM; the second by the block's last residual add. */
static void cuda_plans(const fc_compile_options *base) {
    const char *files[2] = {"shard/gpt2_block.ir", "shard/llama_block.ir"};
    for (int f = 0; f < 2; f++)
        for (int t = 2; t <= 4; t *= 2)
            for (int bf = 0; bf < 2; bf++) {
                char path[1024];
                snprintf(path, sizeof path, "%s/tests/%s", src_dir(), files[f]);
                fc_graph *g = NULL, *s = NULL;
                CHECK(fc_parse_file(ctx, path, NULL, NULL, 0, &g) == FC_OK);
                CHECK(g && fc_graph_shard(g, t, &s) == FC_OK);
                fc_compile_options o = *base;
                o.precision = bf ? FC_PRECISION_BF16 : FC_PRECISION_AS_WRITTEN;
                fc_program *p = NULL;
                if (s && fc_compile(s, &o, &p) != FC_OK) fprintf(stderr, "cuda: %s\n", fc_last_error(ctx));
                CHECK(p != NULL);
                char *plan = p ? fc_program_plan_text(p) : NULL;
                const char *line[64];
                int nl = plan_lines(plan, line, 64), at[2], n = 0;
                for (int i = 0; i < nl; i++)
                    if (launch_is(line[i], "library all_reduce.f32") && n++ < 2) at[n - 1] = i;
                bool ok = n == 2 && at[0] > 0 && at[1] + 1 < nl && at[0] + 2 < at[1];
                for (int k = 0; ok && k < 2; k++) ok = launch_is(line[at[k] - 1], "library gemm");
                ok = ok && launch_is(line[at[0] + 1], "ops: reduce: add,") && launch_is(line[at[0] + 2], "library gemm");
                ok = ok && launch_is(line[at[1] + 1], "ops: pointwise: add");
                CHECK(ok);
                if (!ok && plan) fprintf(stderr, "%s TP=%d %s:\n%s", files[f], t, bf ? "bf16" : "f32", plan);
                fc_free(plan);
                fc_program_free(p);
                fc_graph_free(s);
                fc_graph_free(g);
            }
}

/* Without a GPU the CUDA backend still compiles (NVRTC): a sharded block's
 * collectives are library launches through NCCL, named with their dtype,
 * and an all_gather along an inner axis over two ranks is refused. */
static void test_cuda_plan(void) {
    if (!fc_device_built(FC_DEVICE_CUDA)) return;
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/shard/llama_block.ir", src_dir());
    fc_graph *g = NULL, *s = NULL;
    CHECK(fc_parse_file(ctx, path, NULL, NULL, 0, &g) == FC_OK);
    CHECK(g && fc_graph_shard(g, 2, &s) == FC_OK);
    fc_compile_options o;
    fc_compile_options_default(&o);
    o.device = FC_DEVICE_CUDA;
    o.cuda_graphs = false;
    fc_program *p = NULL;
    if (s && fc_compile(s, &o, &p) != FC_OK) fprintf(stderr, "cuda: %s\n", fc_last_error(ctx));
    char *plan = p ? fc_program_plan_text(p) : NULL;
    int n = 0;
    for (const char *q = plan; q && (q = strstr(q, "library all_reduce.f32")); q++) n++;
    CHECK_EQ_INT(n, 2);
    if (n != 2 && plan) fprintf(stderr, "%s", plan);
    fc_free(plan);
    fc_program_free(p);
    fc_graph_free(s);
    fc_graph_free(g);
    cuda_plans(&o);
    g = fc_graph_new(ctx, "inner");
    fc_dim dims[2] = {4, 6};
    fc_value *x = fc_param(g, "x", FC_F32, 2, dims);
    fc_value *y = fc_all_gather(g, x, 1, 2);
    fc_graph_return(g, 1, &y);
    CHECK(fc_compile(g, &o, &p) == FC_ERR_UNSUPPORTED && !p);
    CHECK(strstr(fc_last_error(ctx), "outermost axis") != NULL);
    fc_graph_free(g);
}

/* ---- the plan around the collectives ------------------------------------ */

/* Whether every node of group gr is a view: a copy kernel. */
static bool copy_group(const fc_group *gr) {
    if (gr->kind != FC_GROUP_POINTWISE) return false;
    for (int i = 0; i < gr->nnodes; i++)
        if (!fc_op_is_view(gr->nodes[i]->op)) return false;
    return true;
}

static int group_writing(const fc_plan *p, const fc_value *v) {
    return v->def ? p->group_of_node[v->def->id] : -1;
}

/* The sharded graph's plan (the pipeline as fc_compile runs it, fast
 * numerics) around each collective: `blocks` all_reduces (one per
 * attention block and per MLP) and `gathers` all_gathers, nothing else;
 * each all_reduce sums in place the buffer its row-parallel GEMM wrote
 * (one storage class: no copy kernel, no second buffer) and is read by one
 * kernel: for `norms` of them the residual add with the next norm (a row
 * kernel that also stores the new residual), for the others (a graph's
 * last) the residual add; no copy kernel writes a collective's operand or
 * reads its result unless `copies` says how many the gathers need. */
static void check_plan(const char *file, const char *name, const fc_binding *b, int nb, int t, int blocks,
                       int norms, int gathers, int copies) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/%s", src_dir(), file);
    fc_graph *g = NULL, *s = NULL;
    CHECK(fc_parse_file(ctx, path, name, b, nb, &g) == FC_OK);
    CHECK(g && fc_graph_shard(g, t, &s) == FC_OK);
    if (!s) {
        fc_graph_free(g);
        return;
    }
    fc_fuse_options fo;
    fc_fuse_options_default(&fo);
    fc_plan plan;
    fc_status st = fc_pipeline(s, &fo, &plan);
    CHECK(st == FC_OK);
    fc_plan_classes c = {0};
    if (st == FC_OK) CHECK(fc_plan_classes_make(ctx, &plan, &c) == FC_OK);
    int nreduce = 0, ngather = 0, ncopy = 0, nother = 0, fused = 0;
    for (int i = 0; st == FC_OK && c.root && i < plan.ngroups; i++) {
        const fc_group *gr = plan.groups[i];
        if (gr->kind != FC_GROUP_LIBRARY || !fc_op_is_collective(gr->nodes[0]->op)) continue;
        const fc_node *n = gr->nodes[0];
        int w = group_writing(&plan, n->in[0]);
        ncopy += w >= 0 && copy_group(plan.groups[w]);
        for (int k = 0; k < plan.ngroups; k++)
            for (int j = 0; j < plan.groups[k]->ninputs; j++)
                ncopy += plan.groups[k]->inputs[j] == n->out[0] && copy_group(plan.groups[k]);
        if (n->op == FC_OP_ALL_GATHER) {
            ngather++;
            continue;
        }
        if (n->op != FC_OP_ALL_REDUCE) {
            nother++;
            continue;
        }
        nreduce++;
        const fc_value *x = n->in[0], *y = n->out[0];
        CHECK(w >= 0 && plan.groups[w]->kind == FC_GROUP_LIBRARY && plan.groups[w]->nodes[0]->op == FC_OP_GEMM);
        CHECK_EQ_INT(c.root[y->id], c.root[x->id]); /* in place */
        int readers = 0, reader = -1;
        for (int k = 0; k < plan.ngroups; k++)
            for (int j = 0; j < plan.groups[k]->ninputs; j++)
                if (plan.groups[k]->inputs[j] == y || plan.groups[k]->inputs[j] == x) readers++, reader = k;
        CHECK_EQ_INT(readers, 2); /* the all_reduce itself, and one kernel */
        if (reader >= 0 && plan.groups[reader] != gr) {
            const fc_group *rg = plan.groups[reader];
            CHECK(rg->kind == FC_GROUP_REDUCE || rg->kind == FC_GROUP_POINTWISE);
            fused += rg->kind == FC_GROUP_REDUCE;
        }
    }
    if (nreduce != blocks || ngather != gathers || ncopy != copies || nother)
        fprintf(stderr, "%s %s TP=%d: %d all_reduce, %d all_gather, %d copies, %d others\n", file, name ? name : "", t,
                nreduce, ngather, ncopy, nother);
    CHECK_EQ_INT(nreduce, blocks);
    CHECK_EQ_INT(ngather, gathers);
    CHECK_EQ_INT(ncopy, copies);
    CHECK_EQ_INT(nother, 0);
    CHECK_EQ_INT(fused, norms);
    fc_plan_classes_free(ctx, &c);
    if (st == FC_OK) fc_plan_release(&plan);
    fc_graph_free(s);
    fc_graph_free(g);
}

static void test_plan(void) {
    const fc_binding prefill[2] = {{"B", 1}, {"T", 5}}, decode[2] = {{"B", 1}, {"T", 1}};
    for (int t = 2; t <= 4; t *= 2) {
        check_plan("shard/gpt2_block.ir", NULL, NULL, 0, t, 2, 1, 0, 0);
        check_plan("shard/llama_block.ir", NULL, NULL, 0, t, 2, 1, 0, 0);
    }
    /* Two layers and an LM head, whose logits are gathered (at T > 1 with
     * the vocabulary axis moved to the front and back: two copies). Its 2
     * key/value heads do not divide by 4. */
    check_plan("decode/llama_tiny.ir", "llama", prefill, 2, 2, 4, 4, 1, 2);
    check_plan("decode/llama_tiny.ir", "llama_decode", decode, 2, 2, 4, 4, 1, 0);
}

int main(void) {
    ctx = fc_context_new();
    test_plan();
    test_golden();
    test_cuda_plan();
    test_api_errors();
    test_collectives();
    test_numerics();
    fc_context_free(ctx);
    return check_report("test_shard");
}
