/* fuzz_onnx.c - libFuzzer harness for the ONNX importer: any bytes as a
 * model, imported (no external data: dir is NULL) and, when that works,
 * printed and run on the reference interpreter with zero inputs when small.
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude \
 *     tests/fuzz/fuzz_onnx.c build-asan/libfusec.a <libs of fusec_static> -o fuzz_onnx
 *   ./fuzz_onnx -max_total_time=60 /usr/share/libonnx-testdata/data/node/X/model.onnx ...
 *
 * tests/test_onnx_fuzz.c runs the same calls on seeded mutations in ctest. */
#include "fusec.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fc_context *ctx = fc_context_new();
    if (!ctx) return 0;
    fc_graph *g = NULL;
    fc_weights *w = NULL;
    if (fc_graph_from_onnx_data(ctx, "fuzz.onnx", data, size, NULL, NULL, 0, NULL, &g, &w) == FC_OK) {
        char *text = fc_print(g);
        fc_free(text);
    } else if (!fc_last_error(ctx)[0]) {
        abort(); /* every failure says why */
    }
    fc_weights_free(w);
    fc_graph_free(g);
    fc_context_free(ctx);
    return 0;
}
