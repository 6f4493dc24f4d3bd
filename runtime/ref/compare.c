/* compare.c - a backend's outputs against the reference interpreter's:
 * the tolerance of each dtype and the element-by-element comparison
 * (fusec.h, "Comparing outputs"). */
#include "runtime/ref/interp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
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
    case FC_I64: case FC_I32: case FC_I8: case FC_BOOL: case FC_STRING: case FC_DTYPE_COUNT: break;
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

/* The unit roundoff of a float dtype: half the distance from 1 to the next
 * value (2^-24 for f32). */
static double unit_roundoff(fc_dtype dt) {
    switch (dt) {
    case FC_F64: return 0x1.0p-53;
    case FC_F32: return 0x1.0p-24;
    case FC_F16: return 0x1.0p-11;
    case FC_BF16: return 0x1.0p-8;
    default: return 0;
    }
}

/*
 * How many times the dtype-faithful computation's error fusec's may be.
 * A fused kernel keeps its intermediates in f32, so for a 16-bit graph it
 * is usually more accurate than a computation that rounds every node, and
 * the margin only has to absorb where it rounds differently. For an f32
 * graph the faithful computation (the reference rounding each node to f32,
 * but summing in float64) misses the error of summing in f32 in some
 * order: a GEMM or reduction over K terms in f32 is off by up to about
 * sqrt(K) roundings of its terms where the reference rounds once, hence
 * the larger margin (K = 4096 gives 64, and twice that for the order).
 */
double fc_check_margin(fc_dtype dt) {
    switch (dt) {
    case FC_F64: case FC_F32: return 128;
    case FC_F16: case FC_BF16: return 8;
    default: return 0;
    }
}

/* |a - b|, with NaN equal to NaN and an infinity equal only to itself
 * (INFINITY when they differ so). */
static double distance(double a, double b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b) ? 0 : INFINITY;
    if (isinf(a) || isinf(b)) return a == b ? 0 : INFINITY;
    return fabs(a - b);
}

/* Is x between a and b (either order)? */
static bool between(int64_t x, int64_t a, int64_t b) { return (x >= a && x <= b) || (x >= b && x <= a); }

/* The exact value of float element i (0 without the exact outputs). */
static double exact_at(const fc_tensor *exact, int64_t i) { return exact ? ((const double *)exact->data)[i] : 0; }

/*
 * The error bound, one element (docs/NUMERICS.md, "The error bound"):
 * *err is how far got is from it (0 inside, > 1 outside: the ratio of
 * the error to what is allowed, INFINITY when nothing is). Integers and
 * bools: equal to the faithful value, or between it and the exact one (a
 * cast or compare of an unrounded value may land on either side). Floats:
 * within the dtype's tolerance of the faithful value, or, against the
 * exact value, within margin times the faithful computation's error there
 * plus its root mean square `floor`, plus one rounding; a NaN or infinity
 * must be the faithful one's or the exact one's. Where only the faithful
 * computation overflows, got is held to the tolerance around the exact
 * value.
 */
static bool element_ok(const fc_tensor *got, const fc_tensor *want, const fc_tensor *exact, int64_t i, double margin,
                       double floor, double u, double *ratio) {
    if (!fc_dtype_is_float(want->dtype)) {
        int64_t x = load_int(got->dtype, got->data, i), w = load_int(want->dtype, want->data, i);
        bool ok = x == w || (exact && between(x, w, load_int(exact->dtype, exact->data, i)));
        *ratio = ok ? 0 : INFINITY;
        return ok;
    }
    double x = fc_interp_load(got->dtype, got->data, i), w = fc_interp_load(want->dtype, want->data, i);
    fc_tolerance tol = fc_dtype_tolerance(want->dtype);
    double err = distance(x, w), bound = tol.abs + tol.rel * (isfinite(w) ? fabs(w) : 0);
    *ratio = err == 0 ? 0 : bound > 0 ? err / bound : INFINITY;
    if (!exact) return err <= bound;
    double e = exact_at(exact, i), xe = distance(x, e), allowed;
    if (!isfinite(e) || !isfinite(x)) allowed = 0;
    else if (!isfinite(w)) allowed = tol.abs + tol.rel * fabs(e);
    else allowed = margin * (fabs(w - e) + floor) + 2 * u * fabs(e);
    double r = xe == 0 ? 0 : allowed > 0 ? xe / allowed : INFINITY;
    if (r < *ratio) *ratio = r;
    return err <= bound || xe <= allowed;
}

