/* onnx_read.c - reading .onnx files: the ModelProto through protobuf-c (the
 * schema is Debian's onnx.proto, compiled at build time), tensors with their
 * external data, the graph's inputs, initializers and outputs, and the walk
 * over the nodes that hands each one to the translation table (onnx_ops.c)
 * or the folder (onnx_shape.c). */
#include "onnx.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The opsets of the default domain that the translation table follows: the
 * table implements each op's semantics from opset 7 on, where they differ
 * by opset; an older model is read with them too, except for the one
 * pre-7 form that means something else (the binary ops' `broadcast`
 * attribute, refused in onnx_ops.c). The upper bound is the newest opset
 * the table has been checked against. */
#define OX_OPSET_MIN 1
#define OX_OPSET_MAX 21

/* Files over this size are refused before they are read: a model's weights
 * over 2 GB live in external data files, never in the protobuf itself. */
#define OX_MAX_PROTO_BYTES ((size_t)1 << 31)

/* How errors and launches name a node: its name, else its first output's. */
static const char *node_name(const Onnx__NodeProto *n) {
    if (n->name && *n->name) return n->name;
    return n->n_output && n->output[0] && *n->output[0] ? n->output[0] : "?";
}

fc_status ox_error(ox_ctx *ox, fc_status st, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const Onnx__NodeProto *n = ox->root ? ox->root->node : ox->node;
    if (n)
        return fc_set_error(ox->ctx, st, "%s: error: node '%s' (%s, opset %lld): %s", ox->file, node_name(n),
                            n->op_type ? n->op_type : "?", (long long)ox->opset, msg);
    return fc_set_error(ox->ctx, st, "%s: error: %s", ox->file, msg);
}

/* ---- the value table ---------------------------------------------- */

static size_t hash_str(const char *s) {
    size_t h = 1469598103934665603u;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211u;
    return h;
}

ox_val *ox_lookup(ox_ctx *ox, const char *name) {
    if (!ox->cap) return NULL;
    for (size_t i = hash_str(name) & (ox->cap - 1);; i = (i + 1) & (ox->cap - 1)) {
        if (!ox->vals[i].name) return NULL;
        if (!strcmp(ox->vals[i].name, name)) return &ox->vals[i];
    }
}

/* A new entry for `name` (an existing one is reset: ONNX names are SSA, but
 * a malformed model that repeats one gets the latest definition). */
ox_val *ox_define(ox_ctx *ox, const char *name) {
    if (ox->used * 2 >= ox->cap) {
        size_t ncap = ox->cap ? ox->cap * 2 : 256;
        ox_val *nv = calloc(ncap, sizeof *nv);
        if (!nv) return NULL;
        for (size_t i = 0; i < ox->cap; i++) {
            if (!ox->vals[i].name) continue;
            size_t j = hash_str(ox->vals[i].name) & (ncap - 1);
            while (nv[j].name) j = (j + 1) & (ncap - 1);
            nv[j] = ox->vals[i];
        }
        free(ox->vals);
        ox->vals = nv;
        ox->cap = ncap;
    }
    size_t i = hash_str(name) & (ox->cap - 1);
    while (ox->vals[i].name && strcmp(ox->vals[i].name, name)) i = (i + 1) & (ox->cap - 1);
    ox_val *v = &ox->vals[i];
    if (v->name) {
        ox_const_free(v->k);
        v->k = NULL;
        v->v = NULL;
        return v;
    }
    v->name = strdup(name);
    if (!v->name) return NULL;
    ox->used++;
    return v;
}

static void free_table(ox_ctx *ox) {
    for (size_t i = 0; i < ox->cap; i++) {
        free(ox->vals[i].name);
        ox_const_free(ox->vals[i].k);
    }
    free(ox->vals);
    ox->vals = NULL;
    ox->cap = ox->used = 0;
}

/* ---- dtypes and tensors ------------------------------------------- */

/* ONNX's integer types without an IR dtype of their own widen to one that
 * holds every value (uint8/int16/uint16 to i32, uint32 to i64); uint64
 * values over INT64_MAX do not fit and are refused when read. */
