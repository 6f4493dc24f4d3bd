/*
 * fusec.h - the public API of fusec, a JIT operator-fusion compiler.
 *
 * One header, opaque handles, a context first. Conventions:
 *
 *  - Every function that can fail either returns an fc_status, or returns a
 *    handle that is "poisoned" on failure. The message of the first failure is
 *    kept on the context and read with fc_last_error().
 *  - Builder calls are sticky (as in cairo): after the first error on a graph
 *    every builder returns the graph's poison value and does nothing, so a chain
 *    of builder calls can be checked once, with fc_graph_status() or when the
 *    graph is verified, printed or run.
 *  - The library never exits and never prints.
 *  - Strings returned as `char *` are owned by the caller and freed with
 *    fc_free(). Strings returned as `const char *` are owned by the library.
 */
#ifndef FUSEC_H
#define FUSEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FUSEC_VERSION_STRING "0.2.0"

/* ------------------------------------------------------------------ */
/* Status codes. The numeric values double as the CLI's exit codes.    */
/* ------------------------------------------------------------------ */
typedef enum fc_status {
    FC_OK = 0,
    FC_ERR_INPUT = 1,       /* bad graph, bad .ir text, bad shapes or dtypes */
    FC_ERR_USAGE = 2,       /* a function was called wrongly (NULL, bad index) */
    FC_ERR_RUNTIME = 3,     /* a failure while running (I/O, device, ...) */
    FC_ERR_NOMEM = 5,       /* an allocation failed */
    FC_ERR_UNSUPPORTED = 6, /* valid, but not supported by this backend */
} fc_status;

/* ------------------------------------------------------------------ */
/* Dtypes and dimensions.                                              */
/* ------------------------------------------------------------------ */
typedef enum fc_dtype {
    FC_F64,
    FC_F32,
    FC_F16,
    FC_BF16,
    FC_I64,
    FC_I32,
    FC_I8,
    FC_BOOL,
    /* Text: each element is a `const char *` to NUL-terminated UTF-8 (an
     * element holds no NUL byte). Only graph parameters and results and the
     * string ops (string_normalizer) take it, on the host backends (the
     * reference interpreter and the CPU backend); docs/IR.md, "Strings". */
    FC_STRING,
    FC_DTYPE_COUNT
} fc_dtype;

/* Maximum tensor rank. */
#define FC_MAX_RANK 8

/*
 * A dimension. A value >= 0 is a static size. FC_DIM_INFER (-1) may appear
 * once in a reshape shape and means "inferred". A symbolic dimension is a
 * value made by fc_sym(); it is <= FC_DIM_SYM_BASE.
 */
typedef int64_t fc_dim;
#define FC_DIM_INFER ((fc_dim)-1)
#define FC_DIM_SYM_BASE ((fc_dim)-2)

/* Name of a dtype as written in .ir text ("f32", "bf16", ...). */
const char *fc_dtype_name(fc_dtype dt);
/* Size in bytes of one element of dt (bool is one byte; a string element
 * is its pointer, sizeof(const char *)). */
size_t fc_dtype_size(fc_dtype dt);

/* ------------------------------------------------------------------ */
/* Handles.                                                            */
/* ------------------------------------------------------------------ */
typedef struct fc_context fc_context;
typedef struct fc_graph fc_graph;
typedef struct fc_value fc_value;

/* Create a context. Returns NULL only when memory is exhausted. */
fc_context *fc_context_new(void);
/* Free a context. Graphs made from it must be freed first. NULL is ignored. */
void fc_context_free(fc_context *ctx);
/*
 * The message of the most recent failure on this context, or "" if none.
 * For user-input errors it holds "file:line:col: error: message", the source
 * line and a caret line. Valid until the next failing call on the context.
 */
const char *fc_last_error(const fc_context *ctx);
/* Clear the context's error message. */
void fc_clear_error(fc_context *ctx);
/*
 * Fault injection for tests: make the Nth allocation made through this
 * context from now on fail (1 = the next one), and every one after it until
 * this is called again. n = 0 turns injection off.
 */
void fc_context_fail_alloc_after(fc_context *ctx, long n);

/* Free a string or buffer returned by fusec. NULL is ignored. */
void fc_free(void *p);

/* The environment variables fusec reads (the only ones: FUSEC_DEVICE,
 * FUSEC_CACHE, ...), one per line, grouped by kind, each with its value
 * type, default, help and, when set, its value: what `fusec --help-env`
 * prints. Free with fc_free; NULL when out of memory. */
char *fc_env_help(void);

/* ------------------------------------------------------------------ */
/* Graphs.                                                             */
/* ------------------------------------------------------------------ */

/* Create an empty graph named `name` (a NAME in .ir syntax). NULL on OOM. */
fc_graph *fc_graph_new(fc_context *ctx, const char *name);
/* Free a graph and everything built in it (one arena). NULL is ignored. */
void fc_graph_free(fc_graph *g);
/* FC_OK, or the status of the first builder error (the sticky error). */
fc_status fc_graph_status(const fc_graph *g);
/* The graph's name (NULL for a NULL graph). */
const char *fc_graph_name(const fc_graph *g);
/* The context the graph belongs to (NULL for a NULL graph). */
fc_context *fc_graph_context(const fc_graph *g);

/*
 * A symbolic dimension named `name`. The same name gives the same dimension.
 * If the symbol was bound with fc_graph_bind(), its static value is returned
 * instead. Returns FC_DIM_INFER and poisons the graph on a bad name.
 */
fc_dim fc_sym(fc_graph *g, const char *name);
/*
 * Bind symbol `name` to `value` in this graph. Must be called before the
 * symbol is first used; later uses of fc_sym(name) return `value`.
 */
fc_status fc_graph_bind(fc_graph *g, const char *name, int64_t value);
/* Whether a dim of g named the bound symbol `name` (through fc_sym, the
 * parser or the ONNX importer): false for a bind that nothing used (a
 * typo, or a symbol of another graph), or for NULL. fusec's --bind refuses
 * such a symbol. */
bool fc_graph_bind_used(const fc_graph *g, const char *name);

/* ------------------------------------------------------------------ */
/* Builders. One per op of the .ir format. Each checks shapes and      */
/* dtypes when called; on error it poisons the graph and returns the   */
/* poison value, which every later builder accepts and propagates.     */
/* ------------------------------------------------------------------ */

/* A graph parameter (input) with a dtype and a shape of `rank` dims. */
fc_value *fc_param(fc_graph *g, const char *name, fc_dtype dt, int rank, const fc_dim *dims);
/*
 * A weak scalar operand, as a bare number in .ir text: it takes the dtype of
 * the other operand (a float scalar with an integer tensor gives f32). It can
 * only be used as an operand of a binary, compare or where op.
 */
fc_value *fc_scalar(fc_graph *g, double v);
/* A weak integer scalar, as a bare integer in .ir text (`mul(%x, 3)`): with
 * an integer tensor the result stays integer. */
fc_value *fc_scalar_int(fc_graph *g, int64_t v);

/* Unary ops. f16/bf16 are computed in f32; integer inputs to the
 * transcendental ops promote to f32. */
fc_value *fc_neg(fc_graph *g, fc_value *x);
fc_value *fc_abs(fc_graph *g, fc_value *x);
fc_value *fc_exp(fc_graph *g, fc_value *x);
fc_value *fc_log(fc_graph *g, fc_value *x);
fc_value *fc_sqrt(fc_graph *g, fc_value *x);
fc_value *fc_rsqrt(fc_graph *g, fc_value *x);
fc_value *fc_recip(fc_graph *g, fc_value *x);
fc_value *fc_sin(fc_graph *g, fc_value *x);
fc_value *fc_cos(fc_graph *g, fc_value *x);
fc_value *fc_tanh(fc_graph *g, fc_value *x);
fc_value *fc_sigmoid(fc_graph *g, fc_value *x);
fc_value *fc_relu(fc_graph *g, fc_value *x);
fc_value *fc_gelu(fc_graph *g, fc_value *x);      /* erf form */
fc_value *fc_gelu_tanh(fc_graph *g, fc_value *x); /* tanh approximation */
fc_value *fc_silu(fc_graph *g, fc_value *x);
/* x * relu6(x + 3) / 6 (MobileNetV3's activation, ONNX HardSwish). */
fc_value *fc_hardswish(fc_graph *g, fc_value *x);
fc_value *fc_erf(fc_graph *g, fc_value *x);

/* Binary ops: NumPy broadcasting, PyTorch dtype promotion. */
fc_value *fc_add(fc_graph *g, fc_value *a, fc_value *b);
fc_value *fc_sub(fc_graph *g, fc_value *a, fc_value *b);
fc_value *fc_mul(fc_graph *g, fc_value *a, fc_value *b);
fc_value *fc_div(fc_graph *g, fc_value *a, fc_value *b); /* true division */
fc_value *fc_max(fc_graph *g, fc_value *a, fc_value *b);
fc_value *fc_min(fc_graph *g, fc_value *a, fc_value *b);
fc_value *fc_pow(fc_graph *g, fc_value *a, fc_value *b);

