/* fuzz_ir.c - libFuzzer harness for the .ir parser: parse, and for a graph
 * that parses: verify, print, parse the print again (it must, to the same
 * text), clone. docs/SECURITY.md says how to run it. */
#include "fusec.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fc_context *ctx = fc_context_new();
    fc_graph *g = NULL;
    if (fc_parse(ctx, "fuzz.ir", (const char *)data, size, NULL, NULL, 0, &g) == FC_OK && fc_verify(g) == FC_OK) {
        char *text = fc_print(g);
        if (text) {
            fc_graph *h = NULL;
            if (fc_parse(ctx, "print.ir", text, strlen(text), NULL, NULL, 0, &h) != FC_OK) abort();
            char *again = fc_print(h);
            if (!again || strcmp(text, again) != 0) abort(); /* print is a fixed point */
            fc_free(again);
            fc_graph_free(h);
            fc_free(text);
        }
        fc_graph_free(fc_graph_clone(g));
    }
    fc_graph_free(g);
    fc_context_free(ctx);
    return 0;
}
