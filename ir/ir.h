/*
 * ir.h - the graph IR shared by every stage (internal header).
 *
 * A graph is a list of nodes in topological order (the order they were built
 * in). Each node has operand values and result values. Values carry a dtype
 * and a shape; a dim is static (>= 0) or symbolic (<= FC_DIM_SYM_BASE).
 * Everything of a graph lives in its arena and is freed with the graph.
 */
#ifndef FC_IR_H
#define FC_IR_H

#include "fusec.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------------- */
/* Broken invariants: one macro, naming file and line. These are     */
/* bugs in fusec, never user errors; they abort (as assert does).     */
/* ---------------------------------------------------------------- */
_Noreturn void fc_unreachable_at(const char *file, int line, const char *what);
#define FC_UNREACHABLE(what) fc_unreachable_at(__FILE__, __LINE__, (what))
#define FC_ASSERT(cond)                                                       \
    do {                                                                      \
        if (!(cond)) fc_unreachable_at(__FILE__, __LINE__, "assertion failed: " #cond); \
    } while (0)

/* ---------------------------------------------------------------- */
/* The op table.                                                     */
/* ---------------------------------------------------------------- */
typedef enum fc_op {
#define X(id, name, min_in, max_in, kind, cost, weight, attrs) FC_OP_##id,
#include "ops.def"
#undef X
    FC_OP_COUNT
} fc_op;

typedef enum fc_op_kind {
    FC_KIND_ELEMWISE,
    FC_KIND_BROADCAST,
    FC_KIND_INJECTIVE,
    FC_KIND_REDUCTION,
    FC_KIND_COMPOSITE,
    FC_KIND_OPAQUE,
} fc_op_kind;

/* An op's cost class (ops.def, column `cost`): ordered, compare with <=. */
typedef enum fc_op_cost {
    FC_COST_LOW,
    FC_COST_MID,
    FC_COST_HIGH,
} fc_op_cost;

typedef struct fc_op_info {
    const char *name;
    int min_in, max_in; /* max_in -1: variadic */
    fc_op_kind kind;
    fc_op_cost cost; /* ops.def column `cost` */
    int weight;      /* ops.def column `weight`: source size as NVRTC sees it */
    const char *attrs; /* signature, see ops.def */
} fc_op_info;

extern const fc_op_info fc_op_table[FC_OP_COUNT];
/* Look an op up by its .ir name; returns FC_OP_COUNT if unknown. */
fc_op fc_op_from_name(const char *name, size_t len);
bool fc_op_is_unary(fc_op op);   /* neg .. erf */
bool fc_op_is_binary(fc_op op);  /* add .. pow */
bool fc_op_is_compare(fc_op op); /* eq .. ge */
bool fc_op_is_reduce(fc_op op);  /* reduce_* */
/* unary, binary, compare, where, cast: one result element from the
 * operands' elements at the same (broadcast) index. */
bool fc_op_is_elementwise(fc_op op);
/* reshape, permute, expand, slice, concat, split, gather, iota, full: each
 * result element is an operand element (or a constant) found by index. */
bool fc_op_is_view(fc_op op);
/* all_reduce, all_gather, reduce_scatter (docs/PARALLEL.md). */
bool fc_op_is_collective(fc_op op);
/* The op's cost class and code weight (ops.def says what each answers). */
fc_op_cost fc_op_cost_of(fc_op op);
int fc_op_weight(fc_op op);
/* What a node adds to a fused kernel's source (FC_GROUP_MAX_WEIGHT caps a
 * group's total): its op's weight, plus FC_OPERAND_WEIGHT for each operand
 * past the first of a variadic op (a concat's operands each add a branch
 * of the coordinate search and a load per vector lane). */
#define FC_OPERAND_WEIGHT 2
struct fc_node;
int fc_node_weight(const struct fc_node *n);
/* Does the op's list attribute hold dims (ops.def kind `dims`: sizes and
 * symbols, as reshape's shape) rather than plain ints (axes, perm)? */
bool fc_op_list_is_dims(fc_op op);

/* ---------------------------------------------------------------- */
/* Attributes. One struct for every op; the op's signature says      */
/* which fields it uses. List attributes share `list`.                */
/* ---------------------------------------------------------------- */
typedef enum fc_attr_kind {
    FC_ATTR_INT,   /* int64 */
    FC_ATTR_INTS,  /* list of int64 (axes, perm) */
    FC_ATTR_DIMS,  /* list of fc_dim: ints, symbols, one -1 (shape, sizes) */
    FC_ATTR_BOOL,
    FC_ATTR_FLOAT,
    FC_ATTR_DTYPE,
    FC_ATTR_STRS,  /* list of strings (string_normalizer's stopwords) */
} fc_attr_kind;

typedef struct fc_attrs {
    int64_t axis;
    int nlist;
    int64_t *list; /* axes | perm | shape | sizes | window | pads (arena memory) */
    bool keepdim, causal;
    double eps, value, scale;
    fc_dtype dtype; /* to | dtype */
    int64_t start, end, step;
    int64_t groups, mode, coord; /* conv/conv_transpose; pad and resize (ops.def) */
    bool ceil, count_pad;        /* max_pool, avg_pool */
    int64_t ranks;               /* the collectives: the group's size */
    bool case_sensitive;         /* string_normalizer */
    int nstrs;
    const char *const *strs;     /* stopwords: NUL-terminated (arena memory) */
} fc_attrs;

/* One parsed entry of an op's attribute signature. */
typedef struct fc_attr_spec {
    char name[16];
    fc_attr_kind kind;
    bool has_default;
    char default_text[32];
} fc_attr_spec;

#define FC_MAX_ATTRS 6
/* The parsed signature of op: returns the number of attributes. */
int fc_op_attr_specs(fc_op op, const fc_attr_spec **specs);
/* Fill every attribute of op with its default (required ones zeroed). */
void fc_attrs_defaults(fc_op op, fc_attrs *a);
/* Pointers into `a` for an attribute name: exactly one is set. */
void fc_attr_field(fc_attrs *a, const char *name, int64_t **i, bool **b, double **f, fc_dtype **dt);

/* The float64 value of elementwise op `op` on scalars (b, c unused by
 * unary ops; where(a, b, c)). The caller rounds to the result dtype. */
double fc_scalar_eval(fc_op op, double a, double b, double c);

/* ---------------------------------------------------------------- */
/* Dtypes.                                                           */
/* ---------------------------------------------------------------- */
bool fc_dtype_is_float(fc_dtype dt);
bool fc_dtype_is_int(fc_dtype dt); /* i8 i32 i64 (not bool) */
/* Parse a dtype name; returns FC_DTYPE_COUNT if unknown. */
fc_dtype fc_dtype_from_name(const char *s, size_t len);
/* PyTorch promotion of two tensor dtypes. */
fc_dtype fc_promote(fc_dtype a, fc_dtype b);
/* The dtype eager PyTorch computes dt's elementwise ops in (its "opmath"
 * type): f32 for f16 and bf16, dt itself otherwise. */
fc_dtype fc_opmath_dtype(fc_dtype dt);
/* The dtype a weak scalar operand of elementwise op `op`, computing in
 * cdt, is rounded to, as eager PyTorch's CUDA kernels take a Python scalar:
 * add, sub, mul, div, max and min take it in opmath (x * 1.702 on bf16
 * multiplies by the f32 nearest 1.702, not by the bf16 1.703125); pow, the
 * compares and where convert it to cdt first. */
fc_dtype fc_weak_scalar_dtype(fc_op op, fc_dtype cdt);

/* ---------------------------------------------------------------- */
/* Source locations, for diagnostics.                                */
/* ---------------------------------------------------------------- */
typedef struct fc_loc {
    int line, col; /* 1-based; line 0 = no location */
} fc_loc;

/* ---------------------------------------------------------------- */
/* Values and nodes.                                                 */
/* ---------------------------------------------------------------- */
typedef struct fc_node fc_node;

struct fc_value {
    /* The graph that made it. Builders refuse a value of another graph:
     * the node would point into memory that graph owns and frees. */
    const fc_graph *graph;
    fc_dtype dtype;
    int rank;
    fc_dim dims[FC_MAX_RANK];
    fc_node *def;    /* defining node; NULL for params and weak scalars */
    int def_index;   /* which result of def */
    int param_index; /* index among params, or -1 */
    int id;          /* unique in the graph, dense from 0 */
    const char *name; /* text name without '%', or NULL (printer invents) */
    /* A parameter declared `inout` (docs/DECODE.md): the graph writes it in
     * place through its one use, an update_slice whose result aliases it. */
    bool inout;
    /* A parameter of a sharded graph (passes/shard.c): the axis it is split
     * along over the ranks, plus one; 0 when every rank takes it whole. */
    int shard_axis1;
    bool weak;       /* a weak scalar operand (bare number) */
    bool weak_int;   /* ...written as an integer */
    double scalar;   /* ...its value */
    bool poison;
};

struct fc_node {
    fc_op op;
    int id;
    int nin, nout;
    fc_value **in;
    fc_value **out;
    fc_attrs a;
    fc_loc loc;
    /* The source lines (loc.line values) of the nodes a pass replaced by
     * this one, besides its own: sorted and distinct, in the graph's arena
     * (a launch's source note names them all). */
    const int *cover;
    int ncover;
    bool dead; /* removed by a pass; skipped by iteration helpers */
};

/* ---------------------------------------------------------------- */
/* Arena: bump allocation in chunks, freed all at once.              */
/* ---------------------------------------------------------------- */
typedef struct fc_arena_chunk fc_arena_chunk;
typedef struct fc_arena {
    fc_context *ctx;
    fc_arena_chunk *head;
    size_t used, cap;
} fc_arena;

void fc_arena_init(fc_arena *ar, fc_context *ctx);
void fc_arena_release(fc_arena *ar);
/* Zeroed, 16-byte aligned memory; NULL (and an error on ctx) when out of memory. */
void *fc_arena_alloc(fc_arena *ar, size_t size);
char *fc_arena_strndup(fc_arena *ar, const char *s, size_t n);

/* Allocation through the context (honours fault injection). */
void *fc_ctx_malloc(fc_context *ctx, size_t size);
void *fc_ctx_realloc(fc_context *ctx, void *p, size_t size);
void fc_ctx_freemem(fc_context *ctx, void *p);
/* Room for `need` entries of elem bytes in *arr, a context allocation
 * (the capacity doubles from 8); false when out of memory (the error on
 * ctx; *arr and *cap unchanged). */
bool fc_ctx_grow(fc_context *ctx, void **arr, int *cap, int need, size_t elem);

/* ---------------------------------------------------------------- */
/* Context and errors.                                               */
/* ---------------------------------------------------------------- */
#define FC_ERROR_MAX 4096
struct fc_context {
    char error[FC_ERROR_MAX];
    long alloc_fail_after; /* 0: off; else the countdown to failure */
    long alloc_count;
};


/* Record an error on ctx (printf-style); returns `st` for chaining. */
fc_status fc_set_error(fc_context *ctx, fc_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
fc_status fc_set_errorv(fc_context *ctx, fc_status st, const char *fmt, va_list ap);
/*
 * Record a located diagnostic:
 *   file:line:col: error: message
 *       <source line>
 *       <caret under col>
 */
fc_status fc_diag(fc_context *ctx, const char *file, const char *text, size_t len, fc_loc loc,
                  const char *fmt, ...) __attribute__((format(printf, 6, 7)));
fc_status fc_diagv(fc_context *ctx, const char *file, const char *text, size_t len, fc_loc loc,
                   const char *fmt, va_list ap);

/* ---------------------------------------------------------------- */
/* A growing string, appended to with printf. The buffer is malloc'd  */
/* (through ctx when set, so fault injection reaches it); after a     */
/* failed allocation `oom` is set and appends do nothing.             */
/* ---------------------------------------------------------------- */
/* A malloc'd byte buffer owned by its holder (a cubin, an encoded
 * description); free it with fc_bytes_free. */
typedef struct fc_bytes {
    uint8_t *data;
    size_t size;
} fc_bytes;
/* Free b->data and zero b. NULL and an empty buffer are ignored. */
void fc_bytes_free(fc_bytes *b);

typedef struct fc_strbuf {
    fc_context *ctx; /* may be NULL */
    char *buf;       /* NUL-terminated once anything was appended */
    size_t len, cap;
    bool oom;
} fc_strbuf;

void fc_strbuf_printf(fc_strbuf *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void fc_strbuf_vprintf(fc_strbuf *s, const char *fmt, va_list ap);
/* Append n bytes of data (text or not; a NUL is kept after them). */
void fc_strbuf_put(fc_strbuf *s, const void *data, size_t n);

/* ---------------------------------------------------------------- */
/* Graph.                                                            */
/* ---------------------------------------------------------------- */
typedef struct fc_sym_binding {
    const char *name;
    int64_t value;
    bool used; /* a dim named it (fc_graph_sym; fc_graph_bind_used) */
} fc_sym_binding;

/* A name -> index table (names.c); the names are not copied: they must
 * live as long as the table (in the graph's arena). */
typedef struct fc_name_slot {
    const char *name;
    size_t len;
    int index;
} fc_name_slot;
typedef struct fc_name_index {
    fc_name_slot *slots;
    size_t cap, used;
} fc_name_index;
/* The index stored for name, or -1. */
int fc_name_index_find(const fc_name_index *ix, const char *name, size_t len);
/* Add or replace name -> index; false when out of memory. */
bool fc_name_index_put(fc_name_index *ix, fc_arena *ar, const char *name, size_t len, int index);

struct fc_graph {
    fc_context *ctx;
    fc_arena arena;
    const char *name;

    fc_node **nodes; /* topological order */
    int nnodes, cap_nodes;
    fc_value **params;
    int nparams, cap_params;
    fc_value **outputs;
    int noutputs;
    bool returned;

    const char **syms; /* symbolic dim names; sym i is FC_DIM_SYM_BASE - i */
    int nsyms, cap_syms;
    fc_sym_binding *binds;
    int nbinds, cap_binds;
    /* params, syms and binds by name: every lookup is by hash. */
    fc_name_index param_names, sym_names, bind_names;

    int next_value_id, next_node_id;
    fc_status status; /* sticky: first builder error */
    fc_value poison_value;

    /* Source text, when the graph came from a file: builders report errors
     * at cur_loc in it. */
    const char *src_file;
    const char *src_text;
    size_t src_len;
    fc_loc cur_loc;
    /* A model has ops, not lines: for a graph imported from one, a node's
     * loc.line is 1 + the index here of the model's op it comes from, and
     * src_ops[index] is that op's name (what a launch's source note says). */
    const char **src_ops;
    int nsrc_ops;
};

/* The name of the model op a node comes from (see src_ops), or NULL. */
static inline const char *fc_graph_src_op(const fc_graph *g, fc_loc loc) {
    return g->src_ops && loc.line > 0 && loc.line <= g->nsrc_ops ? g->src_ops[loc.line - 1] : NULL;
}
/* Copy from's src_ops into to's arena; false when out of memory. */
bool fc_graph_copy_src_ops(fc_graph *to, const fc_graph *from);
/* Give n (of g) a copy of the cover of `like` (a node of any graph); false
 * when out of memory. */
bool fc_node_copy_cover(fc_graph *g, fc_node *n, const fc_node *like);

/* Record a builder error on g: sticky, located at g->cur_loc when set. */
fc_status fc_graph_error(fc_graph *g, fc_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The error for a value of another graph used by `op` as its `what` number
 * `index` ("operand 1", "result 0"): FC_ERR_USAGE, sticky. */
fc_status fc_foreign_value(fc_graph *g, const char *op, const char *what, int index);
/* A reduce_max or reduce_min over an axis of size 0 (an error): true, and
 * the message in buf (verify.c). */
bool fc_empty_max_message(fc_op op, const fc_value *x, const fc_attrs *a, char *buf, size_t n);

/* Grow an arena array (doubling); returns false on OOM (error recorded). */
bool fc_grow(fc_arena *ar, void **arr, int *cap, int need, size_t elem);

static inline bool fc_dim_is_sym(fc_dim d) { return d <= FC_DIM_SYM_BASE; }
static inline int fc_dim_sym_index(fc_dim d) { return (int)(FC_DIM_SYM_BASE - d); }
static inline fc_dim fc_dim_sym(int index) { return FC_DIM_SYM_BASE - index; }
/* d with symbol i replaced by vals[i] (a binding of every symbol). */
static inline fc_dim fc_dim_value(fc_dim d, const int64_t *vals) { return fc_dim_is_sym(d) ? vals[fc_dim_sym_index(d)] : d; }
/* Whether every dim of v is static. */
static inline bool fc_value_is_static(const fc_value *v) {
    for (int d = 0; d < v->rank; d++)
        if (fc_dim_is_sym(v->dims[d])) return false;
    return true;
}

/* Symbol lookup by name without creating it; returns 0 if absent. */
bool fc_graph_find_sym(const fc_graph *g, const char *name, size_t len, fc_dim *out);
/* Symbol by name: a bound value, an existing symbol or a new one. */
fc_dim fc_graph_sym(fc_graph *g, const char *name, size_t len);
/* A dim of g as a dim of c, a graph rebuilt from g (ir/clone.c): symbols
 * are looked up by name in c, where a binding makes them static. */
fc_dim fc_dim_map(fc_graph *g, fc_graph *c, fc_dim d);

/* Product of static dims; *symbolic set if any dim is symbolic. Returns
 * false on overflow of int64. */
bool fc_shape_numel(const fc_dim *dims, int rank, int64_t *numel, bool *symbolic);

/*
 * The generic builder: infer result types of op on `in` with attributes a,
 * append the node, return it (NULL on error, with the graph poisoned).
 * `nout` is only used by split (the number of sizes decides it).
 * The attrs' list is copied into the arena.
 */
fc_node *fc_build(fc_graph *g, fc_op op, fc_value *const *in, int nin, const fc_attrs *a);

/* ---- the convolution family's geometry (window.c) ----------------------- */
/* Per spatial dim: input size, kernel size, stride, dilation, pads at the
 * begin and end, output padding (conv_transpose), output size. */
typedef struct fc_window_geom {
    int ns;
    int64_t in[FC_MAX_SPATIAL], k[FC_MAX_SPATIAL], s[FC_MAX_SPATIAL], d[FC_MAX_SPATIAL];
    int64_t pb[FC_MAX_SPATIAL], pe[FC_MAX_SPATIAL], op[FC_MAX_SPATIAL], out[FC_MAX_SPATIAL];
} fc_window_geom;
/* The geometry of a conv, conv_transpose, max_pool or avg_pool with
 * attributes a over ns spatial dims of static sizes `in`; `kernel` holds
 * the weight's kernel sizes for the convolutions (NULL for the pools).
 * False, with the reason in err, when it does not fit. */
bool fc_window_geom_of(fc_op op, const fc_attrs *a, int ns, const int64_t *in, const int64_t *kernel,
                       fc_window_geom *w, char *err, size_t nerr);
/* The entries after the geometry in conv_cl's window (ops.def): 0 or 1
 * for a bias and a residual operand, then the activation (an
 * fc_gemm_act: 0 none, 1 relu, 2 gelu_tanh). */
enum fc_conv_epi { FC_CONV_BIAS, FC_CONV_RESIDUAL, FC_CONV_ACT, FC_CONV_EPI_LEN };
/* Positions in one window: the product of the kernel sizes. */
int64_t fc_window_size(const fc_window_geom *w);
/* Whether conv n is depthwise: groups > 1, each one input channel and one
 * output channel (weight [G, 1, ..]). */
bool fc_conv_is_depthwise(const fc_node *n);
/* The result type of conv, conv_transpose, the pools, batch_norm, pad and
 * resize (build.c's inference for them); false after recording an error. */
bool fc_infer_window_op(fc_graph *g, fc_op op, fc_value *const *in, int nin, const fc_attrs *a, fc_dtype *dt, int *rank,
                        fc_dim *dims);

/* Check rank, dims and 64-bit size of a shape; poisons g on failure. */
bool fc_check_shape(fc_graph *g, const char *what, fc_dtype dt, int rank, const fc_dim *dims);

/* FC_OK when every dim of the graph is static (a compiled program bakes
 * shapes in); else an error naming the first unbound symbol. */
fc_status fc_graph_check_static(fc_graph *g);

/* What a compile entry point (`fn`, for the messages) checks of its
 * arguments before anything else: a graph (FC_ERR_USAGE without one), an
 * out pointer, no error left from building g, and its results set. */
fc_status fc_graph_check_compile(fc_graph *g, bool have_out, const char *fn);

/* Matmul's view of operand v: its dims with a rank-1 operand promoted
 * ([K] is [1, K] on the left, [K, 1] on the right); returns the rank. The
 * one rule for shape inference, cuBLASLt's descriptions and the generated
 * GEMMs. */
int fc_matmul_operand_dims(const fc_value *v, bool left, fc_dim *dims);

/* Where v, a result of slice or split along axis ax of an input whose dim
 * there is static, starts in that input, with its step along ax in *step
 * (1 for split). Slice's start is clamped as Python's; the one rule for
 * every code generator. */
int64_t fc_view_start(const fc_value *v, int ax, int64_t *step);

/* Inference of update_slice and cache_attention (ir/build_decode.c): the
 * result's type into *dt, *rank, dims; false with the graph poisoned. */
bool fc_infer_decode(fc_graph *g, fc_op op, fc_value *const *in, const fc_attrs *a, fc_dtype *dt, int *rank,
                     fc_dim *dims);
/* Inference of all_reduce, all_gather and reduce_scatter
 * (ir/build_collective.c), as fc_infer_decode. */
bool fc_infer_collective(fc_graph *g, fc_op op, fc_value *const *in, const fc_attrs *a, fc_dtype *dt, int *rank,
                         fc_dim *dims);
/* The string dtype (ir/strings.c). Whether op may take or make string
 * tensors (only string_normalizer does); false with the graph poisoned. */
bool fc_check_string_use(fc_graph *g, fc_op op, fc_value *const *in, int nin, const fc_dtype *out_dt, int nout);
/* g's first value of dtype string (a parameter or a result), or NULL: the
 * one test of a backend that does not take strings. */
const fc_value *fc_graph_first_string(const fc_graph *g);
/* Inference of string_normalizer, as fc_infer_decode. */
bool fc_infer_string_op(fc_graph *g, fc_op op, fc_value *const *in, const fc_attrs *a, fc_dtype *dt, int *rank,
                        fc_dim *dims);
/* string_normalizer (attributes a) on the n strings x: how many strings the
 * result holds (1 when every one is dropped), the bytes it needs (NULs
 * included), and the run itself, which points y[0..count) into `bytes`. */
int64_t fc_string_normalize_count(const fc_attrs *a, const char *const *x, int64_t n);
size_t fc_string_normalize_bytes(const fc_attrs *a, const char *const *x, int64_t n);
void fc_string_normalize(const fc_attrs *a, const char *const *x, int64_t n, const char **y, char *bytes);
/* n strings copied into one block, the pointers followed by the bytes, as
 * fusec.h lays out a string output the caller frees (fc_ctx_malloc: free()
 * releases it); NULL when out of memory. */
void *fc_strings_pack(fc_context *ctx, const char *const *s, int64_t n);
/* The index of the first NULL among n element pointers, or -1: a caller's
 * string input is checked before any op reads it. */
int64_t fc_strings_first_null(const char *const *s, int64_t n);
/* The verifier's rules for inout parameters (ir/build_decode.c): each one's
 * only use is as the destination of one update_slice. */
fc_status fc_verify_inout(fc_graph *g);

/* Re-run inference on node n and compare with its stored result types. */
fc_status fc_reinfer_check(fc_graph *g, fc_node *n);

/* ---------------------------------------------------------------- */
/* Monomials: a product of dims (an element count, a stride, a row   */
/* count) with symbolic dims left as symbols. Every dim is an atom   */
/* (a static size or one symbol), so a product of dims is a static   */
/* factor times a product of symbols (ir/mono.c).                    */
/* ---------------------------------------------------------------- */
#define FC_DYN_MAX_SYMS 16 /* symbols a dynamic program may have */
typedef struct fc_mono {
    int64_t c;                   /* static factor */
    uint8_t e[FC_DYN_MAX_SYMS]; /* exponent of symbol i */
} fc_mono;

fc_mono fc_mono_one(void);
/* m *= d (a static size or a symbol of index < FC_DYN_MAX_SYMS). */
void fc_mono_mul_dim(fc_mono *m, fc_dim d);
/* Product of dims[0 .. rank). */
fc_mono fc_mono_of(const fc_dim *dims, int rank);
/* The monomial 0; that of one dim; a * b. */
fc_mono fc_mono_zero(void);
fc_mono fc_mono_dim(fc_dim d);
fc_mono fc_mono_mul(fc_mono a, const fc_mono *b);
bool fc_mono_eq(const fc_mono *a, const fc_mono *b);
bool fc_mono_is_static(const fc_mono *m);
/* Its value with symbol i = syms[i]; -1 on overflow of int64. */
int64_t fc_mono_eval(const fc_mono *m, const int64_t *syms, int nsyms);
/* The batch of matmul(a, w), a's dims ad[0 .. ra) and w's wd[0 .. rw)
 * (promoted: fc_matmul_operand_dims), both dense row-major: the broadcast
 * batch dims (right-aligned) of size other than 1, in order, with each
 * one's size and the element strides of a, of w and of the dense result
 * (whose matrices are mn elements) along it; a stride is 0 where that
 * operand is broadcast. Returns how many. As monomials, so that symbolic
 * dims stay symbols; with static dims each is a constant (fc_mono_eval
 * with no symbols). The one rule for cuBLASLt's plans and the generated
 * GEMMs. */
int fc_matmul_batch_layout(const fc_dim *ad, int ra, const fc_dim *wd, int rw, fc_mono mn, fc_mono *size,
                           fc_mono *sa, fc_mono *sw, fc_mono *sy);

/* A copy of g for one shape: symbol i becomes vals[i] in every dim (of
 * values and of dims attributes). Every live node and every value keeps
 * its id (ids index plans and launch argument lists); dead nodes are left
 * out. Every node is re-inferred, so a binding that makes the graph
 * invalid gives FC_ERR_INPUT with the reason on the context. Values must be
 * >= 1. The copy has no symbols. */
fc_status fc_graph_bind_copy(fc_graph *g, const int64_t *vals, int nvals, fc_graph **out);
/* The checks fc_graph_bind_copy makes of the values themselves: one per
 * symbol, each at least 1 (FC_ERR_INPUT naming the symbol if not). */
fc_status fc_graph_check_bind_values(const fc_graph *g, const int64_t *vals, int nvals);

/* Create a parameter value. */
fc_value *fc_build_param(fc_graph *g, const char *name, size_t name_len, fc_dtype dt, int rank,
                         const fc_dim *dims);

/* Format a dim ("768" or "B") into buf; returns buf. */
const char *fc_dim_str(const fc_graph *g, fc_dim d, char *buf, size_t n);
/* Format a type "f32[B, 768]" into buf; returns buf. */
const char *fc_type_str(const fc_graph *g, fc_dtype dt, int rank, const fc_dim *dims, char *buf, size_t n);

/* Shortest decimal text for a double that reads back exactly (inf, -inf, nan too). */
void fc_format_double(double v, char *buf, size_t n);

#endif