bool ox_dtype_from_onnx(int32_t t, fc_dtype *out) {
    switch (t) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: *out = FC_F32; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: *out = FC_F64; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16: *out = FC_F16; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16: *out = FC_BF16; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: *out = FC_I64; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32: *out = FC_I32; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT8: *out = FC_I8; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL: *out = FC_BOOL; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__STRING: *out = FC_STRING; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT8:
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT16:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT16: *out = FC_I32; return true;
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT32:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT64: *out = FC_I64; return true;
    default: return false;
    }
}

const char *ox_onnx_dtype_name(int32_t t) {
    static const char *names[] = {"UNDEFINED", "FLOAT",  "UINT8",  "INT8",   "UINT16",    "INT16",
                                  "INT32",     "INT64",  "STRING", "BOOL",   "FLOAT16",   "DOUBLE",
                                  "UINT32",    "UINT64", "COMPLEX64", "COMPLEX128", "BFLOAT16"};
    if (t >= 0 && t < (int32_t)(sizeof names / sizeof *names)) return names[t];
    return t <= 23 ? "FLOAT8/INT4" : "unknown";
}

static size_t raw_elem_size(int32_t t) {
    switch (t) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE:
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT64: return 8;
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT:
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT32: return 4;
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16:
    case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16:
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT16:
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT16: return 2;
    default: return 1;
    }
}

/* Element i of little-endian raw data of ONNX type t, as a double or an int. */
static void raw_elem(const uint8_t *p, int32_t t, bool is_float, double *f, int64_t *iv) {
    uint64_t u = 0;
    size_t es = raw_elem_size(t);
    for (size_t b = 0; b < es; b++) u |= (uint64_t)p[b] << (8 * b);
    switch (t) {
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: { float x; uint32_t w = (uint32_t)u; memcpy(&x, &w, 4); *f = x; break; }
    case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: memcpy(f, &u, 8); break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16: *f = fc_f16_to_f32((uint16_t)u); break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16: *f = fc_bf16_to_f32((uint16_t)u); break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: case ONNX__TENSOR_PROTO__DATA_TYPE__UINT64: *iv = (int64_t)u; break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT32: *iv = (int32_t)(uint32_t)u; break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT32: *iv = (int64_t)(uint32_t)u; break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT16: *iv = (int16_t)(uint16_t)u; break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__UINT16: *iv = (uint16_t)u; break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__INT8: *iv = (int8_t)(uint8_t)u; break;
    case ONNX__TENSOR_PROTO__DATA_TYPE__BOOL: *iv = u != 0; break;
    default: *iv = (uint8_t)u; break;
    }
    (void)is_float;
}

/* The bytes of an external tensor: `location` relative to dir (no absolute
 * paths, no '..': a model names files beside itself), `offset`, `length`. */
static fc_status read_external(ox_ctx *ox, const Onnx__TensorProto *t, const char *dir, size_t want, uint8_t **out) {
    const char *loc = NULL;
    long long off = 0, len = -1;
    for (size_t i = 0; i < t->n_external_data; i++) {
        const Onnx__StringStringEntryProto *e = t->external_data[i];
        if (!e->key || !e->value) continue;
        char *end;
        if (!strcmp(e->key, "location")) loc = e->value;
        else if (!strcmp(e->key, "offset")) { errno = 0; off = strtoll(e->value, &end, 10); if (*end || errno || off < 0) off = -1; }
        else if (!strcmp(e->key, "length")) { errno = 0; len = strtoll(e->value, &end, 10); if (*end || errno || len < 0) len = -2; }
    }
    const char *tn = t->name ? t->name : "";
    if (!loc || !*loc) return ox_error(ox, FC_ERR_INPUT, "tensor '%s': external data without a location", tn);
    if (off < 0 || len == -2) return ox_error(ox, FC_ERR_INPUT, "tensor '%s': bad external data offset or length", tn);
    if (loc[0] == '/' || strstr(loc, ".."))
        return ox_error(ox, FC_ERR_INPUT, "tensor '%s': external data location '%s' is not a file beside the model", tn, loc);
    if (!dir) return ox_error(ox, FC_ERR_INPUT, "tensor '%s': external data '%s', but the model has no directory", tn, loc);
    if (len >= 0 && (size_t)len != want)
        return ox_error(ox, FC_ERR_INPUT, "tensor '%s': external data length %lld, its shape needs %zu bytes", tn, len, want);
    size_t plen = strlen(dir) + strlen(loc) + 2;
    char *path = malloc(plen);
    if (!path) return fc_set_error(ox->ctx, FC_ERR_NOMEM, "out of memory");
    snprintf(path, plen, "%s/%s", dir, loc);
    FILE *f = fopen(path, "rb");
    fc_status st = FC_OK;
    uint8_t *buf = malloc(want ? want : 1);
    if (!f) st = ox_error(ox, FC_ERR_INPUT, "tensor '%s': cannot open external data '%s': %s", tn, path, strerror(errno));
    else if (!buf) st = fc_set_error(ox->ctx, FC_ERR_NOMEM, "out of memory");
    else if (fseeko(f, (off_t)off, SEEK_SET) != 0 || fread(buf, 1, want, f) != want)
        st = ox_error(ox, FC_ERR_INPUT, "tensor '%s': external data '%s' is too short (%zu bytes at offset %lld)", tn,
                      path, want, off);
    if (f) fclose(f);
    free(path);
    if (st) { free(buf); return st; }
    *out = buf;
    return FC_OK;
}

