/*
 * cuda_off.c - the CUDA backend's place in a build without the CUDA
 * toolkit (CMake's FUSEC_WITH_CUDA=OFF, or no toolkit found): the rest of
 * runtime/cuda is left out, and this file gives the public API that lives
 * there, so that the library links and every call says why it cannot
 * work. The backend table says "not built", so fc_device_list still names
 * cuda, fc_device_built says false, and fc_compile for FC_DEVICE_CUDA
 * fails with FC_ERR_UNSUPPORTED. The kernel cache holds only CUDA
 * programs, so its commands report that too.
 */
#include "runtime/backend.h"

#include "ir/ir.h"

#include <stdlib.h>
#include <string.h>

static const char no_cuda[] = "this build has no CUDA backend (the CUDA toolkit was not found at configure time, "
                              "or FUSEC_WITH_CUDA=OFF)";

const char *fc_cuda_not_built_reason(void) { return no_cuda; }

static bool cuda_built(void) { return false; }
static bool cuda_present(void) { return false; }

static fc_status cuda_compile(fc_graph *g, const fc_compile_options *o, fc_program **out) {
    (void)o;
    if (out) *out = NULL;
    if (!g) return FC_ERR_USAGE;
    return fc_set_error(fc_graph_context(g), FC_ERR_UNSUPPORTED, "%s", no_cuda);
}

/* No CUDA program can exist in this build: fc_compile above makes none, so
 * the table's other entries are never reached. */
const fc_backend fc_backend_cuda = {
    .name = "cuda",
    .device = FC_DEVICE_CUDA,
    .preference = 3,
    .built = cuda_built,
    .present = cuda_present,
    .compile = cuda_compile,
};

char *fc_compile_times_text(const fc_compile_times *t) {
    if (!t) return NULL;
    fc_strbuf s = {0};
    fc_strbuf_printf(&s, "time: %.3f ms (parse %.3f ms, compile %.3f ms; %s)\n", t->parse_ms + t->compile_ms,
                     t->parse_ms, t->compile_ms, no_cuda);
    if (s.oom || !s.buf) {
        free(s.buf);
        return NULL;
    }
    return s.buf;
}

/* ---- compiled program files: CUDA programs -------------------------- */

bool fc_program_is_file(const char *path) {
    (void)path;
    return false;
}

fc_status fc_program_load_file(fc_context *ctx, const char *path, fc_program **out) {
    if (out) *out = NULL;
    return fc_set_error(ctx, FC_ERR_UNSUPPORTED, "%s: a compiled program file runs on CUDA, and %s", path ? path : "?",
                        no_cuda);
}

fc_status fc_program_load_data(fc_context *ctx, const void *data, size_t size, fc_program **out) {
    (void)data;
    (void)size;
    if (out) *out = NULL;
    return fc_set_error(ctx, FC_ERR_UNSUPPORTED, "a compiled program runs on CUDA, and %s", no_cuda);
}

fc_status fc_program_save_file_weights(fc_program *p, const char *path, const fc_weights *w) {
    (void)path;
    (void)w;
    if (!p) return FC_ERR_USAGE;
    return fc_set_error(fc_program_context(p), FC_ERR_UNSUPPORTED, "only a CUDA program can be saved, and %s",
                        no_cuda);
}

fc_status fc_program_save_file(fc_program *p, const char *path) { return fc_program_save_file_weights(p, path, NULL); }

const fc_weights *fc_program_weights(const fc_program *p) {
    (void)p;
    return NULL;
}

fc_status fc_program_check_save_path(fc_context *ctx, const char *path) {
    (void)path;
    return fc_set_error(ctx, FC_ERR_UNSUPPORTED, "only a CUDA program can be saved, and %s", no_cuda);
}

/* ---- the kernel cache: CUDA programs and cubins ---------------------- */

fc_status fc_cache_configure(const char *dir) {
    (void)dir;
    return FC_OK;
}

fc_status fc_cache_global_open(fc_context *ctx, fc_cache **out) {
    if (out) *out = NULL;
    return fc_set_error(ctx, FC_ERR_UNSUPPORTED, "the kernel cache holds CUDA programs, and %s", no_cuda);
}

void fc_cache_global_close(void) {}

const char *fc_cache_global_take_warning(void) { return NULL; }

char *fc_cache_info_text(fc_context *ctx, bool verify, size_t *nbad) {
    (void)verify;
    if (nbad) *nbad = 0;
    fc_set_error(ctx, FC_ERR_UNSUPPORTED, "the kernel cache holds CUDA programs, and %s", no_cuda);
    return NULL;
}

char *fc_cache_clear_text(fc_context *ctx) {
    fc_set_error(ctx, FC_ERR_UNSUPPORTED, "the kernel cache holds CUDA programs, and %s", no_cuda);
    return NULL;
}

/* ---- dynamic programs and weights ------------------------------------ */

/* A host backend's program is static and reads its weights at every run:
 * these are no-ops for it, as in a CUDA build. */
fc_status fc_program_reserve(fc_program *p, const fc_binding *largest, int n) {
    (void)largest;
    (void)n;
    return p ? FC_OK : FC_ERR_USAGE;
}

fc_status fc_program_wait_specializations(fc_program *p) { return p ? FC_OK : FC_ERR_USAGE; }

fc_status fc_program_weights_changed(fc_program *p) { return p ? FC_OK : FC_ERR_USAGE; }

fc_status fc_program_infer_outputs(fc_program *p, const fc_tensor *inputs, int nin, fc_tensor *outputs, int nout) {
    (void)inputs; (void)nin; (void)outputs; (void)nout;
    if (!p) return FC_ERR_USAGE;
    return fc_set_error(fc_program_context(p), FC_ERR_UNSUPPORTED,
                        "fc_program_infer_outputs: output shapes come from a dynamic CUDA program, and %s", no_cuda);
}
