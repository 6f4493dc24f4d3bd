/* graph.c - graphs, symbols and bindings, parameters, results, inspection. */
#include "ir.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

fc_graph *fc_graph_new(fc_context *ctx, const char *name) {
    if (!ctx) return NULL;
    fc_graph *g = fc_ctx_malloc(ctx, sizeof *g);
    if (!g) return NULL;
    memset(g, 0, sizeof *g);
    g->ctx = ctx;
    fc_arena_init(&g->arena, ctx);
    g->poison_value.poison = true;
    g->poison_value.graph = g;
    g->poison_value.param_index = -1;
    g->poison_value.dtype = FC_F32;
    g->poison_value.id = -1;
    const char *nm = name ? name : "main";
    g->name = fc_arena_strndup(&g->arena, nm, strlen(nm));
    if (!g->name) {
        fc_graph_free(g);
        return NULL;
    }
    return g;
}

void fc_graph_free(fc_graph *g) {
    if (!g) return;
    fc_arena_release(&g->arena);
    fc_ctx_freemem(g->ctx, g);
}

bool fc_graph_copy_src_ops(fc_graph *to, const fc_graph *from) {
    if (!from->src_ops || from->nsrc_ops <= 0) return true;
    const char **ops = fc_arena_alloc(&to->arena, sizeof *ops * (size_t)from->nsrc_ops);
    if (!ops) return false;
    for (int i = 0; i < from->nsrc_ops; i++) {
        const char *s = from->src_ops[i];
        ops[i] = s ? fc_arena_strndup(&to->arena, s, strlen(s)) : NULL;
        if (s && !ops[i]) return false;
    }
    to->src_ops = ops;
    to->nsrc_ops = from->nsrc_ops;
    return true;
}

bool fc_node_copy_cover(fc_graph *g, fc_node *n, const fc_node *like) {
    n->cover = NULL;
    n->ncover = 0;
    if (like->ncover <= 0) return true;
    int *c = fc_arena_alloc(&g->arena, sizeof *c * (size_t)like->ncover);
    if (!c) return false;
    memcpy(c, like->cover, sizeof *c * (size_t)like->ncover);
    n->cover = c;
    n->ncover = like->ncover;
    return true;
}

fc_status fc_graph_status(const fc_graph *g) { return g ? g->status : FC_ERR_USAGE; }
const char *fc_graph_name(const fc_graph *g) { return g ? g->name : NULL; }
fc_context *fc_graph_context(const fc_graph *g) { return g ? g->ctx : NULL; }

/* The foreign graph is not named: it may be freed already, and its name
 * would then be read from freed memory. */
fc_status fc_foreign_value(fc_graph *g, const char *op, const char *what, int index) {
    return fc_graph_error(g, FC_ERR_USAGE,
                          "%s: %s %d belongs to another graph, not to graph '%s' (a value is used only in the graph "
                          "that made it)",
                          op, what, index, g->name ? g->name : "");
}

fc_status fc_graph_error(fc_graph *g, fc_status st, const char *fmt, ...) {
    if (g->status != FC_OK) return g->status; /* sticky: keep the first */
    va_list ap;
    va_start(ap, fmt);
    if (g->src_text && g->cur_loc.line > 0)
        fc_diagv(g->ctx, g->src_file, g->src_text, g->src_len, g->cur_loc, fmt, ap);
    else
        fc_set_errorv(g->ctx, st, fmt, ap);
    va_end(ap);
    g->status = st;
    return st;
}

/* An allocation failed inside the graph: the context already has the
 * message; make the graph sticky-poisoned with it. */
static void *oom(fc_graph *g) {
    if (g->status == FC_OK) g->status = FC_ERR_NOMEM;
    return NULL;
}

static bool valid_name(const char *s, size_t n) {
    if (n == 0 || !(isalpha((unsigned char)s[0]) || s[0] == '_')) return false;
    for (size_t i = 1; i < n; i++)
        if (!(isalnum((unsigned char)s[i]) || s[i] == '_')) return false;
    return true;
}

bool fc_graph_find_sym(const fc_graph *g, const char *name, size_t len, fc_dim *out) {
    int i = fc_name_index_find(&g->bind_names, name, len);
    if (i >= 0) {
        *out = g->binds[i].value;
        return true;
    }
    i = fc_name_index_find(&g->sym_names, name, len);
    if (i >= 0) {
        *out = fc_dim_sym(i);
        return true;
    }
    return false;
}

