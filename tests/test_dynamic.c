/* test_dynamic.c - the dynamic variant of a program, without a GPU.
 *
 * Every example graph is compiled with its symbols (B, T, N) left unbound:
 * the dynamic pipeline and CUDA codegen must succeed, the source must
 * compile with NVRTC for sm_90, and every kernel must take the graph's
 * symbols. Then fc_plan_bind makes concrete plans for several shapes: the
 * same groups in the same order, the same value and node ids, no symbol
 * left, the parameters and results typed as the statically specialized
 * graph types them, a memory plan that holds every intermediate, and
 * launch grids (fc_launch_grid) that cover the work. Bad bindings are
 * input errors with a message. A variant's instances (one shape each)
 * match fc_plan_bind value by value at those shapes and at every T of the
 * GPT-2 block's sweep (B=1, T=1..1024); a variant makes each with one
 * allocation, from its lowered description (lower/variant_desc.h: the
 * memory plan's layout, ir/arena_layout.h, and its GEMMs as types), whose
 * allocations fail cleanly. The GEMMs are generated kernels (256
 * threads, the symbols as arguments) unless FUSEC_VARIANT_GEMM=cublaslt,
 * which brings back library launches. Numerics of the dynamic kernels are
 * checked on the GPU machine (runtime tests; test_specialize for GEMMs).
 */
#include "check.h"
#include "codegen/cuda/cuda_codegen.h"
#include "codegen/cuda/gemm.h"
#include "fusec.h"
#include "nvrtc_check.h"
#include "ir/arena_layout.h"
#include "ir/timing.h"
#include "passes/passes.h"
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/frame.h"
#include "runtime/cuda/program.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct example {
    const char *file, *graph;
} example;

static const example examples[] = {
    {"examples/softmax.ir", "softmax"},
    {"examples/softmax.ir", "softmax_explicit"},
    {"examples/layernorm.ir", "layernorm"},
    {"examples/layernorm.ir", "layernorm_explicit"},
    {"examples/pointwise.ir", NULL},
    {"examples/mlp.ir", NULL},
    {"examples/gpt2_block.ir", NULL},
    {"examples/gpt2_block_bf16.ir", NULL},
    {"examples/llama_block.ir", NULL},
};

/* Values for B, T and N (N: the row count of softmax/pointwise). */
typedef struct shape {
    int64_t B, T;
} shape;

static const shape shapes[] = {{1, 1}, {2, 7}, {8, 1024}, {3, 33}};

static int64_t sym_value(const char *name, const shape *s) {
    if (!strcmp(name, "B")) return s->B;
    if (!strcmp(name, "T") || !strcmp(name, "N")) return s->T;
    return 5;
}

static bool value_static(const fc_value *v) {
    for (int d = 0; d < v->rank; d++)
        if (v->dims[d] < 0) return false;
    return true;
}

static bool same_type(const fc_value *a, const fc_value *b) {
    return a->dtype == b->dtype && a->rank == b->rank && !memcmp(a->dims, b->dims, sizeof(fc_dim) * (size_t)a->rank);
}

static int64_t numel(const int64_t *dims, int rank) {
    int64_t n = 1;
    for (int d = 0; d < rank; d++) n *= dims[d];
    return n;
}