fc_status ox_tensor_to_const(ox_ctx *ox, const Onnx__TensorProto *t, const char *dir, ox_const **out) {
    *out = NULL;
    const char *tn = t->name ? t->name : "";
    int32_t ty = t->has_data_type ? t->data_type : 0;
    fc_dtype dt;
    if (!ox_dtype_from_onnx(ty, &dt))
        return ox_error(ox, FC_ERR_UNSUPPORTED, "tensor '%s': dtype %s is not supported (supported: FLOAT, DOUBLE, "
                        "FLOAT16, BFLOAT16, INT64, INT32, INT16, INT8, UINT32, UINT16, UINT8, BOOL)", tn,
                        ox_onnx_dtype_name(ty));
    if (dt == FC_STRING)
        return ox_error(ox, FC_ERR_UNSUPPORTED, "tensor '%s': STRING constants are not supported (string tensors "
                        "are graph inputs, initializers and outputs, and StringNormalizer's)", tn);
    if (t->n_dims > FC_MAX_RANK) return ox_error(ox, FC_ERR_UNSUPPORTED, "tensor '%s': rank %zu is over %d", tn, t->n_dims, FC_MAX_RANK);
    if (t->segment) return ox_error(ox, FC_ERR_UNSUPPORTED, "tensor '%s': segmented tensors are not supported", tn);
    int64_t n = 1;
    for (size_t d = 0; d < t->n_dims; d++) {
        if (t->dims[d] < 0 || (t->dims[d] && n > ((int64_t)1 << 40) / t->dims[d]))
            return ox_error(ox, FC_ERR_INPUT, "tensor '%s': bad or too large shape", tn);
        n *= t->dims[d];
    }
    ox_const *k = ox_const_new(dt, (int)t->n_dims, t->dims);
    if (!k) return fc_set_error(ox->ctx, FC_ERR_NOMEM, "out of memory");
    bool isf = dt == FC_F32 || dt == FC_F64 || dt == FC_F16 || dt == FC_BF16;
    size_t es = raw_elem_size(ty);
    uint8_t *ext = NULL;
    const uint8_t *raw = NULL;
    fc_status st = FC_OK;
    if (t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) {
        if ((st = read_external(ox, t, dir, (size_t)n * es, &ext)) != FC_OK) goto fail;
        raw = ext;
    } else if (t->has_raw_data) {
        if (t->raw_data.len != (size_t)n * es) {
            st = ox_error(ox, FC_ERR_INPUT, "tensor '%s': raw data of %zu bytes, its shape needs %zu", tn,
                          t->raw_data.len, (size_t)n * es);
            goto fail;
        }
        raw = t->raw_data.data;
    }
    for (int64_t i = 0; i < n; i++) {
        double f = 0;
        int64_t iv = 0;
        if (raw) {
            raw_elem(raw + (size_t)i * es, ty, isf, &f, &iv);
        } else {
            /* The typed fields: which one holds the data depends on the type. */
            size_t cnt;
            switch (ty) {
            case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT: cnt = t->n_float_data; if ((size_t)i < cnt) f = t->float_data[i]; break;
            case ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE: cnt = t->n_double_data; if ((size_t)i < cnt) f = t->double_data[i]; break;
            case ONNX__TENSOR_PROTO__DATA_TYPE__INT64: cnt = t->n_int64_data; if ((size_t)i < cnt) iv = t->int64_data[i]; break;
            case ONNX__TENSOR_PROTO__DATA_TYPE__UINT32:
            case ONNX__TENSOR_PROTO__DATA_TYPE__UINT64: cnt = t->n_uint64_data; if ((size_t)i < cnt) iv = (int64_t)t->uint64_data[i]; break;
            case ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT16:
                cnt = t->n_int32_data; if ((size_t)i < cnt) f = fc_f16_to_f32((uint16_t)t->int32_data[i]); break;
            case ONNX__TENSOR_PROTO__DATA_TYPE__BFLOAT16:
                cnt = t->n_int32_data; if ((size_t)i < cnt) f = fc_bf16_to_f32((uint16_t)t->int32_data[i]); break;
            default: cnt = t->n_int32_data; if ((size_t)i < cnt) iv = t->int32_data[i]; break;
            }
            if ((size_t)n != cnt) {
                st = ox_error(ox, FC_ERR_INPUT, "tensor '%s': %zu values, its shape needs %lld", tn, cnt, (long long)n);
                goto fail;
            }
        }
        if (ty == ONNX__TENSOR_PROTO__DATA_TYPE__BOOL) iv = iv != 0;
        if (ty == ONNX__TENSOR_PROTO__DATA_TYPE__UINT64 && iv < 0) {
            st = ox_error(ox, FC_ERR_UNSUPPORTED, "tensor '%s': UINT64 value over INT64_MAX", tn);
            goto fail;
        }
        if (isf) k->f[i] = f;
        else k->i[i] = iv;
    }
    free(ext);
    *out = k;
    return FC_OK;
fail:
    free(ext);
    ox_const_free(k);
    return st;
}

