/*
 * run.c - fusec --run: the inputs (.npy files, weights, random data for
 * the rest), running on the chosen device or a compiled program, and the
 * outputs (printed, saved as .npy, --check against the reference
 * interpreter, --bench).
 */
#include "cli.h"
#include "npy.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

/* ------------------------------------------------------------------ */
/* Devices: the library's backends.                                    */
/* ------------------------------------------------------------------ */

/* Compiled kernels have static shapes: a copy of g with the symbols bound
 * to the sizes the inputs give (g itself when it has none). */
static fc_graph *specialize_to_inputs(fc_graph *g, const fc_tensor *in, int nin) {
    fc_binding binds[64];
    int nb = 0;
    for (int i = 0; i < nin && i < fc_graph_num_params(g); i++) {
        const fc_value *pv = fc_graph_param(g, i);
        for (int d = 0; d < fc_value_rank(pv) && d < in[i].rank; d++) {
            const char *sym = fc_sym_name(g, fc_value_dim(pv, d));
            bool known = false;
            for (int k = 0; k < nb && sym; k++) known |= !strcmp(binds[k].name, sym);
            if (sym && !known && nb < 64) binds[nb++] = (fc_binding){sym, in[i].shape[d]};
        }
    }
    return nb ? fc_graph_specialize(g, binds, nb) : g;
}

fc_status compile_on_device(fc_device dev, fc_graph *g, const fc_tensor *in, int nin, const options *o,
                            fc_graph **sg, fc_program **p) {
    *p = NULL;
    fc_compile_options co;
    fc_compile_options_default(&co);
    co.device = dev;
    co.sm = o->sm;
    co.numerics = o->numerics;
    co.precision = o->precision;
    *sg = specialize_to_inputs(g, in, nin);
    if (!*sg) return fc_graph_status(g) ? fc_graph_status(g) : FC_ERR_INPUT;
    return fc_compile(*sg, &co, p);
}

/* Run g on device dev from host memory: compile a copy with the inputs'
 * shapes (passes, codegen and, on CUDA, NVRTC or the cache), then
 * fc_program_run_host (its --bench timing: CUDA events on the GPU, the
 * monotonic clock on the host). */
static fc_status run_on_device(fc_device dev, fc_graph *g, const fc_tensor *in, int nin, fc_tensor *out, int nout,
                               int bench_iters, const options *o, run_stats *rs) {
    memset(rs, 0, sizeof *rs);
    fc_graph *sg = NULL;
    fc_program *p = NULL;
    fc_status st = compile_on_device(dev, g, in, nin, o, &sg, &p);
    if (!sg) return st;
    if (!st) st = fc_program_run_host(p, in, nin, out, nout, &rs->median_ms, bench_iters);
    if (p && dev == FC_DEVICE_CUDA) {
        rs->compiled = true;
        fc_program_times(p, &rs->times);
    }
    fc_program_free(p);
    if (sg != g) fc_graph_free(sg);
    return st;
}

/* ------------------------------------------------------------------ */
/* Random inputs: splitmix64 (Steele, Lea and Flood, 2014).             */
/* ------------------------------------------------------------------ */

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Floats uniform in [lo, hi) (the range fc_graph_param_inits gives the
 * parameter's role), integers in 0..7, bools 0 or 1. */
static void fill_random(fc_tensor *t, uint64_t seed, int param_index, double lo, double hi) {
    uint64_t s = seed, state = 0;
    for (int i = 0; i <= param_index; i++) state = splitmix64(&s);
    int64_t n = fc_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = splitmix64(&state);
        double u = lo + (hi - lo) * ((double)(r >> 11) * 0x1.0p-53);
        switch (t->dtype) {
        case FC_F64: ((double *)t->data)[i] = u; break;
        case FC_F32: ((float *)t->data)[i] = (float)u; break;
        case FC_F16: ((uint16_t *)t->data)[i] = fc_f32_to_f16((float)u); break;
        case FC_BF16: ((uint16_t *)t->data)[i] = fc_f32_to_bf16((float)u); break;
        case FC_I64: ((int64_t *)t->data)[i] = (int64_t)(r >> 61); break;
        case FC_I32: ((int32_t *)t->data)[i] = (int32_t)(r >> 61); break;
        case FC_I8: ((int8_t *)t->data)[i] = (int8_t)(r >> 61); break;
        case FC_BOOL: ((uint8_t *)t->data)[i] = (uint8_t)(r >> 63); break;
        default: break;
        }
    }
}

