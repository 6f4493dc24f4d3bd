/* test_api_misuse.c - the C API used wrongly: a value of one graph used in
 * another, and every public function of ir/, frontend/ and cache/ called
 * with NULL or out-of-range arguments. Nothing may crash, print or abort;
 * run under ASan and UBSan by the sanitizer build. */
#include "check.h"
#include "fusec.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static bool has(const char *s, const char *sub) { return s && sub && strstr(s, sub) != NULL; }

/* A value of graph a given to a builder of graph b: a sticky usage error
 * naming the op and b; b never points into a's memory, so freeing a and
 * then printing b is clean (under ASan this was a heap-use-after-free). */
static void test_foreign_values(void) {
    fc_context *ctx = fc_context_new();
    fc_dim four = 4;
    fc_graph *a = fc_graph_new(ctx, "a");
    fc_graph *b = fc_graph_new(ctx, "b");
    fc_value *xa = fc_param(a, "x", FC_F32, 1, &four);
    fc_value *yb = fc_param(b, "y", FC_F32, 1, &four);
    fc_value *s = fc_add(b, xa, yb);
    CHECK(fc_value_is_poison(s));
    CHECK_EQ_INT(fc_graph_status(b), FC_ERR_USAGE);
    CHECK(has(fc_last_error(ctx), "add: operand 0 belongs to another graph, not to graph 'b'"));
    CHECK(fc_verify(b) != FC_OK);
    CHECK_EQ_INT(fc_graph_status(a), FC_OK); /* a is untouched */
    fc_graph_free(a);
    char *text = fc_print(b); /* must not read a's freed memory */
    free(text);
    fc_graph_free(b);

    /* The second operand, a unary op, a list op, a weak scalar of another
     * graph, and another graph's poison value (which must not pass as "b is
     * already poisoned" and leave b without an error). */
    struct {
        const char *want;
        int which;
    } cases[] = {
        {"mul: operand 1 belongs to another graph", 0},
        {"exp: operand 0 belongs to another graph", 1},
        {"concat: operand 1 belongs to another graph", 2},
        {"add: operand 1 belongs to another graph", 3},
        {"add: operand 1 belongs to another graph", 4},
        {"return: result 0 belongs to another graph", 5},
        {"where: operand 2 belongs to another graph", 6},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        a = fc_graph_new(ctx, "a");
        b = fc_graph_new(ctx, "b");
        xa = fc_param(a, "x", FC_F32, 1, &four);
        yb = fc_param(b, "y", FC_F32, 1, &four);
        fc_value *r = NULL;
        fc_status st = FC_OK;
        switch (cases[k].which) {
        case 0: r = fc_mul(b, yb, xa); break;
        case 1: r = fc_exp(b, xa); break;
        case 2: r = fc_concat(b, 2, (fc_value *[]){yb, xa}, 0); break;
        case 3: r = fc_add(b, yb, fc_scalar(a, 1.0)); break;
        case 4: {
            fc_value *pa = fc_reshape(a, xa, 1, (fc_dim[]){5}); /* poisons a */
            CHECK(fc_value_is_poison(pa));
            r = fc_add(b, yb, pa);
            break;
        }
        case 5: st = fc_graph_return(b, 1, &xa); break;
        case 6: r = fc_where(b, fc_gt(b, yb, yb), yb, xa); break;
        }
        if (r) CHECK(fc_value_is_poison(r));
        if (cases[k].which == 5) CHECK_EQ_INT(st, FC_ERR_USAGE);
        CHECK_EQ_INT(fc_graph_status(b), FC_ERR_USAGE);
        if (!has(fc_last_error(ctx), cases[k].want)) {
            fprintf(stderr, "case %zu: got '%s'\n", k, fc_last_error(ctx));
            CHECK(0);
        }
        /* Sticky: a good build after it still fails. */
        CHECK(fc_value_is_poison(fc_neg(b, yb)));
        fc_graph_free(a);
        free(fc_print(b));
        fc_graph_free(b);
    }
    fc_context_free(ctx);
}

int main(void) {
    test_foreign_values();
    return check_report("test_api_misuse");
}