/* Comparisons: broadcasting; the result is bool. */
fc_value *fc_eq(fc_graph *g, fc_value *a, fc_value *b);
fc_value *fc_ne(fc_graph *g, fc_value *a, fc_value *b);
fc_value *fc_lt(fc_graph *g, fc_value *a, fc_value *b);
fc_value *fc_le(fc_graph *g, fc_value *a, fc_value *b);
fc_value *fc_gt(fc_graph *g, fc_value *a, fc_value *b);
fc_value *fc_ge(fc_graph *g, fc_value *a, fc_value *b);

/* where(cond, a, b): cond is bool; broadcasting over all three. */
fc_value *fc_where(fc_graph *g, fc_value *cond, fc_value *a, fc_value *b);
/* cast(x, to=dt). Float to int truncates toward zero; to bool is x != 0. */
fc_value *fc_cast(fc_graph *g, fc_value *x, fc_dtype to);

/* Reductions over `naxes` axes (negative axes count from the end; naxes = 0
 * reduces over every axis). f16/bf16 accumulate in f32. reduce_sum of an
 * integer or bool tensor gives i64, as in PyTorch; reduce_mean needs floats. */
fc_value *fc_reduce_sum(fc_graph *g, fc_value *x, int naxes, const int *axes, bool keepdim);
fc_value *fc_reduce_max(fc_graph *g, fc_value *x, int naxes, const int *axes, bool keepdim);
fc_value *fc_reduce_min(fc_graph *g, fc_value *x, int naxes, const int *axes, bool keepdim);
fc_value *fc_reduce_mean(fc_graph *g, fc_value *x, int naxes, const int *axes, bool keepdim);

/* Normalizations (composites). x must be a float tensor. */
fc_value *fc_softmax(fc_graph *g, fc_value *x, int axis);
/* layernorm over `axis`; w and b have the shape [size of axis]. */
fc_value *fc_layernorm(fc_graph *g, fc_value *x, fc_value *w, fc_value *b, int axis, double eps);
/* rmsnorm over the last axis; w has the shape [last dim]. */
fc_value *fc_rmsnorm(fc_graph *g, fc_value *x, fc_value *w, double eps);

/* matmul with PyTorch semantics: batch dims broadcast, rank-1 operands are
 * promoted and the added dimension removed. Both operands must be floats of
 * the same dtype. */
fc_value *fc_matmul(fc_graph *g, fc_value *a, fc_value *b);

/* Value of `scale` that means "the default, 1/sqrt(D)". */
#define FC_ATTENTION_DEFAULT_SCALE 0.0
/*
 * attention(q, k, v): softmax(q @ k^T * scale [+ causal mask]) @ v, with
 * q: [.., Sq, D], k: [.., Sk, D], v: [.., Sk, Dv] -> [.., Sq, Dv]. The causal
 * mask is PyTorch's is_causal: query i sees keys j <= i.
 */
fc_value *fc_attention(fc_graph *g, fc_value *q, fc_value *k, fc_value *v, bool causal, double scale);

/* Shape ops. */
fc_value *fc_reshape(fc_graph *g, fc_value *x, int rank, const fc_dim *shape); /* one FC_DIM_INFER allowed */
fc_value *fc_permute(fc_graph *g, fc_value *x, int rank, const int *perm);
fc_value *fc_expand(fc_graph *g, fc_value *x, int rank, const fc_dim *shape); /* FC_DIM_INFER keeps a dim */
/* Python slicing along one axis: negative start/end count from the end and
 * are clamped; end = INT64_MAX means "to the end". step >= 1. */
fc_value *fc_slice(fc_graph *g, fc_value *x, int axis, int64_t start, int64_t end, int64_t step);
fc_value *fc_concat(fc_graph *g, int n, fc_value *const *xs, int axis);
/* split(x, axis, sizes): writes n values to outs (poison values on error). */
fc_status fc_split(fc_graph *g, fc_value *x, int axis, int n, const fc_dim *sizes, fc_value **outs);

/* Creation ops. */
fc_value *fc_iota(fc_graph *g, int rank, const fc_dim *shape, int axis, fc_dtype dt);
fc_value *fc_full(fc_graph *g, int rank, const fc_dim *shape, double value, fc_dtype dt);

/* gather(table, idx, axis): out = table.shape[:axis] + idx.shape +
 * table.shape[axis+1:]; idx must be an integer tensor. */
fc_value *fc_gather(fc_graph *g, fc_value *table, fc_value *idx, int axis);

/* Decode with a key/value cache (docs/DECODE.md). An inout parameter is
 * written in place by the graph: its one use must be the destination of one
 * fc_update_slice, and the caller's buffer holds the new contents after a
 * run (the cache persists across runs in the buffer the caller passes). */
fc_value *fc_param_inout(fc_graph *g, const char *name, fc_dtype dt, int rank, const fc_dim *dims);
/* update_slice(dst, src, offset, axis): dst (an inout parameter) with src
 * written along `axis` from index *offset, an i32/i64 rank-0 tensor read at
 * run time. An offset outside [0, dst_dim - src_dim] is an error of the run
 * (FC_ERR_INPUT) where the backend can see it (reference, CPU); on the GPU
 * the kernel writes nothing then, never outside dst. */
fc_value *fc_update_slice(fc_graph *g, fc_value *dst, fc_value *src, fc_value *offset, int axis);
/* cache_attention(q [B,Hq,Sq,D], k [B,Hkv,S,D], v [B,Hkv,S,Dv], len): attention
 * over the first *len keys (an i32/i64 rank-0 tensor read at run time);
 * Hq a multiple of Hkv (query head h reads key head h / (Hq/Hkv)); causal:
 * query i sees keys j <= len - Sq + i. */
fc_value *fc_cache_attention(fc_graph *g, fc_value *q, fc_value *k, fc_value *v, fc_value *len, bool causal,
                             double scale);
/* Whether v is an inout parameter. */
bool fc_value_is_inout(const fc_value *v);

/* Collectives over the `ranks` ranks of a tensor-parallel group
 * (docs/PARALLEL.md): every rank runs the same graph on its own shard.
 * all_reduce: the elementwise sum over the ranks; all_gather: the ranks'
 * x concatenated along axis in rank order; reduce_scatter: this rank's
 * slice of the sum along axis. A program with ranks > 1 needs a group
 * (fc_compile_options.tp). */
fc_value *fc_all_reduce(fc_graph *g, fc_value *x, int ranks);
fc_value *fc_all_gather(fc_graph *g, fc_value *x, int axis, int ranks);
fc_value *fc_reduce_scatter(fc_graph *g, fc_value *x, int axis, int ranks);
/* Convolutional networks. Tensors are NCHW ([N, C, D1 .. Dn], n from 1 to
 * 3, static spatial dims), as in ONNX and PyTorch; fusec runs them
 * channels-last inside. A zero in fc_window means the default: stride 1,
 * dilation 1, no padding, groups 1. docs/IR.md has the semantics. */
#define FC_MAX_SPATIAL 3
typedef enum fc_auto_pad {
    FC_PAD_EXPLICIT,   /* pad_begin and pad_end as given */
    FC_PAD_SAME_UPPER, /* output = ceil(input / stride); the odd pad at the end */
    FC_PAD_SAME_LOWER, /* ... the odd pad at the begin */
    FC_PAD_VALID,      /* no padding */
} fc_auto_pad;
typedef struct fc_window {
    int64_t kernel[FC_MAX_SPATIAL];     /* the pools' window; convolutions take the weight's */
    int64_t stride[FC_MAX_SPATIAL], dilation[FC_MAX_SPATIAL];
    int64_t pad_begin[FC_MAX_SPATIAL], pad_end[FC_MAX_SPATIAL];
    int64_t output_padding[FC_MAX_SPATIAL]; /* conv_transpose */
    fc_auto_pad auto_pad;
    int64_t groups;                     /* convolutions; C for depthwise */
    bool ceil_mode;                     /* pools: a partial last window counts */
    bool count_include_pad;             /* avg_pool: pads count in the divisor */
} fc_window;
/* conv(x [N, C, D..], w [M, C/groups, k..], b [M] or NULL) -> [N, M, O..] */
fc_value *fc_conv(fc_graph *g, fc_value *x, fc_value *w, fc_value *b, const fc_window *win);
/* conv_transpose(x [N, C, D..], w [C, M/groups, k..], b [M] or NULL): the
 * gradient of conv with respect to its input; O = s (D - 1) + op +
 * d (k - 1) + 1 - pad_begin - pad_end. */
