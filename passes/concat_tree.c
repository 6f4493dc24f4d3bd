/* concat_tree.c - a concat of many operands becomes a balanced tree of
 * concats of at most FC_CONCAT_MAX_FANIN operands each.
 *
 * One concat node is one kernel's worth of code: fusion can cut a graph
 * between nodes, never inside one, so a concat of thousands of operands
 * would be one kernel that reads them all. Such a kernel takes each
 * operand's pointer as a parameter (8 bytes each, against a parameter
 * space of 4 KB before CUDA 12.1 and 32764 bytes after) and NVRTC's time
 * grows faster than linearly in its operands (docs/PERF.md). Split into a
 * tree, each concat is a small view that fusion charges per operand
 * (fc_node_weight), so the cost cap cuts the tree into kernels of bounded
 * size.
 *
 * The tree: the operands in order, cut into ceil(n / F) runs of equal
 * length (within one), each a concat; the same again on those results
 * until at most F remain, which the last concat joins. Every operand is
 * the same number of levels deep. Operands of another dtype than the
 * result are cast to it first, as the concat would convert them: a run of
 * them alone would otherwise promote to a dtype of its own.
 */
#include "passes.h"
#include "rewrite.h"

#include <stdlib.h>
#include <string.h>

/* The root of the tree over vals[0..m) (overwritten), or NULL on error. */
static fc_value *tree(fc_rewriter *rw, fc_value **vals, int m, const fc_attrs *a, int fanin) {
    while (m > fanin) {
        int runs = (m + fanin - 1) / fanin;
        for (int j = 0; j < runs; j++) {
            int lo = (int)((int64_t)j * m / runs), hi = (int)((int64_t)(j + 1) * m / runs);
            fc_node *c = hi - lo > 1 ? fc_rw_build(rw, FC_OP_CONCAT, vals + lo, hi - lo, a) : NULL;
            if (hi - lo > 1 && !c) return NULL;
            vals[j] = c ? c->out[0] : vals[lo]; /* j <= lo: read before written */
        }
        m = runs;
    }
    fc_node *root = fc_rw_build(rw, FC_OP_CONCAT, vals, m, a);
    return root ? root->out[0] : NULL;
}

fc_status fc_pass_concat_tree_with(fc_graph *g, int fanin) {
    fc_status st = fc_pass_precheck(g, "concat_tree");
    if (st) return st;
    if (fanin < 2) return fc_set_error(g->ctx, FC_ERR_USAGE, "concat_tree: a fan-in of %d (at least 2)", fanin);
    fc_rewriter rw;
    if (fc_rw_begin(&rw, g) != FC_OK) return g->status;
    for (fc_node *n; (n = fc_rw_next(&rw));) {
        fc_rw_remap(&rw, n);
        if (n->op != FC_OP_CONCAT || n->nin <= fanin) {
            fc_rw_keep(&rw, n);
            continue;
        }
        fc_value **vals = malloc(sizeof *vals * (size_t)n->nin);
        if (!vals) {
            fc_graph_error(g, FC_ERR_NOMEM, "out of memory (concat_tree)");
            break;
        }
        fc_value *root = NULL;
        bool ok = true;
        for (int i = 0; i < n->nin && ok; i++) ok = (vals[i] = fc_rw_cast(&rw, n->in[i], n->out[0]->dtype)) != NULL;
        if (ok) root = tree(&rw, vals, n->nin, &n->a, fanin);
        free(vals);
        if (!root) break;
        root->name = n->out[0]->name; /* the value it stands for: plans read as the graph */
        if (!fc_rw_replace(&rw, n->out[0], root)) break;
    }
    return fc_rw_end(&rw);
}

fc_status fc_pass_concat_tree(fc_graph *g) { return fc_pass_concat_tree_with(g, FC_CONCAT_MAX_FANIN); }
