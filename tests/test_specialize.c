/* test_specialize.c - dynamic programs and CUDA Graph replay (issue 7).
 *
 * Everywhere (CI has no GPU): a graph with unbound symbols compiles to a
 * dynamic program (its variant through NVRTC); the guards bind symbols from
 * input shapes and reject shapes that contradict the graph, wrong dtypes,
 * sizes below 1 and misaligned pointers, with messages that name the input
 * and the dim, before anything launches; output shapes are inferred; the
 * specialization bookkeeping (fc_dynamic_select) is checked against the
 * stats in all three modes: background (miss, queue, build, hit, LRU
 * eviction at max_specializations), synchronous and off; FUSEC_LOG=guards
 * logs each miss with what changed; nothing is logged without it.
 *
 * With a GPU: every run gets its inputs and outputs at new addresses, and is
 * compared with the reference interpreter: a static program replays as a
 * CUDA Graph with patched pointers; dynamic programs (softmax over symbolic
 * rows, layernorm, the GPT-2 bf16 block and the Llama block with B and T
 * unbound) run a sequence of shapes on the dynamic variant, then again once
 * the specializations have landed (guard hits), with the graph counters
 * checked; and a static program alternates between two sets of buffers, a
 * patch at every replay. */
#include "check.h"
#include "test_util.h"
#include "codegen/cuda/gemm.h"
#include "runtime/cuda/cublaslt.h"
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/dynamic.h"
#include "runtime/ref/interp.h"
#include "runtime/cuda/program.h"

#include <stdlib.h>
#include <unistd.h>

static const char softmax_text[] =
    "graph sm(%x: f32[N, 1000]) {\n"
    "  %y = softmax(%x, axis=-1) : f32[N, 1000]\n"
    "  return %y\n"
    "}\n";

/* A softmax over a symbolic row length (the GPT-2 variant's attention
 * scores are [.., T, T]): test_symbolic_rows. */
static const char softmax_t_text[] =
    "graph smt(%x: bf16[R, T]) {\n"
    "  %y = softmax(%x, axis=-1) : bf16[R, T]\n"
    "  return %y\n"
    "}\n";

static const char ln_text[] =
    "graph ln(%x: bf16[B, T, 256], %w: bf16[256], %b: bf16[256]) {\n"
    "  %h = add(%x, %x)\n"
    "  %y = layernorm(%h, %w, %b, axis=-1, eps=1e-5) : bf16[B, T, 256]\n"
    "  return %y, %h\n"
    "}\n";

static fc_graph *parse(fc_context *ctx, const char *text) {
    fc_graph *g = NULL;
    fc_status st = fc_parse(ctx, "<test>", text, strlen(text), NULL, NULL, 0, &g);
    if (st != FC_OK) fprintf(stderr, "parse: %s\n", fc_last_error(ctx));
    CHECK_EQ_INT(st, FC_OK);
    return g;
}

/* A dynamic program of g; graphs: CUDA Graph replay on (the default) or off. */
static fc_program *compile_dynamic_graphs(fc_context *ctx, fc_graph *g, fc_specialize_mode mode, int max_specs,
                                          bool graphs) {
    fc_compile_options o;
    fc_compile_options_default(&o);
    o.dynamic = true;
    o.specialize = mode;
    o.max_specializations = max_specs;
    o.cuda_graphs = graphs;
    fc_program *p = NULL;
    fc_status st = fc_compile(g, &o, &p);
    if (st != FC_OK) fprintf(stderr, "compile %s: %s\n", fc_graph_name(g), fc_last_error(ctx));
    CHECK_EQ_INT(st, FC_OK);
    return p;
}

static fc_program *compile_dynamic(fc_context *ctx, fc_graph *g, fc_specialize_mode mode, int max_specs) {
    return compile_dynamic_graphs(ctx, g, mode, max_specs, true);
}

static fc_tensor shaped(fc_dtype dt, int rank, const int64_t *dims, void *data) {
    fc_tensor t = {dt, rank, {0}, data};
    for (int d = 0; d < rank; d++) t.shape[d] = dims[d];
    return t;
}

/* ---- without a GPU ---------------------------------------------------------------- */

/* A chain of tanh over [N, 1000] long enough that its variant's frame
 * (a word per symbol and per value) does not fit in the first kernel's
 * parameters: the frame is then copied before the launches instead of
 * carried. A malloc'd text. */
#define LONG_CHAIN 520
static char *long_chain_text(void) {
    size_t cap = 64 + 48 * (size_t)LONG_CHAIN;
    char *t = malloc(cap);
    if (!t) return NULL;
    int n = snprintf(t, cap, "graph chain(%%x: f32[N, 1000]) {\n  %%v0 = tanh(%%x)\n");
    for (int i = 1; i < LONG_CHAIN; i++) n += snprintf(t + n, cap - (size_t)n, "  %%v%d = tanh(%%v%d)\n", i, i - 1);
    snprintf(t + n, cap - (size_t)n, "  return %%v%d\n}\n", LONG_CHAIN - 1);
    return t;
}

/* Without a GPU: a frame too large to carry is copied (the variant says
 * so), a small one carried. */
static void test_frame_carried_or_copied(fc_context *ctx) {
    char *text = long_chain_text();
    CHECK(text != NULL);
    fc_graph *big = text ? parse(ctx, text) : NULL, *small = parse(ctx, softmax_text);
    free(text);
    for (int k = 0; k < 2; k++) {
        fc_graph *g = k ? big : small;
        fc_program *p = g ? compile_dynamic(ctx, g, FC_SPECIALIZE_OFF, 0) : NULL;
        const fc_program *v = p ? fc_dynamic_variant(fc_program_dynamic(p)) : NULL;
        CHECK(v != NULL);
        if (v) {
            const fc_program_desc *d = fc_program_desc_of(v);
            CHECK(d->src.frame_words > 0);
            CHECK(d->src.frame_carried == (k == 0));
            if (k) CHECK(d->src.frame_words > LONG_CHAIN);
        }
        fc_program_free(p);
    }
    fc_graph_free(big);
    fc_graph_free(small);
}

/* Without a GPU: a dynamic program is a handle of its own kind (it runs
 * nothing itself): the calls that take a static executable refuse it
 * cleanly, and what it shows is its variant's or its signature. */
static void test_dynamic_handle(fc_context *ctx) {
    fc_graph *g = parse(ctx, softmax_text);
    fc_program *p = g ? compile_dynamic(ctx, g, FC_SPECIALIZE_OFF, 0) : NULL;
    fc_program *v = p ? fc_dynamic_variant(fc_program_dynamic(p)) : NULL;
    CHECK(v != NULL);
    if (v) {
        CHECK(fc_program_dynamic(v) == NULL); /* a variant is not a dynamic program */
        CHECK_EQ_INT(fc_program_num_launches(p), 0);
        CHECK(fc_program_num_launches(v) > 0);
        CHECK(fc_program_launch(p, 0) == NULL);
        CHECK(fc_program_cubin(p) != NULL && fc_program_cubin(p)->size == 0);
        CHECK(fc_program_cubin(v)->size > 0);
        CHECK_EQ_INT(fc_program_sm(p), fc_program_sm(v));
        CHECK(fc_program_blas(p) == NULL && fc_program_device(p) == NULL);
        CHECK_EQ_INT(fc_program_num_inputs(p), 1);
        char *a = fc_program_plan_text(p), *b = fc_program_plan_text(v);
        CHECK(a && b && !strcmp(a, b)); /* a dynamic program shows its variant */
        free(a);
        free(b);
        fc_tensor in = {FC_F32, 2, {4, 8}, NULL}, out = {0};
        /* A dynamic program runs from host memory at its inputs' shapes
         * (fc_run_shaped inside): the call is checked before the device. */
        CHECK_EQ_INT(fc_program_run_host(p, &in, 1, &out, 1, NULL, 0), FC_ERR_USAGE);
        CHECK(strstr(fc_last_error(ctx), "run: input 0 has no data") != NULL);
        void *none[2] = {0};
        CHECK_EQ_INT(fc_run(p, none, 1, none + 1, 1, NULL), FC_ERR_USAGE);
        fc_program *inst = NULL;
        const int64_t syms[1] = {4};
        CHECK_EQ_INT(fc_program_instance(p, syms, 1, &inst), FC_ERR_USAGE); /* only a variant has shapes */
        CHECK(inst == NULL);
        CHECK_EQ_INT(fc_program_instance(v, syms, 1, &inst), FC_OK);
        CHECK(inst && fc_program_num_launches(inst) == fc_program_num_launches(v));
        fc_program_free(inst);
    }
    fc_program_free(p);
    fc_graph_free(g);
}

