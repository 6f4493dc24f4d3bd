/*
 * interp.h - the reference interpreter (internal header).
 *
 * fc_run_reference() (fusec.h) is the public entry point. This header adds a
 * float64 entry point for the tests of the other backends, which use the
 * interpreter as their oracle: they feed it the same random doubles they feed
 * a backend, get float64 results back without a trip through 16-bit storage,
 * and compare with a tolerance per dtype.
 *
 * Semantics (both entry points):
 *  - Every value is a dense, row-major array of doubles. Every op computes in
 *    float64, and each node's results are rounded to their dtype with
 *    fc_round_to_dtype() once the node has run (see interp_tensor.c for what
 *    that means for integers, bool and NaN).
 *  - Inputs are rounded to their parameter's dtype first.
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

/* fc_interp_run, or with exact: every float value kept in float64, never
 * rounded to its dtype (what fc_run_reference_exact runs). */
fc_status fc_interp_run_mode(fc_graph *g, const fc_interp_tensor *inputs, int nin,
                             fc_interp_tensor *outputs, int nout, bool exact);

/* Element i of host storage of dtype dt, as a double (f16/bf16 decoded). */
double fc_interp_load(fc_dtype dt, const void *data, int64_t i);
/* Store fc_round_to_dtype(x, dt) as element i of host storage of dtype dt. */
void fc_interp_store(fc_dtype dt, void *data, int64_t i, double x);

#endif