/* ------------------------------------------------------------------ */
/* Tensors as text.                                                    */
/* ------------------------------------------------------------------ */

static double tensor_get(const fc_tensor *t, int64_t i) {
    switch (t->dtype) {
    case FC_F64: return ((const double *)t->data)[i];
    case FC_F32: return ((const float *)t->data)[i];
    case FC_F16: return fc_f16_to_f32(((const uint16_t *)t->data)[i]);
    case FC_BF16: return fc_bf16_to_f32(((const uint16_t *)t->data)[i]);
    case FC_I64: return (double)((const int64_t *)t->data)[i];
    case FC_I32: return ((const int32_t *)t->data)[i];
    case FC_I8: return ((const int8_t *)t->data)[i];
    case FC_BOOL: return ((const uint8_t *)t->data)[i];
    default: return 0;
    }
}

static void format_shape(const int64_t *shape, int rank, char *buf, size_t n) {
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < rank && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%" PRId64, i ? ", " : "", shape[i]);
}

static void print_output(FILE *out, int index, const fc_tensor *t) {
    char shape[FC_MAX_RANK * 24];
    format_shape(t->shape, t->rank, shape, sizeof shape);
    int64_t n = fc_tensor_numel(t);
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += tensor_get(t, i);
    fprintf(out, "out%d: %s[%s] checksum=%.6g first=[", index, fc_dtype_name(t->dtype), shape, sum);
    bool is_float = t->dtype == FC_F64 || t->dtype == FC_F32 || t->dtype == FC_F16 || t->dtype == FC_BF16;
    for (int64_t i = 0; i < n && i < 8; i++) {
        if (i) fputs(", ", out);
        if (is_float) fprintf(out, "%.6g", tensor_get(t, i));
        else if (t->dtype == FC_I64) fprintf(out, "%" PRId64, ((const int64_t *)t->data)[i]);
        else fprintf(out, "%.0f", tensor_get(t, i));
    }
    fputs(n > 8 ? ", ...]\n" : "]\n", out);
}

/* ------------------------------------------------------------------ */
/* Running.                                                            */
/* ------------------------------------------------------------------ */

/* Symbol values learned from input files. */
typedef struct sym_values {
    const char *name[64];
    int64_t value[64];
    int n;
} sym_values;

static bool sym_lookup(const sym_values *sv, const char *name, int64_t *v) {
    for (int i = 0; i < sv->n; i++)
        if (strcmp(sv->name[i], name) == 0) {
            *v = sv->value[i];
            return true;
        }
    return false;
}

/* A parameter as the run sees it: one of a graph (its dims may be
 * symbolic) or one of a compiled program (all static). */
typedef struct param_info {
    char name[128];               /* for messages: "%x", or "parameter 2" */
    char type[256];               /* for messages: "f32[N, 4]" */
    fc_dtype dtype;
    int rank;
    int64_t dims[FC_MAX_RANK];    /* the static sizes */
    const char *sym[FC_MAX_RANK]; /* the symbol of dim d (owned by the graph), or NULL when static */
} param_info;

static void param_finish(param_info *pi, const char *name, int index) {
    if (name && *name) snprintf(pi->name, sizeof pi->name, "%%%s", name);
    else snprintf(pi->name, sizeof pi->name, "parameter %d", index);
    size_t n = sizeof pi->type;
    size_t len = (size_t)snprintf(pi->type, n, "%s[", fc_dtype_name(pi->dtype));
    for (int d = 0; d < pi->rank && len < n; d++) {
        if (pi->sym[d]) len += (size_t)snprintf(pi->type + len, n - len, "%s%s", d ? ", " : "", pi->sym[d]);
        else len += (size_t)snprintf(pi->type + len, n - len, "%s%" PRId64, d ? ", " : "", pi->dims[d]);
    }
    if (len < n) snprintf(pi->type + len, n - len, "]");
}