static void test_guards(fc_context *ctx) {
    fc_graph *g = parse(ctx, ln_text);
    fc_program *p = g ? compile_dynamic(ctx, g, FC_SPECIALIZE_OFF, 0) : NULL;
    if (!p) {
        fc_graph_free(g);
        return;
    }
    fc_run_stats s;
    fc_program_stats(p, &s);
    CHECK_STR(s.dynamic_unavailable, "");
    CHECK_EQ_INT(fc_program_num_inputs(p), 3);
    CHECK_EQ_INT(fc_program_num_outputs(p), 2);
    /* Its plan and source are the dynamic variant's: kernels that take the
     * symbol values (B, T) as trailing arguments. */
    char *plan = fc_program_plan_text(p), *src = fc_program_cuda_source(p);
    CHECK(plan && strstr(plan, "total: 1 kernels"));
    CHECK(src && strstr(src, "i64 s0") && strstr(src, "i64 s1"));
    fc_free(plan);
    fc_free(src);
    /* 16-byte aligned fake device pointers: the guard runs before any launch. */
    static _Alignas(256) char buf[4][256];
    int64_t xd[3] = {2, 7, 256}, wd[1] = {256};
    fc_tensor in[3] = {shaped(FC_BF16, 3, xd, buf[0]), shaped(FC_BF16, 1, wd, buf[1]), shaped(FC_BF16, 1, wd, buf[2])};
    fc_tensor out[2];
    CHECK_EQ_INT(fc_program_infer_outputs(p, in, 3, out, 2), FC_OK);
    CHECK_EQ_INT(out[0].rank, 3);
    CHECK_EQ_INT(out[0].shape[0], 2);
    CHECK_EQ_INT(out[0].shape[1], 7);
    CHECK_EQ_INT(out[0].shape[2], 256);
    CHECK_EQ_INT(out[1].dtype, FC_BF16);

    /* A static dim that differs. */
    int64_t bad_static[3] = {2, 7, 255};
    in[0] = shaped(FC_BF16, 3, bad_static, buf[0]);
    CHECK_EQ_INT(fc_program_infer_outputs(p, in, 3, out, 2), FC_ERR_INPUT);
    CHECK(strstr(fc_last_error(ctx), "input 0 (%x) dim 2 is 255, but the graph fixes it at 256") != NULL);
    /* A size below 1. */
    int64_t zero[3] = {2, 0, 256};
    in[0] = shaped(FC_BF16, 3, zero, buf[0]);
    CHECK_EQ_INT(fc_program_infer_outputs(p, in, 3, out, 2), FC_ERR_INPUT);
    CHECK(strstr(fc_last_error(ctx), "dim 1 is 0: sizes must be at least 1") != NULL);
    /* A dtype that differs. */
    in[0] = shaped(FC_F32, 3, xd, buf[0]);
    CHECK_EQ_INT(fc_program_infer_outputs(p, in, 3, out, 2), FC_ERR_INPUT);
    CHECK(strstr(fc_last_error(ctx), "input 0 (%x) is bf16 of rank 3, not f32 of rank 3") != NULL);
    /* A misaligned pointer, and an output of the wrong shape: fc_run_shaped
     * refuses both before touching a device. */
    in[0] = shaped(FC_BF16, 3, xd, buf[0] + 2);
    fc_tensor o2[2] = {shaped(FC_BF16, 3, xd, buf[3]), shaped(FC_BF16, 3, xd, buf[3])};
    CHECK_EQ_INT(fc_run_shaped(p, in, 3, o2, 2, NULL), FC_ERR_INPUT);
    CHECK(strstr(fc_last_error(ctx), "not 16-byte aligned") != NULL);
    in[0] = shaped(FC_BF16, 3, xd, buf[0]);
    int64_t wrong[3] = {2, 8, 256};
    o2[1] = shaped(FC_BF16, 3, wrong, buf[3]);
    CHECK_EQ_INT(fc_run_shaped(p, in, 3, o2, 2, NULL), FC_ERR_INPUT);
    CHECK(strstr(fc_last_error(ctx), "output 1 must be bf16[2, 7, 256]") != NULL);
    /* fc_run cannot run a dynamic program: it has no shapes. */
    void *ptrs[5] = {buf[0], buf[1], buf[2], buf[3], buf[3]};
    CHECK_EQ_INT(fc_run(p, ptrs, 3, ptrs + 3, 2, NULL), FC_ERR_USAGE);
    CHECK(strstr(fc_last_error(ctx), "fc_run_shaped") != NULL);
    fc_program_free(p);
    fc_graph_free(g);

    /* One symbol with two values. */
    static const char two[] = "graph two(%a: f32[N, 4], %b: f32[N, 4]) {\n  %c = add(%a, %b)\n  return %c\n}\n";
    g = parse(ctx, two);
    p = g ? compile_dynamic(ctx, g, FC_SPECIALIZE_OFF, 0) : NULL;
    if (p) {
        int64_t a[2] = {3, 4}, b[2] = {5, 4};
        fc_tensor x[2] = {shaped(FC_F32, 2, a, buf[0]), shaped(FC_F32, 2, b, buf[1])};
        fc_tensor y[1];
        CHECK_EQ_INT(fc_program_infer_outputs(p, x, 2, y, 1), FC_ERR_INPUT);
        CHECK(strstr(fc_last_error(ctx), "input 1 (%b) dim 0 is N = 5, but input 0 (%a) dim 0 says N = 3") != NULL);
    }
    fc_program_free(p);
    fc_graph_free(g);

    /* A static program guards its own shapes. */
    fc_binding bind = {"N", 4};
    fc_graph *gs = NULL;
    CHECK_EQ_INT(fc_parse(ctx, "<t>", softmax_text, strlen(softmax_text), NULL, &bind, 1, &gs), FC_OK);
    fc_program *ps = NULL;
    if (gs) CHECK_EQ_INT(fc_compile(gs, NULL, &ps), FC_OK);
    if (ps) {
        int64_t d5[2] = {5, 1000};
        fc_tensor x = shaped(FC_F32, 2, d5, buf[0]), y = shaped(FC_F32, 2, d5, buf[1]);
        CHECK_EQ_INT(fc_run_shaped(ps, &x, 1, &y, 1, NULL), FC_ERR_INPUT);
        CHECK(strstr(fc_last_error(ctx), "dim 0 is 5, but the graph fixes it at 4") != NULL);
    }
    fc_program_free(ps);
    fc_graph_free(gs);
}