fc_value *fc_conv_transpose(fc_graph *g, fc_value *x, fc_value *w, fc_value *b, const fc_window *win);
fc_value *fc_max_pool(fc_graph *g, fc_value *x, const fc_window *win);
fc_value *fc_avg_pool(fc_graph *g, fc_value *x, const fc_window *win);
/* The mean over the spatial dims: [N, C, 1 ..]. */
fc_value *fc_global_avg_pool(fc_graph *g, fc_value *x);
/* (x - mean) / sqrt(var + eps) * scale + bias, per channel (dim 1). */
fc_value *fc_batch_norm(fc_graph *g, fc_value *x, fc_value *scale, fc_value *bias, fc_value *mean, fc_value *var,
                        double eps);
typedef enum fc_pad_mode { FC_PAD_CONSTANT, FC_PAD_REFLECT, FC_PAD_EDGE } fc_pad_mode;
/* pads: 2 * rank entries, the begins of every dim then the ends (ONNX's
 * order); a negative pad crops. */
fc_value *fc_pad(fc_graph *g, fc_value *x, const int64_t *pads, fc_pad_mode mode, double value);
typedef enum fc_resize_mode {
    FC_RESIZE_NEAREST,            /* round half down (ONNX's round_prefer_floor) */
    FC_RESIZE_NEAREST_FLOOR,
    FC_RESIZE_NEAREST_CEIL,
    FC_RESIZE_NEAREST_HALF_UP,    /* round_prefer_ceil */
    FC_RESIZE_LINEAR,             /* bilinear in 2-D */
} fc_resize_mode;
typedef enum fc_resize_coord {
    FC_COORD_HALF_PIXEL,
    FC_COORD_ALIGN_CORNERS,
    FC_COORD_ASYMMETRIC,
    FC_COORD_PYTORCH_HALF_PIXEL,
} fc_resize_coord;
/* x resized to `shape` (rank entries; N and C kept); the scale of a dim is
 * its output size over its input size. */
fc_value *fc_resize(fc_graph *g, fc_value *x, int rank, const fc_dim *shape, fc_resize_mode mode, fc_resize_coord coord);

/* Set the graph's results. Must be called exactly once. */
fc_status fc_graph_return(fc_graph *g, int n, fc_value *const *outs);

/* ------------------------------------------------------------------ */
/* Inspection.                                                         */
/* ------------------------------------------------------------------ */
int fc_value_rank(const fc_value *v);
fc_dtype fc_value_dtype(const fc_value *v);
/* v's name in the graph ("%x" is "x"); "" when it has none. */
const char *fc_value_name(const fc_value *v);
/* Dimension i of v: a static size or a symbolic fc_dim. */
fc_dim fc_value_dim(const fc_value *v, int i);
/* True if v is the poison value. */
bool fc_value_is_poison(const fc_value *v);
/* For a NULL graph: 0 parameters and outputs; an index out of range: NULL. */
int fc_graph_num_params(const fc_graph *g);
fc_value *fc_graph_param(const fc_graph *g, int i);
int fc_graph_num_outputs(const fc_graph *g);
fc_value *fc_graph_output(const fc_graph *g, int i);
/* Name of a symbolic dim, or NULL if d is not symbolic. */
const char *fc_sym_name(const fc_graph *g, fc_dim d);

/*
 * What each parameter is to the graph, and the range a model's initializer
 * would draw it from (PyTorch's defaults; docs/CLI.md, "Random inputs"):
 * the second operand of a matmul is a weight, uniform in +-1/sqrt(K) for
 * the matmul's contraction size K (nn.Linear); a parameter added to a
 * matmul's result is its bias, in the same range; a layernorm's or
 * rmsnorm's weight is a scale, in [0.9, 1.1); a layernorm's bias a shift,
 * in [-0.1, 0.1); everything else is data, in [-1, 1). A parameter reaches
 * its use through cast, reshape, permute and expand; its first use that
 * fits a rule decides. Integer and bool parameters are data. Fills
 * out[0..n) (n at most fc_graph_num_params).
 */
typedef enum fc_param_role {
    FC_ROLE_DATA = 0,
    FC_ROLE_WEIGHT,
    FC_ROLE_BIAS,
    FC_ROLE_NORM_SCALE,
    FC_ROLE_NORM_SHIFT,
} fc_param_role;
typedef struct fc_param_init {
    fc_param_role role;
    int64_t fan_in; /* weights and biases: the K of their matmul; else 0 */
    double lo, hi;  /* draw uniformly from [lo, hi) */
} fc_param_init;
fc_status fc_graph_param_inits(const fc_graph *g, fc_param_init *out, int n);

/* ------------------------------------------------------------------ */
/* Text format, verification.                                          */
/* ------------------------------------------------------------------ */

/* A symbol binding, as given by --bind B=4. */
typedef struct fc_binding {
    const char *name;
    int64_t value;
} fc_binding;

/*
 * Parse .ir text. `filename` is used in diagnostics. `graph_name` picks a
 * graph of a multi-graph file (NULL: the first). `binds` bind symbolic dims.
 * On success *out is a new graph; on failure *out is NULL and the context's
 * error holds a located diagnostic (file:line:col, source line, caret).
 */
fc_status fc_parse(fc_context *ctx, const char *filename, const char *text, size_t len,
                   const char *graph_name, const fc_binding *binds, int nbinds, fc_graph **out);
/* Read and parse a file; as fc_parse. */
fc_status fc_parse_file(fc_context *ctx, const char *path, const char *graph_name,
                        const fc_binding *binds, int nbinds, fc_graph **out);
/* Names of the graphs in a file's text, for listing. */
fc_status fc_parse_graph_names(fc_context *ctx, const char *filename, const char *text, size_t len,
                               char ***names, int *n); /* free each and the array with fc_free */

/* Print a graph as .ir text. Returns a malloc'd string (fc_free), or NULL
 * with the error on the context. The output parses back to the same text. */
char *fc_print(fc_graph *g);

/* Check every invariant of the graph. FC_OK or an error on the context. */
fc_status fc_verify(fc_graph *g);

/* ------------------------------------------------------------------ */
/* Running with the reference interpreter.                             */
/* ------------------------------------------------------------------ */

/*
 * A dense, row-major host tensor. `data` holds elements in the dtype's own
 * storage: f16 and bf16 as uint16_t bit patterns, bool as one byte (0 or 1),
 * a string as a `const char *` to NUL-terminated UTF-8 (so `data` is a
 * `const char **` of numel pointers). An input's strings are the caller's
 * and are read during the run only. A string output of fc_run_reference is
 * one allocation, the pointers followed by the bytes they point at, which
 * fc_tensor_release frees whole, and so is one of fc_program_run_host; the
 * outputs a caller gives storage for (fc_run, fc_run_shaped) point into
 * bytes the program owns, valid until its next run or fc_program_free.
 * fc_weights_add copies the bytes too.
 */
typedef struct fc_tensor {
    fc_dtype dtype;
    int rank;
    int64_t shape[FC_MAX_RANK];
    void *data;
} fc_tensor;

/* Number of elements of t (1 for a scalar); -1 for NULL, a bad shape or overflow. */
int64_t fc_tensor_numel(const fc_tensor *t);
/* Free t->data (allocated by fusec) and set it to NULL. */
void fc_tensor_release(fc_tensor *t);

/*
 * Run g with the reference interpreter: float64 arithmetic, each value
 * rounded to its dtype (f16/bf16 round to nearest-even). inputs[i] matches
 * parameter i; symbolic dims are bound from the input shapes. On success
 * outputs[0..nout) are filled with newly allocated tensors (release them with
 * fc_tensor_release); nout must equal fc_graph_num_outputs(g).
 */
fc_status fc_run_reference(fc_graph *g, const fc_tensor *inputs, int nin, fc_tensor *outputs, int nout);
/* The same graph computed exactly: every float value kept in float64, never
 * rounded to its dtype (integer and bool values as fc_run_reference has
 * them). Float outputs are f64 tensors. What fc_compare_outputs_exact
 * measures errors against. */
fc_status fc_run_reference_exact(fc_graph *g, const fc_tensor *inputs, int nin, fc_tensor *outputs, int nout);

/* Conversions between f32 and the 16-bit float formats (round to nearest-even). */
uint16_t fc_f32_to_bf16(float f);
float fc_bf16_to_f32(uint16_t h);
uint16_t fc_f32_to_f16(float f);
float fc_f16_to_f32(uint16_t h);
/* Round a double to the nearest value of dtype dt (saturating/truncating as
 * a cast); NaN for a dt that is not an fc_dtype. */
double fc_round_to_dtype(double x, fc_dtype dt);


/* ------------------------------------------------------------------ */
/* Compiling and running on a device.                                  */
/* ------------------------------------------------------------------ */

/* Where a program runs: each device is one backend of the library. The
 * pointers fc_run takes are device pointers on CUDA and host pointers on
 * the CPU and the reference interpreter. */
typedef enum fc_device {
    FC_DEVICE_CUDA, /* NVIDIA GPU: generated kernels through NVRTC and the driver API */
    FC_DEVICE_CPU,  /* the LLVM CPU backend (when built with LLVM) */
    FC_DEVICE_REF,  /* the reference interpreter: float64, slow, the oracle */
    FC_DEVICE_COUNT
} fc_device;

