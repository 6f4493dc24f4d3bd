/* compare.c - a backend's outputs against the reference interpreter's:
 * the tolerance of each dtype and the element-by-element comparison
 * (fusec.h, "Comparing outputs"). */
#include "runtime/ref/interp.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Comparing outputs.                                                  */
/* ------------------------------------------------------------------ */

fc_tolerance fc_dtype_tolerance(fc_dtype dt) {
    switch (dt) {
    case FC_F64: return (fc_tolerance){1e-9, 1e-12};
    case FC_F32: return (fc_tolerance){1e-5, 1e-5};
    case FC_F16: return (fc_tolerance){2e-3, 1e-3};
    case FC_BF16: return (fc_tolerance){1.6e-2, 1e-2};
    case FC_I64: case FC_I32: case FC_I8: case FC_BOOL: case FC_DTYPE_COUNT: break;
    }
    return (fc_tolerance){0, 0};
}

/* Element i of an integer or bool tensor, exactly (a double would lose
 * i64 values above 2^53). */
static int64_t load_int(fc_dtype dt, const void *data, int64_t i) {
    switch (dt) {
    case FC_I64: return ((const int64_t *)data)[i];
    case FC_I32: return ((const int32_t *)data)[i];
    case FC_I8: return ((const int8_t *)data)[i];
    case FC_BOOL: return ((const uint8_t *)data)[i];
    default: FC_UNREACHABLE("load_int of a float dtype");
    }
}

static bool valid_tensor(const fc_tensor *t) {
    return (unsigned)t->dtype < FC_DTYPE_COUNT && t->rank >= 0 && t->rank <= FC_MAX_RANK && fc_tensor_numel(t) >= 0;
}

static bool same_type(const fc_tensor *a, const fc_tensor *b) {
    if (!valid_tensor(a) || !valid_tensor(b)) return false;
    if (a->dtype != b->dtype || a->rank != b->rank) return false;
    for (int d = 0; d < a->rank; d++)
        if (a->shape[d] != b->shape[d]) return false;
    return true;
}

static void compare_one(const fc_tensor *got, const fc_tensor *want, fc_output_diff *r) {
    memset(r, 0, sizeof *r);
    r->dtype = want->dtype;
    r->tol = fc_dtype_tolerance(want->dtype);
    r->worst = -1;
    r->shape_ok = same_type(got, want);
    if (!r->shape_ok) return;
    r->numel = fc_tensor_numel(want);
    bool is_float = fc_dtype_is_float(want->dtype);
    double worst_ratio = -1;
    for (int64_t i = 0; i < r->numel; i++) {
        double x, w, err, bound;
        bool ok;
        if (is_float) {
            x = fc_interp_load(got->dtype, got->data, i);
            w = fc_interp_load(want->dtype, want->data, i);
        } else {
            int64_t xi = load_int(got->dtype, got->data, i), wi = load_int(want->dtype, want->data, i);
            x = (double)xi;
            w = (double)wi;
            if (xi == wi) x = w; /* equal, even where doubles cannot tell */
            else if (x == w) x = nextafter(w, INFINITY);
        }
        if (isnan(x) || isnan(w)) {
            ok = isnan(x) && isnan(w);
            err = ok ? 0 : INFINITY;
        } else if (isinf(x) || isinf(w)) {
            ok = x == w;
            err = ok ? 0 : INFINITY;
        } else {
            err = fabs(x - w);
            ok = err <= r->tol.abs + r->tol.rel * fabs(w);
        }
        bound = r->tol.abs + r->tol.rel * (isfinite(w) ? fabs(w) : 0);
        if (err > r->max_abs_err) r->max_abs_err = err;
        if (w != 0 && !isnan(w)) {
            double rel = isinf(w) ? (ok ? 0 : INFINITY) : err / fabs(w);
            if (rel > r->max_rel_err) r->max_rel_err = rel;
        }
        if (!ok) r->nbad++;
        /* The element nearest to (or furthest past) its bound. */
        double ratio = err == 0 ? 0 : bound > 0 ? err / bound : INFINITY;
        if (ratio > worst_ratio) {
            worst_ratio = ratio;
            r->worst = i;
            r->worst_got = x;
            r->worst_want = w;
        }
    }
    r->pass = r->nbad == 0;
}

/* "f32[4, 8]" for a host tensor (its rank may be bad: it is being checked). */
static const char *tensor_type_str(const fc_tensor *t, char *buf, size_t n) {
    size_t len = (size_t)snprintf(buf, n, "%s[", fc_dtype_name(t->dtype));
    int rank = t->rank < 0 ? 0 : t->rank > FC_MAX_RANK ? FC_MAX_RANK : t->rank;
    for (int d = 0; d < rank && len < n; d++)
        len += (size_t)snprintf(buf + len, n - len, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (len < n) snprintf(buf + len, n - len, "]");
    return buf;
}

const char *fc_output_diff_format(const fc_output_diff *d, int index, char *buf, size_t n) {
    if (!d->shape_ok) {
        snprintf(buf, n, "output %d: FAIL (dtype or shape differs)", index);
        return buf;
    }
    int len = snprintf(buf, n, "output %d (%s, %lld elements): max_abs_err %.3g max_rel_err %.3g (tolerance rel %g abs %g): ",
                       index, fc_dtype_name(d->dtype), (long long)d->numel, d->max_abs_err, d->max_rel_err,
                       d->tol.rel, d->tol.abs);
    if (len < 0 || (size_t)len >= n) return buf;
    if (d->pass)
        snprintf(buf + len, n - (size_t)len, "ok");
    else
        snprintf(buf + len, n - (size_t)len, "FAIL (%lld elements out of tolerance; worst [%lld]: got %.9g, want %.9g)",
                 (long long)d->nbad, (long long)d->worst, d->worst_got, d->worst_want);
    return buf;
}

fc_status fc_compare_outputs(fc_context *ctx, const fc_tensor *got, const fc_tensor *want, int n,
                             fc_output_diff *diffs) {
    if (n < 0 || (n > 0 && (!got || !want || !diffs)))
        return fc_set_error(ctx, FC_ERR_USAGE, "fc_compare_outputs: NULL arguments or n < 0");
    for (int i = 0; i < n; i++) {
        if ((fc_tensor_numel(&got[i]) > 0 && !got[i].data) || (fc_tensor_numel(&want[i]) > 0 && !want[i].data))
            return fc_set_error(ctx, FC_ERR_USAGE, "fc_compare_outputs: output %d has no data", i);
    }
    int first_bad = -1;
    for (int i = 0; i < n; i++) {
        compare_one(&got[i], &want[i], &diffs[i]);
        if (!diffs[i].pass && first_bad < 0) first_bad = i;
    }
    if (first_bad < 0) return FC_OK;
    char line[512];
    fc_output_diff_format(&diffs[first_bad], first_bad, line, sizeof line);
    if (!diffs[first_bad].shape_ok) {
        char a[160], b[160];
        return fc_set_error(ctx, FC_ERR_RUNTIME, "output %d is %s, the reference's is %s", first_bad,
                            tensor_type_str(&got[first_bad], a, sizeof a),
                            tensor_type_str(&want[first_bad], b, sizeof b));
    }
    return fc_set_error(ctx, FC_ERR_RUNTIME, "%s", line);
}
