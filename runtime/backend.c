/*
 * backend.c - the backend registry, and the public calls that dispatch
 * through it (runtime/backend.h).
 *
 * Adding a backend is one line in `registry` below, and its table in its
 * own folder. The order of the lines is the order `fusec --devices` lists
 * them in; fc_device_default picks by each table's preference.
 */
#include "runtime/backend.h"
#include "ir/ir.h"
#include "ir/options.h"
#include "ir/switches.h"
#include "lower/program_desc.h"

#include <string.h>

static const fc_backend *const registry[] = {
    &fc_backend_ref,
    &fc_backend_cpu,
    &fc_backend_cuda,
};
#define NBACKENDS ((int)(sizeof registry / sizeof registry[0]))

int fc_backend_count(void) { return NBACKENDS; }

const fc_backend *fc_backend_at(int i) { return i >= 0 && i < NBACKENDS ? registry[i] : NULL; }

const fc_backend *fc_backend_for(fc_device d) {
    for (int i = 0; i < NBACKENDS; i++)
        if (registry[i]->device == d) return registry[i];
    return NULL;
}

bool fc_program_is(const fc_program *p, fc_device d) { return p && fc_backend_of(p)->device == d; }

fc_status fc_backend_unsupported(fc_program *p, const char *what) {
    return fc_set_error(fc_program_context(p), FC_ERR_UNSUPPORTED, "%s: not supported by the %s backend (program %s)",
                        what, fc_backend_of(p)->name, fc_program_name(p));
}

/* ------------------------------------------------------------------ */
/* Devices.                                                            */
/* ------------------------------------------------------------------ */

const char *fc_device_name(fc_device d) {
    const fc_backend *b = fc_backend_for(d);
    return b ? b->name : NULL;
}

bool fc_device_from_name(const char *name, fc_device *out) {
    for (int i = 0; name && out && i < NBACKENDS; i++)
        if (!strcmp(registry[i]->name, name)) {
            *out = registry[i]->device;
            return true;
        }
    return false;
}

int fc_device_list(fc_device *out, int max) {
    for (int i = 0; out && i < NBACKENDS && i < max; i++) out[i] = registry[i]->device; /* NULL: count only */
    return NBACKENDS;
}

bool fc_device_built(fc_device d) {
    const fc_backend *b = fc_backend_for(d);
    return b && b->built();
}

bool fc_device_available(fc_device d) {
    const fc_backend *b = fc_backend_for(d);
    return b && b->built() && b->present();
}

fc_device fc_device_default(void) {
    const fc_backend *best = NULL;
    for (int i = 0; i < NBACKENDS; i++)
        if ((!best || registry[i]->preference > best->preference) && fc_device_available(registry[i]->device))
            best = registry[i];
    return best ? best->device : FC_DEVICE_REF;
}

const char *fc_device_default_name(bool *from_env) {
    const char *env = fc_switch_str(FC_SW_DEVICE);
    if (from_env) *from_env = *env != 0;
    return *env ? env : fc_device_name(fc_device_default());
}

/* ------------------------------------------------------------------ */
/* Programs.                                                           */
/* ------------------------------------------------------------------ */

fc_status fc_compile(fc_graph *g, const fc_compile_options *o, fc_program **out) {
    if (out) *out = NULL;
    fc_status entry = fc_graph_check_compile(g, out != NULL, "fc_compile");
    if (entry != FC_OK) return entry;
    fc_context *ctx = g->ctx;
    fc_compile_options defaults;
    if (!o) {
        fc_compile_options_default(&defaults);
        o = &defaults;
    }
    fc_status st = fc_compile_options_check(ctx, o);
    if (st != FC_OK) return st;
    const fc_backend *b = fc_backend_for(o->device);
    if (!b) return fc_set_error(ctx, FC_ERR_USAGE, "fc_compile: unknown device %d", (int)o->device);
    if (!b->built())
        return fc_set_error(ctx, FC_ERR_UNSUPPORTED, "fc_compile: the %s backend is not in this build", b->name);
    /* Strings are text preprocessing on the host: a GPU kernel has no use
     * for pointers into host memory, so the device backend refuses them
     * here, once, before any pass or code generator sees a string. */
    const fc_value *s = o->device == FC_DEVICE_CUDA ? fc_graph_first_string(g) : NULL;
    if (s)
        return fc_set_error(ctx, FC_ERR_UNSUPPORTED,
                            "fc_compile: graph %s has string tensors (%%%s is %s), which only the host backends run "
                            "(--device=cpu or ref), not cuda",
                            g->name, s->name ? s->name : "?", fc_dtype_name(s->dtype));
    return b->compile(g, o, out);
}

