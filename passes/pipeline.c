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
 *   - epilogue folds a matmul's tail into a gemm node before fusion, so the
 *     tail never becomes a kernel of its own;
 *   - pad pads the gemm nodes epilogue made (bias, activation and fused
 *     siblings already in them: one zero block pads them all, and the
 *     slice it adds would stop epilogue's tail matching if it came first);
 *     static plans only: the dynamic variant's generated tiles take
 *     unaligned rows (gather loads), and the cost rule needs the sizes;
 *   - fusion makes groups and schedules them; loadtime marks the groups
 *     that compute GEMM weights from parameters (run once, not per run),
 *     before batching (which never batches them with per-run groups) and
 *     the memory plan (which gives their results memory of their own).
 */
#include "passes.h"
#include "recognize.h"

#include <string.h>

fc_status fc_pipeline(fc_graph *g, const fc_fuse_options *o, fc_plan *plan) {
    fc_status st;
    memset(plan, 0, sizeof *plan);
    bool dynamic = o && o->dynamic;
    bool eager = o && o->numerics == FC_NUMERICS_EAGER;
    if ((st = fc_verify(g))) return st;
    if ((st = fc_pass_canonicalize(g))) return st;
    if ((st = fc_pass_recognize_views(g))) return st; /* exported models: passes/recognize.h */
    if (!eager && (st = fc_pass_recognize_gelu(g))) return st;
    if (!eager && (st = fc_pass_recognize_norm(g))) return st;
    if (dynamic && (st = fc_pass_lower_attention(g))) return st;
    if (!eager && (st = fc_pass_fold_batch_norm(g))) return st;
    if ((st = fc_pass_lower_conv(g))) return st;
    if ((st = fc_pass_layout(g))) return st;
    if ((st = dynamic ? fc_pass_decompose_dynamic(g) : fc_pass_decompose(g))) return st;
    if (o && (st = fc_pass_autocast(g, o->precision))) return st;
    if ((st = fc_pass_canonicalize(g))) return st;
    if (!dynamic && (st = fc_pass_attention(g))) return st;
    if ((st = fc_pass_epilogue(g))) return st;
    if (!dynamic && (st = fc_pass_pad(g))) return st;
    if ((st = fc_verify(g))) return st;
    if ((st = fc_pass_fuse(g, o, plan))) return st; /* vertical, horizontal, schedule */
    if (!dynamic && (st = fc_pass_loadtime(plan))) return st;
    if (o == NULL || o->horizontal)
        if ((st = fc_pass_batch(plan))) return fc_set_error(g->ctx, st, "out of memory (batching)");
    if (dynamic) return FC_OK; /* a memory plan per shape: fc_plan_bind, or an instance's layout */
    if ((st = fc_pass_memplan(plan))) return st;
    return FC_OK;
}