static void param_of_graph(fc_graph *g, int i, param_info *pi) {
    const fc_value *p = fc_graph_param(g, i);
    memset(pi, 0, sizeof *pi);
    pi->dtype = fc_value_dtype(p);
    pi->rank = fc_value_rank(p);
    for (int d = 0; d < pi->rank; d++) {
        fc_dim dim = fc_value_dim(p, d);
        pi->sym[d] = fc_sym_name(g, dim);
        pi->dims[d] = pi->sym[d] ? 0 : dim;
    }
    param_finish(pi, fc_value_name(p), i);
}

static void param_of_program(const fc_program *prog, int i, param_info *pi) {
    fc_tensor t;
    const char *name = NULL;
    memset(pi, 0, sizeof *pi);
    if (fc_program_input(prog, i, &t, &name) == FC_OK) {
        pi->dtype = t.dtype;
        pi->rank = t.rank;
        for (int d = 0; d < t.rank; d++) pi->dims[d] = t.shape[d];
    }
    param_finish(pi, name, i);
}

/* Convert a tensor read from .npy to parameter dtype pt (see --help).
 * Returns 0, EXIT_INPUT (message printed) or EXIT_NOMEM. */
static int convert_input(fc_tensor *t, fc_dtype pt, const char *file, const char *pname) {
    if (t->dtype == pt) return 0;
    if (t->dtype == FC_F32 && (pt == FC_BF16 || pt == FC_F16)) {
        int64_t n = fc_tensor_numel(t);
        uint16_t *h = malloc((size_t)(n ? n : 1) * sizeof *h);
        if (!h) return fail(EXIT_NOMEM, "%s: out of memory", file);
        const float *f = t->data;
        for (int64_t i = 0; i < n; i++) h[i] = pt == FC_BF16 ? fc_f32_to_bf16(f[i]) : fc_f32_to_f16(f[i]);
        free(t->data);
        t->data = h;
        t->dtype = pt;
        return 0;
    }
    return fail(EXIT_INPUT, "%s: dtype %s does not fit parameter %s of dtype %s", file, fc_dtype_name(t->dtype),
                pname, fc_dtype_name(pt));
}

/* Check a file's shape against the parameter's and learn its symbols. */
static int match_shape(const param_info *pi, const fc_tensor *t, sym_values *sv, const char *file) {
    char shape[FC_MAX_RANK * 24];
    bool ok = pi->rank == t->rank;
    for (int d = 0; ok && d < t->rank; d++) {
        const char *sym = pi->sym[d];
        if (!sym) {
            ok = pi->dims[d] == t->shape[d];
            continue;
        }
        int64_t known;
        if (sym_lookup(sv, sym, &known)) {
            if (known != t->shape[d])
                return fail(EXIT_INPUT, "%s: dimension %d of parameter %s (%s) is %s = %" PRId64
                            " by an earlier input, but the file has %" PRId64,
                            file, d, pi->name, pi->type, sym, known, t->shape[d]);
        } else if (sv->n < 64) {
            sv->name[sv->n] = sym;
            sv->value[sv->n] = t->shape[d];
            sv->n++;
        }
    }
    if (!ok) {
        format_shape(t->shape, t->rank, shape, sizeof shape);
        return fail(EXIT_INPUT, "%s: shape [%s] does not fit parameter %s of type %s", file, shape, pi->name,
                    pi->type);
    }
    return 0;
}

