/*
 * variant_desc.h - a dynamic variant's lowered description: everything
 * that makes the variant's program description at one shape, with the
 * symbols' values as the only input, and nothing that points into a plan.
 *
 * A variant's kernels take the symbol values; what differs between its
 * shapes is plain arithmetic on them: the arena's placement (the memory
 * plan's layout, ir/arena_layout.h), each value's size, the parameters'
 * and results' dims, the grids of the kernels whose grids are per shape
 * (lower/launch.h: fc_launch_grid), and each library launch's GEMM (its
 * operands' types, planned at the shape by the rule the bound node would
 * be: fc_gemm_plan_of_info). The compile driver makes it once from the
 * plan (runtime/cuda/variant_compile.c); a run at a new shape evaluates it
 * here (fc_variant_desc_at), so that no pass and no code generator runs
 * while a program runs, and a new shape costs a few microseconds.
 */
#ifndef FC_LOWER_VARIANT_DESC_H
#define FC_LOWER_VARIANT_DESC_H

#include "ir/arena_layout.h"
#include "lower/program_desc.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A library launch's GEMM as types (symbols kept): the node's decoded
 * flags and the types its plan is made from. */
typedef struct fc_gemm_form {
    fc_op op;
    fc_gemm_info info;        /* the node's flags; its value pointers are NULL */
    fc_program_tensor a, y;   /* the left operand and the result */
    fc_program_tensor *w;     /* info.nweights right operands */
    /* Positions among the launch's arguments, the same at every shape
     * (fc_gemm_desc.op_arg, .out_arg); NULL: the launch runs no GEMM. */
    int *op_arg;
    int out_arg;
} fc_gemm_form;

typedef struct fc_variant_desc {
    fc_arena_layout *arena; /* the memory plan's layout (the variant owns it) */
    /* By value id (arena->nvalues of them): where it lives. The kind and
     * index do not depend on the shape, but an arena value's index is its
     * offset at the shape; every size is per shape. */
    fc_store *store;
    bool *grid_sized;    /* by launch: its grid depends on the symbols (else the variant's is every shape's) */
    fc_gemm_form *gemm;  /* by launch, or NULL when no launch runs a GEMM */
    int gemm_weights;    /* the weights of every GEMM: the room their columns take per shape */
} fc_variant_desc;

/* The form of gemm (or matmul) node n run as a launch with arguments
 * arg_ids[0 .. nargs) (fc_launch.args). Compile time: it reads the node.
 * FC_ERR_UNSUPPORTED (nothing on ctx) for a node that is not a gemm or
 * matmul; FC_ERR_USAGE when a value of n is not an argument; FC_ERR_NOMEM.
 * *out is zeroed on failure; free it with fc_gemm_form_release. */
fc_status fc_gemm_form_of(fc_context *ctx, const fc_node *n, const int *arg_ids, int nargs, fc_gemm_form *out);
void fc_gemm_form_release(fc_context *ctx, fc_gemm_form *f);
/* Free what vd owns (of v's nlaunches launches) and zero it. */
void fc_variant_desc_release(fc_context *ctx, fc_variant_desc *vd, int nlaunches);

/* The bytes fc_variant_desc_at places in its block for variant v. */
size_t fc_variant_desc_bytes(const fc_variant_desc *vd, const fc_program_desc *v);
/*
 * v (the variant's own description: signature with symbolic dims, its
 * launches, its target) at one shape, into d: storage with the shape's
 * arena offsets and sizes, the arena's size, the parameters' and results'
 * dims, the launches with the shape's grids (a variant of frame kernels:
 * v's own launches, whose grids serve every shape), and each GEMM's
 * description, checked against the storage. d's arrays live in block
 * (fc_variant_desc_bytes of it, 16-byte aligned); its names, launch
 * argument lists and GEMM operand positions are v's and vd's, borrowed:
 * never release d. sym_values: nsyms values, checked by the caller
 * (fc_graph_check_bind_values). FC_ERR_INPUT when a size or a grid
 * overflows; FC_ERR_NOMEM; FC_ERR_RUNTIME when a GEMM does not fit its
 * buffers.
 */
fc_status fc_variant_desc_at(fc_context *ctx, const fc_variant_desc *vd, const fc_program_desc *v,
                             const int64_t *sym_values, int nsyms, void *block, fc_program_desc *d);

#endif