/* The bound plan against the dynamic one and the static pipeline. */
static void check_bound(fc_context *ctx, const example *ex, const fc_plan *dyn, const fc_cuda_src *src, const shape *sh) {
    fc_graph *dg = dyn->g;
    int64_t vals[16];
    fc_binding binds[16];
    for (int i = 0; i < dg->nsyms; i++) {
        vals[i] = sym_value(dg->syms[i], sh);
        binds[i] = (fc_binding){dg->syms[i], vals[i]};
    }
    fc_plan bp;
    fc_status st = fc_plan_bind(dyn, vals, dg->nsyms, &bp);
    if (st) fprintf(stderr, "%s: bind B=%lld T=%lld: %s\n", ex->file, (long long)sh->B, (long long)sh->T, fc_last_error(ctx));
    CHECK_EQ_INT(st, FC_OK);
    if (st) return;
    CHECK(!bp.dynamic);
    CHECK(bp.owned_graph == bp.g && bp.g != dg);
    CHECK_EQ_INT(bp.nsyms, dg->nsyms);
    CHECK_EQ_INT(bp.ngroups, dyn->ngroups);
    CHECK_EQ_INT(bp.g->next_value_id, dg->next_value_id);
    CHECK(bp.offset != NULL);
    /* Group by group: same kind, nodes, inputs and outputs (by id); no symbol left. */
    bool groups_ok = bp.ngroups == dyn->ngroups;
    for (int i = 0; groups_ok && i < bp.ngroups; i++) {
        const fc_group *a = dyn->groups[i], *b = bp.groups[i];
        groups_ok = a->kind == b->kind && a->nnodes == b->nnodes && a->ninputs == b->ninputs && a->noutputs == b->noutputs &&
                    a->rank == b->rank && a->batch == b->batch && b->id == i;
        for (int k = 0; groups_ok && k < a->nnodes; k++)
            groups_ok = a->nodes[k]->id == b->nodes[k]->id && a->nodes[k]->op == b->nodes[k]->op;
        for (int k = 0; groups_ok && k < a->ninputs; k++) groups_ok = a->inputs[k]->id == b->inputs[k]->id && value_static(b->inputs[k]);
        for (int k = 0; groups_ok && k < a->noutputs; k++)
            groups_ok = a->outputs[k]->id == b->outputs[k]->id && value_static(b->outputs[k]);
        for (int d = 0; groups_ok && d < b->rank; d++) groups_ok = b->space[d] >= 0;
        if (groups_ok && b->kind == FC_GROUP_REDUCE) {
            groups_ok = b->rows >= 1 && b->row_len >= 1 && b->rows * b->row_len == numel(b->space, b->rank);
        }
        if (!groups_ok) fprintf(stderr, "%s: group %d of the bound plan differs from the dynamic plan's\n", ex->file, i);
    }
    CHECK(groups_ok);
    /* Every node of the bound graph keeps its id and op. */
    bool nodes_ok = true;
    for (int i = 0, j = 0; i < dg->nnodes && nodes_ok; i++) {
        if (dg->nodes[i]->dead) continue;
        nodes_ok = j < bp.g->nnodes && bp.g->nodes[j]->id == dg->nodes[i]->id && bp.g->nodes[j]->op == dg->nodes[i]->op;
        for (int k = 0; nodes_ok && k < dg->nodes[i]->nout; k++) {
            nodes_ok = bp.g->nodes[j]->out[k]->id == dg->nodes[i]->out[k]->id && value_static(bp.g->nodes[j]->out[k]);
        }
        j++;
    }
    CHECK(nodes_ok);
    /* Memory plan: every intermediate inside the arena. */
    bool mem_ok = true;
    for (int i = 0; i < bp.ngroups; i++)
        for (int k = 0; k < bp.groups[i]->noutputs; k++) {
            const fc_value *v = bp.groups[i]->outputs[k];
            int64_t off = bp.offset[v->id];
            if (off >= 0 && off + fc_value_bytes(v) > bp.arena_bytes) mem_ok = false;
        }
    CHECK(mem_ok);

    /* Sizes evaluated at the values (what a variant's instance places its
     * layout with: check_instances) are the bound graph's. */
    bool bytes_ok = true;
    for (int i = 0; i < bp.g->nnodes && bytes_ok; i++)
        for (int k = 0; k < bp.g->nodes[i]->nout && bytes_ok; k++) {
            const fc_value *bv = bp.g->nodes[i]->out[k];
            int n = 0;
            while (n < dg->nnodes && dg->nodes[n]->id != bp.g->nodes[i]->id) n++;
            if (n < dg->nnodes) bytes_ok = fc_value_bytes_at(dg->nodes[n]->out[k], vals) == fc_value_bytes(bv);
        }
    CHECK(bytes_ok);

    /* The statically specialized graph types the params and results alike. */
    fc_graph *sg = NULL;
    CHECK_EQ_INT(fc_parse_file(ctx, ex->file, ex->graph, binds, dg->nsyms, &sg), FC_OK);
    if (sg) {
        fc_plan sp;
        st = fc_pipeline(sg, NULL, &sp);
        CHECK_EQ_INT(st, FC_OK);
        CHECK_EQ_INT(sg->nparams, bp.g->nparams);
        CHECK_EQ_INT(sg->noutputs, bp.g->noutputs);
        for (int i = 0; i < sg->nparams && i < bp.g->nparams; i++) CHECK(same_type(sg->params[i], bp.g->params[i]));
        for (int i = 0; i < sg->noutputs && i < bp.g->noutputs; i++) CHECK(same_type(sg->outputs[i], bp.g->outputs[i]));
        fc_plan_release(&sp);
        fc_graph_free(sg);
    }

    /* Launch grids cover the work: a pointwise kernel has a thread per 8
     * elements at least (or the grid limit: the loop is grid-stride), a
     * reduce kernel a thread per row at least. */
    for (int i = 0; i < src->nlaunches; i++) {
        const fc_launch *l = &src->launches[i];
        unsigned grid[3];
        st = fc_launch_grid(bp.g->ctx, l, bp.sym_values, bp.nsyms, grid);
        CHECK_EQ_INT(st, FC_OK);
        if (l->kind != FC_LAUNCH_KERNEL || st) continue;
        const fc_group *gr = bp.groups[l->group];
        CHECK(grid[0] >= 1 && grid[1] >= 1 && grid[2] >= 1);
        int64_t threads = (int64_t)grid[0] * grid[1] * grid[2] * l->block[0] * l->block[1] * l->block[2];
        if (gr->batch) continue;
        if (gr->kind == FC_GROUP_POINTWISE) {
            int64_t n = numel(gr->space, gr->rank);
            bool ok = threads * 8 >= n || grid[0] == 1u << 30;
            if (!ok) fprintf(stderr, "%s: launch %s: %lld threads for %lld elements\n", ex->file, l->name, (long long)threads, (long long)n);
            CHECK(ok);
        } else if (gr->kind == FC_GROUP_REDUCE) {
            bool ok = threads >= gr->rows || grid[0] == 1u << 30;
            if (!ok) fprintf(stderr, "%s: launch %s: %lld threads for %lld rows\n", ex->file, l->name, (long long)threads, (long long)gr->rows);
            CHECK(ok);
        }
    }
    fc_plan_release(&bp);
    CHECK(bp.g == NULL && bp.groups == NULL);
}

/* The GEMM groups' launches: kernels (or library calls with
 * FUSEC_VARIANT_GEMM=cublaslt). Returns how many are kernels. */
static int check_gemm_launches(const fc_plan *dyn, const fc_cuda_src *src) {
    int kernels = 0;
    bool want_kernels = fc_cuda_variant_gemm_kernels();
    for (int i = 0; i < src->nlaunches; i++) {
        const fc_launch *l = &src->launches[i];
        const fc_group *gr = dyn->groups[l->group];
        if (gr->kind != FC_GROUP_LIBRARY || (gr->nodes[0]->op != FC_OP_GEMM && gr->nodes[0]->op != FC_OP_MATMUL)) continue;
        CHECK_EQ_INT(l->kind, want_kernels ? FC_LAUNCH_KERNEL : FC_LAUNCH_LIBRARY);
        if (l->kind != FC_LAUNCH_KERNEL) continue;
        kernels++;
        CHECK(l->block[0] == 256 && l->smem > 0 && l->smem <= 227 * 1024);
        CHECK(strstr(src->source, l->name) != NULL);
        /* One persistent block per SM: the plan's count, 132 without one. */
        const int64_t sms = dyn->sm_count > 0 ? dyn->sm_count : 132;
        CHECK(l->grid_per[0] == 1 && l->grid_max[0] == sms && l->grid_max[1] == 1 && l->grid_max[2] == 1);
        CHECK(l->grid_work[0].c == sms && fc_mono_is_static(&l->grid_work[0]));
    }
    return kernels;
}

static void check_bad_bindings(fc_context *ctx, const fc_plan *dyn) {
    fc_graph *dg = dyn->g;
    int n = dg->nsyms;
    int64_t vals[16];
    fc_plan bp;
    if (n == 0) return;
    /* 0, negative */
    for (int bad = 0; bad < 2; bad++) {
        for (int i = 0; i < n; i++) vals[i] = 4;
        vals[n - 1] = bad == 0 ? 0 : -3;
        CHECK_EQ_INT(fc_plan_bind(dyn, vals, n, &bp), FC_ERR_INPUT);
        CHECK(strstr(fc_last_error(ctx), "at least 1") != NULL);
        CHECK(strstr(fc_last_error(ctx), dg->syms[n - 1]) != NULL);
        CHECK(bp.g == NULL && bp.ngroups == 0);
    }
    /* the wrong number of values */
    for (int i = 0; i < n; i++) vals[i] = 4;
    CHECK_EQ_INT(fc_plan_bind(dyn, vals, n + 1, &bp), FC_ERR_INPUT);
    CHECK(strstr(fc_last_error(ctx), "symbols") != NULL);
    /* sizes whose product cannot be a tensor */
    for (int i = 0; i < n; i++) vals[i] = (int64_t)1 << 61;
    CHECK_EQ_INT(fc_plan_bind(dyn, vals, n, &bp), FC_ERR_INPUT);
    CHECK(strstr(fc_last_error(ctx), "too large") != NULL);
    CHECK(bp.g == NULL);
}