/* The device's name as --device spells it ("cuda", "cpu", "ref"); NULL for
 * a value out of range. */
const char *fc_device_name(fc_device d);
/* The device named `name`, into *out: true, or false for an unknown name. */
bool fc_device_from_name(const char *name, fc_device *out);
/* Up to `max` of the devices this library knows, into out (NULL with max
 * 0 to count them), in the order `fusec --devices` lists them; returns how
 * many it knows. */
int fc_device_list(fc_device *out, int max);
/* True when this build has the device's backend (the CPU backend needs
 * LLVM at build time). */
bool fc_device_built(fc_device d);
/* True when the device is built and usable on this machine now (CUDA: a
 * driver and a GPU are present). */
bool fc_device_available(fc_device d);
/* The device fc_compile_options_default's callers should use when they
 * are not told: CUDA when a GPU is present, else the CPU backend when
 * built, else the reference interpreter. */
fc_device fc_device_default(void);
/* The name of the device a tool should use when it is not told: $FUSEC_DEVICE
 * when set and not empty (*from_env true; the name may be unknown, the
 * caller says so), else fc_device_default()'s (*from_env false). from_env
 * may be NULL. */
const char *fc_device_default_name(bool *from_env);

/* What a dynamic program does when a run's shapes match no specialization
 * (a guard miss). */
typedef enum fc_specialize_mode {
    /* The run goes ahead at once with the dynamic variant while a
     * background thread compiles the specialization; later runs of those
     * shapes use it once it is ready. No run waits for a compile. */
    FC_SPECIALIZE_BACKGROUND = 0,
    /* The run compiles the specialization first, then runs it. */
    FC_SPECIALIZE_SYNC = 1,
    /* Never specialize: the dynamic variant serves every run. */
    FC_SPECIALIZE_OFF = 2,
} fc_specialize_mode;

/* The precision a program computes in (docs/PRECISION.md): the graph's
 * own dtypes, or an autocast of its float32 values in the manner of
 * torch.autocast. Graph inputs and results keep their declared dtypes. */
typedef enum fc_precision {
    FC_PRECISION_AS_WRITTEN = 0, /* the graph's dtypes (the default) */
    /* Every float computes in f32: f16/bf16 values are widened, GEMMs run
     * f32 math without TF32 (allow_tf32 is ignored). */
    FC_PRECISION_F32 = 1,
    /* The graph's dtypes, with f32 GEMMs on TF32 tensor cores (as
     * allow_tf32); the CPU backend has no TF32 and computes f32. */
    FC_PRECISION_TF32 = 2,
    /* torch.autocast(dtype=bfloat16/float16): matmuls and attention read
     * their f32 operands rounded to the low dtype and accumulate in f32;
     * reductions, softmax, norms, exp, log, pow, rsqrt and recip compute in
     * f32; other ops follow their operands (PyTorch promotion). */
    FC_PRECISION_BF16 = 3,
    FC_PRECISION_F16 = 4,
    FC_PRECISION_COUNT
} fc_precision;
/* How a kernel rounds the values it computes (docs/NUMERICS.md). */
typedef enum fc_numerics {
    /* A float value that lives only in registers inside a kernel is
     * computed and kept in f32 (f64 for f64 values) whatever its dtype, and
     * rounded to its dtype only where it is stored to memory or returned
     * (a cast to a float dtype included); the constants of iota and full are
     * values of their dtype. The default: fewer instructions,
     * and closer to the exact result than rounding every op. */
    FC_NUMERICS_FAST = 0,
    /* Every value is rounded to its dtype, as eager PyTorch rounds each
     * op's result (--numerics=eager). */
    FC_NUMERICS_EAGER = 1,
} fc_numerics;

typedef struct fc_compile_options {
    fc_device device;
    /* CUDA target as major*10+minor (90 = sm_90). 0: the device's own, or
     * sm_90 when there is no device (NVRTC needs no GPU). */
    int sm;
    bool fast_math;     /* --use_fast_math; off by default (numerics) */
    bool fuse;          /* vertical and horizontal fusion; on by default */
    /* f32 matmuls on TF32 tensor cores (cuBLASLt's
     * CUBLAS_COMPUTE_32F_FAST_TF32): products with a 10-bit mantissa, about
     * 8x the f32 rate, results no longer within the f32 tolerance of the
     * reference. Off by default; f16 and bf16 GEMMs accumulate in f32 either
     * way. */
    bool allow_tf32;
    /* CUDA Graphs (docs/RUNTIME-GRAPHS.md): after its first run, a program
     * captures its whole launch sequence (cuBLASLt calls included) into a
     * CUDA Graph and replays it, patching new input and output pointers
     * into the graph; on by default. $FUSEC_CUDA_GRAPHS=0 also turns it
     * off. */
    bool cuda_graphs;
    /* Dynamic shapes (docs/DYNAMIC.md). false (the default): every symbolic
     * dim must be bound, and the kernels have the shapes baked in. true:
     * symbols may stay unbound; the program keeps a dynamic variant (its
     * kernels take the dims as arguments; compiled once) and up to
     * max_specializations static specializations behind shape guards, run
     * with fc_run_shaped. */
    bool dynamic;
    int max_specializations; /* dynamic programs: the LRU bound (default 8; >= 1) */
    fc_specialize_mode specialize; /* dynamic programs: what a guard miss does */
    fc_precision precision;        /* FC_PRECISION_AS_WRITTEN by default */
    fc_numerics numerics; /* rounding inside kernels; FC_NUMERICS_FAST by default */
    /* Tensor parallelism (docs/PARALLEL.md): the group whose rank `tp_rank`
     * this program is, for the collectives of a sharded graph
     * (fc_graph_shard). NULL (the default): no group, and a collective over
     * more than one rank is an error. The group must be of the program's
     * device and outlive the program. */
    const struct fc_tp_group *tp;
    int tp_rank;
} fc_compile_options;

/* Fill o with the defaults. */
void fc_compile_options_default(fc_compile_options *o);

/*
 * Tensor parallelism (docs/PARALLEL.md), Megatron-style. fc_graph_shard
 * makes the graph one rank of `degree` runs: the weights of matmul chains
 * split column-parallel (QKV, up and gate projections: their output
 * features) then row-parallel (attention output and down projections:
 * their input features), attention heads and key/value heads split,
 * key/value caches split by heads, an all_reduce after each row-parallel
 * matmul and an all_gather where a split value meets an op that needs it
 * whole. Every rank runs that one graph on its own shard of the
 * parameters. The source graph is not modified; degree 1 is a copy.
 */
fc_status fc_graph_shard(fc_graph *g, int degree, fc_graph **out);
/* The axis parameter i of a sharded graph is split along (each rank holds
 * slice `rank` of `degree` equal slices), or -1: every rank takes it whole.
 * -1 for a graph that is not sharded. */
int fc_graph_param_shard_axis(const fc_graph *g, int i);
/* Slice `rank` of `degree` equal slices of `full` along axis (axis -1: the
 * whole tensor), copied into *out (release with fc_tensor_release): how a
 * parameter's shard is cut at load time from the full weights. */
fc_status fc_tensor_shard(fc_context *ctx, const fc_tensor *full, int axis, int degree, int rank, fc_tensor *out);

/* A tensor-parallel group: `degree` ranks of one device kind in this
 * process. CPU and ref: ranks are threads of the caller, the collectives
 * an in-process sum. CUDA: GPU r of the visible GPUs is rank r, with one
 * NCCL communicator each (ncclCommInitAll; NCCL loaded with dlopen), and
 * each rank's program must run on its own host thread (NCCL's rule for
 * communicators of one process). */
typedef struct fc_tp_group fc_tp_group;
fc_status fc_tp_group_create(fc_context *ctx, fc_device device, int degree, fc_tp_group **out);
int fc_tp_group_degree(const fc_tp_group *grp);
/* Free a group (after its programs). NULL is ignored. */
void fc_tp_group_free(fc_tp_group *grp);

/*
 * The graph passes of a compile (docs/PASSES.md), on a copy of g, with
 * `hook` called after each one: its name ("canonicalize", "decompose",
 * ...; a pass that runs twice is named twice) and the working graph, which
 * the hook may read (fc_print, the fc_graph_ and fc_value_ getters) but
 * must not change. Nothing is compiled, and g is not modified. o gives the
 * options that choose the passes (fuse, dynamic, precision, numerics,
 * device); NULL: the defaults. `fusec --dump-after` prints with it.
 */
typedef void (*fc_pass_hook)(void *user, const char *pass, fc_graph *g);
fc_status fc_run_passes(fc_graph *g, const fc_compile_options *o, fc_pass_hook hook, void *user);

/* A compiled program: a launch plan, its kernels and their device code. */
typedef struct fc_program fc_program;

