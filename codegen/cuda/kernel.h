/* kernel.h - the generator of pointwise and row (REDUCE) kernels
 * (internal to codegen/cuda), in files by role:
 *   expr.c        the value of a graph value at an element index, as C
 *                 (views become index arithmetic, results are memoized);
 *   kernel.c      what both kernel kinds share: parameters, vector loads
 *                 and stores, the walk over a chunk's elements;
 *   pointwise.c   POINTWISE groups, alone or batched in one launch;
 *   reduce.c      REDUCE groups: rows, phases, all-reduces;
 *   frame_entry.c the entry points of a dynamic plan's frame kernels.
 * The dispatcher (codegen.c) calls pointwise.c, reduce.c and
 * frame_entry.c; they build on expr.c and kernel.c. */
#ifndef FC_CUDA_KERNEL_H
#define FC_CUDA_KERNEL_H

#include "emit.h"

#define SZ 96  /* room for one size expression */
#define CX 256 /* room for one coordinate expression */

typedef struct memo {
    int vid;
    char idx[24];
    char expr[96];
} memo;

/* Coordinates an index is known to have: idx is the linear index of an
 * element of a value of shape (rank, dims) whose coordinate d is the C
 * expression c[d] ("" where not known). */
typedef struct coords {
    char idx[24];
    int rank;
    fc_dim dims[FC_MAX_RANK];
    char c[FC_MAX_RANK][CX];
} coords;

typedef struct kctx {
    const fc_plan *p;
    const fc_group *gr;
    fc_strbuf *s;
    int tmp;
    memo *memo;
    int nmemo, cap_memo;
    /* Indices made from coordinates (a view's, a broadcast operand's, a row
     * kernel's element): coord reads their coordinates back instead of
     * dividing the index again (64-bit divisions by run-time sizes are the
     * costly part of a dynamic kernel's element). Scoped with the memo. */
    coords *cm;
    int ncm, cap_cm;
    /* A trailing reduction: element L = row * len + j0 + e, its outer
     * coordinates from row (computed once a row), the reduced ones from j0. */
    bool row_coords;
    /* A pointwise kernel's vector chunk at base (a multiple of its width,
     * which divides the last dim): chunk_c[d] names base's coordinate d, and
     * element base + e has them, the last plus e. */
    bool chunk_coords;
    char chunk_c[FC_MAX_RANK][24];
    bool oom;
    fc_status err;
    char errmsg[256];
    /* REDUCE groups */
    bool reduce;
    int tpr;
    bool *is_row;    /* per value id: computed once per row */
    bool *row_ready; /* per value id: its row variable exists */
    /* Values kept in registers across phases: element e of chunk c of value
     * cached_vid[i] is cached_arr[i][c][e]. */
    int cached_vid[8];
    char cached_arr[8][16];
    int ncached;
    /* Dynamic plan: symbolic sizes are the kernel's i64 parameters s0 ..
     * s{nsyms-1} (every kernel takes all of them). */
    bool dyn;
    int nsyms;
    /* A frame kernel (fc_launch.frame): its pointers are loaded, not
     * parameters, so read-only loads are said explicitly (fc_nc). */
    bool frame;
    /* Broadcast inputs whose shape is a suffix of the space (a norm's
     * weight) are vector-loaded at base % P (P = their element count):
     * bv lists them for the current chunk; bx maps (element index L, P)
     * to the name of that element's index into them. */
    struct { int input; int64_t p; char off[24]; } bv[8];
    int nbv;
    /* Persistent rows: suffix-broadcast inputs loaded in the prologue with
     * the row (their chunk c in q<input>[c]) instead of in the phases that
     * read them: bq lists the inputs. */
    int bq[8];
    int nbq;
    struct { char L[24]; int64_t p; char ix[24]; } bx[8];
    int nbx;
    /* store_element: the output value being stored unrounded (-1: none). */
    int store_only_vid;
    char store_only_name[24];
    /* A group evaluated inside another kernel's epilogue (a GEMV's gate,
     * gemv.c): its input 0 is that kernel's registers, read through this
     * function-like macro of the element index instead of a load (NULL:
     * a load, as every other input). */
    const char *input0_as;
} kctx;

