/* onnx.h - the ONNX importer's internal interface, shared by its three parts:
 * onnx_read.c (the protobuf file, tensors, the graph walk), onnx_ops.c (the
 * op translation table) and onnx_shape.c (values known at import: constants,
 * shapes and the arithmetic on them, folded). */
#ifndef FC_ONNX_H
#define FC_ONNX_H

#include "ir.h"

#include <onnx/onnx.pb-c.h>

/* One element of a value known at import. A shape vector can hold a
 * symbolic dim (kind SYM: the fc_dim itself) or a size that is known to be
 * computed from symbols but is not a symbol itself (kind UNKNOWN), which a
 * reshape can still take as its one inferred (-1) dim. */
enum { OX_KNOWN = 0, OX_SYM = 1, OX_UNKNOWN = 2 };

typedef struct ox_const {
    fc_dtype dt;
    int rank;
    int64_t shape[FC_MAX_RANK];
    int64_t n;
    int64_t *i;          /* integer and bool dtypes */
    double *f;           /* float dtypes */
    unsigned char *kind; /* NULL when every element is OX_KNOWN */
} ox_const;

/* An ONNX value: the IR value, or its data known at import, or both. */
typedef struct ox_val {
    char *name;
    fc_value *v;
    ox_const *k;
    /* A sequence (onnx_seq.c): its tensors, known at import as a list of
     * IR values (graph arena memory). */
    bool is_seq;
    fc_value **seq;
    int nseq;
} ox_val;

typedef struct ox_ctx ox_ctx;
struct fc_weights;

/* The importer's state for one graph (also the throwaway graphs of folding). */
struct ox_ctx {
    fc_context *ctx;
    fc_graph *g;
    const char *file;
    int64_t opset;
    struct fc_weights *w; /* where constant tensors that become parameters go */
    ox_ctx *root;         /* the model's importer (itself, or the folder's parent) */
    const Onnx__NodeProto *node;
    const Onnx__GraphProto *gp; /* the model's graph: declared types (the root's) */
    ox_val **in;          /* the current node's inputs (NULL: absent) */
    int nin;
    fc_value *out_v[16];  /* the current node's results */
    ox_const *out_k[16];
    int nout;
    /* a sequence result (the sequence ops have one output) */
    bool out_is_seq;
    fc_value **out_seq;
    int out_nseq;
    /* the value table (open addressing on the name) */
    ox_val *vals;
    size_t cap, used;
    int nweights_made;
};

/* onnx_read.c */
fc_status ox_error(ox_ctx *ox, fc_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
ox_val *ox_lookup(ox_ctx *ox, const char *name);
ox_val *ox_define(ox_ctx *ox, const char *name);
bool ox_dtype_from_onnx(int32_t t, fc_dtype *out);
const char *ox_onnx_dtype_name(int32_t t);
/* Tensor proto to known data (dir: where external data lives, or NULL). */
fc_status ox_tensor_to_const(ox_ctx *ox, const Onnx__TensorProto *t, const char *dir, ox_const **out);

/* onnx_ops.c: translate ox->node (its inputs in ox->in) into ox->out_*. */
fc_status ox_translate(ox_ctx *ox);
/* Is op_type in the table (for the folder's choice, and messages). */
bool ox_op_known(const char *op_type);
/* onnx_seq.c: the sequence ops, resolved at import. */
bool ox_op_is_sequence(const char *op_type);
fc_status ox_op_sequence(ox_ctx *ox);
/* onnx_grad.c: Gradient (ai.onnx.preview.training), differentiating the IR
 * built so far. */
fc_status ox_op_gradient(ox_ctx *ox);

/* onnx_string.c: a STRING TensorProto as an fc_tensor (fusec.h's layout). */
fc_status ox_string_tensor(fc_context *ctx, const char *file, const Onnx__TensorProto *t, fc_tensor *out);
/* onnx_shape.c */
ox_const *ox_const_new(fc_dtype dt, int rank, const int64_t *shape);
void ox_const_free(ox_const *k);
/* Integer view of known element i (floats truncated). */
int64_t ox_const_int(const ox_const *k, int64_t i);
double ox_const_dbl(const ox_const *k, int64_t i);
/* The IR value of a known tensor: fc_full for one repeated value, else a
 * parameter whose data goes to the weights. */
fc_value *ox_materialize(ox_ctx *ox, ox_val *val);
/* Fold the current node when every input is known: structurally for the
 * shape ops (which keep symbolic dims), else by running the node's
 * translation on a throwaway graph with the reference interpreter. Returns
 * FC_OK with *folded false when the node is not folded. */
fc_status ox_try_fold(ox_ctx *ox, bool *folded);
/* Known data to an fc_tensor (the tensor owns a copy) and back. */
fc_status ox_const_to_tensor(const ox_const *k, fc_tensor *t);
ox_const *ox_const_from_tensor(const fc_tensor *t);

/* safetensors.c: the weights container, shared with the importer. */
fc_status fc_weights_new_internal(struct fc_weights **out);
fc_status fc_weights_add_owned(struct fc_weights *w, const char *name, fc_tensor *t);

#endif