/* Redirect stderr to a file while fn runs; return what was written. */
static char *capture_stderr(void (*fn)(void *), void *arg) {
    char path[] = "/tmp/fusec-test-log-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return NULL;
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    fn(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    static char text[8192];
    lseek(fd, 0, SEEK_SET);
    ssize_t n = read(fd, text, sizeof text - 1);
    text[n > 0 ? n : 0] = 0;
    close(fd);
    unlink(path);
    return text;
}

typedef struct select_run {
    fc_program *p;
    const int64_t *keys;
    int n;
    int hits;
} select_run;

static void run_selects(void *arg) {
    select_run *r = arg;
    for (int i = 0; i < r->n; i++) {
        fc_program *spec = NULL;
        CHECK_EQ_INT(fc_dynamic_select(r->p, &r->keys[i], &spec), FC_OK);
        r->hits += spec != NULL;
    }
}

static void test_bookkeeping(fc_context *ctx) {
    fc_graph *g = parse(ctx, softmax_text);
    if (!g) return;
    /* Background, at most 2 specializations. */
    fc_program *p = compile_dynamic(ctx, g, FC_SPECIALIZE_BACKGROUND, 2);
    if (p) {
        int64_t k64 = 64, k65 = 65, k7 = 7;
        select_run r = {p, &k64, 1, 0};
        setenv("FUSEC_LOG", "guards", 1);
        char *log = capture_stderr(run_selects, &r);
        unsetenv("FUSEC_LOG");
        CHECK_EQ_INT(r.hits, 0);
        CHECK(log && strstr(log, "guard miss: first run (N=64)") && strstr(log, "compiling in the background"));
        CHECK_EQ_INT(fc_program_wait_specializations(p), FC_OK);
        fc_run_stats s;
        fc_program_stats(p, &s);
        CHECK_EQ_INT(s.guard_misses, 1);
        CHECK_EQ_INT(s.specializations_built, 1);
        CHECK_EQ_INT(s.specializations_live, 1);
        CHECK_EQ_INT(s.specializations_pending, 0);
        /* The miss's guard time is counted (a select is no run: no run time). */
        CHECK(s.miss_guard_ms > 0 && s.miss_guard_ms < 1000);
        CHECK(s.miss_run_ms == 0);
        const double guard_ms = s.miss_guard_ms;
        /* Now a hit: not counted. */
        r = (select_run){p, &k64, 1, 0};
        run_selects(&r);
        CHECK_EQ_INT(r.hits, 1);
        fc_program_stats(p, &s);
        CHECK(s.miss_guard_ms == guard_ms);
        /* A new shape: a miss that says what changed. */
        r = (select_run){p, &k65, 1, 0};
        setenv("FUSEC_LOG", "guards", 1);
        log = capture_stderr(run_selects, &r);
        unsetenv("FUSEC_LOG");
        CHECK(log && strstr(log, "N changed 64 -> 65") != NULL);
        CHECK_EQ_INT(fc_program_wait_specializations(p), FC_OK);
        /* A third shape evicts the least recently used (64 was used before 65). */
        r = (select_run){p, &k65, 1, 0};
        run_selects(&r);
        CHECK_EQ_INT(r.hits, 1);
        r = (select_run){p, &k7, 1, 0};
        run_selects(&r);
        CHECK_EQ_INT(fc_program_wait_specializations(p), FC_OK);
        fc_program_stats(p, &s);
        CHECK_EQ_INT(s.specializations_built, 3);
        CHECK_EQ_INT(s.specializations_evicted, 1);
        CHECK_EQ_INT(s.specializations_live, 2);
        CHECK_EQ_INT(s.guard_hits, 2);
        CHECK_EQ_INT(s.guard_misses, 3);
        int64_t again[3] = {65, 7, 64};
        r = (select_run){p, again, 3, 0};
        run_selects(&r);
        CHECK_EQ_INT(r.hits, 2); /* 64 was evicted */
        /* Without FUSEC_LOG nothing is printed. */
        r = (select_run){p, &k7, 1, 0};
        log = capture_stderr(run_selects, &r);
        CHECK(log && log[0] == 0);
    }
    fc_program_free(p);

    /* Synchronous: the miss compiles, then runs the specialization. */
    p = compile_dynamic(ctx, g, FC_SPECIALIZE_SYNC, 4);
    if (p) {
        int64_t k = 3;
        fc_program *spec = NULL;
        CHECK_EQ_INT(fc_dynamic_select(p, &k, &spec), FC_OK);
        CHECK(spec != NULL);
        fc_run_stats s;
        fc_program_stats(p, &s);
        CHECK_EQ_INT(s.sync_compiles, 1);
        CHECK_EQ_INT(s.specializations_built, 1);
        CHECK_EQ_INT(s.guard_misses, 1);
        /* FUSEC_LOG=spec: the steps of making one, each with its start and
         * end on fc_now_ms's clock (here on the caller's thread). */
        int64_t k5 = 5;
        select_run r = {p, &k5, 1, 0};
        setenv("FUSEC_LOG", "spec", 1);
        const double before = fc_now_ms();
        char *log = capture_stderr(run_selects, &r);
        const double after = fc_now_ms();
        unsetenv("FUSEC_LOG");
        const char *line = log ? strstr(log, "fusec[spec]: ") : NULL;
        double a = 0, b = 0;
        CHECK(line && sscanf(line, "fusec[spec]: %lf..%lf", &a, &b) == 2);
        CHECK(before - 0.001 <= a && a <= b && b <= after + 0.001); /* printed to 1 us */
        CHECK(log && strstr(log, "parse and compile") && strstr(log, "specialization N=5 made"));
        CHECK(log && !strstr(log, "fusec[guards]"));
    }
    fc_program_free(p);

    /* Off: the variant serves everything, nothing is built. */
    p = compile_dynamic(ctx, g, FC_SPECIALIZE_OFF, 0);
    if (p) {
        int64_t keys[3] = {3, 4, 3};
        select_run r = {p, keys, 3, 0};
        run_selects(&r);
        CHECK_EQ_INT(r.hits, 0);
        fc_run_stats s;
        fc_program_stats(p, &s);
        CHECK_EQ_INT(s.specializations_built, 0);
        CHECK_EQ_INT(s.guard_misses, 3);
    }
    fc_program_free(p);
    fc_graph_free(g);
}

/* Every allocation of a dynamic compile fails in turn: FC_ERR_NOMEM each
 * time (never a crash, a leak under ASan, or a program that silently lost
 * its dynamic variant), until the compile succeeds whole. */
/* fc_program_reserve's argument checks (no GPU needed), and a static
 * program's nothing to do. */
static void test_reserve_usage(fc_context *ctx) {
    fc_graph *g = parse(ctx, ln_text);
    fc_program *p = g ? compile_dynamic(ctx, g, FC_SPECIALIZE_OFF, 0) : NULL;
    if (!p) {
        fc_graph_free(g);
        return;
    }
    CHECK_EQ_INT(fc_program_reserve(NULL, NULL, 0), FC_ERR_USAGE);
    CHECK_EQ_INT(fc_program_reserve(p, (fc_binding[]){{"B", 2}, {"X", 3}}, 2), FC_ERR_USAGE);
    CHECK(strstr(fc_last_error(ctx), "no symbol X") != NULL);
    CHECK_EQ_INT(fc_program_reserve(p, (fc_binding[]){{"B", 2}}, 1), FC_ERR_USAGE);
    CHECK(strstr(fc_last_error(ctx), "symbol T is not given") != NULL);
    CHECK_EQ_INT(fc_program_reserve(p, (fc_binding[]){{"B", 2}, {"T", 0}}, 2), FC_ERR_USAGE);
    CHECK(strstr(fc_last_error(ctx), "T = 0: sizes must be at least 1") != NULL);
    /* Valid: done with a GPU, the device's absence said without one. */
    fc_status st = fc_program_reserve(p, (fc_binding[]){{"T", 64}, {"B", 2}}, 2);
    if (fc_cuda_available(NULL)) CHECK_EQ_INT(st, FC_OK);
    else CHECK_EQ_INT(st, FC_ERR_RUNTIME);
    fc_clear_error(ctx);
    fc_program_free(p);
    fc_binding bind[2] = {{"B", 2}, {"T", 5}};
    fc_graph *gs = fc_graph_specialize(g, bind, 2);
    fc_compile_options o;
    fc_compile_options_default(&o);
    fc_program *ps = NULL;
    if (gs && fc_compile(gs, &o, &ps) == FC_OK) CHECK_EQ_INT(fc_program_reserve(ps, bind, 2), FC_OK);
    fc_program_free(ps);
    fc_graph_free(gs);
    fc_graph_free(g);
}

static void test_dynamic_compile_oom(void) {
    fc_context *ctx = fc_context_new();
    fc_graph *g = parse(ctx, ln_text);
    fc_compile_options o;
    fc_compile_options_default(&o);
    o.dynamic = true;
    o.specialize = FC_SPECIALIZE_OFF;
    int failures = 0;
    fc_program *p = compile_through_alloc_failures(ctx, g, &o, &failures);
    CHECK(p != NULL);
    if (p) {
        fc_run_stats s;
        fc_program_stats(p, &s);
        if (s.dynamic_unavailable[0]) fprintf(stderr, "no variant: %s\n", s.dynamic_unavailable);
        CHECK_STR(s.dynamic_unavailable, "");
        fc_program_free(p);
    }
    CHECK(failures > 10);
    fc_graph_free(g);
    fc_context_free(ctx);
}

/* ---- with a GPU ------------------------------------------------------------------- */

static double uniform(double lo, double hi) { return lo + (hi - lo) * ((double)rand() / RAND_MAX); }

/* Random host inputs for p's parameters at these symbol values. */
static void fill_inputs(fc_program *p, const fc_tensor *shapes, fc_tensor *in, int nin) {
    for (int i = 0; i < nin; i++) {
        in[i] = shapes[i];
        int64_t n = fc_tensor_numel(&in[i]);
        size_t es = fc_dtype_size(in[i].dtype);
        in[i].data = malloc((size_t)n * es + 1);
        const char *name = NULL;
        fc_tensor ty;
        fc_program_input(p, i, &ty, &name);
        /* Weights small (as a model's), norms' scales near 1, data (and
         * RoPE's cos and sin) in [-1, 1]. */
        double lo = -1, hi = 1;
        bool trig = name && (!strcmp(name, "cos") || !strcmp(name, "sin"));
        if (name && !trig && ty.rank == 2) lo = -0.02, hi = 0.02;
        else if (name && (strstr(name, "norm") || strstr(name, "_w"))) lo = 0.9, hi = 1.1;
        else if (name && strstr(name, "_b")) lo = -0.02, hi = 0.02;
        /* A weight (a parameter with no symbolic dim) has the same values
         * at every run, wherever its buffer lands: a program may assume its
         * weights constant (docs/GEMM.md: fused sibling GEMMs keep their
         * concatenated weights by address), so a new buffer that happens to
         * reuse a freed address must not hold other values. */
        bool weight = true;
        for (int d = 0; d < ty.rank; d++) weight &= ty.shape[d] >= 0;
        uint64_t lcg = 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1);
        for (int64_t e = 0; e < n; e++) {
            double v;
            if (weight) {
                lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
                v = lo + (hi - lo) * (double)(lcg >> 11) / 9007199254740992.0;
            } else {
                v = uniform(lo, hi);
            }
            if (in[i].dtype == FC_BF16) ((uint16_t *)in[i].data)[e] = fc_f32_to_bf16((float)v);
            else if (in[i].dtype == FC_F16) ((uint16_t *)in[i].data)[e] = fc_f32_to_f16((float)v);
            else ((float *)in[i].data)[e] = (float)v;
        }
    }
}

static size_t bytes_of(const fc_tensor *t) { return (size_t)fc_tensor_numel(t) * fc_dtype_size(t->dtype); }

/* Run p once on inputs of these shapes, every buffer freshly allocated (so
 * at new addresses), and compare with the reference interpreter. */
static void run_and_compare(fc_context *ctx, fc_cuda_device *dev, fc_program *p, fc_graph *g, const fc_tensor *shapes,
                            int nin, int nout, const char *what) {
    fc_tensor in[16], got[8], want[8], dev_in[16], dev_out[8];
    fill_inputs(p, shapes, in, nin);
    CHECK_EQ_INT(fc_program_infer_outputs(p, in, nin, got, nout), FC_OK);
    /* A spacer allocation makes the next buffers land elsewhere. */
    CUdeviceptr spacer = 0;
    fc_cuda_alloc(dev, 4096 + (size_t)(rand() % 8) * 4096, &spacer);
    for (int i = 0; i < nin; i++) {
        CUdeviceptr d = 0;
        CHECK_EQ_INT(fc_cuda_alloc(dev, bytes_of(&in[i]) + 16, &d), FC_OK);
        CHECK_EQ_INT(fc_cuda_upload(dev, d, in[i].data, bytes_of(&in[i])), FC_OK);
        dev_in[i] = in[i];
        dev_in[i].data = (void *)(uintptr_t)d;
    }
    for (int k = 0; k < nout; k++) {
        CUdeviceptr d = 0;
        CHECK_EQ_INT(fc_cuda_alloc(dev, bytes_of(&got[k]) + 16, &d), FC_OK);
        dev_out[k] = got[k];
        dev_out[k].data = (void *)(uintptr_t)d;
    }
    fc_status st = fc_run_shaped(p, dev_in, nin, dev_out, nout, dev->stream);
    if (st != FC_OK) fprintf(stderr, "%s: %s\n", what, fc_last_error(ctx));
    CHECK_EQ_INT(st, FC_OK);
    CHECK_EQ_INT(fc_cuda_stream_sync(dev, NULL), FC_OK);
    for (int k = 0; k < nout; k++) {
        got[k].data = malloc(bytes_of(&got[k]) + 1);
        CHECK_EQ_INT(fc_cuda_download(dev, got[k].data, (CUdeviceptr)(uintptr_t)dev_out[k].data, bytes_of(&got[k])),
                     FC_OK);
    }
    CHECK_EQ_INT(fc_run_reference(g, in, nin, want, nout), FC_OK);
    fc_output_diff diff[8];
    st = fc_compare_outputs(ctx, got, want, nout, diff);
    for (int k = 0; k < nout; k++) {
        char line[512];
        printf("%s: %s\n", what, fc_output_diff_format(&diff[k], k, line, sizeof line));
    }
    CHECK_EQ_INT(st, FC_OK);
    for (int i = 0; i < nin; i++) {
        fc_cuda_free(dev, (CUdeviceptr)(uintptr_t)dev_in[i].data);
        free(in[i].data);
    }
    for (int k = 0; k < nout; k++) {
        fc_cuda_free(dev, (CUdeviceptr)(uintptr_t)dev_out[k].data);
        free(got[k].data);
        fc_tensor_release(&want[k]);
    }
    fc_cuda_free(dev, spacer);
}