fc_status fc_run(fc_program *p, void *const *inputs, int nin, void *const *outputs, int nout, void *stream) {
    return p ? fc_backend_of(p)->run(p, inputs, nin, outputs, nout, stream) : FC_ERR_USAGE;
}

fc_status fc_run_shaped(fc_program *p, const fc_tensor *inputs, int nin, const fc_tensor *outputs, int nout,
                        void *stream) {
    return p ? fc_backend_of(p)->run_shaped(p, inputs, nin, outputs, nout, stream) : FC_ERR_USAGE;
}

fc_status fc_program_run_host(fc_program *p, const fc_tensor *inputs, int nin, fc_tensor *outputs, int nout,
                              double *median_ms, int bench_iters) {
    return p ? fc_backend_of(p)->run_host(p, inputs, nin, outputs, nout, median_ms, bench_iters) : FC_ERR_USAGE;
}

void fc_program_free(fc_program *p) {
    if (p) fc_backend_of(p)->free(p);
}

void fc_program_stats(const fc_program *p, fc_run_stats *out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (p) fc_backend_of(p)->stats(p, out);
}

static char *describe(fc_program *p, fc_describe_kind what) { return p ? fc_backend_of(p)->describe(p, what) : NULL; }

char *fc_program_plan_text(fc_program *p) { return describe(p, FC_DESCRIBE_PLAN); }

char *fc_program_source(fc_program *p) { return describe(p, FC_DESCRIBE_SOURCE); }
char *fc_program_plan_dot(fc_program *p) { return describe(p, FC_DESCRIBE_DOT); }

char *fc_program_cuda_source(fc_program *p) {
    if (p && !fc_program_is(p, FC_DEVICE_CUDA)) {
        fc_backend_unsupported(p, "CUDA source");
        return NULL;
    }
    return describe(p, FC_DESCRIBE_SOURCE);
}

char *fc_program_ptx(fc_program *p) { return describe(p, FC_DESCRIBE_ASM); }

const fc_program_desc *fc_program_desc_of(const fc_program *p) { return p ? fc_backend_of(p)->desc(p) : NULL; }

fc_context *fc_program_context(const fc_program *p) { return p ? fc_backend_of(p)->context(p) : NULL; }

fc_device fc_program_device_of(const fc_program *p) { return p ? fc_backend_of(p)->device : FC_DEVICE_CUDA; }

const char *fc_program_name(const fc_program *p) {
    const fc_program_desc *d = fc_program_desc_of(p);
    return d && d->graph_name ? d->graph_name : "";
}

const char *fc_program_graph_text(const fc_program *p) {
    const fc_program_desc *d = fc_program_desc_of(p);
    return d ? d->graph_text : NULL;
}

void fc_program_times(const fc_program *p, fc_compile_times *out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (p && fc_backend_of(p)->times) fc_backend_of(p)->times(p, out);
}

/* The signature, from the description every backend has. */

int fc_program_num_inputs(const fc_program *p) { return p ? fc_program_desc_of(p)->nparams : 0; }

int fc_program_num_outputs(const fc_program *p) { return p ? fc_program_desc_of(p)->noutputs : 0; }

static void tensor_type_of(const fc_program_tensor *t, fc_tensor *out) {
    memset(out, 0, sizeof *out);
    out->dtype = t->dtype;
    out->rank = t->rank;
    for (int d = 0; d < t->rank; d++) out->shape[d] = t->dims[d];
}

fc_status fc_program_input(const fc_program *p, int i, fc_tensor *type, const char **name) {
    const fc_program_desc *d = fc_program_desc_of(p);
    if (!p || !type || i < 0 || i >= d->nparams) {
        if (p) return fc_set_error(fc_program_context(p), FC_ERR_USAGE, "fc_program_input: bad input %d (or NULL type)", i);
        return FC_ERR_USAGE;
    }
    tensor_type_of(&d->params[i], type);
    if (name) *name = d->params[i].name;
    return FC_OK;
}

fc_status fc_program_output(const fc_program *p, int i, fc_tensor *type) {
    const fc_program_desc *d = fc_program_desc_of(p);
    if (!p || !type || i < 0 || i >= d->noutputs) {
        if (p) return fc_set_error(fc_program_context(p), FC_ERR_USAGE, "fc_program_output: bad output %d (or NULL type)", i);
        return FC_ERR_USAGE;
    }
    tensor_type_of(&d->outputs[i], type);
    return FC_OK;
}
