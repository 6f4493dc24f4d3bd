/* test_api_misuse.c - the C API used wrongly: a value of one graph used in
 * another, and every public function of ir/, frontend/ and cache/ called
 * with NULL or out-of-range arguments. Nothing may crash, print or abort;
 * run under ASan and UBSan by the sanitizer build. */
#include "check.h"
#include "fusec.h"
#include "ir/options.h"

#include <math.h>

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


/* Every public function of ir/ and frontend/ with each NULL or bad
 * argument: an error status or the documented neutral value, and no crash
 * (the sanitizer build runs this under ASan and UBSan). */
static void test_null_sweep(void) {
    fc_dim four = 4;
    /* The context. */
    CHECK_STR(fc_last_error(NULL), "no context");
    fc_clear_error(NULL);
    fc_context_fail_alloc_after(NULL, 3);
    fc_context_free(NULL);
    fc_free(NULL);
    CHECK_STR(fc_dtype_name((fc_dtype)99), "?");
    CHECK_STR(fc_dtype_name((fc_dtype)-1), "?");
    CHECK_EQ_INT(fc_dtype_size((fc_dtype)99), 0);
    CHECK(isnan(fc_round_to_dtype(1.5, (fc_dtype)99))); /* was: an internal error printed, then abort */
    CHECK(isnan(fc_round_to_dtype(1.5, (fc_dtype)-7)));
    CHECK(fc_round_to_dtype(1.5, FC_I32) == 1.0);

    /* A NULL graph. */
    CHECK(fc_graph_new(NULL, "g") == NULL);
    fc_graph_free(NULL);
    CHECK_EQ_INT(fc_graph_status(NULL), FC_ERR_USAGE);
    CHECK(fc_graph_name(NULL) == NULL);
    CHECK(fc_graph_context(NULL) == NULL);
    CHECK_EQ_INT(fc_graph_num_params(NULL), 0);
    CHECK(fc_graph_param(NULL, 0) == NULL);
    CHECK_EQ_INT(fc_graph_num_outputs(NULL), 0);
    CHECK(fc_graph_output(NULL, 0) == NULL);
    CHECK(fc_sym_name(NULL, fc_value_dim(NULL, 0)) == NULL);
    CHECK(fc_sym_name(NULL, (fc_dim)-1000000) == NULL);
    CHECK(fc_sym(NULL, "B") == FC_DIM_INFER);
    CHECK_EQ_INT(fc_graph_bind(NULL, "B", 4), FC_ERR_USAGE);
    CHECK(fc_param(NULL, "x", FC_F32, 1, &four) == NULL);
    CHECK(fc_scalar(NULL, 1) == NULL);
    CHECK(fc_scalar_int(NULL, 1) == NULL);
    CHECK(fc_neg(NULL, NULL) == NULL);
    CHECK(fc_add(NULL, NULL, NULL) == NULL);
    CHECK(fc_where(NULL, NULL, NULL, NULL) == NULL);
    CHECK(fc_cast(NULL, NULL, FC_F32) == NULL);
    CHECK(fc_reduce_sum(NULL, NULL, 0, NULL, false) == NULL);
    CHECK(fc_softmax(NULL, NULL, 0) == NULL);
    CHECK(fc_layernorm(NULL, NULL, NULL, NULL, 0, 1e-5) == NULL);
    CHECK(fc_rmsnorm(NULL, NULL, NULL, 1e-5) == NULL);
    CHECK(fc_matmul(NULL, NULL, NULL) == NULL);
    CHECK(fc_attention(NULL, NULL, NULL, NULL, false, 1) == NULL);
    CHECK(fc_reshape(NULL, NULL, 1, &four) == NULL);
    CHECK(fc_permute(NULL, NULL, 0, NULL) == NULL);
    CHECK(fc_expand(NULL, NULL, 1, &four) == NULL);
    CHECK(fc_slice(NULL, NULL, 0, 0, 1, 1) == NULL);
    CHECK(fc_concat(NULL, 0, NULL, 0) == NULL);
    CHECK_EQ_INT(fc_split(NULL, NULL, 0, 0, NULL, NULL), FC_ERR_USAGE);
    CHECK(fc_iota(NULL, 1, &four, 0, FC_I32) == NULL);
    CHECK(fc_full(NULL, 1, &four, 1, FC_F32) == NULL);
    CHECK(fc_gather(NULL, NULL, NULL, 0) == NULL);
    CHECK_EQ_INT(fc_graph_return(NULL, 0, NULL), FC_ERR_USAGE);
    CHECK(fc_print(NULL) == NULL);
    CHECK_EQ_INT(fc_verify(NULL), FC_ERR_USAGE);
    CHECK(fc_graph_clone(NULL) == NULL);
    CHECK(fc_graph_specialize(NULL, NULL, 0) == NULL);
    /* A NULL value. */
    CHECK_EQ_INT(fc_value_rank(NULL), 0);
    CHECK_EQ_INT(fc_value_dtype(NULL), FC_DTYPE_COUNT);
    CHECK(fc_value_dim(NULL, 0) == FC_DIM_INFER);
    CHECK(fc_value_is_poison(NULL));

    /* Bad arguments on a good graph: each a usage or input error. Each
     * case gets a fresh graph, since errors are sticky. */
    fc_context *ctx = fc_context_new();
    for (int k = 0;; k++) {
        fc_graph *g = fc_graph_new(ctx, "g");
        fc_value *x = fc_param(g, "x", FC_F32, 1, &four);
        fc_value *r = NULL, *outs[2] = {NULL, NULL};
        fc_status st = FC_OK;
        bool done = false;
        switch (k) {
        case 0: st = fc_graph_bind(g, NULL, 4); break;
        case 1: st = fc_graph_bind(g, "B", -4); break;
        case 2: CHECK(fc_sym(g, NULL) == FC_DIM_INFER); break;
        case 3: r = fc_param(g, NULL, FC_F32, 0, NULL); break;
        case 4: r = fc_param(g, "y", (fc_dtype)99, 0, NULL); break;
        case 5: r = fc_param(g, "y", FC_F32, 1, NULL); break;
        case 6: r = fc_param(g, "y", FC_F32, -1, &four); break;
        case 7: r = fc_param(g, "y", FC_F32, FC_MAX_RANK + 1, &four); break;
        case 8: r = fc_neg(g, NULL); break;
        case 9: r = fc_add(g, x, NULL); break;
        case 10: r = fc_cast(g, x, (fc_dtype)99); break;
        case 11: r = fc_reduce_sum(g, x, -1, NULL, false); break;
        case 12: r = fc_reduce_sum(g, x, 1, NULL, false); break;
        case 13: r = fc_reduce_max(g, x, 1, (int[]){7}, false); break;
        case 14: r = fc_softmax(g, x, 5); break;
        case 15: r = fc_reshape(g, x, 1, NULL); break;
        case 16: r = fc_reshape(g, x, FC_MAX_RANK + 1, &four); break;
        case 17: r = fc_permute(g, x, 1, NULL); break;
        case 18: r = fc_slice(g, x, 0, 0, 2, 0); break;
        case 19: r = fc_concat(g, -1, NULL, 0); break;
        case 20: r = fc_concat(g, 2, NULL, 0); break;
        case 21: st = fc_split(g, x, 0, 2, NULL, outs); break;
        case 22: st = fc_split(g, x, 0, 2, (fc_dim[]){2, 2}, NULL); break;
        case 23: r = fc_iota(g, 1, &four, 0, (fc_dtype)99); break;
        case 24: r = fc_full(g, 1, NULL, 1, FC_F32); break;
        case 25: r = fc_gather(g, x, NULL, 0); break;
        case 26: st = fc_graph_return(g, 1, NULL); break;
        case 27: st = fc_graph_return(g, 0, &x); break;
        case 28: st = fc_graph_return(g, 1, (fc_value *[]){NULL}); break;
        case 29: CHECK(fc_graph_specialize(g, NULL, 2) == NULL); st = FC_ERR_USAGE; break;
        case 30: CHECK(fc_graph_specialize(g, NULL, -1) == NULL); st = FC_ERR_USAGE; break;
        case 31: CHECK(fc_graph_specialize(g, (fc_binding[]){{NULL, 4}}, 1) == NULL); st = FC_ERR_USAGE; break;
        case 32: CHECK(fc_print(g) == NULL); st = FC_ERR_USAGE; break; /* no return yet */
        case 33: CHECK(fc_verify(g) != FC_OK); st = FC_ERR_INPUT; break;
        default: done = true;
        }
        if (done) {
            fc_graph_free(g);
            break;
        }
        if (r) CHECK(fc_value_is_poison(r));
        fc_status gs = fc_graph_status(g);
        if (st == FC_OK && gs == FC_OK) {
            fprintf(stderr, "bad-argument case %d was accepted\n", k);
            CHECK(0);
        }
        CHECK(fc_graph_param(g, -1) == NULL && fc_graph_param(g, 1) == NULL && fc_graph_output(g, 0) == NULL);
        free(fc_print(g));
        fc_graph_free(g);
    }

    /* The parser. */
    fc_graph *out = (fc_graph *)&four; /* must be set to NULL */
    const char *text = "graph g(%x: f32[4]) {\n  %y = neg(%x)\n  return %y\n}\n";
    CHECK_EQ_INT(fc_parse(NULL, "t", text, strlen(text), NULL, NULL, 0, &out), FC_ERR_USAGE);
    CHECK(out == NULL);
    CHECK_EQ_INT(fc_parse(ctx, "t", text, strlen(text), NULL, NULL, 0, NULL), FC_ERR_USAGE);
    CHECK_EQ_INT(fc_parse(ctx, "t", NULL, 5, NULL, NULL, 0, &out), FC_ERR_USAGE);
    CHECK_EQ_INT(fc_parse(ctx, "t", text, strlen(text), NULL, NULL, 2, &out), FC_ERR_USAGE);
    CHECK_EQ_INT(fc_parse(ctx, "t", text, strlen(text), NULL, NULL, -1, &out), FC_ERR_USAGE);
    CHECK(fc_parse(ctx, NULL, NULL, 0, NULL, NULL, 0, &out) != FC_OK && out == NULL); /* empty text */
    CHECK(fc_parse(ctx, "t", text, strlen(text), NULL, (fc_binding[]){{NULL, 4}}, 1, &out) != FC_OK && !out);
    CHECK(fc_parse(ctx, "t", text, strlen(text), "nosuch", NULL, 0, &out) != FC_OK && !out);
    CHECK_EQ_INT(fc_parse(ctx, NULL, text, strlen(text), NULL, NULL, 0, &out), FC_OK);
    fc_graph_free(out);
    CHECK_EQ_INT(fc_parse_file(NULL, "x.ir", NULL, NULL, 0, &out), FC_ERR_USAGE);
    CHECK_EQ_INT(fc_parse_file(ctx, NULL, NULL, NULL, 0, &out), FC_ERR_USAGE);
    CHECK_EQ_INT(fc_parse_file(ctx, "x.ir", NULL, NULL, 0, NULL), FC_ERR_USAGE);
    CHECK(fc_parse_file(ctx, "/nonexistent/x.ir", NULL, NULL, 0, &out) != FC_OK && !out);
    char **names = (char **)&four;
    int n = 7;
    CHECK_EQ_INT(fc_parse_graph_names(NULL, "t", text, strlen(text), &names, &n), FC_ERR_USAGE);
    CHECK(names == NULL && n == 0);
    CHECK_EQ_INT(fc_parse_graph_names(ctx, "t", text, strlen(text), NULL, &n), FC_ERR_USAGE);
    CHECK_EQ_INT(fc_parse_graph_names(ctx, "t", text, strlen(text), &names, NULL), FC_ERR_USAGE);
    CHECK_EQ_INT(fc_parse_graph_names(ctx, "t", NULL, 3, &names, &n), FC_ERR_USAGE);

    /* Compile options from the caller (checked before fc_compile reads them). */
    fc_compile_options o;
    fc_compile_options_default(&o);
    CHECK_EQ_INT(fc_compile_options_check(ctx, &o), FC_OK);
    CHECK_EQ_INT(fc_compile_options_check(ctx, NULL), FC_OK);
    o.max_specializations = -3;
    CHECK_EQ_INT(fc_compile_options_check(ctx, &o), FC_ERR_USAGE);
    CHECK(has(fc_last_error(ctx), "max_specializations -3"));
    fc_compile_options_default(&o);
    o.specialize = (fc_specialize_mode)9;
    CHECK_EQ_INT(fc_compile_options_check(ctx, &o), FC_ERR_USAGE);
    CHECK(has(fc_last_error(ctx), "specialize mode 9"));
    fc_compile_options_default(&o);
    o.specialize = (fc_specialize_mode)-1;
    CHECK_EQ_INT(fc_compile_options_check(ctx, &o), FC_ERR_USAGE);
    fc_compile_options_default(&o);
    o.precision = FC_PRECISION_COUNT;
    CHECK_EQ_INT(fc_compile_options_check(ctx, &o), FC_ERR_USAGE);
    CHECK(has(fc_last_error(ctx), "bad precision 5"));
    o.precision = (fc_precision)-1;
    CHECK_EQ_INT(fc_compile_options_check(ctx, &o), FC_ERR_USAGE);
    o.precision = FC_PRECISION_BF16;
    o.numerics = (fc_numerics)2;
    CHECK_EQ_INT(fc_compile_options_check(ctx, &o), FC_ERR_USAGE);
    CHECK(has(fc_last_error(ctx), "bad numerics 2"));
    o.numerics = FC_NUMERICS_EAGER;
    CHECK_EQ_INT(fc_compile_options_check(ctx, &o), FC_OK);
    fc_compile_options_default(&o);
    o.device = (fc_device)5;
    CHECK_EQ_INT(fc_compile_options_check(ctx, &o), FC_ERR_USAGE);
    fc_compile_options_default(&o);
    o.sm = -90;
    CHECK_EQ_INT(fc_compile_options_check(ctx, &o), FC_ERR_USAGE);
    o.sm = 5000;
    CHECK_EQ_INT(fc_compile_options_check(ctx, &o), FC_ERR_USAGE);
    fc_compile_options_default(&o);
    o.device = FC_DEVICE_REF;
    CHECK_EQ_INT(fc_compile_options_check(ctx, &o), FC_OK);
    /* fc_compile makes the same check before any backend reads the options. */
    fc_graph *cg = NULL;
    const char *small = "graph s(%x: f32[4]) {\n  %y = add(%x, %x)\n  return %y\n}\n";
    CHECK_EQ_INT(fc_parse(ctx, "s", small, strlen(small), NULL, NULL, 0, &cg), FC_OK);
    fc_program *prog = (fc_program *)&four;
    o.device = FC_DEVICE_REF;
    o.max_specializations = -3;
    CHECK_EQ_INT(fc_compile(cg, &o, &prog), FC_ERR_USAGE);
    CHECK(prog == NULL && has(fc_last_error(ctx), "max_specializations -3"));
    o.max_specializations = 0;
    o.specialize = (fc_specialize_mode)9;
    CHECK_EQ_INT(fc_compile(cg, &o, &prog), FC_ERR_USAGE);
    fc_graph_free(cg);
    /* Statistics into NULL, or of NULL, are no crash. */
    fc_program_stats(NULL, NULL);
    fc_run_stats rs;
    fc_program_stats(NULL, &rs);
    CHECK_EQ_INT(rs.runs, 0);
    CHECK_EQ_INT(fc_tensor_numel(NULL), -1);
    fc_context_free(ctx);
}

int main(void) {
    test_foreign_values();
    test_null_sweep();
    return check_report("test_api_misuse");
}