static void test_static_replay(fc_context *ctx, fc_cuda_device *dev) {
    fc_binding bind = {"N", 64};
    fc_graph *g = NULL;
    CHECK_EQ_INT(fc_parse(ctx, "<t>", softmax_text, strlen(softmax_text), NULL, &bind, 1, &g), FC_OK);
    fc_program *p = NULL;
    if (g) CHECK_EQ_INT(fc_compile(g, NULL, &p), FC_OK);
    if (!p) return;
    int64_t d[2] = {64, 1000};
    fc_tensor x = shaped(FC_F32, 2, d, NULL);
    for (int rep = 0; rep < 4; rep++) run_and_compare(ctx, dev, p, g, &x, 1, 1, "static softmax N=64");
    fc_run_stats s;
    fc_program_stats(p, &s);
    printf("static softmax: runs %llu, captures %llu, replays %llu, patches %llu\n", (unsigned long long)s.runs,
           (unsigned long long)s.graph_captures, (unsigned long long)s.graph_replays,
           (unsigned long long)s.graph_patches);
    CHECK_EQ_INT(s.runs, 4);
    CHECK_EQ_INT(s.graph_captures, 1);
    CHECK_EQ_INT(s.graph_replays, 3);

    /* Two sets of buffers kept alive, used in turn (A B A B A): every replay
     * after the graph's build (at the second run, with B) patches the one
     * kernel, and every result is right. (Above, freed buffers may come
     * back at the same addresses, so the patch count there is not fixed.) */
    float *hx[2], *hy = malloc(sizeof(float) * 64000);
    CUdeviceptr dx[2], dy[2];
    for (int b = 0; b < 2; b++) {
        hx[b] = malloc(sizeof(float) * 64000);
        for (int e = 0; e < 64000; e++) hx[b][e] = (float)uniform(-4, 4);
        CHECK_EQ_INT(fc_cuda_alloc(dev, sizeof(float) * 64000, &dx[b]), FC_OK);
        CHECK_EQ_INT(fc_cuda_alloc(dev, sizeof(float) * 64000, &dy[b]), FC_OK);
        CHECK_EQ_INT(fc_cuda_upload(dev, dx[b], hx[b], sizeof(float) * 64000), FC_OK);
    }
    uint64_t patches0 = s.graph_patches;
    for (int r = 0; r < 5; r++) {
        int b = r % 2;
        fc_tensor in = shaped(FC_F32, 2, d, (void *)(uintptr_t)dx[b]), out = shaped(FC_F32, 2, d, (void *)(uintptr_t)dy[b]);
        CHECK_EQ_INT(fc_run_shaped(p, &in, 1, &out, 1, dev->stream), FC_OK);
        CHECK_EQ_INT(fc_cuda_stream_sync(dev, NULL), FC_OK);
        CHECK_EQ_INT(fc_cuda_download(dev, hy, dy[b], sizeof(float) * 64000), FC_OK);
        fc_tensor hin = shaped(FC_F32, 2, d, hx[b]), want;
        CHECK_EQ_INT(fc_run_reference(g, &hin, 1, &want, 1), FC_OK);
        fc_tensor got = shaped(FC_F32, 2, d, hy);
        fc_output_diff diff;
        CHECK_EQ_INT(fc_compare_outputs(ctx, &got, &want, 1, &diff), FC_OK);
        fc_tensor_release(&want);
    }
    fc_program_stats(p, &s);
    /* Runs 2 to 5 here alternate, so each patches; the first does unless
     * its buffers landed where the last run above had its own. */
    CHECK(s.graph_patches - patches0 >= 4 && s.graph_patches - patches0 <= 5);
    CHECK_EQ_INT(s.graph_replays, 8);
    for (int b = 0; b < 2; b++) {
        fc_cuda_free(dev, dx[b]);
        fc_cuda_free(dev, dy[b]);
        free(hx[b]);
    }
    free(hy);
    fc_program_free(p);
    fc_graph_free(g);
}

/* prebuilt: whether each specialization's graph is built before it lands
 * (not for programs with fused sibling GEMMs); concats: how many groups of
 * fused sibling GEMMs the graph has (the variant keeps one concatenation
 * of each, whatever the number of shapes). */
/* The variant's reduction over a symbolic row length in each of its two
 * row loops (codegen/cuda/reduce.c, fc_cg_reduce_kernel): as vectors (T a
 * multiple of 8, at least 256), one element at a time (the rest); each
 * against the reference, on new buffers, the variant alone. */
static void test_symbolic_rows(fc_context *ctx, fc_cuda_device *dev) {
    fc_graph *g = parse(ctx, softmax_t_text);
    fc_program *p = g ? compile_dynamic(ctx, g, FC_SPECIALIZE_OFF, 0) : NULL;
    static const int64_t ts[] = {7, 64, 256, 1000, 2048, 2056, 4096, 3001, 255};
    for (size_t i = 0; p && i < sizeof ts / sizeof ts[0]; i++) {
        fc_tensor sh[16];
        sh[0] = shaped(FC_BF16, 2, (int64_t[]){5, ts[i]}, NULL);
        char name[64];
        snprintf(name, sizeof name, "softmax over T = %lld", (long long)ts[i]);
        run_and_compare(ctx, dev, p, g, sh, 1, 1, name);
    }
    fc_program_free(p);
    fc_graph_free(g);
}

static void test_dynamic_gpu(fc_context *ctx, fc_cuda_device *dev, const char *what, fc_graph *g, int nsteps,
                             const fc_tensor (*shapes)[16], int nin, int nout, bool prebuilt, int concats) {
    fc_program *p = compile_dynamic(ctx, g, FC_SPECIALIZE_BACKGROUND, 4);
    if (!p) return;
    fc_run_stats s;
    fc_program_stats(p, &s);
    if (s.dynamic_unavailable[0]) printf("%s: no dynamic variant: %s\n", what, s.dynamic_unavailable);
    char name[160];
    /* Each shape twice (a miss served by the variant, then a graph replay
     * with new pointers), then the same after the specializations land. */
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < nsteps; i++)
            for (int rep = 0; rep < 2; rep++) {
                snprintf(name, sizeof name, "%s step %d%s", what, i, pass ? " (specialized)" : "");
                run_and_compare(ctx, dev, p, g, shapes[i], nin, nout, name);
            }
        CHECK_EQ_INT(fc_program_wait_specializations(p), FC_OK);
    }
    fc_program_stats(p, &s);
    printf("%s: runs %llu, hits %llu, misses %llu, dynamic runs %llu, built %llu, evicted %llu, live %d, graph "
           "captures %llu (%llu built in the background), replays %llu, patches %llu\n",
           what, (unsigned long long)s.runs, (unsigned long long)s.guard_hits, (unsigned long long)s.guard_misses,
           (unsigned long long)s.dynamic_runs, (unsigned long long)s.specializations_built,
           (unsigned long long)s.specializations_evicted, s.specializations_live,
           (unsigned long long)s.graph_captures, (unsigned long long)s.graph_prebuilt,
           (unsigned long long)s.graph_replays, (unsigned long long)s.graph_patches);
    CHECK_EQ_INT(s.runs, (uint64_t)(4 * nsteps));
    /* Every specialization built here had a run's pointers: its graph was
     * built before it landed, and its first run replayed it, patched with
     * that run's new buffers (results compared above). */
    if (prebuilt) CHECK_EQ_INT(s.graph_prebuilt, s.specializations_built);
    else CHECK_EQ_INT(s.graph_prebuilt, 0);
    fc_program *v = fc_dynamic_variant(fc_program_dynamic(p));
    /* (Generated GEMM kernels read each sibling's weight where it is: no concatenation.) */
    if (v) CHECK_EQ_INT(fc_cublaslt_num_concats(fc_program_blas(v)), fc_cuda_variant_gemm_kernels() ? 0 : concats);
    CHECK(s.guard_hits >= (uint64_t)nsteps); /* the second pass, at least */
    CHECK(s.dynamic_runs >= 1);
    CHECK(s.specializations_built >= 1);
    CHECK(s.graph_replays >= 1);
    fc_program_free(p);
}

/* Two sibling GEMMs of one input (one cuBLASLt call on concatenated
 * weights). */
static const char *siblings_text = "graph sib(%x: f32[N, 64], %wg: f32[80, 64], %wu: f32[80, 64]) {\n"
                                   "  %wgt = permute(%wg, perm=[1, 0])\n  %wut = permute(%wu, perm=[1, 0])\n"
                                   "  %g0 = matmul(%x, %wgt)\n  %g = relu(%g0)\n  %u0 = matmul(%x, %wut)\n"
                                   "  %u = relu(%u0)\n  return %g, %u\n}\n";

/* New values written into a weight in place (the same buffer) reach the
 * results once fc_program_weights_changed says so: for a static program
 * replaying its graph, a dynamic program's variant, and a specialization. */
