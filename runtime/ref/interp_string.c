/* interp_string.c - string tensors in the reference interpreter:
 * string_normalizer, and the one storage rule for string values. A string
 * value's buffer holds its element pointers where a number's holds doubles
 * (one pointer per 8-byte slot); a parameter's point at the caller's
 * strings, which outlive the run, and a computed value's into the bytes
 * allocated after them in the same block, which free() releases whole. */
#include "interp_impl.h"

_Static_assert(sizeof(double) == sizeof(const char *), "a string pointer fills one double slot");

fc_status fc_ref_run_string_normalizer(interp *ip)
{
    const ibuf *x = operand(ip, 0);
    const fc_attrs *a = &ip->node->a;
    const fc_value *v = ip->node->out[0];
    const char *const *xs = (const char *const *)(const void *)x->data;
    int64_t kept = fc_string_normalize_count(a, xs, x->numel);
    int64_t want = v->dims[v->rank - 1];
    if (kept != want)
        return fc_ref_err(ip, FC_ERR_INPUT,
                          "%lld strings remain of %lld, but the result's shape holds %lld (how many remain depends on "
                          "the values; the graph's shape attribute says how many it expects)",
                          (long long)kept, (long long)x->numel, (long long)want);
    int64_t shape[2] = {1, kept};
    fc_status st = fc_ref_set_result(ip, 0, x->rank, x->rank == 1 ? &shape[1] : shape);
    if (st != FC_OK)
        return st;
    size_t head = sizeof(const char *) * (size_t)kept;
    size_t bytes = fc_string_normalize_bytes(a, xs, x->numel);
    char *blk = fc_ref_alloc_zeroed(ip->ctx, (int64_t)(head + bytes), 1);
    if (!blk)
        return nomem(ip);
    fc_string_normalize(a, xs, x->numel, (const char **)(void *)blk, blk + head);
    ibuf *y = result(ip, 0);
    fc_ctx_freemem(ip->ctx, y->data);
    y->data = (double *)(void *)blk;
    return FC_OK;
}