/* Compare one output (exact: an f64 tensor of want's shape for a float
 * output, want's dtype for an integer one, or NULL). */
static void compare_one(const fc_tensor *got, const fc_tensor *want, const fc_tensor *exact, fc_output_diff *r) {
    memset(r, 0, sizeof *r);
    r->dtype = want->dtype;
    r->tol = fc_dtype_tolerance(want->dtype);
    r->worst = -1;
    r->shape_ok = same_type(got, want);
    if (!r->shape_ok) return;
    r->numel = fc_tensor_numel(want);
    bool is_float = fc_dtype_is_float(want->dtype), use_exact = exact && is_float;
    double u = unit_roundoff(want->dtype);
    r->margin = exact ? fc_check_margin(want->dtype) : 0;
    /* The faithful computation's error against the exact one: its root
     * mean square over the output (finite elements) is the floor of every
     * element's allowance, so that an element where rounding every value
     * happens to be exact does not demand exactness. */
    double floor = 0, sq_ref = 0, sq_got = 0, sq_exact = 0;
    if (use_exact) {
        int64_t nfinite = 0;
        for (int64_t i = 0; i < r->numel; i++) {
            double w = fc_interp_load(want->dtype, want->data, i), e = exact_at(exact, i);
            double d = distance(w, e);
            if (!isfinite(d) || !isfinite(e)) continue;
            if (d > r->ref_err) r->ref_err = d;
            sq_ref += d * d;
            sq_exact += e * e;
            nfinite++;
        }
        floor = nfinite ? sqrt(sq_ref / (double)nfinite) : 0;
    }
    double worst_ratio = -1;
    for (int64_t i = 0; i < r->numel; i++) {
        double ratio;
        bool ok = element_ok(got, want, exact, i, r->margin, floor, u, &ratio);
        double x = is_float ? fc_interp_load(got->dtype, got->data, i) : (double)load_int(got->dtype, got->data, i);
        double w = is_float ? fc_interp_load(want->dtype, want->data, i) : (double)load_int(want->dtype, want->data, i);
        double err = distance(x, w);
        if (!ok && err == 0) err = INFINITY; /* two i64 values a double cannot tell apart */
        if (err > r->max_abs_err) r->max_abs_err = err;
        if (w != 0 && !isnan(w)) {
            double rel = isinf(w) ? (ok ? 0 : INFINITY) : err / fabs(w);
            if (rel > r->max_rel_err) r->max_rel_err = rel;
        }
        if (use_exact) {
            double e = exact_at(exact, i), xe = distance(x, e);
            if (xe > r->err) r->err = xe;
            if (isfinite(xe) && isfinite(e)) sq_got += xe * xe;
        }
        if (!ok) r->nbad++;
        /* The element nearest to (or furthest past) its bound. */
        if (ratio > worst_ratio) {
            worst_ratio = ratio;
            r->worst = i;
            r->worst_got = x;
            r->worst_want = w;
        }
    }
    if (sq_exact > 0) {
        r->rel_l2 = sqrt(sq_got / sq_exact);
        r->ref_rel_l2 = sqrt(sq_ref / sq_exact);
    }
    r->worst_ratio = worst_ratio < 0 ? 0 : worst_ratio;
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
    if (!buf || n == 0) return NULL;
    if (!d) {
        snprintf(buf, n, "output %d: no comparison", index);
        return buf;
    }
    if (!d->shape_ok) {
        snprintf(buf, n, "output %d: FAIL (dtype or shape differs)", index);
        return buf;
    }
    int len = snprintf(buf, n, "output %d (%s, %lld elements): max_abs_err %.3g max_rel_err %.3g (tolerance rel %g abs %g",
                       index, fc_dtype_name(d->dtype), (long long)d->numel, d->max_abs_err, d->max_rel_err,
                       d->tol.rel, d->tol.abs);
    if (len >= 0 && (size_t)len < n && d->margin > 0)
        len += snprintf(buf + len, n - (size_t)len, "; against float64: error %.3g, the reference's %.3g, allowed %gx",
                        d->err, d->ref_err, d->margin);
    if (len < 0 || (size_t)len >= n) return buf;
    if (d->pass)
        snprintf(buf + len, n - (size_t)len, "): ok");
    else
        snprintf(buf + len, n - (size_t)len, "): FAIL (%lld elements out of tolerance; worst [%lld]: got %.9g, want %.9g)",
                 (long long)d->nbad, (long long)d->worst, d->worst_got, d->worst_want);
    return buf;
}