static void test_weights_changed(fc_context *ctx, fc_cuda_device *dev) {
    static const char *const what[3] = {"static", "dynamic variant", "specialization"};
    enum { N = 48, K = 64, H = 80 };
    int64_t dx[2] = {N, K}, dw[2] = {H, K}, dy[2] = {N, H};
    for (int mode = 0; mode < 3; mode++) {
        fc_binding bind = {"N", N};
        fc_graph *g = NULL;
        CHECK_EQ_INT(fc_parse(ctx, "<t>", siblings_text, strlen(siblings_text), NULL, mode ? NULL : &bind,
                              mode ? 0 : 1, &g),
                     FC_OK);
        fc_program *p = NULL;
        if (g && mode == 0) CHECK_EQ_INT(fc_compile(g, NULL, &p), FC_OK);
        if (g && mode > 0) p = compile_dynamic(ctx, g, mode == 1 ? FC_SPECIALIZE_OFF : FC_SPECIALIZE_BACKGROUND, 2);
        if (!p) {
            fc_graph_free(g);
            continue;
        }
        size_t nx = (size_t)N * K, nw = (size_t)H * K, ny = (size_t)N * H;
        float *hx = malloc(nx * 4), *hw[2] = {malloc(nw * 4), malloc(nw * 4)}, *hy = malloc(ny * 4);
        for (size_t e = 0; e < nx; e++) hx[e] = (float)uniform(-1, 1);
        for (int w = 0; w < 2; w++)
            for (size_t e = 0; e < nw; e++) hw[w][e] = (float)uniform(-1, 1);
        CUdeviceptr bx = 0, bw[2] = {0, 0}, by[2] = {0, 0};
        CHECK_EQ_INT(fc_cuda_alloc(dev, nx * 4, &bx), FC_OK);
        for (int w = 0; w < 2; w++) {
            CHECK_EQ_INT(fc_cuda_alloc(dev, nw * 4, &bw[w]), FC_OK);
            CHECK_EQ_INT(fc_cuda_alloc(dev, ny * 4, &by[w]), FC_OK);
            CHECK_EQ_INT(fc_cuda_upload(dev, bw[w], hw[w], nw * 4), FC_OK);
        }
        CHECK_EQ_INT(fc_cuda_upload(dev, bx, hx, nx * 4), FC_OK);
        for (int step = 0; step < 8; step++) {
            /* The specialization lands after two runs of the variant. */
            if (mode == 2 && step == 2) CHECK_EQ_INT(fc_program_wait_specializations(p), FC_OK);
            /* Static: %wu changes in place first without the call: the
             * program keeps its copy (the documented contract), so %u is
             * stale at runs 3 and 4 (which shows the call is what makes
             * the difference at run 5). */
            bool stale = mode == 0 && (step == 3 || step == 4);
            if (mode == 0 && step == 3) {
                for (size_t e = 0; e < nw; e++) hw[1][e] = (float)uniform(-1, 1);
                CHECK_EQ_INT(fc_cuda_upload(dev, bw[1], hw[1], nw * 4), FC_OK);
            }
            if (step == 5) {
                for (size_t e = 0; e < nw; e++) hw[0][e] = (float)uniform(-1, 1);
                CHECK_EQ_INT(fc_cuda_upload(dev, bw[0], hw[0], nw * 4), FC_OK);
                CHECK_EQ_INT(fc_program_weights_changed(p), FC_OK);
            }
            fc_tensor in[3] = {shaped(FC_F32, 2, dx, (void *)(uintptr_t)bx),
                               shaped(FC_F32, 2, dw, (void *)(uintptr_t)bw[0]),
                               shaped(FC_F32, 2, dw, (void *)(uintptr_t)bw[1])};
            fc_tensor out[2] = {shaped(FC_F32, 2, dy, (void *)(uintptr_t)by[0]),
                                shaped(FC_F32, 2, dy, (void *)(uintptr_t)by[1])};
            CHECK_EQ_INT(fc_run_shaped(p, in, 3, out, 2, dev->stream), FC_OK);
            CHECK_EQ_INT(fc_cuda_stream_sync(dev, NULL), FC_OK);
            fc_tensor hin[3] = {shaped(FC_F32, 2, dx, hx), shaped(FC_F32, 2, dw, hw[0]), shaped(FC_F32, 2, dw, hw[1])};
            fc_tensor want[2];
            CHECK_EQ_INT(fc_run_reference(g, hin, 3, want, 2), FC_OK);
            for (int k = 0; k < 2; k++) {
                CHECK_EQ_INT(fc_cuda_download(dev, hy, by[k], ny * 4), FC_OK);
                fc_tensor got = shaped(FC_F32, 2, dy, hy);
                fc_output_diff diff;
                fc_status st = fc_compare_outputs(ctx, &got, &want[k], 1, &diff);
                if (stale && k == 1) {
                    CHECK(st != FC_OK);
                    fc_tensor_release(&want[k]);
                    continue;
                }
                if (st != FC_OK) {
                    char line[512];
                    printf("weights changed, %s, run %d: %s\n", what[mode], step,
                           fc_output_diff_format(&diff, k, line, sizeof line));
                }
                CHECK_EQ_INT(st, FC_OK);
                fc_tensor_release(&want[k]);
            }
        }
        fc_run_stats s;
        fc_program_stats(p, &s);
        printf("weights changed, %s: runs %llu, hits %llu, replays %llu\n", what[mode], (unsigned long long)s.runs,
               (unsigned long long)s.guard_hits, (unsigned long long)s.graph_replays);
        /* The change came while a graph was being replayed. */
        CHECK(s.graph_replays >= 4);
        if (mode == 2) CHECK(s.guard_hits >= 6);
        fc_cuda_free(dev, bx);
        for (int w = 0; w < 2; w++) {
            fc_cuda_free(dev, bw[w]);
            fc_cuda_free(dev, by[w]);
            free(hw[w]);
        }
        free(hx);
        free(hy);
        fc_program_free(p);
        fc_graph_free(g);
    }
}

/* A variant of kernels only runs every shape through one graph, built at
 * its first run, and right every time, including a shape that comes back
 * after another and an instance evicted and made again (more shapes than
 * the variant keeps). Each run whose shape or buffers differ writes the
 * frame: carried (a frame that fits in the first kernel's parameters), its
 * first kernel's node alone is patched with the new words; copied (a
 * frame too large to carry: carried false), the graph never changes. */
static void test_shared_variant_graph(fc_context *ctx, fc_cuda_device *dev, fc_graph *g, bool carried) {
    fc_program *p = compile_dynamic(ctx, g, FC_SPECIALIZE_OFF, 0);
    if (!p) return;
    const fc_program *v = fc_dynamic_variant(fc_program_dynamic(p));
    CHECK(v && fc_program_desc_of(v)->src.frame_carried == carried);
    /* 37 twice in a row (no re-pointing), back to 37 after others, and
     * ten distinct shapes in all, past the 8 instances kept. */
    static const int64_t rows[] = {37, 37, 1, 256, 37, 5, 9, 12, 700, 3, 64, 2, 37, 37};
    enum { NRUNS = sizeof rows / sizeof rows[0] };
    uint64_t changes = 0;
    for (int i = 0; i < NRUNS; i++) {
        if (i > 0 && rows[i] != rows[i - 1]) changes++;
        fc_tensor x = shaped(FC_F32, 2, (int64_t[]){rows[i], 1000}, NULL);
        char what[64];
        snprintf(what, sizeof what, "shared variant graph, run %d, N=%lld", i, (long long)rows[i]);
        run_and_compare(ctx, dev, p, g, &x, 1, 1, what);
    }
    fc_run_stats s;
    fc_program_stats(p, &s);
    printf("shared variant graph (%s): runs %llu, dynamic runs %llu, captures %llu, frame writes %llu, "
           "replays %llu, patches %llu, skips %llu%s%s\n",
           carried ? "frame, carried" : "frame, copied", (unsigned long long)s.runs, (unsigned long long)s.dynamic_runs,
           (unsigned long long)s.graph_captures, (unsigned long long)s.frame_writes, (unsigned long long)s.graph_replays,
           (unsigned long long)s.graph_patches, (unsigned long long)s.graph_skips, s.graph_skip_reason[0] ? ": " : "",
           s.graph_skip_reason);
    CHECK_EQ_INT(s.dynamic_runs, NRUNS);
    CHECK_EQ_INT(s.graph_captures, 1);
    CHECK_EQ_INT(s.graph_replays, NRUNS);
    CHECK_EQ_INT(s.graph_skips, 0);
    /* Every change of shape writes the frame (each run here has new
     * buffers, so most runs do), which patches the carrier's node, but at
     * the first run (the graph's build). */
    CHECK_EQ_INT(s.graph_patches, carried ? s.frame_writes - 1 : 0);
    CHECK(s.frame_writes >= changes + 1 && s.frame_writes <= NRUNS);
    fc_program_free(p);
}

/* Frame kernels launched one by one (CUDA Graphs off): each run writes the
 * frame before its launches, and every shape is right. */
static void test_frame_eager(fc_context *ctx, fc_cuda_device *dev, fc_graph *g) {
    fc_program *p = compile_dynamic_graphs(ctx, g, FC_SPECIALIZE_OFF, 0, false);
    if (!p) return;
    static const int64_t rows[] = {37, 1, 256, 37, 700};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        fc_tensor x = shaped(FC_F32, 2, (int64_t[]){rows[i], 1000}, NULL);
        char what[64];
        snprintf(what, sizeof what, "frame kernels, no graphs, N=%lld", (long long)rows[i]);
        run_and_compare(ctx, dev, p, g, &x, 1, 1, what);
    }
    fc_run_stats s;
    fc_program_stats(p, &s);
    CHECK_EQ_INT(s.graph_replays, 0);
    CHECK_EQ_INT(s.dynamic_runs, 5);
    CHECK(s.frame_writes >= 4 && s.frame_writes <= 5);
    fc_program_free(p);
}

/* The frame is written when, and only when, a run's shape or buffers
 * differ from the last run's, and the results are right either way: the
 * same buffers and shape twice (no write), a new shape, a new output
 * buffer, and back to the first shape, on fixed buffers. */
static void test_frame_writes(fc_context *ctx, fc_cuda_device *dev, fc_graph *g) {
    fc_program *p = compile_dynamic(ctx, g, FC_SPECIALIZE_OFF, 0);
    if (!p) return;
    const int64_t cols = 1000, maxrows = 64;
    CUdeviceptr bx = 0, by[2] = {0, 0};
    CHECK_EQ_INT(fc_cuda_alloc(dev, (size_t)(maxrows * cols * 4), &bx), FC_OK);
    for (int k = 0; k < 2; k++) CHECK_EQ_INT(fc_cuda_alloc(dev, (size_t)(maxrows * cols * 4), &by[k]), FC_OK);
    float *hx = malloc(sizeof(float) * (size_t)(maxrows * cols)), *hy = malloc(sizeof(float) * (size_t)(maxrows * cols));
    for (int64_t e = 0; e < maxrows * cols; e++) hx[e] = (float)uniform(-1, 1);
    CHECK_EQ_INT(fc_cuda_upload(dev, bx, hx, sizeof(float) * (size_t)(maxrows * cols)), FC_OK);
    /* rows, output buffer, frame writes after the run */
    static const struct { int64_t rows; int out; uint64_t writes; } steps[] = {
        {37, 0, 1}, {37, 0, 1}, {5, 0, 2}, {5, 1, 3}, {5, 1, 3}, {37, 1, 4}, {37, 0, 5}};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        int64_t dims[2] = {steps[i].rows, cols};
        fc_tensor in = shaped(FC_F32, 2, dims, (void *)(uintptr_t)bx);
        fc_tensor out = shaped(FC_F32, 2, dims, (void *)(uintptr_t)by[steps[i].out]);
        CHECK_EQ_INT(fc_cuda_memset_async(dev, by[steps[i].out], 0xff, (size_t)(maxrows * cols * 4), NULL), FC_OK);
        CHECK_EQ_INT(fc_run_shaped(p, &in, 1, &out, 1, dev->stream), FC_OK);
        CHECK_EQ_INT(fc_cuda_stream_sync(dev, NULL), FC_OK);
        CHECK_EQ_INT(fc_cuda_download(dev, hy, by[steps[i].out], sizeof(float) * (size_t)(steps[i].rows * cols)), FC_OK);
        fc_tensor hin = shaped(FC_F32, 2, dims, hx), got = shaped(FC_F32, 2, dims, hy), want;
        CHECK_EQ_INT(fc_run_reference(g, &hin, 1, &want, 1), FC_OK);
        fc_output_diff diff;
        CHECK_EQ_INT(fc_compare_outputs(ctx, &got, &want, 1, &diff), FC_OK);
        fc_tensor_release(&want);
        fc_run_stats s;
        fc_program_stats(p, &s);
        if (s.frame_writes != steps[i].writes)
            printf("frame writes, step %zu: %llu writes, want %llu\n", i, (unsigned long long)s.frame_writes,
                   (unsigned long long)steps[i].writes);
        CHECK_EQ_INT(s.frame_writes, steps[i].writes);
    }
    fc_cuda_free(dev, bx);
    for (int k = 0; k < 2; k++) fc_cuda_free(dev, by[k]);
    free(hx);
    free(hy);
    fc_program_free(p);
}

