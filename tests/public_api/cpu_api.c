/*
 * cpu_api.c - a program built against include/fusec.h alone (its only
 * include directory: see tests/CMakeLists.txt), as a user's would be. It
 * builds a graph with the builder API, compiles it with fc_compile for the
 * CPU backend and for the reference interpreter, runs it with fc_run on
 * host pointers, fc_run_shaped and fc_program_run_host, and checks the
 * numbers against fc_run_reference within the dtype's tolerance; it profiles
 * the CPU program (fc_program_profile) and asks for its DOT graph.
 * Exit 77 (a skip) when this build has no CPU backend.
 */
#include "fusec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define EXPECT(cond)                                                     \
    do {                                                                 \
        if (!(cond)) {                                                   \
            fprintf(stderr, "%s:%d: failed: %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                  \
        }                                                                \
    } while (0)

enum { ROWS = 4, COLS = 8 };

/* softmax(x * x + x, axis=-1) and x * 2, over f32[ROWS, COLS]. */
static fc_graph *build(fc_context *ctx) {
    fc_graph *g = fc_graph_new(ctx, "api");
    const fc_dim dims[2] = {ROWS, COLS};
    fc_value *x = fc_param(g, "x", FC_F32, 2, dims);
    fc_value *y = fc_softmax(g, fc_add(g, fc_mul(g, x, x), x), -1);
    fc_value *z = fc_mul(g, x, fc_scalar(g, 2.0));
    fc_value *outs[2] = {y, z};
    if (fc_graph_return(g, 2, outs) != FC_OK || fc_graph_status(g) != FC_OK) {
        fprintf(stderr, "building the graph: %s\n", fc_last_error(ctx));
        fc_graph_free(g);
        return NULL;
    }
    return g;
}

static fc_tensor f32(float *data) {
    fc_tensor t = {FC_F32, 2, {ROWS, COLS}, data};
    return t;
}

/* Compare outputs got[0..2) with the reference's want. */
static void check(fc_context *ctx, const char *what, const fc_tensor *got, const fc_tensor *want) {
    fc_output_diff d[2];
    fc_status st = fc_compare_outputs(ctx, got, want, 2, d);
    if (st != FC_OK) fprintf(stderr, "%s: %s\n", what, fc_last_error(ctx));
    EXPECT(st == FC_OK && d[0].pass && d[1].pass);
}

/* Every way to run p, each checked. */
static void run_all(fc_context *ctx, fc_program *p, float *x, const fc_tensor *want) {
    const char *name = fc_device_name(fc_program_device_of(p));
    EXPECT(fc_program_num_inputs(p) == 1 && fc_program_num_outputs(p) == 2);
    EXPECT(strcmp(fc_program_name(p), "api") == 0);
    fc_tensor t;
    const char *pname = NULL;
    EXPECT(fc_program_input(p, 0, &t, &pname) == FC_OK && t.dtype == FC_F32 && t.rank == 2 && t.shape[1] == COLS);
    EXPECT(pname && strcmp(pname, "x") == 0);

    /* fc_run: host pointers on the host backends. */
    float y[ROWS * COLS], z[ROWS * COLS];
    void *in[1] = {x}, *out[2] = {y, z};
    fc_status st = fc_run(p, in, 1, out, 2, NULL);
    if (st != FC_OK) fprintf(stderr, "%s: fc_run: %s\n", name, fc_last_error(ctx));
    EXPECT(st == FC_OK);
    fc_tensor got[2] = {f32(y), f32(z)};
    check(ctx, name, got, want);

    /* fc_run_shaped with this call's shapes. */
    memset(y, 0, sizeof y);
    memset(z, 0, sizeof z);
    fc_tensor tin = f32(x);
    EXPECT(fc_run_shaped(p, &tin, 1, got, 2, NULL) == FC_OK);
    check(ctx, name, got, want);

    /* From host memory, with a benchmark. */
    fc_tensor host[2];
    memset(host, 0, sizeof host);
    double ms = -1;
    st = fc_program_run_host(p, &tin, 1, host, 2, &ms, 3);
    EXPECT(st == FC_OK && ms >= 0);
    if (st == FC_OK) check(ctx, name, host, want);
    for (int k = 0; k < 2; k++) fc_tensor_release(&host[k]);

    fc_run_stats s;
    fc_program_stats(p, &s);
    EXPECT(s.runs >= 3);
}

/* The profile of the CPU program, as a C user reads it: the rows, the
 * summary, the text forms; and the fused graph in DOT. */
static void profile_checks(fc_context *ctx, fc_program *p, float *x) {
    fc_tensor tin = f32(x);
    fc_profile_options po;
    fc_profile_options_default(&po);
    EXPECT(po.runs > 0 && po.warmup >= 0);
    po.runs = 5;
    po.warmup = 1;
    fc_profile *prof = NULL;
    fc_status st = fc_program_profile(p, &tin, 1, &po, &prof);
    if (st != FC_OK) fprintf(stderr, "fc_program_profile: %s\n", fc_last_error(ctx));
    EXPECT(st == FC_OK && prof);
    if (!prof) return;
    fc_profile_summary s;
    fc_profile_get_summary(prof, &s);
    EXPECT(s.runs == 5 && s.warmup == 1 && s.launches == fc_profile_count(prof) && s.launches >= 1);
    EXPECT(s.device && strstr(s.device, "CPU") && s.wall_ms > 0 && s.device_ms > 0 && s.plain_wall_ms > 0);
    double share = 0, last = 1e300;
    for (int i = 0; i < fc_profile_count(prof); i++) {
        const fc_profile_launch *r = fc_profile_at(prof, i);
        EXPECT(r && r->median_ms <= last && r->min_ms <= r->median_ms && r->bytes > 0);
        EXPECT(r->source && r->name && r->ops && strcmp(r->kind, "kernel") == 0);
        last = r->median_ms;
        share += r->share;
    }
    EXPECT(fabs(share - 1) < 1e-6);
    EXPECT(fc_profile_at(prof, fc_profile_count(prof)) == NULL && fc_profile_at(prof, -1) == NULL);
    int launch;
    double a, b;
    EXPECT(fc_profile_timeline(prof, 0, &launch, &a, &b) && a >= 0 && b >= a);
    char *table = fc_profile_text(prof, FC_PROFILE_TABLE), *csv = fc_profile_text(prof, FC_PROFILE_CSV);
    EXPECT(table && strstr(table, "median ms") && csv && strncmp(csv, "launch,name,kind,median_ms", 26) == 0);
    fc_free(table);
    fc_free(csv);
    EXPECT(fc_profile_format_from_name("json") == FC_PROFILE_JSON && fc_profile_format_from_name("xml") == -1);
    EXPECT(strcmp(fc_profile_format_name(FC_PROFILE_TRACE), "trace") == 0);
    fc_profile_free(prof);
    /* Misuse: no runs. */
    po.runs = 0;
    EXPECT(fc_program_profile(p, &tin, 1, &po, &prof) == FC_ERR_USAGE && prof == NULL);
    char *dot = fc_program_plan_dot(p);
    EXPECT(dot && strncmp(dot, "digraph", 7) == 0 && strstr(dot, "subgraph cluster_0"));
    fc_free(dot);
}

int main(void) {
    /* The registry, by name and back. */
    fc_device d;
    EXPECT(fc_device_from_name("cpu", &d) && d == FC_DEVICE_CPU);
    EXPECT(fc_device_from_name("ref", &d) && d == FC_DEVICE_REF);
    EXPECT(!fc_device_from_name("tpu", &d));
    EXPECT(fc_device_list(NULL, 0) == 3);
    EXPECT(fc_device_available(FC_DEVICE_REF));
    if (!fc_device_built(FC_DEVICE_CPU)) {
        printf("cpu_api: skipped (this build has no CPU backend)\n");
        return 77;
    }
    fc_context *ctx = fc_context_new();
    fc_graph *g = build(ctx);
    if (!g) return 1;
    float x[ROWS * COLS];
    for (int i = 0; i < ROWS * COLS; i++) x[i] = (float)sin(0.7 * i) * 1.5f;
    fc_tensor tin = f32(x), want[2];
    memset(want, 0, sizeof want);
    EXPECT(fc_run_reference(g, &tin, 1, want, 2) == FC_OK);

    const fc_device devices[2] = {FC_DEVICE_CPU, FC_DEVICE_REF};
    for (int i = 0; i < 2; i++) {
        fc_compile_options o;
        fc_compile_options_default(&o);
        o.device = devices[i];
        fc_program *p = NULL;
        fc_status st = fc_compile(g, &o, &p);
        if (st != FC_OK) fprintf(stderr, "fc_compile (%s): %s\n", fc_device_name(devices[i]), fc_last_error(ctx));
        EXPECT(st == FC_OK && p && fc_program_device_of(p) == devices[i]);
        if (!p) continue;
        run_all(ctx, p, x, want);
        if (devices[i] == FC_DEVICE_CPU) {
            char *plan = fc_program_plan_text(p);
            EXPECT(plan && strstr(plan, "total: "));
            fc_free(plan);
            /* Not a CUDA program: no CUDA source, said cleanly. */
            EXPECT(fc_program_cuda_source(p) == NULL && strstr(fc_last_error(ctx), "not supported"));
            EXPECT(fc_program_save_file(p, "/nonexistent/x.cubin") == FC_ERR_UNSUPPORTED);
            profile_checks(ctx, p, x);
        } else {
            fc_profile *prof = NULL;
            EXPECT(fc_program_profile(p, &tin, 1, NULL, &prof) == FC_ERR_UNSUPPORTED && !prof);
            EXPECT(fc_program_plan_dot(p) == NULL);
        }
        fc_program_free(p);
    }
    for (int k = 0; k < 2; k++) fc_tensor_release(&want[k]);
    fc_graph_free(g);
    fc_context_free(ctx);
    if (failures) fprintf(stderr, "cpu_api: %d failure(s)\n", failures);
    else printf("cpu_api: ok\n");
    return failures ? 1 : 0;
}