/*
 * Compile g (every symbolic dim must be bound: shapes are baked into the
 * kernels). The graph is not modified: fusec compiles a copy. Without a GPU
 * this still runs the passes, the codegen and NVRTC (for `sm`), so the
 * emit functions below work; fc_run then fails cleanly.
 */
fc_status fc_compile(fc_graph *g, const fc_compile_options *o, fc_program **out);
/*
 * Run p on `stream` (a CUstream; NULL: the default stream). inputs[i] and
 * outputs[i] are device pointers to dense row-major buffers of the graph's
 * parameters and results. Returns when the work is queued on the stream.
 */
fc_status fc_run(fc_program *p, void *const *inputs, int nin, void *const *outputs, int nout, void *stream);
/* Free a program (and its device memory). NULL is ignored. */
void fc_program_free(fc_program *p);
/* The device p was compiled for. */
fc_device fc_program_device_of(const fc_program *p);
/* The name of the graph p was compiled from (owned by p; "" for NULL). */
const char *fc_program_name(const fc_program *p);
/* The text of the graph p was compiled from, as fc_print wrote it (owned
 * by p); NULL when p carries none. */
const char *fc_program_graph_text(const fc_program *p);
/* The context p reports its errors to (the graph's, or the loader's). */
fc_context *fc_program_context(const fc_program *p);

/*
 * Run p from host memory on any device: inputs[i] must match parameter i
 * in dtype and shape. On success outputs[0..nout) hold newly allocated
 * host tensors (release each with fc_tensor_release); on failure they are
 * all empty. CUDA copies the inputs to device buffers made for the call,
 * runs, and copies the results back.
 *
 * bench_iters > 0 also benchmarks: after the checked run, a few warm-up
 * runs, then bench_iters runs timed one by one (CUDA events on the GPU,
 * the monotonic clock on the host); their median in milliseconds goes to
 * *median_ms (which may be NULL otherwise).
 */
fc_status fc_program_run_host(fc_program *p, const fc_tensor *inputs, int nin, fc_tensor *outputs, int nout,
                              double *median_ms, int bench_iters);

/*
 * Run p with the shapes of this call (docs/DYNAMIC.md). inputs[i].data is
 * a device pointer to a dense row-major buffer of inputs[i]'s dtype and
 * shape; outputs[k].data likewise, with the shape fc_program_infer_outputs
 * gives for these inputs. Symbolic dims are bound from the input shapes.
 * Shapes that contradict the graph (a static dim that differs, one symbol
 * with two values, a size <= 0), a dtype that differs, or a pointer that
 * is not 16-byte aligned are FC_ERR_INPUT with a message that names the
 * input and the dim; nothing is launched then. Works for every program: a
 * static one accepts exactly its own shapes.
 */
fc_status fc_run_shaped(fc_program *p, const fc_tensor *inputs, int nin, const fc_tensor *outputs, int nout,
                        void *stream);
/*
 * The dtype and shape of each result for these input shapes (inputs[i].data
 * is not read) into outputs[0..nout) (their data is set to NULL). Errors as
 * fc_run_shaped's.
 */
fc_status fc_program_infer_outputs(fc_program *p, const fc_tensor *inputs, int nin, fc_tensor *outputs, int nout);
/* Dynamic programs: wait until every specialization queued so far is built
 * (or has failed), and the background thread's growth of the arena ahead
 * of need is done. For tests and benchmarks; FC_OK at once otherwise. */
fc_status fc_program_wait_specializations(fc_program *p);
/*
 * Dynamic programs: declare the largest shape the program will see (every
 * symbol by name, as --bind takes them; a TensorRT optimization profile's
 * "max"), and map the memory the dynamic variant needs for it now, so that
 * no later run grows it on the caller's thread (85-280 us each on the
 * H200) or the background thread ahead of need. Every size being a
 * product of the symbols, a shape within these values needs no more; one
 * that does (a larger value) grows the memory as before (counted in
 * arena_grows). Opens the device and loads the variant's module if no run
 * has yet, and builds the variant's CUDA Graph (a variant of kernels only:
 * one graph for every shape) with the largest shape's instance, so that
 * the first run replays it as any new shape's run does. FC_ERR_USAGE for a name the graph has no symbol of, a symbol
 * not given, or a value below 1; FC_OK with nothing to do for a static
 * program, or a dynamic one without a variant (each shape then has its
 * own specialization, sized for it).
 */
fc_status fc_program_reserve(fc_program *p, const fc_binding *largest, int n);
/*
 * Tell p that new values were written into weight or bias buffers in place
 * (the same addresses) since its last run. A program keeps a copy of the
 * weights of fused sibling GEMMs, concatenated, of weights padded to
 * aligned rows, and of weights computed from parameters at load (a cast
 * of an f32 weight under --precision; docs/GEMM.md, "The constant-weights
 * contract", "Unaligned shapes" and "Weights computed at load time"),
 * which it refreshes by itself only when a weight moves; after this call its next run copies them again (for a
 * dynamic program: every shape's). Everything else reads its inputs at
 * every run and needs no telling. FC_OK also when p has nothing to refresh.
 */
fc_status fc_program_weights_changed(fc_program *p);

/* What a program's runs did: guards, specializations, CUDA Graphs. */
typedef struct fc_run_stats {
    uint64_t runs;               /* fc_run and fc_run_shaped calls that launched work */
    /* Dynamic programs (all zero for a static one). */
    uint64_t guard_hits;         /* runs served by a ready specialization */
    uint64_t guard_misses;       /* runs whose shapes had no ready specialization */
    uint64_t dynamic_runs;       /* runs served by the dynamic variant */
    uint64_t sync_compiles;      /* runs that waited for a compile (FC_SPECIALIZE_SYNC, or
                                  * no dynamic variant: see dynamic_unavailable) */
    uint64_t specializations_built, specializations_failed, specializations_evicted;
    int specializations_live;    /* ready now */
    int specializations_pending; /* queued or compiling now */
    double shape_setup_ms;       /* host time the dynamic variant spent on shapes it had no
                                  * instance for: binding its plan to the shape (grids, memory
                                  * plan, descriptions) and freeing the instance evicted */
    double miss_guard_ms;        /* host time of the guard checks that missed, in all: finding no
                                  * ready specialization and queueing one (and evicting; after
                                  * the run's launches), or compiling it where synchronous
                                  * specialization is asked for */
    double miss_run_ms;          /* host time of the runs that missed, in all (fc_run_shaped
                                  * from the guard to its return: the guard, the variant's
                                  * instance, frame and launches; docs/DYNAMIC.md) */
    uint64_t arena_grows;        /* times the dynamic variant's arena grew for a larger shape
                                  * (its first allocation included) */
    double arena_grow_ms;        /* host time of those growths, in all (memory mapped at the
                                  * arena's end, or, without virtual memory management, the
                                  * arena freed and allocated larger; docs/DYNAMIC.md) */
    uint64_t arena_grows_ahead;  /* growths the background thread made ahead of need, after a
                                  * new shape's run (to twice that shape's need): no run waited */
    double arena_ahead_ms;       /* their time, in all (the background thread's) */
    /* CUDA Graphs, over the program (and its specializations). */
    uint64_t graph_captures;     /* graphs built and instantiated */
    uint64_t graph_prebuilt;     /* of those, built before their first run: by the background
                                  * thread for a specialization, by fc_program_reserve for the
                                  * dynamic variant (docs/DYNAMIC.md) */
    double graph_build_ms;       /* host time spent building them, in all */
    uint64_t graph_replays;      /* runs that launched a graph */
    uint64_t graph_patches;      /* graph nodes given new pointers (kernel parameters set, or a
                                  * cuBLASLt call captured again) */
    uint64_t frame_writes;       /* dynamic variant runs that wrote its frame: a shape, buffers
                                  * or arena other than the last run's (a variant of kernels
                                  * only: its kernels read sizes and pointers from the frame,
                                  * and its graph never changes; docs/DYNAMIC.md) */
    uint64_t graph_skips;        /* runs after the first launched one by one: graphs are off,
                                  * or building or patching the graph failed */
    char graph_skip_reason[160]; /* why ("" if the program replays) */
    char dynamic_unavailable[160]; /* why the program has no dynamic variant ("" if it has one,
                                    * or is static) */
} fc_run_stats;

/* p's statistics since it was made (all zero for NULL). */
void fc_program_stats(const fc_program *p, fc_run_stats *out);
/* The launch plan as text: one line per launch, then the arena line, then
 * exactly `total: K kernels, L library calls, M bytes of intermediates`. */
char *fc_program_plan_text(fc_program *p);
/* The generated CUDA C source (a CUDA program's; FC_ERR_UNSUPPORTED on
 * the context, and NULL, for another device's). */
char *fc_program_cuda_source(fc_program *p);
/* The PTX NVRTC makes of the source (a CUDA program's, as above). */
char *fc_program_ptx(fc_program *p);
/* The generated source of any device's program: CUDA C, or the CPU
 * backend's optimized LLVM IR (kept when $FUSEC_DEBUG has "code");
 * NULL with FC_ERR_UNSUPPORTED when the backend has none. */