/* The dynamic variant's GEMMs (generated kernels, codegen/cuda/gemm.c,
 * unless FUSEC_VARIANT_GEMM=cublaslt) against the reference: every
 * epilogue, each dtype, transposes, batches with broadcast, fused
 * siblings (one weight a multiple of 8 columns, one not), leading dims
 * that are not multiples of 8 (the element-by-element loads), odd sizes
 * and M = 1, at several values of the symbols, on the variant alone. Each
 * run's name says which kernel each GEMM takes (fc_cuda_gemm_path: the
 * kernels' own rule), and each case's wants say which kernels some run of
 * it must reach, so that a change of the rule cannot quietly leave a
 * kernel untested: the wgmma tiles where the device has them (sm 90) and
 * the split 64 x 64 and 128 x 128 tiles. */
enum { WANT_WG = 1, WANT_WG_SPLIT = 2, WANT_SMALL_SPLIT = 4, WANT_LARGE_SPLIT = 8 };
static void test_variant_gemms(fc_context *ctx, fc_cuda_device *dev) {
    static const struct {
        const char *what, *text;
        int64_t syms[4][2]; /* symbol values per run, in symbol order */
        int wants;          /* WANT_*: the kernels some run must reach where the device has them */
    } cases[] = {
        {"bf16 gelu(x W + b), K 100, N 77",
         "graph g1(%x: bf16[N, 100], %w: bf16[100, 77], %g_b: bf16[77]) {\n"
         "  %h = matmul(%x, %w)\n  %a = add(%h, %g_b)\n  %y = gelu_tanh(%a)\n  return %y\n}\n",
         {{1, 0}, {33, 0}, {300, 0}, {2, 0}}, 0},
        {"f16 relu(x W^T + r), batched rows",
         "graph g2(%x: f16[B, T, 64], %w: f16[96, 64], %r: f16[B, T, 96]) {\n"
         "  %wt = permute(%w, perm=[1, 0])\n  %h = matmul(%x, %wt)\n  %a = add(%h, %r)\n  %y = relu(%a)\n"
         "  return %y\n}\n",
         {{1, 1}, {2, 37}, {3, 130}, {1, 600}}, 0},
        {"f32 0.5 x W + b (FMA kernel)",
         "graph g3(%x: f32[N, 37], %w: f32[37, 45], %g_b: f32[45]) {\n"
         "  %h = matmul(%x, %w)\n  %s = mul(%h, 0.5)\n  %y = add(%s, %g_b)\n  return %y\n}\n",
         {{1, 0}, {65, 0}, {200, 0}, {7, 0}}, 0},
        {"bf16 scores q k^T * 0.125, batch B x 3",
         "graph g4(%q: bf16[B, 3, T, 32], %k: bf16[B, 3, T, 32]) {\n"
         "  %kt = permute(%k, perm=[0, 1, 3, 2])\n  %s = matmul(%q, %kt)\n  %y = mul(%s, 0.125)\n  return %y\n}\n",
         {{1, 1}, {2, 9}, {1, 150}, {3, 64}}, 0},
        {"bf16 weight broadcast over B, [B, 2, T, 24] x [2, 24, 40]",
         "graph g5(%a: bf16[B, 2, T, 24], %w: bf16[2, 24, 40]) {\n  %y = matmul(%a, %w)\n  return %y\n}\n",
         {{1, 1}, {3, 5}, {2, 130}, {1, 33}}, 0},
        {"bf16 trans_a, K = T",
         "graph g6(%a: bf16[T, 48], %w: bf16[T, 40]) {\n"
         "  %at = permute(%a, perm=[1, 0])\n  %y = matmul(%at, %w)\n  return %y\n}\n",
         {{1, 0}, {17, 0}, {300, 0}, {64, 0}}, 0},
        {"bf16 siblings relu(x W1 + b1), relu(x W2 + b2), N 80 and 36",
         "graph g7(%x: bf16[N, 64], %w1: bf16[64, 80], %w2: bf16[64, 36], %g_b1: bf16[80], %g_b2: bf16[36]) {\n"
         "  %h1 = matmul(%x, %w1)\n  %a1 = add(%h1, %g_b1)\n  %y1 = relu(%a1)\n"
         "  %h2 = matmul(%x, %w2)\n  %a2 = add(%h2, %g_b2)\n  %y2 = relu(%a2)\n  return %y1, %y2\n}\n",
         {{1, 0}, {45, 0}, {257, 0}, {3, 0}}, 0},
        {"f16 x W -> f32 (autocast), M = B T",
         "graph g8(%x: f16[B, T, 72], %w: f16[72, 24]) {\n"
         "  %xf = cast(%x, to=f32)\n  %wf = cast(%w, to=f32)\n  %y = matmul(%xf, %wf)\n  return %y\n}\n",
         {{1, 1}, {2, 33}, {4, 100}, {1, 2}}, 0},
        {"f32 relu(x W^T + r), K 19",
         "graph g9(%x: f32[N, 19], %w: f32[70, 19], %r: f32[N, 70]) {\n"
         "  %wt = permute(%w, perm=[1, 0])\n  %h = matmul(%x, %wt)\n  %a = add(%h, %r)\n  %y = relu(%a)\n"
         "  return %y\n}\n",
         {{1, 0}, {31, 0}, {129, 0}, {5, 0}}, 0},
        /* Split-K (64 x 64 tiles, fewer than SMs): K 1000 is not a
         * multiple of the 64-deep k tile nor of the split; M 1 to 65. */
        {"bf16 x W + b, K 1000, split-K",
         "graph g10(%x: bf16[N, 1000], %w: bf16[1000, 200], %g_b: bf16[200]) {\n"
         "  %h = matmul(%x, %w)\n  %y = add(%h, %g_b)\n  return %y\n}\n",
         {{1, 0}, {5, 0}, {64, 0}, {65, 0}}, WANT_SMALL_SPLIT},
        /* Every epilogue at once, N odd (element-wise pairs), split-K at M 1 and 3. */
        {"f16 gelu(0.5 x W + r + b), N 333, split-K",
         "graph g11(%x: f16[N, 512], %w: f16[512, 333], %r: f16[N, 333], %g_b: f16[333]) {\n"
         "  %h = matmul(%x, %w)\n  %s = mul(%h, 0.5)\n  %a = add(%s, %r)\n  %b = add(%a, %g_b)\n"
         "  %y = gelu_tanh(%b)\n  return %y\n}\n",
         {{1, 0}, {3, 0}, {64, 0}, {200, 0}}, WANT_SMALL_SPLIT},
        /* A batch of GEMMs, each split along K (the splits of each batch
         * element's tile meet at their own counter). */
        {"bf16 batched [B, T, 256] x [B, 256, 40], split-K",
         "graph g12(%a: bf16[B, T, 256], %w: bf16[B, 256, 40]) {\n  %y = matmul(%a, %w)\n  return %y\n}\n",
         {{1, 1}, {3, 1}, {2, 50}, {4, 7}}, WANT_SMALL_SPLIT},
        /* Siblings with split-K: each split reads the weight holding its columns. */
        {"bf16 siblings x W1 + b1, x W2 + b2, K 320, split-K",
         "graph g13(%x: bf16[N, 320], %w1: bf16[320, 80], %w2: bf16[320, 36], %g_b1: bf16[80], %g_b2: bf16[36]) {\n"
         "  %h1 = matmul(%x, %w1)\n  %y1 = add(%h1, %g_b1)\n"
         "  %h2 = matmul(%x, %w2)\n  %y2 = add(%h2, %g_b2)\n  return %y1, %y2\n}\n",
         {{1, 0}, {2, 0}, {16, 0}, {70, 0}}, WANT_SMALL_SPLIT},
        /* The large tiles (wgmma 128 x 192 on sm 90, mma.sync 128 x 128
         * elsewhere) at M 2100 and 2500: edges in M, N and K (K 200 is not
         * a multiple of the k tile), bias, residual, relu. */
        {"bf16 relu(x W + r + b), N 1096, K 200, large tiles",
         "graph g14(%x: bf16[N, 200], %w: bf16[200, 1096], %r: bf16[N, 1096], %g_b: bf16[1096]) {\n"
         "  %h = matmul(%x, %w)\n  %a = add(%h, %r)\n  %b = add(%a, %g_b)\n  %y = relu(%b)\n  return %y\n}\n",
         {{2100, 0}, {1, 0}, {300, 0}, {2500, 0}}, WANT_WG},
        {"f16 x W^T, N 1001 (odd), large tiles at M 4000, split-K at 129",
         "graph g15(%x: f16[N, 200], %w: f16[1001, 200]) {\n"
         "  %wt = permute(%w, perm=[1, 0])\n  %y = matmul(%x, %wt)\n  return %y\n}\n",
         {{4000, 0}, {7, 0}, {129, 0}, {1, 0}}, WANT_WG | WANT_SMALL_SPLIT},
        /* wgmma's operand layouts and edges (sm 90, the sizes the rule
         * gives them there, and all of them in the forced pass; the other
         * kernels elsewhere): A M-major (trans_a), both operands
         * transposed, a strided batch, a weight broadcast over a batch dim,
         * siblings whose boundary falls inside a tile, f16 in and f32 out,
         * K 3000 (split 10 ways under wgmma at M 1 and 77: not a multiple
         * of the k tile), M not a multiple of 64 or 128. */
        {"bf16 trans_a, M 640, N 384, K = T",
         "graph g16(%a: bf16[T, 640], %w: bf16[T, 384]) {\n"
         "  %at = permute(%a, perm=[1, 0])\n  %y = matmul(%at, %w)\n  return %y\n}\n",
         {{700, 0}, {1, 0}, {130, 0}, {64, 0}}, WANT_SMALL_SPLIT},
        {"f16 x^T W^T + b, M 512, N 260, K = T",
         "graph g17(%a: f16[T, 512], %w: f16[260, T], %g_b: f16[260]) {\n"
         "  %at = permute(%a, perm=[1, 0])\n  %wt = permute(%w, perm=[1, 0])\n  %h = matmul(%at, %wt)\n"
         "  %y = add(%h, %g_b)\n  return %y\n}\n",
         {{1000, 0}, {7, 0}, {300, 0}, {77, 0}}, WANT_SMALL_SPLIT},
        {"bf16 batched [B, T, 96] x [B, 96, 256]",
         "graph g18(%a: bf16[B, T, 96], %w: bf16[B, 96, 256]) {\n  %y = matmul(%a, %w)\n  return %y\n}\n",
         {{2, 600}, {1, 1}, {3, 200}, {1, 1000}}, WANT_SMALL_SPLIT},
        {"bf16 relu([B, 2, T, 64] x [2, 64, 192]), weight broadcast over B",
         "graph g19(%a: bf16[B, 2, T, 64], %w: bf16[2, 64, 192]) {\n  %h = matmul(%a, %w)\n  %y = relu(%h)\n  return %y\n}\n",
         {{3, 500}, {1, 33}, {2, 130}, {3, 1000}}, WANT_WG},
        {"bf16 siblings relu(x W1 + b1), relu(x W2 + b2), N 400 and 136, K 256",
         "graph g20(%x: bf16[N, 256], %w1: bf16[256, 400], %w2: bf16[256, 136], %g_b1: bf16[400], %g_b2: bf16[136]) {\n"
         "  %h1 = matmul(%x, %w1)\n  %a1 = add(%h1, %g_b1)\n  %y1 = relu(%a1)\n"
         "  %h2 = matmul(%x, %w2)\n  %a2 = add(%h2, %g_b2)\n  %y2 = relu(%a2)\n  return %y1, %y2\n}\n",
         {{700, 0}, {1, 0}, {150, 0}, {2000, 0}}, WANT_WG | WANT_SMALL_SPLIT},
        {"f16 x W -> f32 (autocast), N 400, K 136, M = B T",
         "graph g21(%x: f16[B, T, 136], %w: f16[136, 400]) {\n"
         "  %xf = cast(%x, to=f32)\n  %wf = cast(%w, to=f32)\n  %y = matmul(%xf, %wf)\n  return %y\n}\n",
         {{3, 500}, {1, 1}, {2, 200}, {1, 66}}, WANT_WG | WANT_SMALL_SPLIT},
        {"bf16 x W + b, K 3000, N 384",
         "graph g22(%x: bf16[N, 3000], %w: bf16[3000, 384], %g_b: bf16[384]) {\n"
         "  %h = matmul(%x, %w)\n  %y = add(%h, %g_b)\n  return %y\n}\n",
         {{256, 0}, {1, 0}, {77, 0}, {129, 0}}, WANT_SMALL_SPLIT},
        /* mma.sync's 128 x 128 tile split along K: at M 200, 136 tiles of
         * 64 x 64 are two rounds, 34 of 128 x 128 split 3 ways one (k
         * tiles 0-3, 4-7, 8-10, the last ragged: K 700); M and N not
         * multiples of the tile. 64 x 64 tiles at M 1 (split), 65, 129. */
        {"bf16 relu(x W + b), N 2120, K 700, 128 x 128 tiles split",
         "graph g23(%x: bf16[N, 700], %w: bf16[700, 2120], %g_b: bf16[2120]) {\n"
         "  %h = matmul(%x, %w)\n  %a = add(%h, %g_b)\n  %y = relu(%a)\n  return %y\n}\n",
         {{200, 0}, {1, 0}, {65, 0}, {129, 0}}, WANT_LARGE_SPLIT},
    };
    const int sm = dev->info.cc_major * 10 + dev->info.cc_minor;
    const bool generated = fc_cuda_variant_gemm_kernels(), wgmma = fc_cuda_gemm_wgmma_bn(sm) > 0;
    static const char *const path_names[] = {"fma", "mma 64x64", "mma 128x128", "wgmma"};
    {
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            fc_graph *g = parse(ctx, cases[c].text);
            /* The variant's plan, as the runtime makes it, on a copy (the
             * passes rewrite the graph; the reference runs the original). */
            fc_graph *gp = parse(ctx, cases[c].text);
            fc_plan plan;
            fc_fuse_options fo;
            fc_fuse_options_default(&fo);
            fo.dynamic = true;
            bool planned = gp && fc_pipeline(gp, &fo, &plan) == FC_OK;
            CHECK(planned);
            fc_program *p = g ? compile_dynamic(ctx, g, FC_SPECIALIZE_OFF, 1) : NULL;
            int nin = g ? fc_graph_num_params(g) : 0, nout = g ? fc_graph_num_outputs(g) : 0, reached = 0;
            for (int r = 0; p && planned && r < 4; r++) {
                fc_tensor sh[16];
                for (int q = 0; q < nin; q++) {
                    fc_value *pv = fc_graph_param(g, q);
                    fc_tensor ty = {0};
                    ty.dtype = fc_value_dtype(pv);
                    ty.rank = fc_value_rank(pv);
                    for (int d = 0; d < ty.rank; d++) {
                        fc_dim dd = fc_value_dim(pv, d);
                        ty.shape[d] = dd >= 0 ? dd : cases[c].syms[r][FC_DIM_SYM_BASE - dd];
                    }
                    sh[q] = ty;
                }
                /* The kernel each GEMM group takes at these sizes. */
                char paths[96] = "";
                for (int i = 0; i < plan.ngroups; i++) {
                    int64_t splits = 1;
                    int path = fc_cuda_gemm_path(plan.groups[i], cases[c].syms[r], 2, sm, dev->info.sm_count, &splits);
                    if (path < 0) continue;
                    size_t n = strlen(paths);
                    snprintf(paths + n, sizeof paths - n, "%s%s", n ? ", " : "", path_names[path]);
                    n = strlen(paths);
                    if (splits > 1) snprintf(paths + n, sizeof paths - n, " split %lld", (long long)splits);
                    if (path == FC_GEMM_PATH_WGMMA) reached |= WANT_WG | (splits > 1 ? WANT_WG_SPLIT : 0);
                    if (path == FC_GEMM_PATH_MMA_SMALL && splits > 1) reached |= WANT_SMALL_SPLIT;
                    if (path == FC_GEMM_PATH_MMA_LARGE && splits > 1) reached |= WANT_LARGE_SPLIT;
                }
                char name[256];
                snprintf(name, sizeof name, "variant gemm: %s, run %d (%s)", cases[c].what, r, paths);
                run_and_compare(ctx, dev, p, g, sh, nin, nout, name);
            }
            int wants = cases[c].wants & (wgmma ? ~0 : WANT_SMALL_SPLIT | WANT_LARGE_SPLIT);
            if (p && planned && generated && (reached & wants) != wants)
                fprintf(stderr, "variant gemm: %s: wants kernels 0x%x, its runs reach 0x%x\n", cases[c].what, wants, reached);
            if (p && planned && generated) CHECK((reached & wants) == wants);
            if (planned) fc_plan_release(&plan);
            fc_program_free(p);
            fc_graph_free(gp);
            fc_graph_free(g);
        }
    }
}