bool fc_graph_bind_used(const fc_graph *g, const char *name) {
    if (!g || !name) return false;
    int b = fc_name_index_find(&g->bind_names, name, strlen(name));
    return b >= 0 && g->binds[b].used;
}

/* Room for entry n of *arr (elem bytes each), and an arena copy of name
 * that ix finds as entry n; NULL (the graph out of memory) when either
 * allocation fails. */
static const char *add_named(fc_graph *g, void **arr, int *cap, int n, size_t elem, fc_name_index *ix, const char *name,
                             size_t len) {
    if (!fc_grow(&g->arena, arr, cap, n + 1, elem)) {
        oom(g);
        return NULL;
    }
    const char *copy = fc_arena_strndup(&g->arena, name, len);
    if (!copy || !fc_name_index_put(ix, &g->arena, copy, len, n)) {
        oom(g);
        return NULL;
    }
    return copy;
}

fc_dim fc_graph_sym(fc_graph *g, const char *name, size_t len) {
    int b = fc_name_index_find(&g->bind_names, name, len);
    if (b >= 0) {
        g->binds[b].used = true;
        return g->binds[b].value;
    }
    fc_dim d;
    if (fc_graph_find_sym(g, name, len, &d)) return d;
    const char *copy =
        add_named(g, (void **)&g->syms, &g->cap_syms, g->nsyms, sizeof *g->syms, &g->sym_names, name, len);
    if (!copy) return FC_DIM_INFER;
    g->syms[g->nsyms] = copy;
    return fc_dim_sym(g->nsyms++);
}

fc_dim fc_sym(fc_graph *g, const char *name) {
    if (!g) return FC_DIM_INFER;
    if (g->status) return FC_DIM_INFER;
    if (!name || !valid_name(name, strlen(name))) {
        fc_graph_error(g, FC_ERR_USAGE, "fc_sym: '%s' is not a valid symbol name", name ? name : "(null)");
        return FC_DIM_INFER;
    }
    return fc_graph_sym(g, name, strlen(name));
}

fc_status fc_graph_bind(fc_graph *g, const char *name, int64_t value) {
    if (!g) return FC_ERR_USAGE;
    if (!name || !valid_name(name, strlen(name)))
        return fc_graph_error(g, FC_ERR_USAGE, "bind: '%s' is not a valid symbol name", name ? name : "(null)");
    if (value < 0) return fc_graph_error(g, FC_ERR_USAGE, "bind: %s=%lld is negative", name, (long long)value);
    size_t len = strlen(name);
    if (fc_name_index_find(&g->sym_names, name, len) >= 0)
        return fc_graph_error(g, FC_ERR_USAGE, "bind: symbol %s is already in use; bind it before use", name);
    int b = fc_name_index_find(&g->bind_names, name, len);
    if (b >= 0) {
        g->binds[b].value = value;
        return FC_OK;
    }
    const char *copy =
        add_named(g, (void **)&g->binds, &g->cap_binds, g->nbinds, sizeof *g->binds, &g->bind_names, name, len);
    if (!copy) return FC_ERR_NOMEM;
    g->binds[g->nbinds].name = copy;
    g->binds[g->nbinds].value = value;
    g->binds[g->nbinds].used = false;
    g->nbinds++;
    return FC_OK;
}

const char *fc_sym_name(const fc_graph *g, fc_dim d) {
    if (!g || !fc_dim_is_sym(d)) return NULL;
    int i = fc_dim_sym_index(d);
    return i < g->nsyms ? g->syms[i] : NULL;
}

const char *fc_dim_str(const fc_graph *g, fc_dim d, char *buf, size_t n) {
    const char *s = fc_sym_name(g, d);
    if (s) snprintf(buf, n, "%s", s);
    else if (fc_dim_is_sym(d)) snprintf(buf, n, "?");
    else snprintf(buf, n, "%lld", (long long)d);
    return buf;
}

const char *fc_type_str(const fc_graph *g, fc_dtype dt, int rank, const fc_dim *dims, char *buf, size_t n) {
    size_t pos = 0;
    pos += (size_t)snprintf(buf + pos, n - pos, "%s[", fc_dtype_name(dt));
    for (int i = 0; i < rank && pos < n; i++) {
        char d[64];
        pos += (size_t)snprintf(buf + pos, n - pos, "%s%s", i ? ", " : "", fc_dim_str(g, dims[i], d, sizeof d));
    }
    if (pos < n) snprintf(buf + pos, n - pos, "]");
    return buf;
}