/* Sizes a binding contradicts: a graph whose reshape only fits when
 * T is a multiple of... no such graph can be written (symbols must match
 * exactly at build time), so contradiction reaches fc_plan_bind only as a
 * size below 1 or a size too large; both are covered above. The lower-level
 * fc_graph_bind_copy re-infers every node, which this checks directly. */
static void check_bind_copy(fc_context *ctx) {
    const char *ir = "graph g(%x: f32[B, T, 8], %y: f32[T, 8]) {\n"
                     "  %a = add(%x, %y)\n"
                     "  %r = reshape(%a, shape=[B, T, 2, 4])\n"
                     "  return %r\n}\n";
    fc_graph *g = NULL;
    CHECK_EQ_INT(fc_parse(ctx, "bind.ir", ir, strlen(ir), NULL, NULL, 0, &g), FC_OK);
    if (!g) return;
    int64_t vals[2] = {3, 5};
    fc_graph *c = NULL;
    CHECK_EQ_INT(fc_graph_bind_copy(g, vals, 2, &c), FC_OK);
    if (c) {
        CHECK_EQ_INT(c->nsyms, 0);
        CHECK_EQ_INT(c->outputs[0]->id, g->outputs[0]->id);
        CHECK_EQ_INT(c->outputs[0]->dims[0], 3);
        CHECK_EQ_INT(c->outputs[0]->dims[1], 5);
        CHECK_EQ_INT(c->nodes[1]->a.list[1], 5); /* the reshape's shape attribute is bound too */
        CHECK_EQ_INT(fc_verify(c), FC_OK);
        fc_graph_free(c);
    }
    /* A hand-broken copy: an operand whose dims disagree is caught by re-inference. */
    g->params[1]->dims[0] = 8; /* %y: f32[8, 8] against %x: f32[B, T, 8] */
    CHECK_EQ_INT(fc_graph_bind_copy(g, vals, 2, &c), FC_ERR_INPUT);
    CHECK(c == NULL);
    CHECK(strstr(fc_last_error(ctx), "do not fit") != NULL);
    fc_graph_free(g);
}

/* Instance inst of variant v against fc_plan_bind of the variant's plan
 * at the same values: the parameters' and results' types, every value's
 * storage (arena offsets and sizes), the arena's size and every launch's
 * grid. */
static bool instance_matches(fc_program *v, const fc_program *inst, const int64_t *vals, int nsyms) {
    const fc_plan *dyn = fc_program_plan(v);
    fc_plan bp;
    if (fc_plan_bind(dyn, vals, nsyms, &bp) != FC_OK) return false;
    const fc_program_desc *d = fc_program_desc_of(inst);
    bool ok = d->arena_bytes == bp.arena_bytes && d->intermediate_bytes == bp.intermediate_bytes &&
              d->nparams == bp.g->nparams && d->noutputs == bp.g->noutputs;
    for (int i = 0; ok && i < d->nparams; i++) {
        const fc_value *pv = bp.g->params[i];
        ok = d->params[i].dtype == pv->dtype && d->params[i].rank == pv->rank &&
             !memcmp(d->params[i].dims, pv->dims, sizeof(fc_dim) * (size_t)pv->rank);
    }
    for (int k = 0; ok && k < d->noutputs; k++) {
        const fc_value *ov = bp.g->outputs[k];
        ok = d->outputs[k].dtype == ov->dtype && d->outputs[k].rank == ov->rank &&
             !memcmp(d->outputs[k].dims, ov->dims, sizeof(fc_dim) * (size_t)ov->rank) &&
             (d->outputs[k].copy_from.kind == FC_STORE_NONE || d->outputs[k].copy_from.bytes == fc_value_bytes(ov));
    }
    /* Each value's size as the bound graph has it (-1: not in it). */
    int nv = bp.g->next_value_id;
    int64_t *want = malloc(sizeof *want * (size_t)(nv + 1));
    for (int id = 0; id < nv; id++) want[id] = -1;
    for (int i = 0; i < bp.g->nparams; i++) want[bp.g->params[i]->id] = fc_value_bytes(bp.g->params[i]);
    for (int i = 0; i < bp.g->nnodes; i++)
        for (int k = 0; k < bp.g->nodes[i]->nout; k++)
            want[bp.g->nodes[i]->out[k]->id] = fc_value_bytes(bp.g->nodes[i]->out[k]);
    ok = ok && d->nvalues == nv;
    for (int id = 0; ok && id < d->nvalues; id++) {
        const fc_store *sv = &d->store[id];
        if (sv->kind == FC_STORE_ARENA) ok = sv->index == bp.offset[id];
        else ok = bp.offset[id] < 0;
        if (ok && sv->kind != FC_STORE_NONE) ok = sv->bytes == want[id];
    }
    free(want);
    for (int i = 0; ok && i < d->src.nlaunches; i++) {
        const fc_launch *vl = &fc_program_desc_of(v)->src.launches[i];
        /* A frame kernel has one grid for every shape: the instance's
         * launches are the variant's own. */
        if (vl->kind == FC_LAUNCH_KERNEL && vl->frame) {
            ok = &d->src.launches[i] == vl && d->src.frame_words == fc_program_desc_of(v)->src.frame_words;
            continue;
        }
        unsigned grid[3];
        ok = fc_launch_grid(bp.g->ctx, vl, bp.sym_values, bp.nsyms, grid) == FC_OK && !memcmp(grid, d->src.launches[i].grid, sizeof grid);
        /* A library launch's GEMM: what its bound node describes. */
        const fc_gemm_desc *got = fc_program_gemm(d, i);
        const fc_node *n = vl->kind == FC_LAUNCH_LIBRARY && bp.groups[vl->group]->nnodes == 1 ? bp.groups[vl->group]->nodes[0] : NULL;
        fc_gemm_desc want = {0};
        if (ok && n && fc_gemm_desc_of(bp.g->ctx, n, vl->args, vl->nargs, &want) == FC_OK) {
            ok = got && !memcmp(&got->plan, &want.plan, sizeof want.plan) && got->out_arg == want.out_arg &&
                 !memcmp(got->wcols, want.wcols, sizeof *want.wcols * (size_t)want.plan.nweights) &&
                 !memcmp(got->op_arg, want.op_arg, sizeof *want.op_arg * (size_t)fc_gemm_plan_nops(&want.plan));
            fc_gemm_desc_release(&want);
        } else if (ok) {
            ok = got == NULL;
        }
    }
    fc_plan_release(&bp);
    return ok;
}