/* ---- the graph ------------------------------------------------------ */

/* A NAME for the IR from an ONNX name: [A-Za-z0-9_] kept, others become '_',
 * a leading digit gets a '_' before it. */
static void ir_name(const char *s, char *out, size_t cap) {
    size_t j = 0;
    if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || *s == '_') && j + 1 < cap) out[j++] = '_';
    for (; *s && j + 1 < cap; s++) {
        char c = *s;
        out[j++] = ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_') ? c : '_';
    }
    out[j] = 0;
}

static fc_status add_input(ox_ctx *ox, const Onnx__ValueInfoProto *vi) {
    const char *name = vi->name ? vi->name : "";
    if (!*name) return ox_error(ox, FC_ERR_INPUT, "a graph input has no name");
    const Onnx__TypeProto *tp = vi->type;
    if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
        return ox_error(ox, FC_ERR_UNSUPPORTED, "graph input '%s' is not a tensor (sequences, maps, optionals and "
                        "sparse tensors are not supported)", name);
    const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    fc_dtype dt;
    int32_t et = tt->has_elem_type ? tt->elem_type : 0;
    if (!ox_dtype_from_onnx(et, &dt))
        return ox_error(ox, FC_ERR_UNSUPPORTED, "graph input '%s' has dtype %s, which is not supported", name,
                        ox_onnx_dtype_name(et));
    if (!tt->shape) return ox_error(ox, FC_ERR_UNSUPPORTED, "graph input '%s' has no shape (its rank must be known)", name);
    if (tt->shape->n_dim > FC_MAX_RANK)
        return ox_error(ox, FC_ERR_UNSUPPORTED, "graph input '%s' has rank %zu, over %d", name, tt->shape->n_dim, FC_MAX_RANK);
    fc_dim dims[FC_MAX_RANK];
    for (size_t d = 0; d < tt->shape->n_dim; d++) {
        const Onnx__TensorShapeProto__Dimension *dm = tt->shape->dim[d];
        char sym[128];
        if (dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
            if (dm->dim_value < 0) return ox_error(ox, FC_ERR_INPUT, "graph input '%s': dim %zu is negative", name, d);
            dims[d] = dm->dim_value;
            continue;
        }
        if (dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM && dm->dim_param && *dm->dim_param) {
            ir_name(dm->dim_param, sym, sizeof sym);
        } else {
            /* A dim with neither a size nor a name: a symbol of its own. */
            char base[100];
            ir_name(name, base, sizeof base);
            snprintf(sym, sizeof sym, "%s_d%zu", base, d);
        }
        dims[d] = fc_sym(ox->g, sym);
    }
    fc_value *v = fc_param(ox->g, name, dt, (int)tt->shape->n_dim, dims);
    if (fc_graph_status(ox->g)) return ox_error(ox, fc_graph_status(ox->g), "graph input '%s': %s", name, fc_last_error(ox->ctx));
    ox_val *val = ox_define(ox, name);
    if (!val) return fc_set_error(ox->ctx, FC_ERR_NOMEM, "out of memory");
    val->v = v;
    return FC_OK;
}