/* Emit the VEC elements starting at linear index `base` of the space: each
 * element's index variable, memo entries for vector-loaded inputs `vin`
 * (names of fc_vec variables, NULL when not vector-loaded), and a callback
 * for what to do with each element. */
typedef void (*elem_fn)(kctx *k, int e, const char *L, void *arg);

typedef struct store_arg {
    char (*vout)[24]; /* vector output names, or NULL (scalar stores) */
    bool row_outputs; /* REDUCE: skip per-row outputs (stored separately) */
} store_arg;

/* ---- expr.c ---- */
const char *fc_cg_compute_type(fc_dtype dt);
void fc_cg_rounded(char *out, size_t n, fc_dtype dt, const char *e);
/* Whether v, computed inside the kernel, stays unrounded in its compute
 * type (fast numerics, a float dtype): only its store rounds it. */
bool fc_cg_unrounded(const kctx *k, const fc_value *v);
const char *fc_cg_dimx(int64_t d, char *buf, size_t n);
void fc_cg_stride_text(const fc_dim *dims, int rank, char st[][SZ]);
const char *fc_cg_lookup(kctx *k, int vid, const char *idx);
void fc_cg_remember(kctx *k, int vid, const char *idx, const char *expr);
void fc_cg_fail(kctx *k, const char *msg);
bool fc_cg_is_input(const kctx *k, const fc_value *v, int *pos);
void fc_cg_note_coords(kctx *k, const char *idx, int rank, const fc_dim *dims, const char *const *c);
int64_t fc_cg_suffix_numel(const fc_group *gr, const fc_value *x);
const char *fc_cg_emit_value(kctx *k, const fc_value *v, const char *L);
bool fc_cg_in_group(const kctx *k, const fc_node *n);

/* ---- kernel.c ---- */
void fc_cg_sym_args(kctx *k, const char *prefix);
void fc_cg_kernel_params(kctx *k);
void fc_cg_kernel_signature(kctx *k, fc_launch *l, unsigned block);
int fc_cg_vector_width(const kctx *k, int64_t len);
bool fc_cg_full_shape(const fc_group *gr, const fc_value *v);
void fc_cg_chunk_base_coords(kctx *k, int vec);
void fc_cg_elements(kctx *k, const char *base, int vec, char vin[][24], elem_fn fn, void *arg);
const char *fc_cg_vector_load(const kctx *k, int i, int vec, const char *at, char *buf, size_t n);
int64_t fc_cg_vector_bcast(const fc_group *gr, int i, int vec);
bool fc_cg_in_prologue(const kctx *k, int i);
void fc_cg_vector_loads(kctx *k, const char *base, int vec, char vin[][24], const char *cache_fmt);
void fc_cg_store_element(kctx *k, int e, const char *L, void *arg);
void fc_cg_declare_vector_outputs(kctx *k, int vec, char vout[][24]);
void fc_cg_vector_stores(kctx *k, int vec, char vout[][24], const char *base);
/* Room for the names of the vector variables of a group's inputs (*vin)
 * and outputs (*vout), 24 characters each, zeroed (free both); false, and
 * neither, out of memory. */
bool fc_cg_vector_names(const fc_group *gr, char (**vin)[24], char (**vout)[24]);

/* ---- pointwise.c ---- */
fc_status fc_cg_pointwise_kernel(kctx *k, fc_launch *l);
fc_status fc_cg_batched_launch(const fc_plan *plan, int first, int last, fc_strbuf *s, fc_launch *l);

/* ---- reduce.c ---- */
fc_status fc_cg_reduce_kernel(kctx *k, fc_launch *l);

/* ---- frame_entry.c ---- */
void fc_cg_frame_entry(fc_strbuf *s, fc_launch *l, int nsyms, int carried_words);
bool fc_cg_frame_carry(int words);
int fc_cg_carrier_words(fc_cuda_src *out, bool carry);
/* The frame's device helpers, once after the prelude, and the carrier's
 * (fc_frame_words, fc_frame_store) where carry. */
void fc_cg_frame_preludes(fc_strbuf *s, bool carry);

#endif