bool fc_shape_numel(const fc_dim *dims, int rank, int64_t *numel, bool *symbolic) {
    int64_t n = 1;
    bool sym = false;
    for (int i = 0; i < rank; i++) {
        if (fc_dim_is_sym(dims[i])) {
            sym = true;
            continue;
        }
        if (dims[i] != 0 && n > INT64_MAX / dims[i]) return false;
        n *= dims[i];
    }
    *numel = n;
    if (symbolic) *symbolic = sym;
    return true;
}

/* Checks shared by params and every node result: rank, dims, and that the
 * static element count and byte size fit in 64 bits. */
bool fc_check_shape(fc_graph *g, const char *what, fc_dtype dt, int rank, const fc_dim *dims) {
    if (rank < 0 || rank > FC_MAX_RANK) {
        fc_graph_error(g, FC_ERR_INPUT, "%s: rank %d is out of range (at most %d dimensions)", what, rank, FC_MAX_RANK);
        return false;
    }
    for (int i = 0; i < rank; i++)
        if (dims[i] < 0 && !fc_dim_is_sym(dims[i])) {
            fc_graph_error(g, FC_ERR_INPUT, "%s: dimension %d is negative (%lld)", what, i, (long long)dims[i]);
            return false;
        }
    int64_t n;
    if (!fc_shape_numel(dims, rank, &n, NULL) || n > INT64_MAX / (int64_t)fc_dtype_size(dt)) {
        fc_graph_error(g, FC_ERR_INPUT, "%s: shape is too large (element count or byte size overflows 64 bits)", what);
        return false;
    }
    return true;
}

fc_value *fc_build_param(fc_graph *g, const char *name, size_t len, fc_dtype dt, int rank, const fc_dim *dims) {
    if (g->status) return &g->poison_value;
    if ((unsigned)dt >= FC_DTYPE_COUNT) {
        fc_graph_error(g, FC_ERR_USAGE, "param: bad dtype %d", (int)dt);
        return &g->poison_value;
    }
    if (!fc_check_shape(g, "param", dt, rank, dims)) return &g->poison_value;
    if (fc_name_index_find(&g->param_names, name, len) >= 0) {
        fc_graph_error(g, FC_ERR_INPUT, "parameter %%%.*s is already defined", (int)len, name);
        return &g->poison_value;
    }
    fc_value *v = fc_arena_alloc(&g->arena, sizeof *v);
    if (!v || !fc_grow(&g->arena, (void **)&g->params, &g->cap_params, g->nparams + 1, sizeof *g->params)) {
        oom(g);
        return &g->poison_value;
    }
    v->graph = g;
    v->dtype = dt;
    v->rank = rank;
    if (rank) memcpy(v->dims, dims, sizeof(fc_dim) * (size_t)rank);
    v->param_index = g->nparams;
    v->id = g->next_value_id++;
    v->name = fc_arena_strndup(&g->arena, name, len);
    if (!v->name || !fc_name_index_put(&g->param_names, &g->arena, v->name, len, g->nparams)) {
        oom(g);
        return &g->poison_value;
    }
    g->params[g->nparams++] = v;
    return v;
}

fc_value *fc_param(fc_graph *g, const char *name, fc_dtype dt, int rank, const fc_dim *dims) {
    if (!g) return NULL;
    if (g->status) return &g->poison_value;
    if (!name || !*name) {
        fc_graph_error(g, FC_ERR_USAGE, "fc_param: a parameter needs a name");
        return &g->poison_value;
    }
    if (rank > 0 && !dims) {
        fc_graph_error(g, FC_ERR_USAGE, "fc_param: dims is NULL");
        return &g->poison_value;
    }
    return fc_build_param(g, name, strlen(name), dt, rank, dims);
}

fc_value *fc_param_inout(fc_graph *g, const char *name, fc_dtype dt, int rank, const fc_dim *dims) {
    fc_value *v = fc_param(g, name, dt, rank, dims);
    if (v && !v->poison) v->inout = true;
    return v;
}

fc_value *fc_scalar(fc_graph *g, double v) {
    if (!g) return NULL;
    if (g->status) return &g->poison_value;
    fc_value *s = fc_arena_alloc(&g->arena, sizeof *s);
    if (!s) return oom(g), &g->poison_value;
    s->graph = g;
    s->weak = true;
    s->scalar = v;
    s->dtype = FC_F32; /* fixed when it is used as an operand */
    s->param_index = -1;
    s->id = g->next_value_id++;
    return s;
}

fc_value *fc_scalar_int(fc_graph *g, int64_t v) {
    fc_value *s = fc_scalar(g, (double)v);
    if (s && !s->poison) s->weak_int = true;
    return s;
}