static fc_status import_node(ox_ctx *ox, const Onnx__NodeProto *n) {
    ox->node = n;
    if (!n->op_type) return ox_error(ox, FC_ERR_INPUT, "the node has no op_type");
    /* The training domain's Gradient is the one op of another domain: it
     * differentiates the graph built so far, never folded. */
    bool gradient = n->domain && !strcmp(n->domain, "ai.onnx.preview.training") && !strcmp(n->op_type, "Gradient");
    if (n->domain && *n->domain && strcmp(n->domain, "ai.onnx") && !gradient)
        return ox_error(ox, FC_ERR_UNSUPPORTED, "domain '%s' is not supported (only the default ONNX domain, and "
                        "Gradient of ai.onnx.preview.training)", n->domain);
    if (n->n_input > 64 || n->n_output > 16)
        return ox_error(ox, FC_ERR_UNSUPPORTED, "%zu inputs and %zu outputs: too many", n->n_input, n->n_output);
    ox_val *ins[64];
    for (size_t i = 0; i < n->n_input; i++) {
        const char *in = n->input[i];
        if (!in || !*in) { ins[i] = NULL; continue; }
        if (!(ins[i] = ox_lookup(ox, in))) return ox_error(ox, FC_ERR_INPUT, "input '%s' is not defined before", in);
    }
    ox->in = ins;
    ox->nin = (int)n->n_input;
    ox->nout = (int)n->n_output;
    memset(ox->out_v, 0, sizeof ox->out_v);
    memset(ox->out_k, 0, sizeof ox->out_k);
    ox->out_is_seq = false;
    bool folded = false;
    fc_status st = gradient ? ox_op_gradient(ox) : ox_try_fold(ox, &folded);
    if (st == FC_OK && !folded && !gradient) st = ox_translate(ox);
    if (st == FC_OK && fc_graph_status(ox->g)) {
        /* A builder refused the translation: say so at the node. */
        char msg[768];
        snprintf(msg, sizeof msg, "%s", fc_last_error(ox->ctx));
        st = ox_error(ox, FC_ERR_UNSUPPORTED, "%s", msg);
    }
    if (st) {
        for (int i = 0; i < 16; i++) ox_const_free(ox->out_k[i]);
        return st;
    }
    for (size_t i = 0; i < n->n_output; i++) {
        const char *on = n->output[i];
        if (!on || !*on) { ox_const_free(ox->out_k[i]); ox->out_k[i] = NULL; continue; }
        ox_val *val = NULL;
        bool seq = i == 0 && ox->out_is_seq;
        if (!ox->out_v[i] && !ox->out_k[i] && !seq)
            st = ox_error(ox, FC_ERR_UNSUPPORTED, "output %zu ('%s') is not supported", i, on);
        else if (!(val = ox_define(ox, on)))
            st = fc_set_error(ox->ctx, FC_ERR_NOMEM, "out of memory");
        if (st) {
            for (size_t j = i; j < 16; j++) ox_const_free(ox->out_k[j]);
            return st;
        }
        val->v = ox->out_v[i];
        val->k = ox->out_k[i];
        ox->out_k[i] = NULL;
        if (seq) {
            val->is_seq = true;
            val->seq = ox->out_seq;
            val->nseq = ox->out_nseq;
        }
        fc_value *v = val->v;
        if (v && v->def && !v->name && !v->weak) v->name = fc_arena_strndup(&ox->g->arena, on, strlen(on));
    }
    /* Results the node has no output for (a translation may make more). */
    for (size_t j = n->n_output; j < 16; j++) ox_const_free(ox->out_k[j]);
    ox->node = NULL;
    return FC_OK;
}

