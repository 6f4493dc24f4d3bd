/* fuzz_aot.c - libFuzzer harness for the AOT loader: the section table, the kernels' ELF checks, the
 * container, the program decoder and the validation on load. No GPU is
 * needed: a load reads and checks, it launches nothing. Most mutations
 * break the checksum, so it is recomputed first (unless
 * FUZZ_AOT_KEEP_CHECKSUM is set) and the fuzzer reaches the checks
 * behind it. */
#include "runtime/cuda/aot.h"
#include "runtime/cuda/program.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/aot_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *b = malloc(size ? size : 1);
    if (!b) return 0;
    if (size) memcpy(b, data, size);
    if (!getenv("FUZZ_AOT_KEEP_CHECKSUM")) aot_fix_checksum(b, size);
    fc_context *ctx = fc_context_new();
    fc_program *p = NULL;
    if (fc_program_load_data(ctx, b, size, &p) == FC_OK) {
        char *plan = fc_program_plan_text(p);
        fc_free(plan);
        fc_program_free(p);
    }
    fc_context_free(ctx);
    free(b);
    return 0;
}