/* file's first graph through the dynamic pipeline and codegen: true when
 * both worked (then *g, *dyn and *src are the caller's to release; else
 * nothing is left to release). */
/* The dynamic pipeline and codegen of graph *g (freed, and set to NULL,
 * on failure). */
static bool codegen_dynamic_graph(fc_graph **g, fc_plan *dyn, fc_cuda_src *src) {
    memset(src, 0, sizeof *src);
    if (!*g) return false;
    fc_fuse_options fo;
    fc_fuse_options_default(&fo);
    fo.dynamic = true;
    fc_status st = fc_pipeline(*g, &fo, dyn);
    CHECK_EQ_INT(st, FC_OK);
    if (st == FC_OK) {
        st = fc_cuda_codegen(dyn, src);
        CHECK_EQ_INT(st, FC_OK);
        if (st != FC_OK) fc_plan_release(dyn);
    }
    if (st != FC_OK) {
        fc_graph_free(*g);
        *g = NULL;
    }
    return st == FC_OK;
}

static bool codegen_dynamic(fc_context *ctx, const char *file, fc_graph **g, fc_plan *dyn, fc_cuda_src *src) {
    *g = NULL;
    CHECK_EQ_INT(fc_parse_file(ctx, file, NULL, NULL, 0, g), FC_OK);
    return codegen_dynamic_graph(g, dyn, src);
}

/* How often needle occurs in hay. */
static int occurrences(const char *hay, const char *needle) {
    int n = 0;
    for (const char *at = hay ? strstr(hay, needle) : NULL; at; at = strstr(at + 1, needle)) n++;
    return n;
}

/* A reduction over a symbolic row length (the variant's softmax over T):
 * its row loop twice, as vectors of 8 bf16 when the length is a multiple
 * of 8 and at least 256 (a vector for each of the row's 32 threads) and
 * the buffers 16-byte aligned (checked at run time), else one
 * element at a time; the GPT-2 block's layernorms (768 long, static) take
 * vectors always and are not doubled. Not with a broadcast input (its
 * period is symbolic). No GPU: the text (the
 * GPU tests run both loops: T = 500 and 777, and 1000 and 1024). */
static void check_reduce_vector_path(fc_context *ctx) {
    static const char *test = ") >= 256 && ((0ull | (unsigned long long)a0 | (unsigned long long)o0) & 15) == 0) {";
    fc_graph *g = NULL;
    fc_plan dyn;
    fc_cuda_src src;
    if (codegen_dynamic(ctx, "examples/gpt2_block_bf16.ir", &g, &dyn, &src)) {
        CHECK_EQ_INT(occurrences(src.source, test), 1);
        CHECK_EQ_INT(occurrences(src.source, "fc_nc_vec<__nv_bfloat16, 8>(a0 + base)") >= 3, 1);
        fc_cuda_src_release(&src);
        fc_plan_release(&dyn);
        fc_graph_free(g);
    }
    static const char *texts[2] = {
        "graph s(%x: bf16[R, T]) {\n  %y = softmax(%x, axis=-1)\n  return %y\n}\n",
        "graph s(%x: bf16[R, T], %m: bf16[T]) {\n  %h = add(%x, %m)\n  %y = softmax(%h, axis=-1)\n  return %y\n}\n"};
    for (int i = 0; i < 2; i++) {
        g = NULL;
        CHECK_EQ_INT(fc_parse(ctx, "<test>", texts[i], strlen(texts[i]), NULL, NULL, 0, &g), FC_OK);
        if (!codegen_dynamic_graph(&g, &dyn, &src)) continue;
        CHECK_EQ_INT(occurrences(src.source, test), i == 0);
        fc_cuda_src_release(&src);
        fc_plan_release(&dyn);
        fc_graph_free(g);
    }
}

/* Frame entries (codegen/cuda/cuda_codegen.h, fc_launch.frame): a dynamic
 * plan of kernels only gives every kernel one, reading each argument from
 * word nsyms + its value id and each symbol from its own word, then
 * waiting for the kernel before; with a library launch, none. The carried
 * frame (the default; carried: what the caller expects): the first kernel
 * takes the words by value too, reads its own from there and stores them
 * all into the frame; neither it nor the kernel after it is a
 * programmatic dependent, every later one is. */
static void check_frame_entries(const fc_plan *dyn, const fc_cuda_src *src, bool carried) {
    bool kernels_only = true;
    for (int i = 0; i < src->nlaunches; i++) kernels_only &= src->launches[i].kind != FC_LAUNCH_LIBRARY;
    CHECK_EQ_INT(src->frame_words > 0, kernels_only);
    CHECK_EQ_INT(src->frame_carried, kernels_only && carried);
    const int nsyms = dyn->g->nsyms;
    if (kernels_only) CHECK_EQ_INT(src->frame_words, nsyms + dyn->g->next_value_id);
    const int carrier = fc_cuda_src_frame_carrier(src);
    CHECK_EQ_INT(carrier >= 0, src->frame_carried);
    int kernel = 0; /* kernels so far */
    for (int i = 0; i < src->nlaunches; i++) {
        const fc_launch *l = &src->launches[i];
        if (l->kind != FC_LAUNCH_KERNEL) continue;
        CHECK_EQ_INT(l->frame, kernels_only);
        CHECK_EQ_INT(i == carrier, src->frame_carried && kernel == 0);
        if (l->frame) CHECK_EQ_INT(l->pdl, !src->frame_carried || kernel >= 2);
        kernel++;
        char want[200];
        if (i == carrier)
            snprintf(want, sizeof want,
                     "%s(long long *__restrict__ fc_frame, const __grid_constant__ fc_frame_words<%d> fc_fw) {\n"
                     "  fc_frame_store(fc_frame, fc_fw);\n",
                     l->name, src->frame_words);
        else snprintf(want, sizeof want, "%s(const long long *__restrict__ fc_frame) {\n", l->name);
        const char *at = strstr(src->source, want);
        CHECK_EQ_INT(at != NULL, l->frame);
        if (!at) continue;
        const char *end = strstr(at, "\n}\n");
        CHECK(end != NULL);
        const char *from = i == carrier ? "fc_fw.w" : "fc_frame";
        for (int a = 0; a < l->nargs && end; a++) {
            snprintf(want, sizeof want, "  const long long w%d = %s[%d];\n", a, from, nsyms + l->args[a]);
            const char *w = strstr(at, want);
            CHECK(w != NULL && w < end);
        }
        for (int k = 0; k < l->nsyms && end; k++) {
            snprintf(want, sizeof want, "  const long long s%d = %s[%d];\n", k, from, k);
            const char *w = strstr(at, want);
            CHECK(w != NULL && w < end);
        }
        const char *wait = strstr(at, "asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");");
        CHECK(wait != NULL && end && wait < end);
        snprintf(want, sizeof want, "static __device__ __forceinline__ void %s_main(", l->name);
        CHECK(strstr(src->source, want) != NULL);
    }
}