fc_status fc_graph_return(fc_graph *g, int n, fc_value *const *outs) {
    if (!g) return FC_ERR_USAGE;
    if (g->status) return g->status;
    if (g->returned) return fc_graph_error(g, FC_ERR_USAGE, "return: the graph already has its results");
    if (n < 1 || !outs) return fc_graph_error(g, FC_ERR_INPUT, "return: a graph must return at least one value");
    for (int i = 0; i < n; i++) {
        if (!outs[i]) return fc_graph_error(g, FC_ERR_USAGE, "return: result %d is NULL", i);
        if (outs[i]->graph != g) return fc_foreign_value(g, "return", "result", i);
        if (outs[i]->poison) return g->status ? g->status : FC_ERR_INPUT;
        if (outs[i]->weak) return fc_graph_error(g, FC_ERR_INPUT, "return: a bare number cannot be a result");
    }
    g->outputs = fc_arena_alloc(&g->arena, sizeof(fc_value *) * (size_t)n);
    if (!g->outputs) return oom(g), FC_ERR_NOMEM;
    memcpy(g->outputs, outs, sizeof(fc_value *) * (size_t)n);
    g->noutputs = n;
    g->returned = true;
    return FC_OK;
}

int fc_value_rank(const fc_value *v) { return v ? v->rank : 0; }
fc_dtype fc_value_dtype(const fc_value *v) { return v ? v->dtype : FC_DTYPE_COUNT; }
const char *fc_value_name(const fc_value *v) { return v && v->name ? v->name : ""; }
fc_dim fc_value_dim(const fc_value *v, int i) { return v && i >= 0 && i < v->rank ? v->dims[i] : FC_DIM_INFER; }
bool fc_value_is_poison(const fc_value *v) { return !v || v->poison; }
bool fc_value_is_inout(const fc_value *v) { return v && v->inout; }
int fc_graph_num_params(const fc_graph *g) { return g ? g->nparams : 0; }
fc_value *fc_graph_param(const fc_graph *g, int i) { return g && i >= 0 && i < g->nparams ? g->params[i] : NULL; }
int fc_graph_num_outputs(const fc_graph *g) { return g ? g->noutputs : 0; }
fc_value *fc_graph_output(const fc_graph *g, int i) { return g && i >= 0 && i < g->noutputs ? g->outputs[i] : NULL; }

/* Compiled kernels bake shapes in: every dim of every param and live node
 * result must be static. The error names the first unbound symbol. */
static fc_status check_static(fc_graph *g, const fc_value *v) {
    for (int d = 0; d < v->rank; d++) {
        if (!fc_dim_is_sym(v->dims[d])) continue;
        const char *name = fc_sym_name(g, v->dims[d]);
        if (!name) name = "?";
        return fc_set_error(g->ctx, FC_ERR_INPUT, "symbol %s is unbound: bind it (--bind %s=...) to compile", name,
                            name);
    }
    return FC_OK;
}

fc_status fc_graph_check_compile(fc_graph *g, bool have_out, const char *fn) {
    if (!g) return FC_ERR_USAGE;
    if (!have_out) return fc_set_error(g->ctx, FC_ERR_USAGE, "%s: out is NULL", fn);
    if (g->status != FC_OK)
        return fc_set_error(g->ctx, g->status, "%s: graph %s has an error from building it", fn, g->name);
    if (!g->returned)
        return fc_set_error(g->ctx, FC_ERR_INPUT, "%s: graph %s has no results (call fc_graph_return)", fn, g->name);
    return FC_OK;
}

fc_status fc_graph_check_static(fc_graph *g) {
    for (int i = 0; i < g->nparams; i++) {
        fc_status st = check_static(g, g->params[i]);
        if (st != FC_OK) return st;
    }
    for (int i = 0; i < g->nnodes; i++) {
        const fc_node *n = g->nodes[i];
        for (int k = 0; !n->dead && k < n->nout; k++) {
            fc_status st = check_static(g, n->out[k]);
            if (st != FC_OK) return st;
        }
    }
    return FC_OK;
}

/* The axis the sharding pass (passes/shard.c) cut parameter i along, kept on
 * the value so that weights can be cut at load time by the runtime, which
 * does not call the passes. */
int fc_graph_param_shard_axis(const fc_graph *g, int i) {
    if (!g || i < 0 || i >= g->nparams) return -1;
    return g->params[i]->shard_axis1 - 1;
}