/* The variant's arena grows in place, and ahead of need: after a new
 * shape's run the background thread maps twice that shape's need, so a
 * larger shape within it runs without growing it; one beyond it grows it
 * on the caller's thread. Results are right throughout (the arena never
 * moves; what the graph and the frame hold stays valid). */
/* One run of a block whose symbols are B and T (in that order) at B = 1
 * and this T, compared with the reference; then wait for the background
 * thread (its specialization, its arena growth). */
static void run_block_at(fc_context *ctx, fc_cuda_device *dev, fc_program *p, fc_graph *g, int64_t T,
                         const char *label) {
    fc_tensor sh[16];
    int nin = fc_graph_num_params(g);
    for (int q = 0; q < nin; q++) {
        fc_value *pv = fc_graph_param(g, q);
        sh[q] = (fc_tensor){fc_value_dtype(pv), fc_value_rank(pv), {0}, NULL};
        for (int d = 0; d < sh[q].rank; d++) {
            fc_dim dd = fc_value_dim(pv, d);
            sh[q].shape[d] = dd >= 0 ? dd : FC_DIM_SYM_BASE - dd == 0 ? 1 : T;
        }
    }
    char what[64];
    snprintf(what, sizeof what, "%s, T=%lld", label, (long long)T);
    run_and_compare(ctx, dev, p, g, sh, nin, 1, what);
    CHECK_EQ_INT(fc_program_wait_specializations(p), FC_OK);
}

static void test_arena_ahead(fc_context *ctx, fc_cuda_device *dev, fc_graph *g) {
    if (!dev->info.vmm) {
        printf("arena ahead: skipped (no virtual memory management: the arena is reallocated to grow)\n");
        return;
    }
    fc_program *p = compile_dynamic(ctx, g, FC_SPECIALIZE_BACKGROUND, 4);
    if (!p) return;
    /* T = 256 (3.5 MB of intermediates), then 360 (6.8 MB: within twice
     * 256's need, beyond the 4 MiB its own growth mapped), then 1024 (52
     * MB: beyond twice 360's). A shape whose need rounded to the
     * granularity (2 MiB) is already twice its need asks for nothing ahead:
     * hence T = 256, not 64 (0.6 MB; run 5 of session 8). */
    static const int64_t ts[3] = {256, 360, 1024};
    static const uint64_t grows[3] = {1, 1, 2};
    for (int i = 0; i < 3; i++) {
        /* The background thread grows the arena before it compiles. */
        run_block_at(ctx, dev, p, g, ts[i], "arena ahead");
        fc_run_stats s;
        fc_program_stats(p, &s);
        printf("arena ahead, T=%lld: grows %llu (%.3f ms), ahead %llu (%.3f ms)\n", (long long)ts[i],
               (unsigned long long)s.arena_grows, s.arena_grow_ms, (unsigned long long)s.arena_grows_ahead,
               s.arena_ahead_ms);
        CHECK_EQ_INT(s.arena_grows, grows[i]);
        CHECK(s.arena_grow_ms > 0);
        /* The 1024 run's own request at least, and one before it (that
         * T = 360 did not grow the arena itself says it was in time). */
        if (i == 2) CHECK(s.arena_grows_ahead >= 2 && s.arena_ahead_ms > 0);
    }
    fc_program_free(p);
}