/* The compile options the variant tests use: the defaults, for sm 90 (the
 * H100/H200; NVRTC needs no device). */
static fc_compile_options sm90_options(void) {
    fc_compile_options o;
    fc_compile_options_default(&o);
    o.sm = 90;
    return o;
}

/* fc_frame_fill: a run's frame holds the symbol values, then at word
 * nsyms + id where value id is this run (the caller's buffer, or the
 * arena at the instance's offset), for every value a kernel takes; the
 * rest stays 0. fc_frame_diff: the range of words that differ. No GPU:
 * the addresses are made up. */
static void check_frame_fill(fc_context *ctx) {
    fc_graph *g = NULL;
    if (fc_parse_file(ctx, "examples/gpt2_block_bf16.ir", NULL, NULL, 0, &g) != FC_OK) return;
    fc_compile_options o = sm90_options();
    fc_program *v = NULL, *inst = NULL;
    CHECK_EQ_INT(fc_program_compile_variant(g, &o, &v), FC_OK);
    int64_t vals[16];
    shape sh = {2, 7};
    for (int i = 0; i < g->nsyms; i++) vals[i] = sym_value(g->syms[i], &sh);
    if (v) CHECK_EQ_INT(fc_program_instance(v, vals, g->nsyms, &inst), FC_OK);
    /* (No frame, as with FUSEC_VARIANT_GEMM=cublaslt: nothing to fill.) */
    CHECK(inst && fc_program_desc_of(inst)->src.frame_words > g->nsyms);
    if (inst && fc_program_desc_of(inst)->src.frame_words > g->nsyms) {
        const fc_program_desc *d = fc_program_desc_of(inst);
        void *in[32], *out[8];
        for (int i = 0; i < d->nparams && i < 32; i++) in[i] = (void *)(uintptr_t)(0x10000000ull * (uint64_t)(i + 1));
        for (int k = 0; k < d->noutputs && k < 8; k++) out[k] = (void *)(uintptr_t)(0x7000000000ull + 0x1000ull * (uint64_t)k);
        const CUdeviceptr arena = 0x5500000000ull;
        fc_replay_env e = {NULL, ctx, d, NULL, arena, NULL, 0, vals, g->nsyms, 0x6600000000ull, NULL, -1, NULL, NULL, 0};
        uint64_t *img = calloc((size_t)d->src.frame_words, sizeof *img);
        char *taken = calloc((size_t)d->src.frame_words, 1);
        fc_frame_fill(&e, in, out, img);
        for (int k = 0; k < g->nsyms; k++) CHECK_EQ_INT(img[k], vals[k]);
        int words = 0;
        for (int i = 0; i < d->src.nlaunches; i++) {
            const fc_launch *l = &d->src.launches[i];
            for (int a = 0; l->kind == FC_LAUNCH_KERNEL && a < l->nargs; a++) {
                const int id = l->args[a];
                const fc_store *st = &d->store[id];
                uint64_t want = st->kind == FC_STORE_INPUT    ? (uint64_t)(uintptr_t)in[st->index]
                                : st->kind == FC_STORE_OUTPUT ? (uint64_t)(uintptr_t)out[st->index]
                                                              : arena + (uint64_t)st->index;
                CHECK(st->kind != FC_STORE_NONE);
                CHECK_EQ_INT(img[g->nsyms + id], want);
                words += !taken[g->nsyms + id];
                taken[g->nsyms + id] = 1;
            }
        }
        int nonzero = 0;
        for (int w = g->nsyms; w < d->src.frame_words; w++) nonzero += img[w] != 0;
        CHECK_EQ_INT(nonzero, words);
        CHECK(words >= 10);
        /* A new output buffer changes its word alone. */
        uint64_t *img2 = calloc((size_t)d->src.frame_words, sizeof *img2);
        out[0] = (void *)(uintptr_t)0x7100000000ull;
        fc_frame_fill(&e, in, out, img2);
        int lo = -1, hi = -1;
        CHECK(fc_frame_diff(img, img2, d->src.frame_words, &lo, &hi));
        CHECK(hi - lo == 1 && img2[lo] == 0x7100000000ull);
        CHECK(!fc_frame_diff(img, img, d->src.frame_words, &lo, &hi) && lo == hi);
        /* The carrier's parameters: the frame's address, then the words
         * themselves (the image, by value); any other frame kernel's: the
         * address alone. */
        CHECK(d->src.frame_carried);
        e.frame_image = img2;
        e.frame_carrier = fc_cuda_src_frame_carrier(&d->src);
        CHECK_EQ_INT(e.frame_carrier, 0);
        fc_launch_params pa;
        CHECK_EQ_INT(fc_launch_params_alloc(ctx, 64, &pa), FC_OK);
        for (int i = 0; pa.block && i < d->src.nlaunches; i++) {
            int n = -1;
            CHECK_EQ_INT(fc_launch_args(&e, i, in, out, &pa, &n), FC_OK);
            CHECK_EQ_INT(n, i == e.frame_carrier ? 2 : 1);
            CHECK(pa.val[0] == 0x6600000000ull && pa.ptr[0] == &pa.val[0]);
            if (n == 2) CHECK(pa.ptr[1] == (void *)img2);
        }
        fc_launch_params_free(ctx, &pa);
        free(img);
        free(img2);
        free(taken);
    }
    fc_program_free(inst);
    fc_program_free(v);
    fc_graph_free(g);
}

/* How many loads and stores of each state space (generic ones counted as
 * "generic") a PTX text has: "ld.global" and "ld.global.nc" apart. */