/* A STRING initializer: known at import, but nothing folds strings, so it
 * is a weight from the start (a parameter named as the value). */
static fc_status string_initializer(ox_ctx *ox, const Onnx__TensorProto *t) {
    fc_tensor st_t;
    fc_status st = ox_string_tensor(ox->ctx, ox->file, t, &st_t);
    if (st) return st;
    fc_dim dims[FC_MAX_RANK];
    for (int d = 0; d < st_t.rank; d++) dims[d] = st_t.shape[d];
    fc_value *p = fc_param(ox->g, t->name, FC_STRING, st_t.rank, dims);
    ox_val *val = fc_graph_status(ox->g) ? NULL : ox_define(ox, t->name);
    if (!val || fc_weights_add_owned(ox->w, t->name, &st_t) != FC_OK) {
        free(st_t.data);
        return fc_graph_status(ox->g) ? ox_error(ox, fc_graph_status(ox->g), "initializer '%s': %s", t->name,
                                                 fc_last_error(ox->ctx))
                                      : fc_set_error(ox->ctx, FC_ERR_NOMEM, "out of memory");
    }
    ox->nweights_made++;
    val->v = p;
    return FC_OK;
}

static fc_status import_graph(ox_ctx *ox, const Onnx__ModelProto *m, const char *dir, const fc_binding *binds,
                              int nbinds, const fc_weights *frozen) {
    const Onnx__GraphProto *gp = m->graph;
    if (!gp) return ox_error(ox, FC_ERR_INPUT, "the model has no graph");
    ox->gp = gp;
    ox->opset = -1;
    for (size_t i = 0; i < m->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = m->opset_import[i];
        if ((!o->domain || !*o->domain || !strcmp(o->domain, "ai.onnx")) && o->has_version) ox->opset = o->version;
    }
    if (ox->opset < 0) ox->opset = 1;
    if (ox->opset < OX_OPSET_MIN || ox->opset > OX_OPSET_MAX)
        return ox_error(ox, FC_ERR_UNSUPPORTED, "opset %lld is not supported (supported: %d to %d)",
                        (long long)ox->opset, OX_OPSET_MIN, OX_OPSET_MAX);
    for (int i = 0; i < nbinds; i++)
        if (fc_graph_bind(ox->g, binds[i].name, binds[i].value) != FC_OK) return fc_graph_status(ox->g);
    if (gp->n_sparse_initializer) return ox_error(ox, FC_ERR_UNSUPPORTED, "sparse initializers are not supported");
    for (size_t i = 0; i < gp->n_initializer; i++) {
        const Onnx__TensorProto *t = gp->initializer[i];
        if (!t->name || !*t->name) return ox_error(ox, FC_ERR_INPUT, "initializer %zu has no name", i);
        if (t->has_data_type && t->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__STRING) {
            fc_status st = string_initializer(ox, t);
            if (st) return st;
            continue;
        }
        ox_const *k;
        fc_status st = ox_tensor_to_const(ox, t, dir, &k);
        if (st) return st;
        ox_val *val = ox_define(ox, t->name);
        if (!val) { ox_const_free(k); return fc_set_error(ox->ctx, FC_ERR_NOMEM, "out of memory"); }
        val->k = k;
    }
    for (size_t i = 0; i < gp->n_input; i++) {
        /* Before IR version 4 initializers were also listed as inputs: they
         * stay weights (their data is the default the model ships). */
        if (gp->input[i]->name && ox_lookup(ox, gp->input[i]->name)) continue;
        const fc_tensor *fz = gp->input[i]->name ? fc_weights_find(frozen, gp->input[i]->name) : NULL;
        if (fz && fz->dtype == FC_STRING)
            return ox_error(ox, FC_ERR_UNSUPPORTED, "input '%s': a string tensor cannot be frozen (known at import)",
                            gp->input[i]->name);
        if (fz) {
            /* A frozen input is known data, as an initializer is. */
            ox_val *val = ox_define(ox, gp->input[i]->name);
            if (!val || !(val->k = ox_const_from_tensor(fz))) return fc_set_error(ox->ctx, FC_ERR_NOMEM, "out of memory");
            continue;
        }
        fc_status st = add_input(ox, gp->input[i]);
        if (st) return st;
    }
    /* Each node's ops are located at it (loc.line = 1 + its index), so that
     * a launch can name the model's nodes it runs. */
    if (gp->n_node > (size_t)INT32_MAX / 2) return ox_error(ox, FC_ERR_UNSUPPORTED, "%zu nodes: too many", gp->n_node);
    ox->g->src_ops = gp->n_node ? fc_arena_alloc(&ox->g->arena, sizeof *ox->g->src_ops * gp->n_node) : NULL;
    if (gp->n_node && !ox->g->src_ops) return fc_set_error(ox->ctx, FC_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < gp->n_node; i++) {
        const Onnx__NodeProto *n = gp->node[i];
        const char *name = node_name(n);
        if (!(ox->g->src_ops[i] = fc_arena_strndup(&ox->g->arena, name, strlen(name))))
            return fc_set_error(ox->ctx, FC_ERR_NOMEM, "out of memory");
        ox->g->nsrc_ops = (int)i + 1;
        ox->g->cur_loc = (fc_loc){(int)i + 1, 0};
        fc_status st = import_node(ox, n);
        if (st) return st;
    }
    ox->g->cur_loc = (fc_loc){0, 0};
    if (!gp->n_output) return ox_error(ox, FC_ERR_INPUT, "the graph has no outputs");
    fc_value **outs = calloc(gp->n_output, sizeof *outs);
    if (!outs) return fc_set_error(ox->ctx, FC_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < gp->n_output; i++) {
        const char *on = gp->output[i]->name ? gp->output[i]->name : "";
        ox_val *val = ox_lookup(ox, on);
        if (!val) { free(outs); return ox_error(ox, FC_ERR_INPUT, "graph output '%s' is not defined", on); }
        outs[i] = ox_materialize(ox, val);
        if (!outs[i] || fc_graph_status(ox->g)) {
            free(outs);
            return ox_error(ox, FC_ERR_UNSUPPORTED, "graph output '%s': %s", on, fc_last_error(ox->ctx));
        }
    }
    fc_status st = fc_graph_return(ox->g, (int)gp->n_output, outs);
    free(outs);
    if (st) return ox_error(ox, st, "%s", fc_last_error(ox->ctx));
    return FC_OK;
}

