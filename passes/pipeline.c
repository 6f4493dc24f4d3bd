/* pipeline.c - the pass list, from a verified graph to a launch plan.
 *
 * This page is the order of the passes and nothing else: each pass is one
 * file named after it (passes.h says what each does). The order matters:
 *
 *   - canonicalize runs first so that decompose sees folded view chains and
 *     shared subexpressions, and again after decompose, whose primitives
 *     expose new identities (a softmax's max of a constant, casts in and
 *     out);
 *   - the recognizers (passes/recognize.h) run before decompose (GELU and
 *     norms in fast numerics only: eager numerics computes the graph as
 *     written, rounding every step), they turn
 *     the primitives an exporter writes (GELU, LayerNorm, RMSNorm, the 2-D
 *     reshapes of linear layers) back into what a hand-written graph has,
 *     so that both lower and fuse alike;
 *   - fold_batch_norm (fast numerics: it rounds the folded weights) runs
 *     before lower_conv, which needs to see conv and batch_norm whole;
 *     lower_conv writes channels-last primitives with permutes at each
 *     op's edges, and layout moves those permutes through the
 *     elementwise ops between convolutions so that pairs cancel (in
 *     canonicalize, next);
 *   - autocast runs on decompose's primitives (a reduction, an exp, a
 *     matmul: the rules are per primitive, so a softmax written out by hand
 *     is cast as the composite is) and before the second canonicalize,
 *     which merges the casts it writes and folds those that cancel;
 *   - attention pattern-matches the canonical primitives that decompose
 *     wrote (softmax(scale * Q K^T) V); the dynamic variant lowers
 *     attention ops instead, before decompose, since the flash kernel needs
 *     static shapes;
 *   - residual (fast numerics) re-associates a 16-bit residual sum that a
 *     GEMM would add again, so that epilogue folds the branch, not the
 *     rounded stream, as that GEMM's residual;
 *   - epilogue folds a matmul's tail into a gemm node before fusion, so the
 *     tail never becomes a kernel of its own;
 *   - pad pads the gemm nodes epilogue made (bias, activation and fused
 *     siblings already in them: one zero block pads them all, and the
 *     slice it adds would stop epilogue's tail matching if it came first);
 *     static plans only: the dynamic variant's generated tiles take
 *     unaligned rows (gather loads), and the cost rule needs the sizes;
 *   - concat_tree runs last among the graph passes, after every pass that
 *     writes concats (lower_conv's columns and pads, pad's zero blocks),
 *     so that no concat reaching fusion has more operands than one
 *     kernel may take;
 *   - fusion makes groups and schedules them; loadtime marks the groups
 *     that compute GEMM weights from parameters (run once, not per run),
 *     before batching (which never batches them with per-run groups) and
 *     the memory plan (which gives their results memory of their own).
 */
#include "passes.h"
#include "recognize.h"

#include <string.h>

/* The caller's hook after a graph pass (--dump-after): it reads the
 * working graph, and the library prints nothing itself. */
static fc_status after(fc_graph *g, const fc_fuse_options *o, const char *pass) {
    if (o && o->after_pass) o->after_pass(o->after_pass_user, pass, g);
    return FC_OK;
}

fc_status fc_pipeline(fc_graph *g, const fc_fuse_options *o, fc_plan *plan) {
    fc_status st;
    memset(plan, 0, sizeof *plan);
    bool dynamic = o && o->dynamic;
    bool eager = o && o->numerics == FC_NUMERICS_EAGER;
    if ((st = fc_verify(g))) return st;
    if ((st = fc_pass_canonicalize(g)) || (st = after(g, o, "canonicalize"))) return st;
    if ((st = fc_pass_recognize_views(g)) || (st = after(g, o, "recognize_views"))) return st; /* exported models: passes/recognize.h */
    if (!eager && ((st = fc_pass_recognize_gelu(g)) || (st = after(g, o, "recognize_gelu")))) return st;
    if (!eager && ((st = fc_pass_recognize_norm(g)) || (st = after(g, o, "recognize_norm")))) return st;
    if (dynamic && ((st = fc_pass_lower_attention(g)) || (st = after(g, o, "lower_attention")))) return st;
    if (!eager && ((st = fc_pass_fold_batch_norm(g)) || (st = after(g, o, "fold_batch_norm")))) return st;
    bool conv_library = o && o->conv_library && !dynamic;
    if ((st = conv_library ? fc_pass_lower_conv_library(g, o->precision) : fc_pass_lower_conv(g)) || (st = after(g, o, "lower_conv")))
        return st;
    if ((st = fc_pass_layout(g)) || (st = after(g, o, "layout"))) return st;
    if ((st = dynamic ? fc_pass_decompose_dynamic(g) : fc_pass_decompose(g)) || (st = after(g, o, "decompose")))
        return st;
    if (o && ((st = fc_pass_autocast(g, o->precision)) || (st = after(g, o, "autocast")))) return st;
    if ((st = fc_pass_canonicalize(g)) || (st = after(g, o, "canonicalize"))) return st;
    if (!dynamic && ((st = fc_pass_attention(g)) || (st = after(g, o, "attention")))) return st;
    if (!eager && ((st = fc_pass_residual(g)) || (st = after(g, o, "residual")))) return st;
    if ((st = fc_pass_epilogue(g)) || (st = after(g, o, "epilogue"))) return st;
    if (!dynamic && ((st = fc_pass_pad(g)) || (st = after(g, o, "pad")))) return st;
    if ((st = fc_pass_concat_tree(g)) || (st = after(g, o, "concat_tree"))) return st;
    if ((st = fc_verify(g))) return st;
    if ((st = fc_pass_fuse(g, o, plan))) return st; /* vertical, horizontal, schedule */
    if (!dynamic && (st = fc_pass_loadtime(plan))) return st;
    if (o == NULL || o->horizontal)
        if ((st = fc_pass_batch(plan))) return fc_set_error(g->ctx, st, "out of memory (batching)");
    if (dynamic) return FC_OK; /* a memory plan per shape: fc_plan_bind, or an instance's layout */
    if ((st = fc_pass_memplan(plan))) return st;
    return FC_OK;
}

/* Public: the graph passes on a copy of g, the hook after each (the plan
 * they lead to is dropped: nothing is compiled). */
fc_status fc_run_passes(fc_graph *g, const fc_compile_options *co, fc_pass_hook hook, void *user) {
    if (!g) return FC_ERR_USAGE;
    if (g->status) return g->status;
    fc_compile_options defaults;
    if (!co) {
        fc_compile_options_default(&defaults);
        co = &defaults;
    }
    fc_graph *copy = fc_graph_clone(g);
    /* As fc_compile says of its clone: the graph was checked, so memory
     * unless the message says otherwise. */
    if (!copy) return strstr(g->ctx->error, "out of memory") ? FC_ERR_NOMEM : FC_ERR_INPUT;
    fc_fuse_options fo;
    fc_fuse_options_default(&fo);
    fo.vertical = fo.horizontal = co->fuse;
    fo.dynamic = co->dynamic;
    fo.precision = co->precision;
    fo.numerics = co->numerics;
    fo.attention_in_place = co->device == FC_DEVICE_CUDA;
    fo.after_pass = hook;
    fo.after_pass_user = user;
    fc_plan plan;
    fc_status st = fc_pipeline(copy, &fo, &plan);
    fc_plan_release(&plan);
    fc_graph_free(copy);
    return st;
}
