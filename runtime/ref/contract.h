/*
 * contract.h - a backend's outputs against fast numerics' error contract
 * (docs/NUMERICS.md, "The bound"), internal.
 *
 * Fast numerics keep values unrounded inside a kernel, so their results
 * are not those of the reference that rounds every value (FC_REF_DTYPE),
 * and a fixed tolerance of the output's dtype does not hold for them
 * either: an output of f32 computed from bf16 values carries bf16's error.
 * The contract compares with the exact result instead (FC_REF_EXACT), and
 * scales what it allows by the error of the dtype-faithful computation on
 * the same inputs: fusec may be as wrong as rounding every value is, twice
 * over, plus the output dtype's own tolerance.
 */
#ifndef FC_RUNTIME_REF_CONTRACT_H
#define FC_RUNTIME_REF_CONTRACT_H

#include "runtime/ref/interp.h"

typedef struct fc_contract_diff {
    fc_dtype dtype;
    int64_t numel, nbad;
    int64_t worst;          /* the element furthest past (or nearest to) its bound; -1 if none */
    double worst_got, worst_exact;
    double max_err;         /* max |got - exact| over elements where both are finite */
    double faithful_err;    /* max |faithful - exact|: the error of rounding every value */
    double rel_l2;          /* ||got - exact|| / ||exact|| (0 when exact is 0) */
    double faithful_rel_l2; /* ||faithful - exact|| / ||exact|| */
    bool shape_ok, pass;
} fc_contract_diff;

/*
 * Run g's reference both ways on `inputs` and check got[0..nout) (a
 * backend's outputs, host storage) against the contract, element by
 * element: a float element is within tol(dt).rel |exact| + tol(dt).abs +
 * 2 max_j |faithful_j - exact_j| of the exact value (fc_dtype_tolerance);
 * a NaN or an infinity must match the exact or the faithful one; an integer
 * or bool element lies between the faithful value and the exact one
 * rounded (a cast or compare of an unrounded value may land on either).
 * FC_OK when every output passes; FC_ERR_RUNTIME with a message naming the
 * first failure; the reference's own error when it refuses the graph.
 */
fc_status fc_ref_check_contract(fc_graph *g, const fc_tensor *inputs, int nin, const fc_tensor *got, int nout,
                                fc_contract_diff *diffs);

#endif
