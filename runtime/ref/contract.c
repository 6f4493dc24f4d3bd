/* contract.c - a backend's outputs against fast numerics' error contract:
 * the exact reference, and the error of the dtype-faithful one as the
 * scale of what is allowed (contract.h, docs/NUMERICS.md). */
#include "runtime/ref/contract.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Integer and bool elements exactly (a double holds every i32, and the
 * i64 values a test makes). */
static double element(fc_dtype dt, const void *data, int64_t i) {
    switch (dt) {
    case FC_I64: return (double)((const int64_t *)data)[i];
    case FC_I32: return ((const int32_t *)data)[i];
    case FC_I8: return ((const int8_t *)data)[i];
    case FC_BOOL: return ((const uint8_t *)data)[i] != 0;
    default: return fc_interp_load(dt, data, i);
    }
}

/* Is x between a and b (either order)? */
static bool between(double x, double a, double b) { return (x >= a && x <= b) || (x >= b && x <= a); }

/* Both non-finite of the same kind: NaN and NaN, or the same infinity. */
static bool same_special(double x, double w) { return isnan(x) ? isnan(w) : x == w; }

static void check_one(const fc_tensor *got, const fc_interp_tensor *ex, const fc_interp_tensor *fa,
                      fc_contract_diff *d) {
    memset(d, 0, sizeof *d);
    d->dtype = ex->dtype;
    d->worst = -1;
    d->shape_ok = got->dtype == ex->dtype && got->rank == ex->rank &&
                  !memcmp(got->shape, ex->shape, sizeof(int64_t) * (size_t)(ex->rank > 0 ? ex->rank : 0));
    if (!d->shape_ok) return;
    d->numel = fc_interp_tensor_numel(ex);
    bool fl = fc_dtype_is_float(ex->dtype);
    double se = 0, sx = 0, sf = 0;
    for (int64_t i = 0; i < d->numel; i++) {
        double e = ex->data[i], f = fa->data[i];
        if (isfinite(e) && isfinite(f) && fabs(f - e) > d->faithful_err) d->faithful_err = fabs(f - e);
    }
    fc_tolerance tol = fc_dtype_tolerance(ex->dtype);
    double worst_ratio = -1;
    for (int64_t i = 0; i < d->numel; i++) {
        double x = element(got->dtype, got->data, i), e = ex->data[i], f = fa->data[i];
        double err = 0, bound = 0;
        bool ok;
        if (!fl) {
            ok = between(x, f, fc_round_to_dtype(e, ex->dtype));
            err = ok ? 0 : INFINITY;
        } else if (!isfinite(x) || !isfinite(e) || !isfinite(f)) {
            ok = same_special(x, e) || same_special(x, f);
            err = ok ? 0 : INFINITY;
        } else {
            err = fabs(x - e);
            bound = tol.rel * fabs(e) + tol.abs + 2 * d->faithful_err;
            ok = err <= bound;
            if (err > d->max_err) d->max_err = err;
            se += err * err;
            sx += e * e;
            sf += (f - e) * (f - e);
        }
        if (!ok) d->nbad++;
        double ratio = err == 0 ? 0 : bound > 0 ? err / bound : INFINITY;
        if (ratio > worst_ratio) {
            worst_ratio = ratio;
            d->worst = i;
            d->worst_got = x;
            d->worst_exact = e;
        }
    }
    d->rel_l2 = sx > 0 ? sqrt(se / sx) : 0;
    d->faithful_rel_l2 = sx > 0 ? sqrt(sf / sx) : 0;
    d->pass = d->nbad == 0;
}

fc_status fc_ref_check_contract(fc_graph *g, const fc_tensor *inputs, int nin, const fc_tensor *got, int nout,
                                fc_contract_diff *diffs) {
    fc_context *ctx = fc_graph_context(g);
    if (nin < 0 || nout < 0 || (nin && !inputs) || (nout && (!got || !diffs)))
        return fc_set_error(ctx, FC_ERR_USAGE, "fc_ref_check_contract: NULL arguments");
    fc_interp_tensor *in = calloc((size_t)nin + 1, sizeof *in);
    fc_interp_tensor *ex = calloc((size_t)nout + 1, sizeof *ex), *fa = calloc((size_t)nout + 1, sizeof *fa);
    fc_status st = in && ex && fa ? FC_OK : fc_set_error(ctx, FC_ERR_NOMEM, "out of memory");
    for (int i = 0; i < nin && st == FC_OK; i++) {
        int64_t n = fc_tensor_numel(&inputs[i]);
        in[i].dtype = inputs[i].dtype;
        in[i].rank = inputs[i].rank;
        memcpy(in[i].shape, inputs[i].shape, sizeof in[i].shape);
        in[i].data = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
        if (!in[i].data) st = fc_set_error(ctx, FC_ERR_NOMEM, "out of memory");
        for (int64_t j = 0; st == FC_OK && j < n; j++) in[i].data[j] = element(inputs[i].dtype, inputs[i].data, j);
    }
    if (st == FC_OK) st = fc_interp_run_rounding(g, FC_REF_EXACT, in, nin, ex, nout);
    if (st == FC_OK) st = fc_interp_run_rounding(g, FC_REF_DTYPE, in, nin, fa, nout);
    int first_bad = -1;
    for (int k = 0; k < nout && st == FC_OK; k++) {
        check_one(&got[k], &ex[k], &fa[k], &diffs[k]);
        if (!diffs[k].pass && first_bad < 0) first_bad = k;
    }
    if (st == FC_OK && first_bad >= 0) {
        const fc_contract_diff *d = &diffs[first_bad];
        if (!d->shape_ok)
            st = fc_set_error(ctx, FC_ERR_RUNTIME, "output %d: dtype or shape differs from the reference's", first_bad);
        else
            st = fc_set_error(ctx, FC_ERR_RUNTIME,
                              "output %d (%s): %lld elements past the contract (max err %.3g, rounding every value "
                              "%.3g); worst [%lld]: got %.9g, exact %.9g",
                              first_bad, fc_dtype_name(d->dtype), (long long)d->nbad, d->max_err, d->faithful_err,
                              (long long)d->worst, d->worst_got, d->worst_exact);
    }
    for (int i = 0; in && i < nin; i++) free(in[i].data);
    for (int k = 0; k < nout; k++) {
        if (ex) fc_interp_tensor_release(&ex[k]);
        if (fa) fc_interp_tensor_release(&fa[k]);
    }
    free(in);
    free(ex);
    free(fa);
    return st;
}