static void count_accesses(const char *ptx, int *generic, int *global, int *nc) {
    *generic = *global = *nc = 0;
    for (const char *at = ptx; (at = strchr(at, '\t')) != NULL; at++) {
        if (strncmp(at + 1, "ld.", 3) && strncmp(at + 1, "st.", 3)) continue;
        const char *q = at + 4;
        if (!strncmp(q, "global.nc.", 10)) ++*nc;
        else if (!strncmp(q, "global.", 7)) ++*global;
        else if (!strncmp(q, "u", 1) || !strncmp(q, "b", 1) || !strncmp(q, "f", 1) || !strncmp(q, "s8", 2) ||
                 !strncmp(q, "s16", 3) || !strncmp(q, "s32", 3) || !strncmp(q, "s64", 3) || !strncmp(q, "v", 1))
            ++*generic;
    }
}

/* 64-bit divisions and remainders in a PTX text (by run-time values: a
 * division by a constant becomes a multiplication). */
static int count_divisions(const char *ptx) {
    static const char *const ops[] = {"div.s64", "div.u64", "rem.s64", "rem.u64"};
    int n = 0;
    for (int i = 0; i < 4; i++)
        for (const char *at = ptx; (at = strstr(at, ops[i])) != NULL; at++) n++;
    return n;
}

/* A frame kernel reads its pointers from memory, where the compiler cannot
 * see they are global: without fc_fp's assumption every access through
 * them was generic (docs/PERF.md has what that cost). With frame entries
 * it has no generic access, and global ones for the frame words its
 * kernels load; and the inputs' read-only loads (ld.global.nc, which a
 * parameter kernel gets from `const __restrict__` and a frame kernel from
 * fc_nc: without them its permutes were 20% slower) are there too. */
static void check_frame_address_spaces(fc_context *ctx) {
    fc_graph *g = NULL;
    if (fc_parse_file(ctx, "examples/gpt2_block_bf16.ir", NULL, NULL, 0, &g) != FC_OK) return;
    fc_compile_options o = sm90_options();
    int gen = 0, glob = 0, nc = 0, words = 0;
    fc_program *v = NULL;
    CHECK_EQ_INT(fc_program_compile_variant(g, &o, &v), FC_OK);
    char *ptx = v ? fc_program_ptx(v) : NULL;
    CHECK(ptx != NULL);
    if (ptx) {
        count_accesses(ptx, &gen, &glob, &nc);
        /* Element coordinates are read back where they are known
         * (codegen/cuda/expr.c, coords), not divided out of the index by
         * run-time sizes again (the softmax's row loop is there twice, as
         * vectors and one element at a time: the divisions that adds are
         * per row, not per element). */
        /* The carrier reads its words from its parameter (ld.param, by a
         * computed address in its store loop), never from a copy in local
         * memory. */
        CHECK(strstr(ptx, ".local") == NULL);
        CHECK(strstr(ptx, "ld.param.u64") != NULL);
        int divs = count_divisions(ptx);
        printf("gpt2_block_bf16 variant PTX: %d 64-bit divisions and remainders\n", divs);
        CHECK(divs <= 140);
    }
    for (int i = 0; v && i < fc_program_desc_of(v)->src.nlaunches; i++) {
        const fc_launch *l = &fc_program_desc_of(v)->src.launches[i];
        if (l->kind == FC_LAUNCH_KERNEL) words += l->nargs + l->nsyms;
    }
    fc_free(ptx);
    fc_program_free(v);
    printf("gpt2_block_bf16 variant PTX: generic %d, global %d, global.nc %d, frame words loaded %d\n", gen, glob, nc, words);
    /* No generic access: fc_fp's assumption makes every pointer loaded
     * from the frame global, as a parameter kernel's are. The frame words
     * come on top of the global ones, read only (fc_nc), as are the
     * inputs. */
    CHECK_EQ_INT(gen, 0);
    CHECK(glob + nc >= words / 2);
    CHECK(nc >= words / 2);
    fc_graph_free(g);
}

/* A frame of more words than the carrier's parameters hold (500) is
 * copied before the launches instead: no carrier, every frame kernel a
 * programmatic dependent. A chain of 600 pointwise ops gives a frame of
 * more than 600 words (one a value id). */
static void check_uncarried_frame(fc_context *ctx) {
    fc_strbuf t = {0};
    fc_strbuf_printf(&t, "graph big(%%v0: f32[N]) {\n");
    for (int i = 1; i <= 600; i++) fc_strbuf_printf(&t, "  %%v%d = add(%%v%d, 1.0)\n", i, i - 1);
    fc_strbuf_printf(&t, "  return %%v600\n}\n");
    fc_graph *g = NULL;
    CHECK(!t.oom && t.buf);
    if (t.buf) CHECK_EQ_INT(fc_parse(ctx, "<test>", t.buf, strlen(t.buf), NULL, NULL, 0, &g), FC_OK);
    free(t.buf);
    fc_plan dyn;
    fc_cuda_src src;
    if (!codegen_dynamic_graph(&g, &dyn, &src)) return;
    CHECK(src.frame_words > 500);
    check_frame_entries(&dyn, &src, false);
    CHECK(src.source && !strstr(src.source, "fc_frame_words"));
    fc_cuda_src_release(&src);
    fc_plan_release(&dyn);
    fc_graph_free(g);
}

/* A dynamic variant's instance (runtime/program.c): for a variant of
 * kernels only it is made from the variant's memory-plan layout
 * (fc_memplan_layout_place), and its description must be what binding the
 * whole graph gives, shape by shape (instance_matches). No GPU: an
 * instance is made on the host, and the variant's kernels compile with
 * NVRTC. bindings: fixed symbols for the parse (NULL: none); ts: extra
 * values of T (or N) to check beyond the shapes above, B = 1. */
static void check_instances(fc_context *ctx, const example *ex, const fc_binding *bindings, int nbindings,
                            const int64_t *ts, int nts) {
    fc_graph *g = NULL;
    if (fc_parse_file(ctx, ex->file, ex->graph, bindings, nbindings, &g) != FC_OK) return;
    fc_compile_options o = sm90_options();
    fc_program *v = NULL;
    fc_status st = fc_program_compile_variant(g, &o, &v);
    if (st) fprintf(stderr, "%s: variant: %s\n", ex->file, fc_last_error(ctx));
    CHECK_EQ_INT(st, FC_OK);
    int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
    for (int si = 0; v && si < nshapes + nts; si++) {
        shape sh = si < nshapes ? shapes[si] : (shape){1, ts[si - nshapes]};
        int64_t vals[16];
        for (int i = 0; i < g->nsyms; i++) vals[i] = sym_value(g->syms[i], &sh);
        fc_program *inst = NULL;
        CHECK_EQ_INT(fc_program_instance(v, vals, g->nsyms, &inst), FC_OK);
        if (!inst) continue;
        /* Made from the variant's lowered description, with library
         * launches or without: no graph is bound, and the plan it shows
         * is the variant's. */
        CHECK(fc_program_plan(inst) == fc_program_plan(v));
        bool ok = instance_matches(v, inst, vals, g->nsyms);
        if (!ok)
            fprintf(stderr, "%s: the instance at B=%lld T=%lld differs from the bound plan\n", ex->file,
                    (long long)sh.B, (long long)sh.T);
        CHECK(ok);
        fc_program_free(inst);
    }
    fc_program_free(v);
    fc_graph_free(g);
}