char *fc_program_source(fc_program *p);

/* The fused graph in Graphviz's DOT language: one cluster per launch
 * (kernel, library call or view), coloured by its kind, holding its ops;
 * edges between ops labelled with the dtype and shape they carry; the
 * parameters and results as their own nodes. A malloc'd text (fc_free);
 * NULL with the error on p's context (FC_ERR_UNSUPPORTED for a backend
 * without a plan: the reference interpreter). `dot -Tsvg` renders it. */
char *fc_program_plan_dot(fc_program *p);

/* ------------------------------------------------------------------ */
/* Where the time goes: the profile (docs/PROFILING.md).               */
/*                                                                     */
/* fc_program_profile runs a program `warmup` times, then `runs` times */
/* as fc_run runs it (CUDA Graphs and all), then `runs` times with     */
/* each launch timed on the device (CUDA: CUPTI's activity records,    */
/* CUPTI loaded only then, the program's CUDA Graph replayed where it  */
/* has one; CPU: the wall clock around each launch), and reports one   */
/* row per launch and a summary. The plain runs say what profiling     */
/* costs.                                                              */
/* ------------------------------------------------------------------ */
typedef struct fc_profile fc_profile;

typedef struct fc_profile_options {
    int warmup; /* runs before the measured ones; default 3 */
    int runs;   /* measured runs; default 20 */
    /* The caller's parse of the graph, in milliseconds, shown as the
     * trace's first compile phase (the library does not parse). */
    double parse_ms;
} fc_profile_options;

void fc_profile_options_default(fc_profile_options *o);

/* One launch of the program, as measured. Strings are owned by the
 * profile. */
typedef struct fc_profile_launch {
    int launch;          /* its position in the launch list (the plan's `launch N`) */
    const char *name;    /* the kernel's function, or the library call ("gemm", "matmul") */
    const char *kind;    /* "kernel" or "library" */
    const char *ops;     /* the ops it runs (the plan's summary) */
    const char *source;  /* where they are written: "model.ir:12-15,18", or an ONNX
                          * model's node names; "" when unknown */
    int nsource_ops;     /* source ops it covers */
    double min_ms, median_ms; /* device time of one launch over the measured runs */
    double share;        /* median_ms / the sum of every launch's median, 0 .. 1 */
    int64_t bytes;       /* its arguments' bytes (read and written once); -1: unknown */
    double flops;        /* the FLOPs it computes (lower/launch_cost.h); -1: unknown */
    double gbps, tflops; /* bytes and FLOPs over median_ms: GB/s (1e9) and TFLOP/s (1e12) */
    double peak_fraction; /* of the device's ceiling it is nearest: gbps / peak_gbps or
                           * tflops / peak_tflops, the larger */
    bool compute_bound;  /* its FLOPs per byte are above the device's ridge point */
    /* The launches (positions in the launch list) whose results it reads. */
    const int *after;
    int nafter;
} fc_profile_launch;

typedef struct fc_profile_summary {
    const char *device;     /* "NVIDIA H200", "x86_64 CPU (16 threads)" */
    double peak_gbps, peak_tflops; /* the ceilings the fractions are of */
    const char *peak_source; /* how they were found ("measured memcpy", "documented") */
    int warmup, runs;
    int launches;           /* rows (aliases, which run nothing, are left out) */
    int kernels, library;
    int source_ops;         /* the sum of the rows' nsource_ops */
    int fused_ops;          /* of those, the ones that share a launch with another */
    double device_ms;       /* the sum of the launches' median device times */
    double wall_ms;         /* median wall time of a profiled run */
    double plain_wall_ms;   /* median wall time of a run as fc_run makes it, unprofiled */
    bool host_bound;        /* the device idles more than half of a profiled run */
    /* The largest gaps between one launch's end and the next one's start
     * (the median run), largest first: after launch gap_after[i]. */
    int ngaps;
    double gap_ms[3];
    int gap_after[3];
    /* How the profiled runs ran: true when they replayed the program's
     * CUDA Graph as fc_run does; mode says it in words (and, launch by
     * launch, why), "" for a backend with one way only. */
    bool replayed;
    const char *mode;
} fc_profile_summary;

/*
 * Profile p on host inputs (fc_program_run_host's convention: each
 * inputs[i] has parameter i's dtype and shape). o NULL: the defaults. The
 * result is freed with fc_profile_free. FC_ERR_UNSUPPORTED for a dynamic
 * program, the reference backend, or CUDA without CUPTI (the message says
 * where fusec looked for it); errors on p's context.
 */
fc_status fc_program_profile(fc_program *p, const fc_tensor *inputs, int nin, const fc_profile_options *o,
                             fc_profile **out);
void fc_profile_free(fc_profile *prof);
/* The rows, sorted by median time, longest first (i in 0 .. count-1). */
int fc_profile_count(const fc_profile *prof);
const fc_profile_launch *fc_profile_at(const fc_profile *prof, int i);
void fc_profile_get_summary(const fc_profile *prof, fc_profile_summary *out);

typedef enum fc_profile_format {
    FC_PROFILE_TABLE, /* aligned columns for a terminal, then the summary */
    FC_PROFILE_CSV,   /* a header line, then one line per row */
    FC_PROFILE_JSON,  /* {"summary": {..}, "launches": [..]}: the fields above */
    FC_PROFILE_TRACE, /* Chrome's trace event format (Perfetto, chrome://tracing): the
                       * compile phases, then each profiled run's host calls and device
                       * activity on their own tracks, joined by flow events */
} fc_profile_format;
/* The profile as text (fc_free); NULL with FC_ERR_UNSUPPORTED on the
 * program's context for JSON and the trace in a build without cJSON. */
char *fc_profile_text(const fc_profile *prof, fc_profile_format format);
/* The format's name: "table", "csv", "json", "trace"; and back (-1: none). */
const char *fc_profile_format_name(fc_profile_format f);
int fc_profile_format_from_name(const char *name);
/* One profiled run's timeline, for drawing it: its events, each a launch's
 * device time [start_ms, end_ms) from the run's start. i in 0 .. n-1;
 * false past the end. */
bool fc_profile_timeline(const fc_profile *prof, int i, int *launch, double *start_ms, double *end_ms);

/* ------------------------------------------------------------------ */
/* Comparing outputs with the reference interpreter's.                */
/* ------------------------------------------------------------------ */

/*
 * The tolerance of a dtype: an element passes when
 *
 *     |got - want| <= abs + rel * |want|        (numpy.allclose's rule)
 *
 * with NaN equal to NaN and an infinity equal only to itself.
 *
 *   dtype   rel      abs      why
 *   f64     1e-9     1e-12    f64 kernels; only summation order and libm
 *                             ulps differ from the reference
 *   f32     1e-5     1e-5     ~100 ulps at 1.0: reductions accumulate in a
 *                             different order (and in f32) than the
 *                             reference's float64, and expf/tanhf differ by
 *                             a few ulps; abs covers results that cancel
 *                             to near zero
 *   f16     2e-3     1e-3     two f16 ulps relative, one ulp at 1.0
 *   bf16    1.6e-2   1e-2     two bf16 ulps relative, one ulp at 1.0
 *   ints    0        0        exact
 *   bool    0        0        exact
 *
 * Why two ulps for the 16-bit floats: a fused kernel keeps intermediates in
 * f32 registers, while the reference rounds every node's result to its
 * dtype, so a chain of 16-bit ops may round once where the reference
 * rounds at every step, and the two can end one ulp apart on either side.
 * The abs terms assume data of order one (the tests' inputs are); they are
 * what keeps cancellation (x - y with x close to y) from failing on the
 * rounding of the operands.
 */
typedef struct fc_tolerance {
    double rel, abs;
} fc_tolerance;

fc_tolerance fc_dtype_tolerance(fc_dtype dt);

/* How one output compares with the reference. */
typedef struct fc_output_diff {
    fc_dtype dtype;
    int64_t numel;
    fc_tolerance tol;
    double max_abs_err; /* max |got - want| (inf when a NaN or inf differs) */
    double max_rel_err; /* max |got - want| / |want| over elements with want != 0 */
    int64_t nbad;       /* elements outside the tolerance */
    int64_t worst;      /* element furthest outside (or nearest to) its bound; -1 if empty */
    double worst_got, worst_want;
    bool shape_ok;      /* same dtype, rank and shape */
    bool pass;          /* shape_ok and nbad == 0 */
    /* Against the exact computation (fc_compare_outputs_exact; 0 otherwise): */
    double err;         /* max |got - exact| */
    double ref_err;     /* max |want - exact|: the dtype-faithful computation's error */
    double margin;      /* the multiple of the faithful error got may have (fc_check_margin) */
    double worst_ratio; /* the worst element's error over what it is allowed (> 1: out) */
    double rel_l2;      /* ||got - exact|| / ||exact|| over finite elements (float outputs) */
    double ref_rel_l2;  /* ||want - exact|| / ||exact||: the faithful computation's */
} fc_output_diff;

