/*
 * interp_tensor.c - the reference interpreter's elements and concrete
 * shapes: loading and storing an element of any dtype, shape arithmetic and
 * NumPy broadcasting, and the host tensors of both entry points.
 */
#include "interp_impl.h"

/* ================================================================ */
/* Elements: rounding, loading, storing.                             */
/* ================================================================ */

/*
 * Rounding is fc_round_to_dtype's (ir/dtype.c), one definition for every
 * stage. What it does, which is what the oracle means by "rounded":
 *  - f32/f16/bf16: round to nearest-even directly from double (no double
 *    rounding through f32); too large a magnitude gives inf.
 *  - i8/i32/i64: truncate toward zero and saturate at the dtype's limits
 *    (i64 just inside 2^63, the largest double below it); NaN gives 0. That
 *    is CUDA's cvt.rzi.sat (__float2int_rz), and it keeps every conversion
 *    defined where C leaves out-of-range ones undefined. Integer arithmetic
 *    that overflows therefore saturates here, where PyTorch wraps around:
 *    numeric tests keep integer results in range. Integers beyond 2^53 are
 *    not exact in a double.
 *  - bool: 1 if x != 0, NaN included (as C's (bool) and PyTorch), else 0.
 */

double fc_interp_load(fc_dtype dt, const void *data, int64_t i)
{
    switch (dt) {
    case FC_F64: return ((const double *)data)[i];
    case FC_F32: return ((const float *)data)[i];
    case FC_F16: return fc_f16_to_f32(((const uint16_t *)data)[i]);
    case FC_BF16: return fc_bf16_to_f32(((const uint16_t *)data)[i]);
    case FC_I64: return (double)((const int64_t *)data)[i];
    case FC_I32: return ((const int32_t *)data)[i];
    case FC_I8: return ((const int8_t *)data)[i];
    case FC_BOOL: return ((const uint8_t *)data)[i] != 0 ? 1.0 : 0.0;
    case FC_STRING: case FC_DTYPE_COUNT: break; /* strings are not numbers (interp_string.c) */
    }
    FC_UNREACHABLE("fc_interp_load: bad dtype");
}

void fc_interp_store(fc_dtype dt, void *data, int64_t i, double x)
{
    x = fc_round_to_dtype(x, dt);
    switch (dt) {
    case FC_F64: ((double *)data)[i] = x; return;
    case FC_F32: ((float *)data)[i] = (float)x; return;
    /* x is already an f16/bf16 value (or inf/NaN), so going through float
     * is exact: no double rounding. */
    case FC_F16: ((uint16_t *)data)[i] = fc_f32_to_f16((float)x); return;
    case FC_BF16: ((uint16_t *)data)[i] = fc_f32_to_bf16((float)x); return;
    case FC_I64: ((int64_t *)data)[i] = (int64_t)x; return; /* in range: saturated above */
    case FC_I32: ((int32_t *)data)[i] = (int32_t)x; return;
    case FC_I8: ((int8_t *)data)[i] = (int8_t)x; return;
    case FC_BOOL: ((uint8_t *)data)[i] = x != 0.0; return;
    case FC_STRING: case FC_DTYPE_COUNT: break;
    }
    FC_UNREACHABLE("fc_interp_store: bad dtype");
}

/* ================================================================ */
/* Concrete shapes.                                                  */
/* ================================================================ */

/* Product of dims; false if it overflows int64. */
bool fc_ref_shape_numel(int rank, const int64_t *shape, int64_t *out)
{
    int64_t n = 1;
    for (int i = 0; i < rank; i++) {
        if (shape[i] != 0 && n > INT64_MAX / shape[i])
            return false;
        n *= shape[i];
    }
    *out = n;
    return true;
}

const char *fc_ref_shape_str(int rank, const int64_t *shape, char *buf, size_t n)
{
    size_t used = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < rank && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (used < n)
        snprintf(buf + used, n - used, "]");
    return buf;
}

/* Normalize a possibly negative axis against rank; false if out of range. */
bool fc_ref_norm_axis(int64_t axis, int rank, int *out)
{
    if (axis < 0)
        axis += rank;
    if (axis < 0 || axis >= rank)
        return false;
    *out = (int)axis;
    return true;
}

bool fc_ref_axis_ok(interp *ip, int64_t axis, int rank, int *out)
{
    if (fc_ref_norm_axis(axis, rank, out))
        return true;
    fc_ref_err(ip, FC_ERR_INPUT, "axis %lld is out of range for rank %d", (long long)axis, rank);
    return false;
}

/*
 * Element offsets that read an operand of shape in[0..inr) while walking a
 * result of shape out[0..outr), by NumPy broadcasting: dims align on the
 * right, a missing or size-1 dim is read with stride 0. The shapes must
 * already be known to broadcast.
 */
void fc_ref_bcast_strides(int inr, const int64_t *in, int outr, int64_t *strides)
{
    int64_t s = 1;
    for (int i = outr - 1; i >= 0; i--) {
        int j = i - (outr - inr);
        if (j < 0) {
            strides[i] = 0;
            continue;
        }
        strides[i] = in[j] == 1 ? 0 : s;
        s *= in[j];
    }
}

/*
 * Broadcast shapes a and b into out (rank max of both). False if a pair of
 * dims is neither equal nor 1.
 */
bool fc_ref_bcast_shape(int ar, const int64_t *a, int br, const int64_t *b, int *outr, int64_t *out)
{
    int r = ar > br ? ar : br;
    for (int i = 0; i < r; i++) {
        int ia = i - (r - ar), ib = i - (r - br);
        int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return false;
        out[i] = da == 1 ? db : da;
    }
    *outr = r;
    return true;
}

/* Zeroed memory for n elements of size `size` (at least one byte, so that
 * an empty tensor still gets a non-NULL pointer). NULL on failure. */
void *fc_ref_alloc_zeroed(fc_context *ctx, int64_t n, size_t size)
{
    if (n < 0 || (uint64_t)n > SIZE_MAX / size)
        return NULL;
    size_t bytes = (size_t)n * size;
    if (bytes == 0)
        bytes = 1;
    void *p = fc_ctx_malloc(ctx, bytes);
    if (p)
        memset(p, 0, bytes);
    return p;
}

/* Element count of a host tensor's shape; -1 if the shape is bad or the
 * count overflows int64 (so that a caller's malloc fails, not overruns). */
static int64_t numel_or_bad(int rank, const int64_t *shape)
{
    int64_t n;
    if (rank < 0 || rank > FC_MAX_RANK)
        return -1;
    for (int i = 0; i < rank; i++)
        if (shape[i] < 0)
            return -1;
    return fc_ref_shape_numel(rank, shape, &n) ? n : -1;
}

int64_t fc_interp_tensor_numel(const fc_interp_tensor *t)
{
    return numel_or_bad(t->rank, t->shape);
}

void fc_interp_tensor_release(fc_interp_tensor *t)
{
    if (!t)
        return;
    free(t->data);
    t->data = NULL;
}

int64_t fc_tensor_numel(const fc_tensor *t)
{
    return t ? numel_or_bad(t->rank, t->shape) : -1;
}

void fc_tensor_release(fc_tensor *t)
{
    if (!t)
        return;
    free(t->data);
    t->data = NULL;
}

