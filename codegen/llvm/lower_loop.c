/*
 * lower_loop.c - counted loops in LLVM IR (with the vectorize hint a sum
 * needs), and the POINTWISE kernel: the iteration space as [outer, inner]
 * loops whose coordinates are seeded for lk_emit_value (lower.c).
 */
#include "codegen/llvm/lower_impl.h"

#include <llvm-c/DebugInfo.h>

/* ---- loops ------------------------------------------------------------------ */

/* for (iv = lo; iv < hi; iv++), with an optional accumulator phi (acc). The
 * builder is left in the body; memo entries made in it die with the loop. */
void lk_loop_open(kern *k, loop *lp, LLVMValueRef lo, LLVMValueRef hi, LLVMValueRef acc_init) {
    lmod *M = k->M;
    LLVMValueRef fn = LLVMGetBasicBlockParent(LLVMGetInsertBlock(B));
    lp->pre = LLVMGetInsertBlock(B);
    lp->header = LLVMAppendBasicBlockInContext(M->c, fn, "loop");
    LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(M->c, fn, "body");
    lp->exit = LLVMAppendBasicBlockInContext(M->c, fn, "done");
    LLVMBuildBr(B, lp->header);
    LLVMPositionBuilderAtEnd(B, lp->header);
    lp->iv = LLVMBuildPhi(B, k->ity, "i");
    lp->acc = acc_init ? LLVMBuildPhi(B, LLVMTypeOf(acc_init), "acc") : NULL;
    LLVMBuildCondBr(B, LLVMBuildICmp(B, LLVMIntSLT, lp->iv, hi, ""), body, lp->exit);
    LLVMPositionBuilderAtEnd(B, body);
    lp->lo = lo;
    lp->acc_init = acc_init;
    lp->step = 1;
    lp->mark = k->nmemo;
}

/* Loop metadata {llvm.loop.vectorize.enable = true}: the loop's ID node is
 * self-referential, made from a temporary node. The hint also allows the
 * vectorizer to reorder floating-point reductions. */
static void hint_vectorize(lmod *M, LLVMValueRef br) {
    LLVMMetadataRef opt[2] = {LLVMMDStringInContext2(M->c, "llvm.loop.vectorize.enable", 26),
                              LLVMValueAsMetadata(LLVMConstInt(M->t_i1, 1, 0))};
    LLVMMetadataRef tmp = LLVMTemporaryMDNode(M->c, NULL, 0);
    LLVMMetadataRef ops[2] = {tmp, LLVMMDNodeInContext2(M->c, opt, 2)};
    LLVMMetadataRef id = LLVMMDNodeInContext2(M->c, ops, 2);
    LLVMMetadataReplaceAllUsesWith(tmp, id);
    LLVMSetMetadata(br, LLVMGetMDKindIDInContext(M->c, "llvm.loop", 9), LLVMMetadataAsValue(M->c, id));
}

void lk_loop_close(kern *k, loop *lp, LLVMValueRef acc_next, bool vectorize_hint) {
    LLVMBasicBlockRef latch = LLVMGetInsertBlock(B);
    LLVMValueRef next = iadd(k, lp->iv, ic(k, lp->step));
    LLVMValueRef br = LLVMBuildBr(B, lp->header);
    if (vectorize_hint) hint_vectorize(k->M, br);
    LLVMValueRef iv_in[2] = {lp->lo, next};
    LLVMBasicBlockRef from[2] = {lp->pre, latch};
    LLVMAddIncoming(lp->iv, iv_in, from, 2);
    if (lp->acc) {
        LLVMValueRef acc_in[2] = {lp->acc_init, acc_next};
        LLVMAddIncoming(lp->acc, acc_in, from, 2);
    }
    LLVMPositionBuilderAtEnd(B, lp->exit);
    k->nmemo = lp->mark;
}

/* ---- POINTWISE kernels ---------------------------------------------------------- */

