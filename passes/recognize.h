/*
 * recognize.h - the recognition passes (internal): composites that
 * exporters write out as primitives become the IR's composite ops again, so
 * that a model imported from ONNX (or .ir written the same way) fuses as the
 * hand-written graph does. Each pass is one file:
 *
 *   recognize_views.c  a 2-D reshape of the activations around a linear
 *                      layer (PyTorch's Conv1D as Gemm) is moved past the
 *                      matmul and its bias, where it meets its inverse and
 *                      goes
 *   recognize_gelu.c   the tanh and erf GELU written out -> gelu_tanh, gelu
 *   recognize_norm.c   LayerNorm and RMSNorm written out -> layernorm, rmsnorm
 *
 * (Attention written out is fc_pass_attention's, passes/attention.c.) They
 * run after the first canonicalize, before decompose. A pattern is rewritten
 * only when every intermediate is used inside it alone; the composite skips
 * the roundings of the intermediates, as decompose's f32 computation does.
 *
 * The helpers below are shared by these files.
 */
#ifndef FC_PASSES_RECOGNIZE_H
#define FC_PASSES_RECOGNIZE_H

#include "ir.h"

#include <stdbool.h>

fc_status fc_pass_recognize_views(fc_graph *g);
fc_status fc_pass_recognize_gelu(fc_graph *g);
fc_status fc_pass_recognize_norm(fc_graph *g);

/* What a recognizer needs while it rebuilds: use counts of the graph before
 * the rebuild (values made by the rebuild have ids past nuses). */
typedef struct fc_rc {
    int *uses;
    int nuses;
} fc_rc;

/* Is v used exactly n times (by live nodes and results)? False for a value
 * made during the rebuild, and for a graph parameter (a pattern's
 * intermediates are never parameters). */
static inline bool fc_rc_private(const fc_rc *rc, const fc_value *v, int n) {
    return v->def && v->id >= 0 && v->id < rc->nuses && rc->uses[v->id] == n;
}

/* The value of a constant operand as an op computing in dtype dt uses it
 * (a weak scalar, or a `full`), in *out; false when v is no constant. */
bool fc_rc_constant(const fc_value *v, fc_dtype dt, double *out);
/* Is v the constant `want` as dtype dt holds it (want rounded to dt)? */
bool fc_rc_is(const fc_value *v, fc_dtype dt, double want);
/* The op of v's definition, or FC_OP_COUNT for a parameter or a scalar. */
static inline fc_op fc_rc_op(const fc_value *v) { return v->def ? v->def->op : FC_OP_COUNT; }

#endif