/* fc_program_reserve with the largest shape (T = 1024): one growth, the
 * reserve's; then no shape within it grows the arena, on the caller's
 * thread or ahead of need; results right. The variant's graph (frame
 * kernels) is built by the reserve, before any run: no run builds
 * another, the first run only replays it. */
static void test_reserve(fc_context *ctx, fc_cuda_device *dev, fc_graph *g) {
    fc_program *p = compile_dynamic(ctx, g, FC_SPECIALIZE_BACKGROUND, 4);
    if (!p) return;
    CHECK_EQ_INT(fc_program_reserve(p, (fc_binding[]){{"T", 1024}, {"B", 1}}, 2), FC_OK);
    fc_run_stats s;
    fc_program_stats(p, &s);
    CHECK_EQ_INT(s.arena_grows, 1);
    CHECK_EQ_INT(s.graph_captures, 1);
    CHECK_EQ_INT(s.graph_prebuilt, 1);
    CHECK_EQ_INT(s.graph_replays, 0);
    static const int64_t ts[5] = {777, 1024, 1, 500, 1000};
    for (int i = 0; i < 5; i++) {
        run_block_at(ctx, dev, p, g, ts[i], "reserved");
        fc_program_stats(p, &s);
        CHECK_EQ_INT(s.arena_grows, 1);
        CHECK_EQ_INT(s.arena_grows_ahead, 0);
        if (i == 0) CHECK_EQ_INT(s.graph_replays, 1);
    }
    /* The variant's one graph (specializations that landed meanwhile build
     * their own: counted apart, as prebuilt). */
    CHECK_EQ_INT(s.graph_captures - s.graph_prebuilt, 0);
    fc_program_free(p);
}

/* The specializations borrow their dynamic program's device and cuBLASLt
 * handle and map their memory (fc_device_lease), so that making and
 * freeing one stalls the caller's launches as little as it can. Results
 * are compared, an eviction included (max 2 specializations, 3 shapes). */
static void test_spec_lease(fc_context *ctx, fc_cuda_device *dev, fc_graph *g, const fc_tensor (*shapes)[16],
                            const int64_t (*bt)[2], int nin, int concats) {
    fc_program *p = compile_dynamic(ctx, g, FC_SPECIALIZE_BACKGROUND, 2);
    if (!p) return;
    char name[96];
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "lease, shape %d", i);
        run_and_compare(ctx, dev, p, g, shapes[i], nin, 1, name);
        CHECK_EQ_INT(fc_program_wait_specializations(p), FC_OK);
        run_and_compare(ctx, dev, p, g, shapes[i], nin, 1, name); /* the specialization */
    }
    const fc_cublaslt *first = NULL;
    int live = 0;
    for (int i = 1; i < 3; i++) { /* shape 0's was evicted */
        fc_program *sp = NULL;
        CHECK_EQ_INT(fc_dynamic_select(p, bt[i], &sp), FC_OK);
        CHECK(sp != NULL);
        if (!sp) continue;
        live++;
        const fc_cuda_device *d = fc_program_device(sp);
        CHECK(d && d->borrowed);
        const fc_cublaslt *h = fc_program_blas(sp);
        CHECK(h != NULL);
        if (concats) CHECK(fc_cublaslt_concats_mapped(h));
        if (first) CHECK(fc_cublaslt_same_handle(first, h));
        first = h;
    }
    CHECK_EQ_INT(live, 2);
    fc_run_stats st;
    fc_program_stats(p, &st);
    CHECK_EQ_INT(st.specializations_evicted, 1);
    fc_program_free(p);
}

static void test_gpu(fc_context *ctx) {
    fc_cuda_device *dev = NULL;
    CHECK_EQ_INT(fc_cuda_device_open(ctx, 0, &dev), FC_OK);
    if (!dev) return;
    srand(7);
    test_static_replay(ctx, dev);
    test_weights_changed(ctx, dev);
    test_variant_gemms(ctx, dev);
    test_symbolic_rows(ctx, dev);

    fc_graph *g = parse(ctx, softmax_text);
    if (g) {
        fc_tensor sh[4][16];
        int64_t rows[4] = {1, 37, 256, 37};
        for (int i = 0; i < 4; i++) sh[i][0] = shaped(FC_F32, 2, (int64_t[]){rows[i], 1000}, NULL);
        test_dynamic_gpu(ctx, dev, "softmax[N, 1000]", g, 4, (const fc_tensor(*)[16])sh, 1, 1, true, 0);
        /* One slot: the second shape's specialization evicts the first's;
         * the counters still add up both (evicted programs' included). */
        fc_program *p = compile_dynamic(ctx, g, FC_SPECIALIZE_BACKGROUND, 1);
        for (int i = 0; p && i < 2; i++) {
            for (int rep = 0; rep < 3; rep++) {
                run_and_compare(ctx, dev, p, g, sh[i], 1, 1, "softmax, one specialization slot");
                if (rep == 0) CHECK_EQ_INT(fc_program_wait_specializations(p), FC_OK);
            }
        }
        fc_run_stats st;
        fc_program_stats(p, &st);
        CHECK_EQ_INT(st.specializations_built, 2);
        CHECK_EQ_INT(st.specializations_evicted, 1);
        CHECK_EQ_INT(st.graph_prebuilt, 2);
        /* Each specialization's two runs, and the variant's run at each
         * shape: its one graph (softmax is all kernels), built at the first
         * and never re-pointed: each shape writes the frame. */
        CHECK_EQ_INT(st.graph_replays, 6);
        CHECK_EQ_INT(st.frame_writes, 2);
        fc_program_free(p);
        test_shared_variant_graph(ctx, dev, g, true);
        char *text = long_chain_text();
        fc_graph *chain = text ? parse(ctx, text) : NULL;
        free(text);
        if (chain) test_shared_variant_graph(ctx, dev, chain, false);
        fc_graph_free(chain);
        test_frame_writes(ctx, dev, g);
        test_frame_eager(ctx, dev, g);
    }
    fc_graph_free(g);

    g = parse(ctx, ln_text);
    if (g) {
        fc_tensor sh[3][16];
        int64_t bt[3][2] = {{1, 1}, {3, 17}, {2, 64}};
        for (int i = 0; i < 3; i++) {
            sh[i][0] = shaped(FC_BF16, 3, (int64_t[]){bt[i][0], bt[i][1], 256}, NULL);
            sh[i][1] = sh[i][2] = shaped(FC_BF16, 1, (int64_t[]){256}, NULL);
        }
        test_dynamic_gpu(ctx, dev, "add+layernorm[B, T, 256]", g, 3, (const fc_tensor(*)[16])sh, 3, 2, true, 0);
    }
    fc_graph_free(g);

    /* The two example blocks with B and T unbound (symbols 0 and 1, in
     * the order the parameters name them): GPT-2 (attention written out,
     * QKV as one GEMM) and Llama (the attention op, RoPE, sibling Q/K/V and
     * gate/up GEMMs). */
    static const struct {
        const char *file, *what;
        int64_t bt[3][2];
        bool prebuilt; /* Llama's Q/K/V and gate/up are fused siblings */
        int concats;
    } blocks[] = {
        {"examples/gpt2_block_bf16.ir", "gpt2_block_bf16[B, T]", {{1, 64}, {1, 7}, {2, 130}}, true, 0},
        {"examples/llama_block.ir", "llama_block[B, T]", {{1, 16}, {2, 7}, {1, 33}}, false, 2},
    };
    const char *src = getenv("FUSEC_SRC");
    for (size_t b = 0; b < sizeof blocks / sizeof blocks[0]; b++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", src && *src ? src : ".", blocks[b].file);
        g = NULL;
        fc_status st = fc_parse_file(ctx, path, NULL, NULL, 0, &g);
        CHECK_EQ_INT(st, FC_OK);
        if (!g) continue;
        fc_tensor sh[3][16];
        int nin = fc_graph_num_params(g);
        for (int i = 0; i < 3; i++)
            for (int q = 0; q < nin; q++) {
                fc_tensor ty = {0};
                fc_value *pv = fc_graph_param(g, q);
                ty.dtype = fc_value_dtype(pv);
                ty.rank = fc_value_rank(pv);
                for (int d = 0; d < ty.rank; d++) {
                    fc_dim dd = fc_value_dim(pv, d);
                    ty.shape[d] = dd >= 0 ? dd : blocks[b].bt[i][FC_DIM_SYM_BASE - dd];
                }
                sh[i][q] = ty;
            }
        test_dynamic_gpu(ctx, dev, blocks[b].what, g, 3, (const fc_tensor(*)[16])sh, nin, 1, blocks[b].prebuilt, blocks[b].concats);
        if (b == 0) {
            test_arena_ahead(ctx, dev, g);
            test_reserve(ctx, dev, g);
        }
        else test_spec_lease(ctx, dev, g, (const fc_tensor(*)[16])sh, (const int64_t(*)[2])blocks[b].bt, nin,
                             blocks[b].concats);
        fc_graph_free(g);
    }
    fc_cuda_device_close(dev);
}

int main(void) {
    fc_context *ctx = fc_context_new();
    test_guards(ctx);
    test_bookkeeping(ctx);
    test_reserve_usage(ctx);
    test_frame_carried_or_copied(ctx);
    test_dynamic_handle(ctx);
    test_dynamic_compile_oom();
    if (fc_cuda_available(NULL)) test_gpu(ctx);
    else printf("test_specialize: GPU part skipped (no CUDA device)\n");
    fc_context_free(ctx);
    return check_report("test_specialize");
}