/* The host time of an instance of variant v (T symbolic) and its free, in
 * microseconds: the mean over 2048, T = 1..1024 twice. */
static double instance_us(fc_program *v) {
    const int reps = 2048;
    const double t0 = fc_now_ms();
    for (int r = 0; r < reps; r++) {
        int64_t tv = 1 + r % 1024;
        fc_program *inst = NULL;
        if (fc_program_instance(v, &tv, 1, &inst) == FC_OK) fc_program_free(inst);
    }
    return (fc_now_ms() - t0) * 1e3 / reps;
}

/* A variant with cuBLASLt calls (FUSEC_VARIANT_GEMM=cublaslt): a new
 * shape costs what one of kernels only does, plus a GEMM plan per library
 * launch, and never a bound graph: its instance is one allocation too. */
static void check_library_instance_time(fc_context *ctx) {
    fc_graph *g = NULL;
    const fc_binding b1 = {"B", 1};
    CHECK_EQ_INT(fc_parse_file(ctx, "examples/gpt2_block_bf16.ir", NULL, &b1, 1, &g), FC_OK);
    fc_compile_options o = sm90_options();
    fc_program *v = NULL, *inst = NULL;
    if (g) CHECK_EQ_INT(fc_program_compile_variant(g, &o, &v), FC_OK);
    if (v) {
        int library = 0;
        fc_program_count_launches(v, NULL, &library, NULL);
        CHECK(library >= 4);
        int64_t t = 77;
        fc_context_fail_alloc_after(ctx, 1);
        CHECK_EQ_INT(fc_program_instance(v, &t, 1, &inst), FC_ERR_NOMEM);
        fc_context_fail_alloc_after(ctx, 0);
        CHECK(inst == NULL);
        fc_context_fail_alloc_after(ctx, 2);
        CHECK_EQ_INT(fc_program_instance(v, &t, 1, &inst), FC_OK);
        fc_context_fail_alloc_after(ctx, 0);
        CHECK(inst && instance_matches(v, inst, &t, 1));
        fc_program_free(inst);
        double us = instance_us(v);
        printf("gpt2_block_bf16 (B=1) variant with cuBLASLt calls: an instance and its free %.2f us\n", us);
        CHECK(us < 500.0);
    }
    fc_program_free(v);
    fc_graph_free(g);
}

/* The GPT-2 block's variant as the T sweep runs it (bench/dynamic_bench.c:
 * B = 1 bound, T = 1 .. 1024): every instance matches fc_plan_bind's plan
 * (the same arena, so no more memory than binding the graph takes); an
 * instance of a variant of kernels only is one allocation (the first
 * failing is a clean out-of-memory error, nothing leaks) and costs a few
 * microseconds; the layout's own allocations fail cleanly too. */
static void check_sweep_instances(fc_context *ctx) {
    static int64_t ts[1024];
    for (int t = 0; t < 1024; t++) ts[t] = t + 1;
    const example ex = {"examples/gpt2_block_bf16.ir", NULL};
    const fc_binding b1 = {"B", 1};
    check_instances(ctx, &ex, &b1, 1, ts, 1024);

    fc_graph *g = NULL;
    CHECK_EQ_INT(fc_parse_file(ctx, ex.file, NULL, &b1, 1, &g), FC_OK);
    fc_compile_options o = sm90_options();
    fc_program *v = NULL;
    if (g) CHECK_EQ_INT(fc_program_compile_variant(g, &o, &v), FC_OK);
    if (v) {
        int64_t t = 77;
        fc_program *inst = NULL;
        fc_context_fail_alloc_after(ctx, 1);
        CHECK_EQ_INT(fc_program_instance(v, &t, 1, &inst), FC_ERR_NOMEM);
        fc_context_fail_alloc_after(ctx, 0);
        CHECK(inst == NULL);
        CHECK(strstr(fc_last_error(ctx), "out of memory") != NULL);
        fc_context_fail_alloc_after(ctx, 2);
        CHECK_EQ_INT(fc_program_instance(v, &t, 1, &inst), FC_OK);
        fc_context_fail_alloc_after(ctx, 0);
        CHECK(inst && instance_matches(v, inst, &t, 1));
        fc_program_free(inst);
        /* What binding the graph refuses is refused here too, with nothing
         * made: a size below 1, the wrong number of values, sizes whose
         * product overflows. */
        t = 0;
        CHECK_EQ_INT(fc_program_instance(v, &t, 1, &inst), FC_ERR_INPUT);
        CHECK(strstr(fc_last_error(ctx), "at least 1") != NULL);
        CHECK(inst == NULL);
        int64_t two[2] = {4, 4};
        CHECK_EQ_INT(fc_program_instance(v, two, 2, &inst), FC_ERR_INPUT);
        CHECK(strstr(fc_last_error(ctx), "symbols") != NULL);
        CHECK(inst == NULL);
        t = (int64_t)1 << 61;
        CHECK_EQ_INT(fc_program_instance(v, &t, 1, &inst), FC_ERR_INPUT);
        CHECK(strstr(fc_last_error(ctx), "too large") != NULL);
        CHECK(inst == NULL);
        /* Host time per new shape (the H200's host is 2-3x slower than
         * the development machine): a loose bound for CI. */
        double us = instance_us(v);
        printf("gpt2_block_bf16 (B=1) variant: an instance and its free %.2f us\n", us);
        CHECK(us < 500.0);

        /* The memory plan's layout, each allocation failing in turn. */
        const fc_plan *dyn = fc_program_plan(v);
        int failures = 0;
        for (long n = 1; n < 100; n++) {
            fc_arena_layout *l = NULL;
            fc_context_fail_alloc_after(ctx, n);
            fc_status st = fc_memplan_layout_make(dyn, &l);
            fc_context_fail_alloc_after(ctx, 0);
            if (st == FC_OK) {
                CHECK_EQ_INT(l->nvalues, dyn->g->next_value_id);
                fc_arena_layout_free(l);
                break;
            }
            failures++;
            CHECK_EQ_INT(st, FC_ERR_NOMEM);
            CHECK(l == NULL);
        }
        CHECK(failures >= 8);
    }
    fc_program_free(v);
    fc_graph_free(g);
}