fc_status fc_graph_from_onnx_data(fc_context *ctx, const char *filename, const void *data, size_t size,
                                  const char *dir, const fc_binding *binds, int nbinds, const fc_weights *frozen,
                                  fc_graph **graph, fc_weights **weights) {
    if (graph) *graph = NULL;
    if (weights) *weights = NULL;
    if (!ctx || !graph || (!data && size)) return ctx ? fc_set_error(ctx, FC_ERR_USAGE, "fc_graph_from_onnx: NULL argument") : FC_ERR_USAGE;
    if (!filename) filename = "<onnx>";
    /* Zero bytes decode as a ModelProto with every field absent; say what
     * the file is rather than that its (absent) model has no graph. */
    if (!size) return fc_set_error(ctx, FC_ERR_INPUT, "%s: error: the file is empty, not an ONNX model", filename);
    Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, size, data);
    if (!m)
        return fc_set_error(ctx, FC_ERR_INPUT, "%s: error: not a valid ONNX model (the protobuf is malformed or truncated)",
                            filename);
    ox_ctx ox;
    memset(&ox, 0, sizeof ox);
    ox.ctx = ctx;
    ox.file = filename;
    ox.root = &ox;
    char gname[64];
    ir_name(m->graph && m->graph->name && *m->graph->name ? m->graph->name : "model", gname, sizeof gname);
    ox.g = fc_graph_new(ctx, gname);
    fc_status st = ox.g ? fc_weights_new_internal(&ox.w) : FC_ERR_NOMEM;
    if (st == FC_OK) st = import_graph(&ox, m, dir, binds, nbinds, frozen);
    else fc_set_error(ctx, FC_ERR_NOMEM, "out of memory");
    free_table(&ox);
    onnx__model_proto__free_unpacked(m, NULL);
    if (st != FC_OK) {
        fc_graph_free(ox.g);
        fc_weights_free(ox.w);
        return st;
    }
    *graph = ox.g;
    if (weights) *weights = ox.w;
    else fc_weights_free(ox.w);
    return FC_OK;
}

