/*
 * test_launch_cost.c - what a CUDA compile records of each launch for the
 * profile (lower/launch_cost.h): the source lines, the source ops covered,
 * the bytes and FLOPs of tests/profile/small.ir worked out by hand, and the
 * same after the program description's encoding and decoding (the cache and
 * AOT files keep them: format version 6). Needs NVRTC, no GPU.
 */
#include "check.h"
#include "runtime/cuda/program.h"
#include "runtime/cuda/program_cache.h"

#include <stdlib.h>


static const fc_launch *launch_at(const fc_program_desc *d, const char *source) {
    for (int i = 0; i < d->src.nlaunches; i++)
        if (!strcmp(d->src.launches[i].source, source)) return &d->src.launches[i];
    fprintf(stderr, "no launch with source %s\n", source);
    return NULL;
}

static void check_costs(const fc_program_desc *d) {
    CHECK_EQ_INT(d->src.nlaunches, 3);
    const fc_launch *pw = launch_at(d, "small.ir:6-7"), *rd = launch_at(d, "small.ir:8"),
                    *mm = launch_at(d, "small.ir:9-10"); /* the matmul and its relu epilogue */
    CHECK(pw && rd && mm);
    if (!pw || !rd || !mm) return;
    /* exp and mul over f32[64, 256]: x read, b written; one FLOP an element an op. */
    CHECK_EQ_INT(pw->nsource_ops, 2);
    CHECK_EQ_INT(pw->bytes, 2 * 64 * 256 * 4);
    CHECK_NEAR(pw->flops, 2.0 * 64 * 256, 0);
    /* reduce_sum of b into 64 floats. */
    CHECK_EQ_INT(rd->bytes, 64 * 256 * 4 + 64 * 4);
    CHECK_NEAR(rd->flops, 64.0 * 256, 0);
    /* The GEMM: b, w (256x128), the result; 2 M N K. */
    CHECK_EQ_INT(mm->kind, FC_LAUNCH_LIBRARY);
    CHECK_EQ_INT(mm->nsource_ops, 2);
    CHECK_EQ_INT(mm->bytes, (64 * 256 + 256 * 128 + 64 * 128) * 4);
    CHECK_NEAR(mm->flops, 2.0 * 64 * 128 * 256, 0);
}

int main(void) {
    setenv("FUSEC_CACHE", "off", 1);
    fc_context *ctx = fc_context_new();
    fc_graph *g = NULL;
    fc_status st = fc_parse_file(ctx, "tests/profile/small.ir", NULL, NULL, 0, &g);
    if (st != FC_OK) fprintf(stderr, "%s\n", fc_last_error(ctx));
    CHECK_EQ_INT(st, FC_OK);
    fc_compile_options o;
    fc_compile_options_default(&o);
    o.device = FC_DEVICE_CUDA;
    o.sm = 90;
    fc_program *p = NULL;
    if (st == FC_OK) st = fc_compile(g, &o, &p);
    if (st != FC_OK) fprintf(stderr, "%s\n", fc_last_error(ctx));
    CHECK_EQ_INT(st, FC_OK);
    if (p) {
        const fc_program_desc *d = fc_program_desc_of(p);
        check_costs(d);
        fc_bytes enc = {0};
        fc_program_desc back;
        memset(&back, 0, sizeof back);
        CHECK_EQ_INT(fc_program_desc_encode(ctx, d, &enc), FC_OK);
        CHECK_EQ_INT(fc_program_desc_decode(ctx, enc.data, enc.size, &back), FC_OK);
        check_costs(&back);
        fc_program_desc_release(&back);
        fc_bytes_free(&enc);
        /* The DOT of the CUDA plan: a cluster per launch. */
        char *dot = fc_program_plan_dot(p);
        CHECK(dot && strstr(dot, "subgraph cluster_2") && !strstr(dot, "subgraph cluster_3"));
        fc_free(dot);
    }
    fc_program_free(p);
    fc_graph_free(g);
    fc_context_free(ctx);
    return check_report("test_launch_cost");
}
