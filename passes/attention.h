/*
 * attention.h - attention fusion: the written-out pattern becomes one
 * `attention` node (internal). docs/ATTENTION.md has the rules.
 *
 * fc_pass_attention finds softmax(scale * (Q @ K^T) [+ mask]) @ V in every
 * spelling the pass knows (composite or primitive softmax, casts to f32 and
 * back, the scale on Q, K or the scores, K transposed by a permute or laid
 * out as [.., D, S], a causal mask from iota, a comparison and where(-inf),
 * or a mask tensor, added or selected) and rewrites it into
 *
 *     attention(%q, %k, %v, [%mask], causal=, scale=)
 *
 * reading Q, K and V through views of the tensors the graph had, so that
 * codegen can read them in place. Whatever it cannot prove equivalent (up to
 * the skipped roundings of intermediates, see the .c file) stays as it was.
 *
 * Pipeline position: after the second canonicalize (composites are
 * primitives, CSE merged equal values) and BEFORE fc_pass_epilogue, which
 * would otherwise turn both matmuls into cuBLASLt gemms.
 *
 * The second half of this header is shared with fusion (passes/fuse.c) and
 * codegen (codegen/cuda/attention.c): how the attention kernel reads its
 * operands and writes its result through chains of view ops, as strides
 * into one stored buffer.
 */
#ifndef FC_PASSES_ATTENTION_H
#define FC_PASSES_ATTENTION_H

#include "ir.h"

#include <stdbool.h>
#include <stdint.h>

/* Rewrite g in place (one rebuild, then DCE). */
fc_status fc_pass_attention(fc_graph *g);

/* ---- strided views ------------------------------------------------------ */

/*
 * Element (c0, .., c[rank-1]) of a value read as a strided view of a stored
 * buffer lives at root_buffer[offset + sum c_i * stride[i]] (in elements of
 * the root's dtype, which is the value's dtype: views never cast).
 */
typedef struct fc_strided_view {
    const fc_value *root; /* the stored value whose buffer is read */
    int64_t offset;
    int rank;
    int64_t stride[FC_MAX_RANK];
} fc_strided_view;

/* Is value v stored (a buffer of its own, row-major)? Asked by the walk
 * below at every value of a view chain, starting with v itself. */
typedef bool (*fc_stored_fn)(const fc_value *v, void *arg);

/*
 * Follow v down its chain of view ops (permute, slice, split, expand, and
 * reshape where the strides allow it) to the first value `stored` accepts,
 * and describe v as a strided view of that value's buffer. False when the
 * chain reaches a value that is not stored and not a view, or a reshape that
 * no strides can express (merging dims that a permute separated, say). A
 * graph parameter is always a root, whatever `stored` says.
 *
 * Fusion calls this with its own idea of what is stored, to decide whether
 * the attention group may read an operand in place (then the views are not
 * stored); codegen calls it with "is a group input" to get the strides.
 */
bool fc_attention_view(const fc_value *v, fc_stored_fn stored, void *arg, fc_strided_view *out);

/*
 * The strides, in elements of the buffer of `w`, at which the attention
 * result `o` is written when `w` is reached from `o` by permute and reshape
 * ops only (each the one user of the value before it; the caller checks
 * that) and `w` is stored row-major. For o == w, the row-major strides of o.
 * False when the chain holds another op or a reshape that no strides can
 * express. This lets the kernel write [B, H, S, D] results straight into the
 * [B, S, H * D] buffer that the output projection reads.
 */
bool fc_attention_output_strides(const fc_value *o, const fc_value *w, int64_t *strides);

#endif
