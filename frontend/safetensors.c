/* safetensors.c - named weights: the container an ONNX import fills with its
 * initializers, and safetensors files read into it (memory-mapped; the
 * JSON header parsed with cJSON), and the binding of weights to a graph's
 * parameters by name. */
#include "onnx.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct fc_weights {
    int n, cap;
    char **names;
    fc_tensor *t;
    bool *owned;   /* data malloc'd (an import's) rather than in the map */
    void *map;     /* the mapped file, or (map_len 0) a malloc'd copy of the bytes */
    size_t map_len;
};

fc_status fc_weights_new_internal(fc_weights **out) {
    *out = calloc(1, sizeof **out);
    return *out ? FC_OK : FC_ERR_NOMEM;
}

static bool grow(fc_weights *w) {
    if (w->n < w->cap) return true;
    int nc = w->cap ? w->cap * 2 : 16;
    char **nn = realloc(w->names, sizeof *nn * (size_t)nc);
    if (!nn) return false;
    w->names = nn;
    fc_tensor *nt = realloc(w->t, sizeof *nt * (size_t)nc);
    if (!nt) return false;
    w->t = nt;
    bool *no = realloc(w->owned, sizeof *no * (size_t)nc);
    if (!no) return false;
    w->owned = no;
    w->cap = nc;
    return true;
}

static fc_status add(fc_weights *w, const char *name, const fc_tensor *t, bool owned) {
    if (!grow(w)) return FC_ERR_NOMEM;
    char *nm = strdup(name);
    if (!nm) return FC_ERR_NOMEM;
    w->names[w->n] = nm;
    w->t[w->n] = *t;
    w->owned[w->n] = owned;
    w->n++;
    return FC_OK;
}

fc_status fc_weights_add_owned(fc_weights *w, const char *name, fc_tensor *t) { return add(w, name, t, true); }

fc_weights *fc_weights_new(void) {
    fc_weights *w;
    return fc_weights_new_internal(&w) == FC_OK ? w : NULL;
}

fc_status fc_weights_add(fc_weights *w, const char *name, const fc_tensor *t) {
    if (!w || !name || !t) return FC_ERR_USAGE;
    int64_t n = fc_tensor_numel(t);
    if (n < 0) return FC_ERR_USAGE;
    fc_tensor c = *t;
    if (t->dtype == FC_STRING) { /* the bytes too, not only the pointers (fusec.h's layout) */
        if (n && (!t->data || fc_strings_first_null(t->data, n) >= 0)) return FC_ERR_USAGE;
        if (!(c.data = fc_strings_pack(NULL, t->data, n))) return FC_ERR_NOMEM;
        fc_status st = add(w, name, &c, true);
        if (st) free(c.data);
        return st;
    }
    size_t bytes = (size_t)n * fc_dtype_size(t->dtype);
    c.data = malloc(bytes ? bytes : 1);
    if (!c.data) return FC_ERR_NOMEM;
    if (bytes) memcpy(c.data, t->data, bytes);
    fc_status st = add(w, name, &c, true);
    if (st) free(c.data);
    return st;
}

void fc_weights_free(fc_weights *w) {
    if (!w) return;
    for (int i = 0; i < w->n; i++) {
        free(w->names[i]);
        if (w->owned[i]) free(w->t[i].data);
    }
    free(w->names);
    free(w->t);
    free(w->owned);
    if (w->map && w->map_len) munmap(w->map, w->map_len);
    else free(w->map);
    free(w);
}

int fc_weights_count(const fc_weights *w) { return w ? w->n : 0; }
const char *fc_weights_name(const fc_weights *w, int i) { return w && i >= 0 && i < w->n ? w->names[i] : NULL; }
const fc_tensor *fc_weights_tensor(const fc_weights *w, int i) { return w && i >= 0 && i < w->n ? &w->t[i] : NULL; }
const fc_tensor *fc_weights_find(const fc_weights *w, const char *name) {
    for (int i = 0; w && name && i < w->n; i++)
        if (!strcmp(w->names[i], name)) return &w->t[i];
    return NULL;
}

static bool st_dtype(const char *s, fc_dtype *dt) {
    static const struct { const char *s; fc_dtype dt; } m[] = {
        {"F64", FC_F64}, {"F32", FC_F32}, {"F16", FC_F16}, {"BF16", FC_BF16},
        {"I64", FC_I64}, {"I32", FC_I32}, {"I8", FC_I8}, {"BOOL", FC_BOOL},
    };
    for (size_t i = 0; i < sizeof m / sizeof *m; i++)
        if (!strcmp(m[i].s, s)) { *dt = m[i].dt; return true; }
    return false;
}

/* The header's tensors, checked against the data's bounds: each one's
 * offsets lie in the data, match its shape's size, and none overlap (the
 * format requires it; a file that breaks it is damaged or hostile). */
