/*
 * test_cuda_profile.c - fc_program_profile on CUDA (docs/PROFILING.md):
 * with CUDA Graphs on, the profiled runs replay the program's graph and say
 * so; with them off they go launch by launch and say why. Both ways give
 * every launch a device time and the same kernels per run (the replay's
 * records placed by their order in the graph, the launch-by-launch ones by
 * their tags), for tests/profile/small.ir (a kernel, a reduction, a GEMM)
 * and the GPT-2 block (library calls one after another). Skips without a
 * CUDA device (or without CUPTI).
 */
#include "check.h"
#include "test_util.h"
#include "runtime/profile_impl.h"

#include <stdlib.h>

static fc_context *ctx;

typedef struct outcome {
    bool replayed;
    char mode[256];
    int rows, timeline;
} outcome;

/* Profile path (bound with binds) with graphs on or off; false if CUPTI is
 * missing (a skip). */
static bool profile(const char *path, const fc_binding *binds, int nb, bool graphs, outcome *o) {
    memset(o, 0, sizeof *o);
    char full[1024];
    snprintf(full, sizeof full, "%s/%s", src_dir(), path);
    fc_graph *g = NULL;
    CHECK(fc_parse_file(ctx, full, NULL, binds, nb, &g) == FC_OK);
    if (!g) return true;
    fc_compile_options co;
    fc_compile_options_default(&co);
    co.device = FC_DEVICE_CUDA;
    co.cuda_graphs = graphs;
    fc_program *p = compile_checked(g, &co);
    const int np = fc_graph_num_params(g);
    fc_tensor in[64];
    for (int i = 0; i < np && i < 64; i++) {
        param_type(&in[i], fc_graph_param(g, i));
        in[i].data = calloc((size_t)fc_tensor_numel(&in[i]) + 1, 8);
    }
    fc_profile_options po;
    fc_profile_options_default(&po);
    po.warmup = 2;
    po.runs = 5;
    fc_profile *prof = NULL;
    const fc_status st = p ? fc_program_profile(p, in, np, &po, &prof) : FC_ERR_USAGE;
    bool ran = true;
    if (st == FC_ERR_UNSUPPORTED && strstr(fc_last_error(ctx), "CUPTI")) {
        printf("skipped: %s\n", fc_last_error(ctx));
        ran = false;
    } else {
        CHECK_EQ_INT(st, FC_OK);
        if (st != FC_OK) fprintf(stderr, "profile %s: %s\n", path, fc_last_error(ctx));
    }
    if (prof) {
        fc_profile_summary s;
        fc_profile_get_summary(prof, &s);
        o->replayed = s.replayed;
        snprintf(o->mode, sizeof o->mode, "%s", s.mode ? s.mode : "");
        o->rows = fc_profile_count(prof);
        for (int i = 0; i < o->rows; i++) {
            const fc_profile_launch *r = fc_profile_at(prof, i);
            /* Every launch that runs in a run has a device time (a
             * load-time one runs when the weights change). */
            if (prof->rec.launches[r->launch].loadtime) continue;
            if (r->median_ms <= 0) fprintf(stderr, "%s: launch %d (%s) has no device time\n", path, r->launch, r->name);
            CHECK(r->median_ms > 0);
        }
        while (fc_profile_timeline(prof, o->timeline, NULL, NULL, NULL)) o->timeline++;
        fc_profile_free(prof);
    }
    for (int i = 0; i < np && i < 64; i++) free(in[i].data);
    fc_program_free(p);
    fc_graph_free(g);
    return ran;
}

static void check_graph(const char *path, const fc_binding *binds, int nb) {
    outcome on, off;
    if (!profile(path, binds, nb, true, &on) || !profile(path, binds, nb, false, &off)) return;
    CHECK(on.replayed);
    if (!on.replayed) fprintf(stderr, "%s: not replayed: %s\n", path, on.mode);
    CHECK(!strncmp(on.mode, "replays of the program's CUDA Graph", 35));
    CHECK(!off.replayed);
    CHECK(strstr(off.mode, "launch by launch (the program replays no CUDA Graph: CUDA Graphs are off") != NULL);
    CHECK_EQ_INT(on.rows, off.rows);
    /* The same kernels in a run either way. */
    CHECK_EQ_INT(on.timeline, off.timeline);
    CHECK(on.timeline >= on.rows);
}

int main(void) {
    ctx = fc_context_new();
    if (!fc_device_available(FC_DEVICE_CUDA)) {
        printf("skipped: no CUDA device\n");
        fc_context_free(ctx);
        return check_report("test_cuda_profile");
    }
    check_graph("tests/profile/small.ir", NULL, 0);
    const fc_binding bt[] = {{"B", 1}, {"T", 8}};
    check_graph("examples/gpt2_block.ir", bt, 2);
    check_graph("examples/gpt2_block_bf16.ir", bt, 2);
    fc_context_free(ctx);
    return check_report("test_cuda_profile");
}