static void *read_all(fc_context *ctx, const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fc_set_error(ctx, FC_ERR_INPUT, "%s: error: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (n < cap) break;
        if (cap >= OX_MAX_PROTO_BYTES) {
            free(buf);
            buf = NULL;
            fclose(f);
            fc_set_error(ctx, FC_ERR_INPUT, "%s: error: over 2 GB: a larger model keeps its weights in external data", path);
            return NULL;
        }
        char *nb = realloc(buf, cap * 2);
        if (!nb) { free(buf); buf = NULL; break; }
        buf = nb;
        cap *= 2;
    }
    bool bad = ferror(f);
    fclose(f);
    if (!buf) { fc_set_error(ctx, FC_ERR_NOMEM, "out of memory reading %s", path); return NULL; }
    if (bad) { free(buf); fc_set_error(ctx, FC_ERR_INPUT, "%s: error: read failed", path); return NULL; }
    *len = n;
    return buf;
}

fc_status fc_graph_from_onnx(fc_context *ctx, const char *path, const fc_binding *binds, int nbinds,
                             const fc_weights *frozen, fc_graph **graph, fc_weights **weights) {
    if (graph) *graph = NULL;
    if (weights) *weights = NULL;
    if (!ctx || !path || !graph) return ctx ? fc_set_error(ctx, FC_ERR_USAGE, "fc_graph_from_onnx: NULL argument") : FC_ERR_USAGE;
    size_t len = 0;
    void *data = read_all(ctx, path, &len);
    if (!data) return FC_ERR_INPUT;
    char *dir = strdup(path);
    if (!dir) { free(data); return fc_set_error(ctx, FC_ERR_NOMEM, "out of memory"); }
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else strcpy(dir, ".");
    fc_status st = fc_graph_from_onnx_data(ctx, path, data, len, dir, binds, nbinds, frozen, graph, weights);
    free(dir);
    free(data);
    return st;
}

fc_status fc_tensor_from_onnx_file(fc_context *ctx, const char *path, fc_tensor *out, char **name) {
    if (name) *name = NULL;
    if (!ctx || !path || !out) return ctx ? fc_set_error(ctx, FC_ERR_USAGE, "fc_tensor_from_onnx_file: NULL argument") : FC_ERR_USAGE;
    memset(out, 0, sizeof *out);
    size_t len = 0;
    void *data = read_all(ctx, path, &len);
    if (!data) return FC_ERR_INPUT;
    Onnx__TensorProto *t = onnx__tensor_proto__unpack(NULL, len, data);
    free(data);
    if (!t) return fc_set_error(ctx, FC_ERR_INPUT, "%s: error: not a valid ONNX TensorProto", path);
    ox_ctx ox;
    memset(&ox, 0, sizeof ox);
    ox.ctx = ctx;
    ox.file = path;
    ox_const *k = NULL;
    fc_status st = t->has_data_type && t->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__STRING
                       ? ox_string_tensor(ctx, path, t, out)
                       : ox_tensor_to_const(&ox, t, NULL, &k);
    if (st == FC_OK && k) st = ox_const_to_tensor(k, out);
    if (st == FC_OK && name && t->name) *name = strdup(t->name);
    ox_const_free(k);
    onnx__tensor_proto__free_unpacked(t, NULL);
    return st;
}
