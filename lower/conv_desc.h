/*
 * conv_desc.h - one convolution library call as plain data: what a conv_cl
 * node (ir/ops.def) asks the library to run, with no GPU and no graph.
 *
 * The lowering makes it from the plan node (fc_conv_desc_of, the only
 * function here that reads a node); the program description carries one
 * per library launch that runs a convolution (lower/program_desc.h), the
 * cache stores it, and runtime/cuda/cudnn.h runs it. fc_conv_desc_valid
 * bounds every byte the call implies against the launch's buffers, so a
 * description read from bytes cannot make the library touch memory
 * outside them. docs/PASSES.md ("lower_conv") has the node's contract.
 */
#ifndef FC_LOWER_CONV_DESC_H
#define FC_LOWER_CONV_DESC_H

#include "passes/epilogue.h" /* fc_gemm_act */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* y = act(conv(x, w) + bias + residual), rounded once to `out`, with
 * x [N, H, W, C], w [M, kh, kw, C/groups], y [N, OH, OW, M], bias [M],
 * residual like y: every tensor dense and channels-last (NHWC, KRSC). */
typedef struct fc_conv_desc {
    fc_dtype dt, out;            /* x's and w's dtype; y's (and the bias's and residual's) */
    int64_t N, H, W, C;          /* x */
    int64_t M, kh, kw, groups;   /* w */
    int64_t OH, OW;              /* y */
    int64_t stride[2], dilation[2], pad_begin[2], pad_end[2]; /* (h, w) */
    bool has_bias, has_residual;
    fc_gemm_act act;
    /* Positions among the launch's arguments (fc_launch.args); -1 for an
     * operand it does not have. */
    int x_arg, w_arg, bias_arg, residual_arg, out_arg;
} fc_conv_desc;

/* The description of conv_cl node n run as a launch whose arguments are
 * the value ids arg_ids[0 .. nargs). FC_ERR_UNSUPPORTED (with a message)
 * for a node that is not a conv_cl or has symbolic dims; FC_ERR_USAGE
 * when a value of n is not among the arguments. */
fc_status fc_conv_desc_of(fc_context *ctx, const fc_node *n, const int *arg_ids, int nargs, fc_conv_desc *out);

/* Whether d is a convolution the library can run safely for a launch of
 * nargs arguments whose buffers hold arg_bytes[i] bytes: dtypes, sizes
 * and flags that make sense, positions in range, and each tensor inside
 * its buffer. false, with the reason in why[0 .. n), when it is not. */
bool fc_conv_desc_valid(const fc_conv_desc *d, int nargs, const int64_t *arg_bytes, char *why, size_t n);

/* The FLOPs of the call (2 per multiply-add of the convolution). */
double fc_conv_desc_flops(const fc_conv_desc *d);

/* A one-line description for plans: "conv_cl 3x3/s2 [bias,residual,relu]
 * -> bf16". Returns buf. */
const char *fc_conv_describe(const fc_node *n, char *buf, size_t size);

#endif