static fc_status parse_header(fc_context *ctx, const char *path, fc_weights *w, const char *hdr, size_t hlen,
                              uint8_t *data, uint64_t dlen) {
    cJSON *root = cJSON_ParseWithLength(hdr, hlen);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return fc_set_error(ctx, FC_ERR_INPUT, "%s: error: the safetensors header is not a JSON object", path);
    }
    fc_status st = FC_OK;
    typedef struct { uint64_t a, b; const char *name; } span;
    int cnt = cJSON_GetArraySize(root);
    span *sp = calloc((size_t)(cnt ? cnt : 1), sizeof *sp);
    int nsp = 0;
    if (!sp) st = fc_set_error(ctx, FC_ERR_NOMEM, "out of memory");
    for (cJSON *e = root->child; e && !st; e = e->next) {
        const char *nm = e->string ? e->string : "";
        if (!strcmp(nm, "__metadata__")) continue;
        cJSON *jdt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
        cJSON *jsh = cJSON_GetObjectItemCaseSensitive(e, "shape");
        cJSON *jof = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
        fc_tensor t;
        memset(&t, 0, sizeof t);
        if (!cJSON_IsObject(e) || !cJSON_IsString(jdt) || !cJSON_IsArray(jsh) || !cJSON_IsArray(jof) ||
            cJSON_GetArraySize(jof) != 2) {
            st = fc_set_error(ctx, FC_ERR_INPUT, "%s: error: tensor '%s': needs dtype, shape and data_offsets", path, nm);
            break;
        }
        if (!st_dtype(jdt->valuestring, &t.dtype)) {
            st = fc_set_error(ctx, FC_ERR_INPUT, "%s: error: tensor '%s': dtype %s is not supported (F64, F32, F16, "
                              "BF16, I64, I32, I8, BOOL)", path, nm, jdt->valuestring);
            break;
        }
        int r = cJSON_GetArraySize(jsh);
        if (r > FC_MAX_RANK) {
            st = fc_set_error(ctx, FC_ERR_INPUT, "%s: error: tensor '%s': rank %d is over %d", path, nm, r, FC_MAX_RANK);
            break;
        }
        t.rank = r;
        uint64_t numel = 1;
        bool bad = false;
        for (int d = 0; d < r; d++) {
            cJSON *x = cJSON_GetArrayItem(jsh, d);
            double v = cJSON_IsNumber(x) ? x->valuedouble : -1;
            if (v < 0 || v > 9e15 || v != (double)(int64_t)v) { bad = true; break; }
            t.shape[d] = (int64_t)v;
            if (t.shape[d] && numel > UINT64_MAX / 16 / (uint64_t)t.shape[d]) { bad = true; break; }
            numel *= (uint64_t)t.shape[d];
        }
        double o0 = cJSON_IsNumber(cJSON_GetArrayItem(jof, 0)) ? cJSON_GetArrayItem(jof, 0)->valuedouble : -1;
        double o1 = cJSON_IsNumber(cJSON_GetArrayItem(jof, 1)) ? cJSON_GetArrayItem(jof, 1)->valuedouble : -1;
        if (bad || o0 < 0 || o1 < o0 || o1 > (double)dlen) {
            st = fc_set_error(ctx, FC_ERR_INPUT, "%s: error: tensor '%s': bad shape or data_offsets out of the file",
                              path, nm);
            break;
        }
        uint64_t a = (uint64_t)o0, b = (uint64_t)o1;
        if (b - a != numel * fc_dtype_size(t.dtype)) {
            st = fc_set_error(ctx, FC_ERR_INPUT, "%s: error: tensor '%s': %llu bytes of data, its shape needs %llu",
                              path, nm, (unsigned long long)(b - a), (unsigned long long)(numel * fc_dtype_size(t.dtype)));
            break;
        }
        if (fc_weights_find(w, nm)) {
            st = fc_set_error(ctx, FC_ERR_INPUT, "%s: error: tensor '%s' appears twice", path, nm);
            break;
        }
        t.data = data + a;
        sp[nsp++] = (span){a, b, e->string};
        if (add(w, nm, &t, false) != FC_OK) st = fc_set_error(ctx, FC_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; !st && i < nsp; i++)
        for (int j = i + 1; j < nsp; j++)
            if (sp[i].a < sp[j].b && sp[j].a < sp[i].b && sp[i].b > sp[i].a && sp[j].b > sp[j].a) {
                st = fc_set_error(ctx, FC_ERR_INPUT, "%s: error: tensors '%s' and '%s' overlap", path, sp[i].name,
                                  sp[j].name);
                break;
            }
    free(sp);
    cJSON_Delete(root);
    return st;
}

