/* onnx_off.c - the import entry points of a build without protobuf-c and
 * cJSON: each says so (CMake printed which package was missing). */
#include "ir.h"

#define OFF(ctx) ((ctx) ? fc_set_error((ctx), FC_ERR_UNSUPPORTED, "fusec was built without the ONNX importer and " \
                  "safetensors reader (protobuf-c, protoc-c, onnx.proto or cJSON was missing): install them " \
                  "(scripts/setup.sh) and rebuild") : FC_ERR_UNSUPPORTED)

fc_status fc_graph_from_onnx(fc_context *ctx, const char *path, const fc_binding *binds, int nbinds,
                             const fc_weights *frozen, fc_graph **graph, fc_weights **weights) {
    if (graph) *graph = NULL;
    if (weights) *weights = NULL;
    return OFF(ctx);
}
fc_status fc_graph_from_onnx_data(fc_context *ctx, const char *filename, const void *data, size_t size,
                                  const char *dir, const fc_binding *binds, int nbinds, const fc_weights *frozen,
                                  fc_graph **graph, fc_weights **weights) {
    if (graph) *graph = NULL;
    if (weights) *weights = NULL;
    return OFF(ctx);
}
fc_status fc_tensor_from_onnx_file(fc_context *ctx, const char *path, fc_tensor *out, char **name) { return OFF(ctx); }
fc_status fc_weights_load_safetensors(fc_context *ctx, const char *path, fc_weights **out) {
    if (out) *out = NULL;
    return OFF(ctx);
}
fc_status fc_weights_load_safetensors_data(fc_context *ctx, const char *name, const void *data, size_t size,
                                           fc_weights **out) {
    if (out) *out = NULL;
    return OFF(ctx);
}
fc_weights *fc_weights_new(void) { return NULL; }
fc_status fc_weights_add(fc_weights *w, const char *name, const fc_tensor *t) { return FC_ERR_UNSUPPORTED; }
void fc_weights_free(fc_weights *w) { (void)w; }
int fc_weights_count(const fc_weights *w) { return 0; }
const char *fc_weights_name(const fc_weights *w, int i) { return NULL; }
const fc_tensor *fc_weights_tensor(const fc_weights *w, int i) { return NULL; }
const fc_tensor *fc_weights_find(const fc_weights *w, const char *name) { return NULL; }
fc_status fc_weights_bind(const fc_weights *w, fc_graph *g, fc_tensor *inputs, int nin, bool *bound, bool exact,
                          int first_free) {
    return OFF(g ? g->ctx : NULL);
}