/*
 * Compare got[i] with want[i] for i < n and fill diffs[i]. Returns FC_OK
 * when every output passes; FC_ERR_RUNTIME when one does not, with a
 * message on ctx naming the first failing output, its errors, its
 * tolerance and its worst element (every diffs[i] is filled either way);
 * FC_ERR_USAGE for NULL arguments.
 */
fc_status fc_compare_outputs(fc_context *ctx, const fc_tensor *got, const fc_tensor *want, int n,
                             fc_output_diff *diffs);

/*
 * fusec's error bound (docs/NUMERICS.md, "The error bound"), what --check
 * and the tests decide: fc_compare_outputs, where an element out of the
 * table's tolerance still passes when its error against the exact
 * computation (exact[i]: fc_run_reference_exact's outputs) is at most
 *
 *   fc_check_margin(dtype) * (|want - exact| + rms) + 2u * |exact|
 *
 * where want is the dtype-faithful computation (fc_run_reference, every
 * value rounded to its dtype, as eager PyTorch computes), rms is the root
 * mean square of |want - exact| over the output and u the dtype's unit
 * roundoff. So large activations and cancellation, which make the
 * faithful computation inexact too, are not reported as fusec's errors;
 * an error well beyond what rounding to the dtypes explains still is.
 * An integer or bool element equals want's or lies between want's and
 * exact's (a cast or compare of a value kept unrounded may land on
 * either side); a NaN or an infinity is want's or exact's.
 */
fc_status fc_compare_outputs_exact(fc_context *ctx, const fc_tensor *got, const fc_tensor *want,
                                   const fc_tensor *exact, int n, fc_output_diff *diffs);
/* The margin of fc_compare_outputs_exact: 128 for f32 and f64 (summation
 * in f32, in any order, against the reference's float64 sums), 8 for f16
 * and bf16; 0 for integer dtypes. */
double fc_check_margin(fc_dtype dt);

/*
 * --check in one call: run g's reference both ways on inputs
 * (fc_run_reference, fc_run_reference_exact) and compare got[0..nout), a
 * backend's outputs on the same inputs, with fc_compare_outputs_exact.
 * FC_OK when every output passes, FC_ERR_RUNTIME when one does not (the
 * message names it); the reference's own status (FC_ERR_INPUT for a
 * gather index out of range, ...) when it refuses the graph or inputs.
 */
fc_status fc_check_outputs(fc_graph *g, const fc_tensor *inputs, int nin, const fc_tensor *got, int nout,
                           fc_output_diff *diffs);

/*
 * One line about diffs for output `index`, for the CLI's --check and the
 * tests:
 *   output 0 (f32, 1024 elements): max_abs_err 1.19e-07 max_rel_err 2.4e-07
 *   (tolerance rel 1e-05 abs 1e-05): ok
 * ending in "FAIL (N elements out of tolerance; worst [i]: got G, want W)"
 * or "FAIL (dtype or shape differs)". Returns buf.
 */
/* A NULL buf (or n 0) gives NULL; a NULL d, "output N: no comparison". */
const char *fc_output_diff_format(const fc_output_diff *d, int index, char *buf, size_t n);

/* "sm_90", "sm90", "90" or "9.0" -> 90 into *sm (a CUDA target for
 * fc_compile_options.sm). False on anything else. */
bool fc_arch_parse(const char *s, int *sm);

/* Copy a graph (a deep copy into a new arena). NULL on failure. */
fc_graph *fc_graph_clone(fc_graph *g);
/* Copy a graph with symbolic dims bound to sizes (a specialized graph, as
 * --bind makes); every node is re-checked. NULL with the error on failure. */
fc_graph *fc_graph_specialize(fc_graph *g, const fc_binding *binds, int nbinds);

/* The rest of this header (a program's signature, programs in files, the
 * compile cache's location, compile timings) is guarded on its own, so that
 * internal headers written before it moved here can still be included with
 * it. */
#ifndef FC_API_PROGRAM_FILES
#define FC_API_PROGRAM_FILES

/* ------------------------------------------------------------------ */
/* A program's parameters and results: what to allocate for fc_run.   */
/* They work for every program, also one loaded from a file, which has */
/* no graph to ask.                                                    */
/* ------------------------------------------------------------------ */

/* The number of parameters of p (the length of fc_run's inputs); 0 for
 * NULL. */
int fc_program_num_inputs(const fc_program *p);
/* The number of results of p (the length of fc_run's outputs); 0 for NULL. */
int fc_program_num_outputs(const fc_program *p);
/*
 * The dtype and static shape of input i (fc_run's inputs[i]) into *type,
 * with type->data NULL. Its name in the graph ("" if it had none) goes to
 * *name when name is not NULL; the string is owned by the program.
 * FC_ERR_USAGE for a bad i or a NULL type.
 */
fc_status fc_program_input(const fc_program *p, int i, fc_tensor *type, const char **name);
/* The dtype and static shape of result i (fc_run's outputs[i]) into *type,
 * with type->data NULL. FC_ERR_USAGE for a bad i or a NULL type. */
fc_status fc_program_output(const fc_program *p, int i, fc_tensor *type);

/* ------------------------------------------------------------------ */
/* Programs in files: compile once, ship one file, run it with no      */
/* parse, no passes and no NVRTC (`fusec model.ir -o model.cubin`).    */
/*                                                                     */
/* The file holds the program (launch plan, signature, the graph's     */
/* text), one cubin per distinct kernel and, optionally, the data of   */
/* parameters (an imported model's weights), with a checksum over the  */
/* whole file. docs/AOT.md describes the format.                       */
/* ------------------------------------------------------------------ */

/*
 * Write p to `path`, replaced atomically (a reader sees the old file or the
 * new one). p may come from fc_compile, from the cache or from a file; a
 * program loaded from a file is written with the weights it carried.
 * Nothing is compiled: the file holds the cubins p's kernels already have.
 * The name is checked as fc_program_check_save_path does. FC_ERR_RUNTIME
 * when the file cannot be written; FC_ERR_UNSUPPORTED for a dynamic
 * program (a file holds static shapes); FC_ERR_USAGE for a NULL p or path,
 * or "".
 */
fc_status fc_program_save_file(fc_program *p, const char *path);
/* The parameters' data, by name: a set of weights (fusec.h's import
 * section; an ONNX model's initializers). */
typedef struct fc_weights fc_weights;
/* As fc_program_save_file, with the tensors of w (NULL: none) in the
 * file: each must name a parameter of p and have its dtype and shape
 * (FC_ERR_USAGE naming it otherwise). A loaded program gives them back
 * (fc_program_weights), so a file of an imported model runs alone. */
fc_status fc_program_save_file_weights(fc_program *p, const char *path, const fc_weights *w);
/* The weights a program loaded from a file carries (owned by p), or NULL. */
const fc_weights *fc_program_weights(const fc_program *p);
/* Would fc_program_save_file write `path`? FC_OK, or the error it would
 * give (a directory, device, FIFO, socket or dangling symlink, a file this
 * process could not open for writing: FC_ERR_RUNTIME). Nothing is created
 * or changed. Check before a long compile whose result is to be saved. */
fc_status fc_program_check_save_path(fc_context *ctx, const char *path);
/*
 * Load a program written by fc_program_save_file into *out (free it with
 * fc_program_free). Nothing is compiled; the GPU is first touched by
 * fc_run, as for fc_compile's programs. A file that is not such a program,
 * is damaged (its checksum differs) or has a newer format is FC_ERR_INPUT,
 * with a message that starts with the path and says which; a file that
 * cannot be read is FC_ERR_RUNTIME. *out is NULL on failure.
 */
fc_status fc_program_load_file(fc_context *ctx, const char *path, fc_program **out);
/* As fc_program_load_file, from the `size` bytes at `data` (a file embedded
 * in an application); the bytes are copied, so they may be freed after. */
fc_status fc_program_load_data(fc_context *ctx, const void *data, size_t size, fc_program **out);
/* True when `path` names such a file (a regular file that starts with
 * fusec's magic, "FUSECAOT"), false for anything else (.ir text, a plain
 * cubin, a missing file). It reads 8 bytes: fc_program_load_file checks
 * the rest. */
bool fc_program_is_file(const char *path);

/* ------------------------------------------------------------------ */
/* The compile cache (docs/CACHE.md). fc_compile uses one cache per    */
/* process, opened at its first use from the environment:              */
/*   FUSEC_CACHE_DIR        the directory; else $XDG_CACHE_HOME/fusec  */
/*                          (when absolute), else ~/.cache/fusec       */
/*   FUSEC_CACHE            off, ro (read only) or rw (the default)    */
/*   FUSEC_CACHE_MAX_BYTES  the size limit (1G by default; 512M, ...)  */
/* A directory owned by another user, or writable by group or others,  */
/* is refused: fc_compile then works without the disk cache.           */
/* ------------------------------------------------------------------ */