void lk_store_full_outputs(kern *k, LLVMValueRef L) {
    const fc_group *gr = k->gr;
    for (int o = 0; o < gr->noutputs; o++) {
        const fc_value *v = gr->outputs[o];
        if (k->reduce && k->is_row[v->id]) continue;
        if (!is_full(gr, v)) continue;
        lk_store_output(k, o, v, L, lk_emit_value(k, v, L));
    }
}

void lk_pointwise_kernel(kern *k, LLVMValueRef b, LLVMValueRef e) {
    const fc_group *gr = k->gr;
    const int64_t *dims = gr->space;
    int rank = gr->rank;
    int64_t n = prod(dims, 0, rank);
    if (n == 0) return;
    /* dims [split, rank) are the inner loop: at least 64 elements if the
     * shape has them. */
    int split = rank;
    int64_t inner = 1;
    while (split > 0 && inner < 64) inner *= dims[--split];
    loop lo;
    LLVMValueRef base = ic(k, 0), i_lo = b, i_hi = e, oc[FC_MAX_RANK];
    if (split > 0) {
        /* for o in [b / inner, ceil(e / inner)): i in [max(b - o inner, 0), min(e - o inner, inner)) */
        lk_loop_open(k, &lo, idiv(k, b, inner), idiv(k, iadd(k, e, ic(k, inner - 1)), inner), NULL);
        base = imul(k, lo.iv, inner);
        i_lo = lm_smax(k->M, isub(k, b, base), ic(k, 0));
        i_hi = lm_smin(k->M, isub(k, e, base), ic(k, inner));
        for (int d = 0; d < split; d++) {
            oc[d] = idiv(k, lo.iv, prod(dims, d + 1, split));
            if (prod(dims, 0, d) > 1) oc[d] = irem(k, oc[d], dims[d]);
        }
    }
    loop li;
    lk_loop_open(k, &li, i_lo, i_hi, NULL);
    LLVMValueRef L = split > 0 ? iadd(k, base, li.iv) : li.iv;
    for (int d = 0; d < rank; d++) {
        LLVMValueRef c;
        if (dims[d] == 1) continue;
        if (d < split) c = oc[d];
        else {
            c = idiv(k, li.iv, prod(dims, d + 1, rank));
            if (prod(dims, split, d) > 1) c = irem(k, c, dims[d]);
        }
        lk_seed_coord(k, rank, dims, d, L, c);
    }
    lk_store_full_outputs(k, L);
    lk_loop_close(k, &li, NULL, false);
    if (split > 0) lk_loop_close(k, &lo, NULL, false);

    /* Outputs of another shape (the pieces of a stored split): each loops
     * over its own elements, in the call whose range starts at 0 (the runtime
     * may split the main range; these are written once either way). */
    bool odd = false;
    for (int o = 0; o < gr->noutputs; o++) odd |= !is_full(gr, gr->outputs[o]);
    if (!odd) return;
    lmod *M = k->M;
    LLVMValueRef fn = LLVMGetBasicBlockParent(LLVMGetInsertBlock(B));
    LLVMBasicBlockRef yes = LLVMAppendBasicBlockInContext(M->c, fn, "odd");
    LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(M->c, fn, "odd_done");
    LLVMBuildCondBr(B, LLVMBuildICmp(B, LLVMIntEQ, b, ic(k, 0), ""), yes, done);
    LLVMPositionBuilderAtEnd(B, yes);
    for (int o = 0; o < gr->noutputs; o++) {
        const fc_value *v = gr->outputs[o];
        if (is_full(gr, v)) continue;
        loop lv;
        lk_loop_open(k, &lv, ic(k, 0), ic(k, numel_of(v)), NULL);
        lk_store_output(k, o, v, lv.iv, lk_emit_value(k, v, lv.iv));
        lk_loop_close(k, &lv, NULL, false);
    }
    LLVMBuildBr(B, done);
    LLVMPositionBuilderAtEnd(B, done);
}

