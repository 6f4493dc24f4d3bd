/* recognize_const.c - the constants the recognition passes compare with
 * (passes/recognize.h): exporters write GELU's and the norms' numbers as
 * scalars or one-valued tensors, rounded to the model's dtype. */
#include "recognize.h"

bool fc_rc_constant(const fc_value *v, fc_dtype dt, double *out) {
    if (v->weak) {
        *out = fc_round_to_dtype(v->scalar, dt);
        return true;
    }
    if (v->def && v->def->op == FC_OP_FULL) {
        *out = fc_round_to_dtype(fc_round_to_dtype(v->def->a.value, v->dtype), dt);
        return true;
    }
    return false;
}

bool fc_rc_is(const fc_value *v, fc_dtype dt, double want) {
    double x;
    return fc_rc_constant(v, dt, &x) && x == fc_round_to_dtype(want, dt);
}