/*
 * Use `dir` as the cache directory instead of the environment's (NULL: the
 * environment's again). Only before the cache is first used (the first
 * fc_compile): FC_ERR_USAGE after that, and for "". FC_ERR_NOMEM when the
 * name cannot be copied.
 */
fc_status fc_cache_configure(const char *dir);

/* The process's cache (the one fc_compile uses; struct fc_cache is
 * opaque). */
typedef struct fc_cache fc_cache;
/* Open the process's cache now, from the environment and
 * fc_cache_configure (fc_compile opens it at its first use), into *out
 * (which may be NULL). FC_ERR_USAGE for a bad $FUSEC_CACHE or
 * $FUSEC_CACHE_MAX_BYTES, FC_ERR_NOMEM; a directory that cannot be used is
 * no error: the cache then works in memory and says why once
 * (fc_cache_global_take_warning). */
fc_status fc_cache_global_open(fc_context *ctx, fc_cache **out);
/* The cache's one-time warning (a directory refused, ...), or NULL; NULL
 * after it was taken once. */
const char *fc_cache_global_take_warning(void);
/* Flush the cache's counters and close it (at exit; a later compile opens
 * it again). */
void fc_cache_global_close(void);
/* `fusec --cache-info [--verify]`'s text: where the cache is, its mode,
 * its entries and counters by level; with verify, every entry's checksum
 * checked and the bad ones listed (their count into *nbad). malloc'd
 * (fc_free); NULL with the error on ctx. */
char *fc_cache_info_text(fc_context *ctx, bool verify, size_t *nbad);
/* Remove every entry (`fusec --cache-clear`) and say what went: malloc'd
 * text (fc_free); NULL with the error on ctx. */
char *fc_cache_clear_text(fc_context *ctx);

/* ------------------------------------------------------------------ */
/* Where the compile time went (`fusec --time`).                       */
/* ------------------------------------------------------------------ */

/* Where a program came from. */
typedef enum fc_program_origin {
    FC_PROGRAM_COMPILED,      /* passes, codegen and NVRTC all ran */
    FC_PROGRAM_KERNEL_CACHE,  /* passes and codegen ran; the cubin came from the cache */
    FC_PROGRAM_PROGRAM_CACHE, /* a warm start: everything came from the cache */
    FC_PROGRAM_FILE,          /* loaded from a file (fc_program_load_file) */
} fc_program_origin;

/* The times of one program's making, in milliseconds. */
typedef struct fc_compile_times {
    fc_program_origin origin;
    double parse_ms;   /* 0 from the library: the caller measures its parse */
    double passes_ms;  /* the passes: fusion, scheduling, memory plan */
    double codegen_ms; /* CUDA C generation */
    double nvrtc_ms;   /* NVRTC; 0 when the cubin came from the cache */
    double cache_ms;   /* keys, cache lookups and stores, (de)serialization */
    double compile_ms; /* all of fc_compile (or of the load), the above included */
    /* At the first fc_run (0 until then, or without a GPU): */
    double device_ms;  /* opening the CUDA device (its primary context) */
    double load_ms;    /* loading the cubin and resolving the kernels */
    bool loaded;       /* a run has loaded the module */
} fc_compile_times;

/* The times of p as they stand now into *out (the device and load times
 * are filled by p's first run); all zero for a NULL p. */
void fc_program_times(const fc_program *p, fc_compile_times *out);
/* The times formatted for `fusec --time`, one step a line (docs/CACHE.md
 * has an example): a malloc'd string (fc_free), NULL when out of memory. */
char *fc_compile_times_text(const fc_compile_times *t);

#endif /* FC_API_PROGRAM_FILES */

/* ------------------------------------------------------------------ */
/* Models in: ONNX import and weights (docs/ONNX.md).                  */
/*                                                                     */
/* The IR has no constant tensors: a graph's data comes in through its */
/* parameters. An imported model's initializers (and its constant      */
/* tensors that are not one repeated value) therefore become           */
/* parameters after the model's own inputs, named as in the model,     */
/* and their data comes back as a set of weights, to be passed as      */
/* those parameters' inputs (fc_weights_bind fills them in).           */
/* Available when fusec is built with protobuf-c and cJSON; otherwise  */
/* these functions return FC_ERR_UNSUPPORTED saying so.                */
/* ------------------------------------------------------------------ */
#ifndef FC_API_IMPORT
#define FC_API_IMPORT

/* A set of named host tensors: a model's initializers, or a safetensors
 * file's tensors. */
typedef struct fc_weights fc_weights;

/*
 * Import the ONNX model at `path` (external data files are read from its
 * directory). Graph inputs keep their names, in order, as the first
 * parameters; `dim_param` dims become symbolic dims of the same name (made
 * valid as a NAME), bound by `binds`. Graph inputs named in `frozen` (NULL:
 * none) are not parameters but known data, as initializers are: an input
 * that must be known when importing (a Reshape's shape, a Slice's starts)
 * can be given this way. Shape arithmetic that depends only on known data
 * and dims is folded. On success *graph is the graph and *weights (when
 * weights is not NULL; else they are freed) the initializers' data; on
 * failure both are NULL and the context's error names the node (its name
 * and op_type) or the part of the file at fault.
 */
fc_status fc_graph_from_onnx(fc_context *ctx, const char *path, const fc_binding *binds, int nbinds,
                             const fc_weights *frozen, fc_graph **graph, fc_weights **weights);
/* As fc_graph_from_onnx, from `size` bytes in memory; `dir` is where external
 * data files are looked for (NULL: external data is an error). */
fc_status fc_graph_from_onnx_data(fc_context *ctx, const char *filename, const void *data, size_t size,
                                  const char *dir, const fc_binding *binds, int nbinds, const fc_weights *frozen,
                                  fc_graph **graph, fc_weights **weights);
/* Read one serialized ONNX TensorProto (a test case's input_0.pb) into *out
 * (release it with fc_tensor_release); *name gets its name (fc_free) when
 * name is not NULL. */
fc_status fc_tensor_from_onnx_file(fc_context *ctx, const char *path, fc_tensor *out, char **name);

/*
 * Read a safetensors file: every tensor by name, of the dtypes F64, F32,
 * F16, BF16, I64, I32, I8 and BOOL. The file is memory-mapped and the
 * tensors point into it. A malformed header, an unknown dtype, data out of the
 * file's bounds or overlapping are FC_ERR_INPUT naming the tensor.
 */
fc_status fc_weights_load_safetensors(fc_context *ctx, const char *path, fc_weights **out);
/* As fc_weights_load_safetensors, from `size` bytes in memory (copied). */
fc_status fc_weights_load_safetensors_data(fc_context *ctx, const char *name, const void *data, size_t size,
                                           fc_weights **out);
/* An empty set (NULL on OOM), and a tensor added to it by copy. */
fc_weights *fc_weights_new(void);
fc_status fc_weights_add(fc_weights *w, const char *name, const fc_tensor *t);
/* Free a set of weights (and unmap its file). NULL is ignored. */
void fc_weights_free(fc_weights *w);
/* Number of tensors; name and tensor of tensor i (owned by w). */
int fc_weights_count(const fc_weights *w);
const char *fc_weights_name(const fc_weights *w, int i);
const fc_tensor *fc_weights_tensor(const fc_weights *w, int i);
/* The tensor named `name`, or NULL. */
const fc_tensor *fc_weights_find(const fc_weights *w, const char *name);
/*
 * Fill inputs[i] (a borrowed view: do not release it) for every parameter i
 * of g named in w, and set bound[i] (when bound is not NULL). A tensor whose
 * dtype or shape differs from its parameter's (symbolic dims match any size,
 * one size per symbol) is FC_ERR_INPUT naming it. With `exact`, a tensor that
 * names no parameter, or a parameter after the first `first_free` that no
 * tensor names, is FC_ERR_INPUT too (`--weights` for an .ir graph: the
 * parameters before first_free are the inputs the user gives).
 */
fc_status fc_weights_bind(const fc_weights *w, fc_graph *g, fc_tensor *inputs, int nin, bool *bound, bool exact,
                          int first_free);
/* Rank `rank`'s weights for a graph sharded at `degree` (fc_graph_shard;
 * docs/PARALLEL.md): each tensor of w that names a cut parameter of
 * `sharded`, cut (fc_tensor_shard); every other tensor whole. Copies, into
 * a new set *out (fc_weights_free), which fc_weights_bind binds to
 * `sharded`: the weights of one safetensors file or ONNX model, split at
 * load time. */
fc_status fc_weights_shard(const fc_weights *w, const fc_graph *sharded, int degree, int rank, fc_weights **out);

#endif /* FC_API_IMPORT */

#ifdef __cplusplus
}
#endif
#endif