/* The file's bytes at p (len of them) into a new set that owns them. */
static fc_status parse_file(fc_context *ctx, const char *path, uint8_t *p, size_t len, bool mapped, fc_weights **out) {
    fc_weights *w = NULL;
    fc_status st = FC_OK;
    uint64_t hlen = 0;
    if (len < 8) {
        st = fc_set_error(ctx, FC_ERR_INPUT, "%s: error: too short for a safetensors file (%zu bytes)", path, len);
    } else {
        for (int i = 0; i < 8; i++) hlen |= (uint64_t)p[i] << (8 * i);
        if (hlen > len - 8 || hlen > ((uint64_t)100 << 20))
            st = fc_set_error(ctx, FC_ERR_INPUT, "%s: error: header length %llu is past the end of the file", path,
                              (unsigned long long)hlen);
    }
    if (!st && (st = fc_weights_new_internal(&w)) != FC_OK) fc_set_error(ctx, st, "out of memory");
    if (st) {
        if (mapped) munmap(p, len);
        else free(p);
        return st;
    }
    w->map = p;
    w->map_len = mapped ? len : 0;
    st = parse_header(ctx, path, w, (const char *)p + 8, (size_t)hlen, p + 8 + hlen, len - 8 - hlen);
    if (st) {
        fc_weights_free(w);
        return st;
    }
    *out = w;
    return FC_OK;
}

fc_status fc_weights_load_safetensors(fc_context *ctx, const char *path, fc_weights **out) {
    if (out) *out = NULL;
    if (!ctx || !path || !out) return ctx ? fc_set_error(ctx, FC_ERR_USAGE, "fc_weights_load_safetensors: NULL argument") : FC_ERR_USAGE;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return fc_set_error(ctx, FC_ERR_INPUT, "%s: error: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return fc_set_error(ctx, FC_ERR_INPUT, "%s: error: not a regular file", path);
    }
    size_t len = (size_t)sb.st_size;
    if (len < 8) {
        close(fd);
        return fc_set_error(ctx, FC_ERR_INPUT, "%s: error: too short for a safetensors file (%zu bytes)", path, len);
    }
    /* Private and writable: the tensors are handed out as fc_tensor views,
     * whose data is not const; a write stays in this process. */
    void *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return fc_set_error(ctx, FC_ERR_RUNTIME, "%s: error: cannot map: %s", path, strerror(errno));
    return parse_file(ctx, path, map, len, true, out);
}

fc_status fc_weights_load_safetensors_data(fc_context *ctx, const char *name, const void *data, size_t size,
                                           fc_weights **out) {
    if (out) *out = NULL;
    if (!ctx || !out || (!data && size)) return ctx ? fc_set_error(ctx, FC_ERR_USAGE, "fc_weights_load_safetensors_data: NULL argument") : FC_ERR_USAGE;
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) return fc_set_error(ctx, FC_ERR_NOMEM, "out of memory");
    if (size) memcpy(copy, data, size);
    return parse_file(ctx, name ? name : "<safetensors>", copy, size, false, out);
}

fc_status fc_weights_bind(const fc_weights *w, fc_graph *g, fc_tensor *inputs, int nin, bool *bound, bool exact,
                          int first_free) {
    if (!w || !g || (!inputs && nin)) return g ? fc_set_error(g->ctx, FC_ERR_USAGE, "fc_weights_bind: NULL argument") : FC_ERR_USAGE;
    fc_context *ctx = g->ctx;
    int np = g->nparams < nin ? g->nparams : nin;
    int64_t symval[256];
    bool symset[256] = {0};
    for (int i = 0; i < np; i++) {
        if (bound) bound[i] = false;
        const fc_value *p = g->params[i];
        const fc_tensor *t = fc_weights_find(w, p->name);
        if (!t) {
            if (exact && i >= first_free)
                return fc_set_error(ctx, FC_ERR_INPUT, "weights: no tensor named '%s' for parameter %%%s", p->name, p->name);
            continue;
        }
        if (t->dtype != p->dtype)
            return fc_set_error(ctx, FC_ERR_INPUT, "weights: tensor '%s' is %s, parameter %%%s is %s", p->name,
                                fc_dtype_name(t->dtype), p->name, fc_dtype_name(p->dtype));
        bool ok = t->rank == p->rank;
        for (int d = 0; ok && d < p->rank; d++) {
            fc_dim want = p->dims[d];
            if (want >= 0) { ok = t->shape[d] == want; continue; }
            int s = (int)(FC_DIM_SYM_BASE - want);
            if (s < 0 || s >= 256) continue;
            if (symset[s]) ok = symval[s] == t->shape[d];
            symset[s] = true;
            symval[s] = t->shape[d];
        }
        if (!ok)
            return fc_set_error(ctx, FC_ERR_INPUT, "weights: tensor '%s' has a shape that does not match parameter %%%s",
                                p->name, p->name);
        inputs[i] = *t;
        if (bound) bound[i] = true;
    }
    if (exact)
        for (int j = 0; j < w->n; j++) {
            bool found = false;
            for (int i = 0; i < g->nparams && !found; i++) found = g->params[i]->name && !strcmp(g->params[i]->name, w->names[j]);
            if (!found) return fc_set_error(ctx, FC_ERR_INPUT, "weights: tensor '%s' names no parameter of graph %s", w->names[j], g->name);
        }
    return FC_OK;
}