int main(void) {
    fc_context *ctx = fc_context_new();
    const char *dump = getenv("FUSEC_TEST_DUMP");
    for (size_t e = 0; e < sizeof examples / sizeof examples[0]; e++) {
        const example *ex = &examples[e];
        fc_graph *g = NULL;
        fc_status st = fc_parse_file(ctx, ex->file, ex->graph, NULL, 0, &g);
        CHECK_EQ_INT(st, FC_OK);
        if (st) {
            fprintf(stderr, "%s: %s\n", ex->file, fc_last_error(ctx));
            continue;
        }
        CHECK(g->nsyms >= 1);
        fc_fuse_options fo;
        fc_fuse_options_default(&fo);
        fo.dynamic = true;
        fc_plan dyn;
        st = fc_pipeline(g, &fo, &dyn);
        if (st) fprintf(stderr, "%s: dynamic pipeline: %s\n", ex->file, fc_last_error(ctx));
        CHECK_EQ_INT(st, FC_OK);
        CHECK(dyn.dynamic);
        CHECK(dyn.offset == NULL && dyn.arena_bytes == 0);
        for (int i = 0; i < dyn.ngroups; i++) {
            CHECK(dyn.groups[i]->kind != FC_GROUP_ATTENTION);
            bool sym = false;
            for (int d = 0; d < dyn.groups[i]->rank; d++) sym = sym || dyn.groups[i]->space[d] < 0;
            if (sym) CHECK_EQ_INT(dyn.groups[i]->batch, 0);
        }
        fc_cuda_src src = {0};
        if (!st) st = fc_cuda_codegen(&dyn, &src);
        if (st) fprintf(stderr, "%s: dynamic codegen: %s\n", ex->file, fc_last_error(ctx));
        CHECK_EQ_INT(st, FC_OK);
        if (!st) {
            if (dump && strstr(ex->file, dump)) printf("%s\n", src.source);
            int kernels = 0;
            for (int i = 0; i < src.nlaunches; i++) {
                if (src.launches[i].kind != FC_LAUNCH_KERNEL) continue;
                kernels++;
                CHECK_EQ_INT(src.launches[i].nsyms, g->nsyms);
            }
            /* (mlp is GEMMs with fused epilogues only: no kernel) */
            if (kernels) CHECK(strstr(src.source, "i64 s0") != NULL);
            check_frame_entries(&dyn, &src, true);
            int gemms = check_gemm_launches(&dyn, &src);
            if (strstr(ex->file, "mlp") || strstr(ex->file, "block")) CHECK(gemms >= 2);
            st = check_nvrtc_compiles(ctx, src.source, "dynamic_test.cu", ex->file);
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) check_bound(ctx, ex, &dyn, &src, &shapes[s]);
            /* Binding runs on the host once per new shape: it must be cheap
             * (well under 1 ms for a GPT-2 block; the bound is loose for CI). */
            int64_t vals[16];
            for (int i = 0; i < g->nsyms; i++) vals[i] = 3 + i;
            double t0 = fc_now_ms();
            int reps = 200;
            for (int r = 0; r < reps; r++) {
                fc_plan bp;
                if (fc_plan_bind(&dyn, vals, g->nsyms, &bp) == FC_OK) fc_plan_release(&bp);
            }
            double us = (fc_now_ms() - t0) * 1e3 / reps;
            printf("%s%s%s: %d groups, fc_plan_bind %.1f us\n", ex->file, ex->graph ? ":" : "", ex->graph ? ex->graph : "",
                   dyn.ngroups, us);
            CHECK(us < 5000.0);
            check_bad_bindings(ctx, &dyn);
        }
        fc_cuda_src_release(&src);
        fc_plan_release(&dyn);
        fc_graph_free(g);
    }
    check_bind_copy(ctx);
    check_frame_fill(ctx);
    check_frame_address_spaces(ctx);
    for (size_t e = 0; e < sizeof examples / sizeof examples[0]; e++) check_instances(ctx, &examples[e], NULL, 0, NULL, 0);
    check_sweep_instances(ctx);
    check_reduce_vector_path(ctx);
    /* A device with another SM count (an H100 PCIe's 114): the GEMMs'
     * persistent grid follows it. */
    {
        fc_graph *g = NULL;
        CHECK_EQ_INT(fc_parse_file(ctx, "examples/mlp.ir", NULL, NULL, 0, &g), FC_OK);
        fc_fuse_options fo;
        fc_fuse_options_default(&fo);
        fo.dynamic = true;
        fc_plan dyn;
        fc_cuda_src src = {0};
        if (g && fc_pipeline(g, &fo, &dyn) == FC_OK) {
            dyn.sm_count = 114;
            CHECK_EQ_INT(fc_cuda_codegen(&dyn, &src), FC_OK);
            CHECK(check_gemm_launches(&dyn, &src) >= 2);
            fc_cuda_src_release(&src);
            fc_plan_release(&dyn);
        }
        fc_graph_free(g);
    }
    /* The escape hatch: library launches again. */
    setenv("FUSEC_VARIANT_GEMM", "cublaslt", 1);
    fc_graph *g = NULL;
    fc_plan dyn;
    fc_cuda_src src = {0};
    if (codegen_dynamic(ctx, "examples/mlp.ir", &g, &dyn, &src)) {
        CHECK_EQ_INT(check_gemm_launches(&dyn, &src), 0);
        CHECK(src.source && !strstr(src.source, "fc_gm_run"));
        check_frame_entries(&dyn, &src, true); /* library launches: no frame */
        fc_cuda_src_release(&src);
        fc_plan_release(&dyn);
        fc_graph_free(g);
    }
    /* Library launches: the instance's cuBLASLt descriptions are its
     * variant's GEMM forms at the shape, and they are what the bound
     * graph's nodes describe. */
    check_instances(ctx, &(example){"examples/gpt2_block_bf16.ir", NULL}, NULL, 0, NULL, 0);
    check_library_instance_time(ctx);
    unsetenv("FUSEC_VARIANT_GEMM");
    check_uncarried_frame(ctx);
    fc_context_free(ctx);
    return check_report("test_dynamic");
}
