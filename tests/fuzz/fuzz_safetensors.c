/* fuzz_safetensors.c - libFuzzer harness for the safetensors reader: any
 * bytes as a file (fc_weights_load_safetensors_data), then every tensor's
 * data read end to end (its bounds were checked against the file).
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude \
 *     tests/fuzz/fuzz_safetensors.c build-asan/libfusec.a <libs> -o fuzz_safetensors
 *
 * tests/test_onnx_fuzz.c runs the same calls on seeded mutations in ctest. */
#include "fusec.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fc_context *ctx = fc_context_new();
    if (!ctx) return 0;
    fc_weights *w = NULL;
    if (fc_weights_load_safetensors_data(ctx, "fuzz.safetensors", data, size, &w) == FC_OK) {
        volatile uint8_t sink = 0;
        for (int i = 0; i < fc_weights_count(w); i++) {
            const fc_tensor *t = fc_weights_tensor(w, i);
            size_t n = (size_t)fc_tensor_numel(t) * fc_dtype_size(t->dtype);
            for (size_t j = 0; j < n; j++) sink ^= ((const uint8_t *)t->data)[j];
        }
        (void)sink;
    } else if (!fc_last_error(ctx)[0]) {
        abort();
    }
    fc_weights_free(w);
    fc_context_free(ctx);
    return 0;
}
