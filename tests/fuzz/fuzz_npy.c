/* fuzz_npy.c - libFuzzer harness for the .npy reader (tools/npy.c, which
 * the CLI links): any bytes are refused or read, never a crash. */
#include "../../tools/npy.c"

#include <stdint.h>
#include <stdio.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FILE *f = fmemopen((void *)data, size ? size : 1, "rb");
    if (!f) return 0;
    if (!size) fgetc(f); /* fmemopen needs a size of at least 1: an empty stream */
    fc_tensor t;
    char err[512];
    if (npy_read_stream(f, "fuzz.npy", &t, err, sizeof err) == 0) {
        int64_t n = fc_tensor_numel(&t);
        if (n < 0) abort();
        npy_tensor_free(&t);
    }
    fclose(f);
    return 0;
}