static int mkdir_p(const char *dir) {
    char path[4096];
    size_t n = strlen(dir);
    if (n >= sizeof path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(path, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (path[i] != '/' && path[i] != '\0') continue;
        char c = path[i];
        path[i] = '\0';
        if (mkdir(path, 0777) != 0 && errno != EEXIST) return -1;
        path[i] = c;
    }
    struct stat st;
    if (stat(dir, &st) != 0) return -1;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

static int save_outputs(const char *dir, const fc_tensor *outs, int nout) {
    if (mkdir_p(dir) != 0) return fail(EXIT_RUNTIME, "cannot create directory '%s': %s", dir, strerror(errno));
    for (int i = 0; i < nout; i++) {
        char path[4200], err[512];
        snprintf(path, sizeof path, "%s/out%d.npy", dir, i);
        fc_tensor t = outs[i];
        float *tmp = NULL;
        if (t.dtype == FC_BF16) {
            int64_t n = fc_tensor_numel(&t);
            tmp = malloc((size_t)(n ? n : 1) * sizeof *tmp);
            if (!tmp) return fail(EXIT_NOMEM, "out of memory");
            for (int64_t k = 0; k < n; k++) tmp[k] = fc_bf16_to_f32(((const uint16_t *)t.data)[k]);
            t.dtype = FC_F32;
            t.data = tmp;
        }
        int rc = npy_write(path, &t, err, sizeof err);
        free(tmp);
        if (rc != 0) return fail(EXIT_RUNTIME, "%s", err);
    }
    return 0;
}

/* Map a failed call's status to an exit code. */
int run_exit_code(fc_status st) {
    switch (st) {
    case FC_ERR_INPUT: return EXIT_INPUT;
    case FC_ERR_USAGE: return EXIT_USAGE; /* a bad FUSEC_CACHE, ... */
    case FC_ERR_NOMEM: return EXIT_NOMEM;
    case FC_ERR_UNSUPPORTED: return EXIT_UNSUPPORTED;
    default: return EXIT_RUNTIME;
    }
}

/* --check: run the reference interpreter on the same inputs twice, in the
 * graph's dtypes and exactly (float64), and compare every output
 * (fc_compare_outputs_exact, docs/RUNTIME-PROGRAM.md). */
/* The graph as the autocast pass rewrote it (the hook's copy). */
static void keep_autocast(void *user, const char *pass, fc_graph *g) {
    fc_graph **kept = user;
    if (!strcmp(pass, "autocast") && !*kept) *kept = fc_graph_clone(g);
}

/* Under --precision, the dtype-faithful computation is that of the
 * precision used: the graph after the autocast pass (its casts to bf16 or
 * f16 in place), run by the reference interpreter with every value rounded
 * to its dtype. NULL when the graph's own dtypes are the ones used. */
static fc_graph *faithful_graph(fc_graph *g, const fc_tensor *in, int np, const options *o, fc_status *st) {
    *st = FC_OK;
    if (!o->precision_given || o->precision == FC_PRECISION_AS_WRITTEN) return NULL;
    fc_graph *sg = specialize_to_inputs(g, in, np);
    if (!sg) {
        *st = fc_graph_status(g) ? fc_graph_status(g) : FC_ERR_INPUT;
        return NULL;
    }
    fc_compile_options co;
    fc_compile_options_default(&co);
    co.device = FC_DEVICE_REF;
    co.precision = o->precision;
    co.numerics = FC_NUMERICS_EAGER; /* the graph as written, rounded at every step */
    fc_graph *kept = NULL;
    *st = fc_run_passes(sg, &co, keep_autocast, &kept);
    if (sg != g) fc_graph_free(sg);
    if (*st == FC_OK && !kept) *st = FC_ERR_NOMEM; /* the clone failed */
    if (*st != FC_OK) {
        fc_graph_free(kept);
        return NULL;
    }
    return kept;
}

static int check_outputs(fc_graph *g, const fc_tensor *in, int np, const fc_tensor *out, int nout,
                         const options *o) {
    fc_context *ctx = fc_graph_context(g);
    size_t n = (size_t)(nout ? nout : 1);
    fc_tensor *want = calloc(n, sizeof *want), *exact = calloc(n, sizeof *exact);
    fc_output_diff *d = calloc(n, sizeof *d);
    int rc = 0;
    if (!want || !exact || !d) {
        rc = fail(EXIT_NOMEM, "out of memory");
        goto done;
    }
    fc_status st;
    fc_graph *faithful = faithful_graph(g, in, np, o, &st);
    if (!st) st = fc_run_reference(faithful ? faithful : g, in, np, want, nout);
    fc_graph_free(faithful);
    if (!st) st = fc_run_reference_exact(g, in, np, exact, nout);
    if (st) {
        print_last_error(ctx);
        rc = run_exit_code(st);
        goto done;
    }
    st = fc_compare_outputs_exact(ctx, out, want, exact, nout, d);
    for (int i = 0; i < nout; i++) {
        char line[768];
        /* Against the reference, then (floats) both errors against float64:
         * fusec's, and the dtype-faithful computation's. */
        printf("check out%d: max_abs_err=%.3g max_rel_err=%.3g %s", i, d[i].max_abs_err, d[i].max_rel_err,
               d[i].pass ? "ok" : "FAIL");
        if (d[i].margin > 0) printf(" (error %.3g, in the dtypes %.3g)", d[i].err, d[i].ref_err);
        putchar('\n');
        if (!d[i].pass) fprintf(stderr, "fusec: %s\n", fc_output_diff_format(&d[i], i, line, sizeof line));
    }
    if (st) rc = EXIT_CHECK;
done:
    for (int i = 0; i < nout; i++) {
        if (want) fc_tensor_release(&want[i]);
        if (exact) fc_tensor_release(&exact[i]);
    }
    free(want);
    free(exact);
    free(d);
    return rc;
}

/* A program file's weights (fc_program_weights: the loader checked their
 * types) as the inputs of the parameters they name that no --inputs file
 * gave: copies, which run_inputs frees with the rest. */
static int program_weights_to_inputs(const fc_program *p, fc_tensor *in, int np) {
    const fc_weights *w = fc_program_weights(p);
    for (int i = 0; w && i < np; i++) {
        fc_tensor type;
        const char *name = NULL;
        if (in[i].data || fc_program_input(p, i, &type, &name) != FC_OK) continue;
        const fc_tensor *t = fc_weights_find(w, name);
        if (!t) continue;
        size_t bytes = (size_t)fc_tensor_numel(t) * fc_dtype_size(t->dtype);
        in[i] = *t;
        if (!(in[i].data = malloc(bytes ? bytes : 1))) return fail(EXIT_NOMEM, "out of memory");
        memcpy(in[i].data, t->data, bytes);
    }
    return 0;
}

/* Weights (an ONNX model's initializers, --weights) as the inputs of the
 * parameters they name that no --inputs file gave: copies, which
 * run_inputs frees with the rest. */
static int weights_to_inputs(const fc_weights *w, fc_graph *g, fc_tensor *in, int np) {
    fc_tensor *view = calloc((size_t)(np ? np : 1), sizeof *view);
    bool *bound = calloc((size_t)(np ? np : 1), sizeof *bound);
    if (!view || !bound) {
        free(view);
        free(bound);
        return fail(EXIT_NOMEM, "out of memory");
    }
    int rc = 0;
    if (fc_weights_bind(w, g, view, np, bound, false, 0) != FC_OK) {
        print_last_error(fc_graph_context(g));
        rc = EXIT_INPUT;
    }
    for (int i = 0; i < np && !rc; i++) {
        if (!bound[i] || in[i].data) continue;
        size_t bytes = (size_t)fc_tensor_numel(&view[i]) * fc_dtype_size(view[i].dtype);
        in[i] = view[i];
        in[i].data = malloc(bytes ? bytes : 1);
        if (!in[i].data) rc = fail(EXIT_NOMEM, "out of memory");
        else memcpy(in[i].data, view[i].data, bytes);
    }
    free(view);
    free(bound);
    return rc;
}

/* A compile (--emit=plan|cuda|ptx, -o) of a graph with symbolic dims: bind
 * them from the --inputs files' shapes, as --run does, into a specialized
 * copy (*out; g itself when it has no unbound symbol). A symbol no file
 * gives is an error that names it and the parameters that have it. */
int bind_from_inputs(const options *o, fc_graph *g, fc_graph **out) {
    *out = g;
    int np = fc_graph_num_params(g);
    if (o->ninputs > np)
        return usage_error("%d input files given, but graph '%s' has %d parameter%s", o->ninputs, fc_graph_name(g),
                           np, np == 1 ? "" : "s");
    param_info *params = calloc((size_t)(np ? np : 1), sizeof *params);
    if (!params) return fail(EXIT_NOMEM, "out of memory");
    sym_values sv = {.n = 0};
    int rc = 0;
    char err[512];
    for (int i = 0; i < np && !rc; i++) {
        param_of_graph(g, i, &params[i]);
        if (i >= o->ninputs || !*o->inputs[i]) continue;
        fc_tensor t = {0};
        if (npy_read(o->inputs[i], &t, err, sizeof err) != 0) rc = fail(EXIT_RUNTIME, "%s", err);
        else if (!(rc = convert_input(&t, params[i].dtype, o->inputs[i], params[i].name)))
            rc = match_shape(&params[i], &t, &sv, o->inputs[i]);
        free(t.data);
    }
    /* The first symbol of a parameter that no file bound. */
    for (int i = 0; i < np && !rc; i++) {
        for (int d = 0; d < params[i].rank && !rc; d++) {
            int64_t v;
            const char *sym = params[i].sym[d];
            if (sym && !sym_lookup(&sv, sym, &v))
                rc = usage_error("symbol '%s' is unbound: dimension %d of parameter %s (%s) has it, and no --inputs "
                                 "file gives that parameter; bind it with --bind %s=<size> or give the file",
                                 sym, d, params[i].name, params[i].type, sym);
        }
    }
    if (!rc && sv.n > 0) {
        fc_binding binds[64];
        for (int k = 0; k < sv.n; k++) binds[k] = (fc_binding){sv.name[k], sv.value[k]};
        *out = fc_graph_specialize(g, binds, sv.n);
        if (!*out) {
            print_last_error(fc_graph_context(g));
            *out = g;
            rc = EXIT_INPUT;
        }
    }
    free(params);
    return rc;
}

/* Build the inputs (files, then random data), run, print or save the
 * outputs, and --check and --bench them. */
int run_inputs(const options *o, const run_target *t, run_stats *rs) {
    int np = t->g ? fc_graph_num_params(t->g) : fc_program_num_inputs(t->prog);
    int nout = t->g ? fc_graph_num_outputs(t->g) : fc_program_num_outputs(t->prog);
    if (o->ninputs > np)
        return usage_error("%d input files given, but graph '%s' has %d parameter%s", o->ninputs, t->name, np,
                           np == 1 ? "" : "s");
    fc_tensor *in = calloc((size_t)(np ? np : 1), sizeof *in);
    fc_tensor *out = calloc((size_t)(nout ? nout : 1), sizeof *out);
    param_info *params = calloc((size_t)(np ? np : 1), sizeof *params);
    fc_param_init *init = calloc((size_t)(np ? np : 1), sizeof *init);
    int rc = 0;
    if (!in || !out || !params || !init) {
        rc = fail(EXIT_NOMEM, "out of memory");
        goto done;
    }
    /* Random data in the range of each parameter's role (the graph's: a
     * compiled program file's embedded one; data without it). */
    for (int i = 0; i < np; i++) init[i] = (fc_param_init){FC_ROLE_DATA, 0, -1.0, 1.0};
    if (t->ref && fc_graph_num_params(t->ref) == np && fc_graph_param_inits(t->ref, init, np) != FC_OK) {
        print_last_error(fc_graph_context(t->ref));
        rc = EXIT_NOMEM;
        goto done;
    }
    for (int i = 0; i < np; i++) {
        if (t->g) param_of_graph(t->g, i, &params[i]);
        else param_of_program(t->prog, i, &params[i]);
    }
    sym_values sv = {.n = 0};
    char err[512];

    /* Files first: their shapes give the symbolic dims of random inputs. */
    for (int i = 0; i < np && i < o->ninputs; i++) {
        const char *file = o->inputs[i];
        if (!*file) continue;
        if (npy_read(file, &in[i], err, sizeof err) != 0) {
            rc = fail(EXIT_RUNTIME, "%s", err);
            goto done;
        }
        if ((rc = convert_input(&in[i], params[i].dtype, file, params[i].name)) != 0) goto done;
        if ((rc = match_shape(&params[i], &in[i], &sv, file)) != 0) goto done;
    }
    if (t->weights && t->g && (rc = weights_to_inputs(t->weights, t->g, in, np)) != 0) goto done;
    if (!t->g && t->prog && (rc = program_weights_to_inputs(t->prog, in, np)) != 0) goto done;
    for (int i = 0; i < np; i++) {
        if ((i < o->ninputs && *o->inputs[i]) || in[i].data) continue;
        const param_info *p = &params[i];
        if (p->dtype == FC_STRING) {
            rc = usage_error("parameter %s (%s) is a string tensor: --run makes no random strings; run the graph "
                             "through the C API",
                             p->name, p->type);
            goto done;
        }
        fc_tensor *x = &in[i];
        x->dtype = p->dtype;
        x->rank = p->rank;
        uint64_t numel = 1;
        for (int d = 0; d < x->rank; d++) {
            int64_t v = p->dims[d];
            if (p->sym[d] && !sym_lookup(&sv, p->sym[d], &v)) {
                rc = usage_error("parameter %s (%s) gets random data, but dimension '%s' is unknown: bind it "
                                 "with --bind %s=<size> or give an input file",
                                 p->name, p->type, p->sym[d], p->sym[d]);
                goto done;
            }
            x->shape[d] = v;
            if (v != 0 && numel > (uint64_t)INT64_MAX / (uint64_t)v) numel = UINT64_MAX;
            else numel *= (uint64_t)v;
        }
        size_t es = fc_dtype_size(x->dtype);
        if (numel > (uint64_t)SIZE_MAX / 2 / es) {
            rc = fail(EXIT_NOMEM, "parameter %s is too large to allocate", p->name);
            goto done;
        }
        x->data = malloc(numel ? (size_t)numel * es : 1);
        if (!x->data) {
            rc = fail(EXIT_NOMEM, "out of memory for parameter %s", p->name);
            goto done;
        }
        fill_random(x, o->seed, i, init[i].lo, init[i].hi);
    }

    if (o->profile || o->trace_file || o->report_file) {
        if (t->prog) rc = profile_program(o, t->prog, in, np, t->parse_ms);
        else {
            fc_graph *sg = NULL;
            fc_program *p = NULL;
            fc_status cs = compile_on_device(t->dev, t->g, in, np, o, &sg, &p);
            if (cs != FC_OK) {
                print_last_error(fc_graph_context(t->g));
                rc = run_exit_code(cs);
            } else rc = profile_program(o, p, in, np, t->parse_ms);
            fc_program_free(p);
            if (sg && sg != t->g) fc_graph_free(sg);
        }
        goto done;
    }
    fc_status st;
    fc_context *ctx;
    if (t->prog) {
        ctx = fc_program_context(t->prog);
        st = fc_program_run_host(t->prog, in, np, out, nout, &rs->median_ms, o->bench_iters);
    } else {
        ctx = fc_graph_context(t->g);
        st = run_on_device(t->dev, t->g, in, np, out, nout, o->bench_iters, o, rs);
    }
    if (st != FC_OK) {
        print_last_error(ctx);
        rc = run_exit_code(st);
        goto done;
    }
    if (o->save_dir) {
        rc = save_outputs(o->save_dir, out, nout);
    } else if (!o->bench_iters || o->check) {
        for (int i = 0; i < nout; i++) print_output(stdout, i, &out[i]);
    }
    if (!rc && o->check) rc = check_outputs(t->ref, in, np, out, nout, o);
    if (!rc && o->bench_iters) printf("time: %.4f ms median of %d\n", rs->median_ms, o->bench_iters);
    if (fflush(stdout) != 0 && !rc) rc = fail(EXIT_RUNTIME, "cannot write to stdout: %s", strerror(errno));

done:
    if (in)
        for (int i = 0; i < np; i++) free(in[i].data);
    if (out)
        for (int i = 0; i < nout; i++)
            if (out[i].data) fc_tensor_release(&out[i]);
    free(in);
    free(out);
    free(params);
    free(init);
    return rc;
}