static fc_status compare_outputs(fc_context *ctx, const fc_tensor *got, const fc_tensor *want, const fc_tensor *exact,
                                 int n, fc_output_diff *diffs, const char *fn) {
    if (n < 0 || (n > 0 && (!got || !want || !diffs)))
        return fc_set_error(ctx, FC_ERR_USAGE, "%s: NULL arguments or n < 0", fn);
    for (int i = 0; i < n; i++) {
        if ((fc_tensor_numel(&got[i]) > 0 && !got[i].data) || (fc_tensor_numel(&want[i]) > 0 && !want[i].data))
            return fc_set_error(ctx, FC_ERR_USAGE, "%s: output %d has no data", fn, i);
        if (!exact) continue;
        /* The exact outputs: f64 for a float output, want's own dtype for
         * an integer one (which is compared exactly, without them). */
        const fc_tensor *e = &exact[i];
        bool fits = valid_tensor(e) && valid_tensor(&want[i]) && e->rank == want[i].rank &&
                    e->dtype == (fc_dtype_is_float(want[i].dtype) ? FC_F64 : want[i].dtype);
        for (int d = 0; fits && d < e->rank; d++) fits = e->shape[d] == want[i].shape[d];
        if (!fits || (fc_tensor_numel(e) > 0 && !e->data))
            return fc_set_error(ctx, FC_ERR_USAGE, "%s: exact output %d is not an f64 tensor of the reference's shape",
                                fn, i);
    }
    int first_bad = -1;
    for (int i = 0; i < n; i++) {
        compare_one(&got[i], &want[i], exact ? &exact[i] : NULL, &diffs[i]);
        if (!diffs[i].pass && first_bad < 0) first_bad = i;
    }
    if (first_bad < 0) return FC_OK;
    char line[768];
    fc_output_diff_format(&diffs[first_bad], first_bad, line, sizeof line);
    if (!diffs[first_bad].shape_ok) {
        char a[160], b[160];
        return fc_set_error(ctx, FC_ERR_RUNTIME, "output %d is %s, the reference's is %s", first_bad,
                            tensor_type_str(&got[first_bad], a, sizeof a),
                            tensor_type_str(&want[first_bad], b, sizeof b));
    }
    return fc_set_error(ctx, FC_ERR_RUNTIME, "%s", line);
}

fc_status fc_compare_outputs(fc_context *ctx, const fc_tensor *got, const fc_tensor *want, int n,
                             fc_output_diff *diffs) {
    return compare_outputs(ctx, got, want, NULL, n, diffs, "fc_compare_outputs");
}

fc_status fc_compare_outputs_exact(fc_context *ctx, const fc_tensor *got, const fc_tensor *want,
                                   const fc_tensor *exact, int n, fc_output_diff *diffs) {
    if (n > 0 && !exact) return fc_set_error(ctx, FC_ERR_USAGE, "fc_compare_outputs_exact: NULL exact");
    return compare_outputs(ctx, got, want, exact, n, diffs, "fc_compare_outputs_exact");
}

fc_status fc_check_outputs(fc_graph *g, const fc_tensor *inputs, int nin, const fc_tensor *got, int nout,
                           fc_output_diff *diffs) {
    if (!g) return FC_ERR_USAGE;
    fc_context *ctx = fc_graph_context(g);
    if (nout < 0 || (nout > 0 && (!got || !diffs)))
        return fc_set_error(ctx, FC_ERR_USAGE, "fc_check_outputs: NULL arguments or nout < 0");
    size_t n = (size_t)nout + 1;
    fc_tensor *want = calloc(n, sizeof *want), *exact = calloc(n, sizeof *exact);
    fc_status st = want && exact ? FC_OK : fc_set_error(ctx, FC_ERR_NOMEM, "out of memory");
    if (!st) st = fc_run_reference(g, inputs, nin, want, nout);
    if (!st) st = fc_run_reference_exact(g, inputs, nin, exact, nout);
    if (!st) st = fc_compare_outputs_exact(ctx, got, want, exact, nout, diffs);
    for (int i = 0; i < nout; i++) {
        if (want) fc_tensor_release(&want[i]);
        if (exact) fc_tensor_release(&exact[i]);
    }
    free(want);
    free(exact);
    return st;
}
