/*
 * interp.h - the reference interpreter (internal header).
 *
 * fc_run_reference() (fusec.h) is the public entry point. This header adds a
 * float64 entry point for the tests of the other backends, which use the
 * interpreter as their oracle: they feed it the same random doubles they feed
 * a backend, get float64 results back without a trip through 16-bit storage,
 * and compare with a tolerance per dtype.
 *
 * Semantics (both entry points; docs/NUMERICS.md says why):
 *  - Every value is a dense, row-major array of doubles. Every op computes in
 *    float64, and each node's results are rounded to their dtype with
 *    fc_round_to_dtype() once the node has run (see interp_tensor.c for what
 *    that means for integers, bool and NaN): eager PyTorch's semantics, one
 *    rounding per op, computed exactly between the roundings. Operands of
 *    another dtype are converted to the op's; a weak scalar is rounded to
 *    fc_weak_scalar_dtype (f32 for an add of bf16 values).
 *  - Inputs are rounded to their parameter's dtype first.
 *  - fc_interp_run_rounding(FC_REF_EXACT) computes what fast numerics
 *    approximate: no float value is rounded but the inputs and the
 *    constants of iota and full (integer and bool values still are).
 *  - Symbolic dims are bound from the input shapes; every result shape is
 *    computed again from the operands' concrete shapes and checked against the
 *    value's type (FC_ERR_INPUT on a mismatch).
 */
#ifndef FC_RUNTIME_INTERP_H
#define FC_RUNTIME_INTERP_H

#include "ir.h"

/* A dense, row-major tensor held as doubles. `dtype` is the logical dtype:
 * every element is a value of that dtype. */
typedef struct fc_interp_tensor {
    fc_dtype dtype;
    int rank;
    int64_t shape[FC_MAX_RANK];
    double *data; /* fc_interp_tensor_numel() doubles */
} fc_interp_tensor;

/* Number of elements of t (1 for a scalar; -1 for a bad shape or overflow). */
int64_t fc_interp_tensor_numel(const fc_interp_tensor *t);
/* Free t->data (allocated by fc_interp_run with malloc) and set it to NULL. */
void fc_interp_tensor_release(fc_interp_tensor *t);

/*
 * Run g on float64 inputs. inputs[i] matches parameter i in dtype and rank
 * and its values are rounded to that dtype (so random doubles are fine). On
 * success outputs[0..nout) hold newly allocated tensors (release each with
 * fc_interp_tensor_release); on failure they are all empty (data NULL) and
 * the error is on the graph's context.
 */
fc_status fc_interp_run(fc_graph *g, const fc_interp_tensor *inputs, int nin,
                        fc_interp_tensor *outputs, int nout);

/* What the interpreter rounds. */
typedef enum fc_ref_rounding {
    /* Every node's results to their dtype (fc_interp_run, fc_run_reference):
     * what eager numerics promise to follow. */
    FC_REF_DTYPE = 0,
    /* Only inputs, iota, full and integer or bool values: the float
     * results, the graph's outputs included, are the float64 values of the
     * graph on its (rounded) inputs, weak scalars at their exact values.
     * The exact answer the error contract is measured against. */
    FC_REF_EXACT = 1,
} fc_ref_rounding;

/* fc_interp_run with the rounding `r`. */
fc_status fc_interp_run_rounding(fc_graph *g, fc_ref_rounding r, const fc_interp_tensor *inputs, int nin,
                                 fc_interp_tensor *outputs, int nout);

/* fc_interp_run_rounding as rank `rank` of the tensor-parallel group tp
 * (NULL: no group; a collective over more than one rank is then an error).
 * Every rank of tp must run its graph at the same time, on its own thread:
 * the collectives wait for one another (runtime/collective.h). */
fc_status fc_interp_run_ranked(fc_graph *g, fc_ref_rounding r, const struct fc_tp_group *tp, int rank,
                               const fc_interp_tensor *inputs, int nin, fc_interp_tensor *outputs, int nout);
/* fc_run_reference (exact: fc_run_reference_exact) as rank `rank` of tp. */
fc_status fc_ref_run_tensors(fc_graph *g, const struct fc_tp_group *tp, int rank, const fc_tensor *inputs, int nin,
                             fc_tensor *outputs, int nout, bool exact);

/* Element i of host storage of dtype dt, as a double (f16/bf16 decoded). */
double fc_interp_load(fc_dtype dt, const void *data, int64_t i);
/* Store fc_round_to_dtype(x, dt) as element i of host storage of dtype dt. */
void fc_interp_store(fc_dtype dt, void *data, int64_t i, double x);

#endif
