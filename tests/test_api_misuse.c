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


/* The rest of the public API with NULL or out-of-range arguments: an error
 * status or the documented neutral value, never a crash, a print or an
 * abort (run under ASan and UBSan by scripts/test.sh). */
static void test_null_sweep_rest(void) {
    fc_context *ctx = fc_context_new();
    fc_graph *g = fc_graph_new(ctx, "g");
    /* Builders: a NULL graph gives NULL; a NULL operand poisons g. */
    fc_value *(*unary[])(fc_graph *, fc_value *) = {fc_abs, fc_log, fc_sqrt, fc_rsqrt, fc_recip, fc_sin, fc_cos,
                                                   fc_tanh, fc_sigmoid, fc_relu, fc_gelu, fc_gelu_tanh, fc_silu,
                                                   fc_hardswish, fc_erf};
    for (size_t i = 0; i < sizeof unary / sizeof unary[0]; i++) {
        CHECK(unary[i](NULL, NULL) == NULL);
        CHECK(fc_value_is_poison(unary[i](g, NULL)));
    }
    fc_value *(*binary[])(fc_graph *, fc_value *, fc_value *) = {fc_sub, fc_div, fc_max, fc_min, fc_pow, fc_eq,
                                                                fc_ne, fc_lt, fc_le, fc_ge};
    for (size_t i = 0; i < sizeof binary / sizeof binary[0]; i++) {
        CHECK(binary[i](NULL, NULL, NULL) == NULL);
        CHECK(fc_value_is_poison(binary[i](g, NULL, NULL)));
    }
    CHECK(fc_reduce_min(NULL, NULL, 0, NULL, false) == NULL);
    CHECK(fc_value_is_poison(fc_reduce_mean(g, NULL, 1, (const int[]){0}, false)));
    CHECK(fc_value_name(NULL) != NULL && !*fc_value_name(NULL)); /* "" */
    CHECK(!fc_graph_bind_used(NULL, "B"));
    CHECK(!fc_graph_bind_used(g, NULL));
    fc_param_init pi;
    CHECK_EQ_INT(fc_graph_param_inits(NULL, &pi, 1), FC_ERR_USAGE);
    CHECK_EQ_INT(fc_run_passes(NULL, NULL, NULL, NULL), FC_ERR_USAGE);
    fc_tensor_release(NULL);
    fc_tensor t = {0}, outs[1];
    CHECK(fc_run_reference(NULL, &t, 1, outs, 1) != FC_OK);
    CHECK(fc_run_reference_exact(NULL, &t, 1, outs, 1) != FC_OK);
    /* Devices: names of bad values, lookups of NULL. */
    CHECK(fc_device_name((fc_device)99) == NULL); /* documented: out of range */
    fc_device d;
    CHECK(!fc_device_from_name(NULL, &d));
    CHECK(!fc_device_from_name("cpu", NULL));
    CHECK_EQ_INT(fc_device_list(NULL, 4) >= 0, 1);
    CHECK(!fc_device_built((fc_device)99));
    CHECK(!fc_device_available((fc_device)-1));
    (void)fc_device_default();
    CHECK(fc_device_default_name(NULL) != NULL);
    /* Programs: NULL is an error or the neutral value. */
    CHECK(fc_run(NULL, NULL, 0, NULL, 0, NULL) != FC_OK);
    fc_program_free(NULL);
    (void)fc_program_device_of(NULL);
    CHECK(fc_program_name(NULL) != NULL);
    CHECK(fc_program_graph_text(NULL) == NULL);
    CHECK(fc_program_context(NULL) == NULL);
    CHECK(fc_program_run_host(NULL, NULL, 0, NULL, 0, NULL, 0) != FC_OK);
    CHECK(fc_run_shaped(NULL, NULL, 0, NULL, 0, NULL) != FC_OK);
    CHECK(fc_program_infer_outputs(NULL, NULL, 0, NULL, 0) != FC_OK);
    CHECK(fc_program_wait_specializations(NULL) != FC_OK);
    CHECK(fc_program_reserve(NULL, NULL, 0) != FC_OK);
    CHECK(fc_program_weights_changed(NULL) != FC_OK);
    CHECK(fc_program_plan_text(NULL) == NULL);
    CHECK(fc_program_cuda_source(NULL) == NULL);
    CHECK(fc_program_ptx(NULL) == NULL);
    CHECK(fc_program_source(NULL) == NULL);
    CHECK_EQ_INT(fc_program_num_inputs(NULL), 0);
    CHECK_EQ_INT(fc_program_num_outputs(NULL), 0);
    CHECK(fc_program_input(NULL, 0, &t, NULL) != FC_OK);
    CHECK(fc_program_output(NULL, 0, &t) != FC_OK);
    CHECK(fc_program_save_file(NULL, "x") != FC_OK);
    fc_program *prog = NULL;
    CHECK(fc_program_load_file(NULL, "x", &prog) != FC_OK);
    CHECK(fc_program_load_file(ctx, NULL, &prog) != FC_OK);
    CHECK(fc_program_load_data(ctx, NULL, 10, &prog) != FC_OK);
    CHECK(fc_program_load_data(ctx, "x", 1, NULL) != FC_OK);
    CHECK(!fc_program_is_file(NULL));
    fc_compile_times ct;
    fc_program_times(NULL, &ct);
    fc_program_times(NULL, NULL);
    char *txt = fc_compile_times_text(NULL);
    fc_free(txt);
    /* Comparing. */
    (void)fc_dtype_tolerance((fc_dtype)99);
    (void)fc_check_margin((fc_dtype)99);
    fc_output_diff od;
    CHECK_EQ_INT(fc_compare_outputs(ctx, NULL, NULL, 1, &od), FC_ERR_USAGE);
    CHECK_EQ_INT(fc_compare_outputs_exact(ctx, NULL, NULL, NULL, 1, &od), FC_ERR_USAGE);
    char buf[64];
    CHECK(fc_output_diff_format(NULL, 0, buf, sizeof buf) != NULL);
    CHECK(fc_output_diff_format(&od, 0, NULL, 0) == NULL);
    int sm;
    CHECK(!fc_arch_parse(NULL, &sm));
    /* The cache. */
    CHECK(fc_cache_global_open(NULL, NULL) != FC_OK);
    (void)fc_cache_global_take_warning();
    size_t nbad;
    fc_free(fc_cache_info_text(NULL, false, &nbad)); /* a NULL context: text, or NULL; no crash */
    fc_free(fc_cache_info_text(ctx, false, NULL));
    fc_free(fc_cache_clear_text(NULL));
    /* Import and weights. */
    fc_graph *og = NULL;
    fc_weights *w = NULL;
    CHECK(fc_graph_from_onnx(NULL, "x.onnx", NULL, 0, NULL, &og, &w) != FC_OK);
    CHECK(fc_graph_from_onnx(ctx, NULL, NULL, 0, NULL, &og, &w) != FC_OK);
    CHECK(fc_graph_from_onnx_data(ctx, "x", NULL, 10, NULL, NULL, 0, NULL, &og, &w) != FC_OK);
    CHECK(fc_tensor_from_onnx_file(ctx, NULL, &t, NULL) != FC_OK);
    CHECK(fc_weights_load_safetensors(ctx, NULL, &w) != FC_OK);
    CHECK(fc_weights_load_safetensors_data(ctx, "x", NULL, 10, &w) != FC_OK);
    fc_weights *nw = fc_weights_new();
    CHECK(fc_weights_add(NULL, "a", &t) != FC_OK);
    CHECK(fc_weights_add(nw, NULL, &t) != FC_OK);
    CHECK(fc_weights_add(nw, "a", NULL) != FC_OK);
    CHECK_EQ_INT(fc_weights_count(NULL), 0);
    CHECK(fc_weights_name(NULL, 0) == NULL);
    CHECK(fc_weights_name(nw, 5) == NULL);
    CHECK(fc_weights_tensor(nw, -1) == NULL);
    CHECK(fc_weights_find(NULL, "a") == NULL);
    CHECK(fc_weights_find(nw, NULL) == NULL);
    CHECK(fc_weights_bind(NULL, g, NULL, 0, NULL, false, 0) != FC_OK);
    CHECK(fc_weights_bind(nw, NULL, NULL, 0, NULL, false, 0) != FC_OK);
    fc_weights_free(nw);
    fc_weights_free(NULL);
    /* No pointer arguments: any value is fine. */
    fc_free(fc_env_help());
    CHECK(isnan(fc_bf16_to_f32(0x7fc1)) && isnan(fc_f16_to_f32(0x7e01)));
    CHECK(fc_bf16_to_f32(fc_f32_to_bf16(NAN)) != fc_bf16_to_f32(fc_f32_to_bf16(NAN))); /* NaN stays NaN */
    CHECK(isnan(fc_f16_to_f32(fc_f32_to_f16(NAN))));
    (void)fc_cache_configure(NULL); /* NULL: drop --cache-dir's copy */
    fc_cache_global_close();
    fc_graph_free(g);
    fc_context_free(ctx);
}

/* The decode, convolution, profile, check and program-file functions with
 * NULL or out-of-range arguments: NULL builders, poisoned graphs, error
 * statuses or the documented neutral values; no crash, no print. */
static void test_null_sweep_late(void) {
    fc_dim four = 4;
    fc_window win;
    memset(&win, 0, sizeof win);
    const int64_t pads[2] = {1, 1};
    /* A NULL graph: NULL from every builder. */
    CHECK(fc_param_inout(NULL, "c", FC_F32, 1, &four) == NULL);
    CHECK(fc_update_slice(NULL, NULL, NULL, NULL, 0) == NULL);
    CHECK(fc_cache_attention(NULL, NULL, NULL, NULL, NULL, true, 1) == NULL);
    CHECK(!fc_value_is_inout(NULL));
    CHECK(fc_conv(NULL, NULL, NULL, NULL, &win) == NULL);
    CHECK(fc_conv_transpose(NULL, NULL, NULL, NULL, &win) == NULL);
    CHECK(fc_max_pool(NULL, NULL, &win) == NULL);
    CHECK(fc_avg_pool(NULL, NULL, &win) == NULL);
    CHECK(fc_global_avg_pool(NULL, NULL) == NULL);
    CHECK(fc_batch_norm(NULL, NULL, NULL, NULL, NULL, NULL, 1e-5) == NULL);
    CHECK(fc_pad(NULL, NULL, pads, FC_PAD_CONSTANT, 0) == NULL);
    CHECK(fc_resize(NULL, NULL, 1, &four, FC_RESIZE_LINEAR, FC_COORD_HALF_PIXEL) == NULL);

    /* Bad arguments on a good graph: each poisons it (a fresh graph per
     * case, since errors are sticky). x is f32[4], y f32[1,2,4,4]. */
    fc_context *ctx = fc_context_new();
    fc_dim nchw[4] = {1, 2, 4, 4};
    for (int k = 0;; k++) {
        fc_graph *g = fc_graph_new(ctx, "g");
        fc_value *x = fc_param(g, "x", FC_F32, 1, &four);
        fc_value *y = fc_param(g, "y", FC_F32, 4, nchw);
        fc_value *r = NULL;
        bool done = false;
        fc_window bw = win;
        switch (k) {
        case 0: r = fc_param_inout(g, NULL, FC_F32, 1, &four); break;
        case 1: r = fc_param_inout(g, "c", (fc_dtype)99, 1, &four); break;
        case 2: r = fc_param_inout(g, "c", FC_F32, 1, NULL); break;
        case 3: r = fc_param_inout(g, "c", FC_F32, -1, &four); break;
        case 4: r = fc_update_slice(g, NULL, x, NULL, 0); break;
        case 5: r = fc_update_slice(g, x, x, NULL, 0); break; /* not inout, no offset */
        case 6: {
            fc_value *c = fc_param_inout(g, "c", FC_F32, 1, &four);
            CHECK(fc_value_is_inout(c) && !fc_value_is_inout(x));
            r = fc_update_slice(g, c, x, fc_param(g, "off", FC_I32, 0, NULL), 5); /* axis out of range */
            break;
        }
        case 7: r = fc_cache_attention(g, NULL, NULL, NULL, NULL, false, 1); break;
        case 8: r = fc_cache_attention(g, y, y, y, NULL, true, 1); break;
        case 9: r = fc_conv(g, NULL, NULL, NULL, &win); break;
        case 10: r = fc_conv(g, y, NULL, NULL, &win); break;
        case 11: r = fc_conv(g, y, y, NULL, NULL); break;
        case 12: r = fc_conv(g, x, x, NULL, &win); break; /* rank 1 */
        case 13: r = fc_conv_transpose(g, y, NULL, NULL, &win); break;
        case 14: r = fc_conv_transpose(g, y, y, NULL, NULL); break;
        case 15: r = fc_max_pool(g, y, NULL); break;
        case 16: r = fc_max_pool(g, x, &win); break;
        case 17: bw.kernel[0] = bw.kernel[1] = 2; bw.stride[0] = -1; r = fc_avg_pool(g, y, &bw); break;
        case 18: r = fc_avg_pool(g, NULL, &win); break;
        case 19: r = fc_global_avg_pool(g, NULL); break;
        case 20: r = fc_global_avg_pool(g, x); break; /* no spatial dims */
        case 21: r = fc_batch_norm(g, y, NULL, NULL, NULL, NULL, 1e-5); break;
        case 22: r = fc_batch_norm(g, NULL, x, x, x, x, 1e-5); break;
        case 23: r = fc_pad(g, x, NULL, FC_PAD_CONSTANT, 0); break;
        case 24: r = fc_pad(g, x, pads, (fc_pad_mode)9, 0); break;
        case 25: r = fc_pad(g, NULL, pads, FC_PAD_EDGE, 0); break;
        case 26: r = fc_resize(g, y, 4, NULL, FC_RESIZE_LINEAR, FC_COORD_HALF_PIXEL); break;
        case 27: r = fc_resize(g, y, 2, nchw, FC_RESIZE_LINEAR, FC_COORD_HALF_PIXEL); break; /* rank 2 of 4 */
        case 28: r = fc_resize(g, y, 4, nchw, (fc_resize_mode)99, FC_COORD_HALF_PIXEL); break;
        case 29: r = fc_resize(g, y, 4, nchw, FC_RESIZE_LINEAR, (fc_resize_coord)-1); break;
        case 30: r = fc_resize(g, NULL, 4, nchw, FC_RESIZE_NEAREST, FC_COORD_ASYMMETRIC); break;
        default: done = true;
        }
        if (done) {
            fc_graph_free(g);
            break;
        }
        if (r) CHECK(fc_value_is_poison(r));
        if (fc_graph_status(g) == FC_OK) {
            fprintf(stderr, "late bad-argument case %d was accepted\n", k);
            CHECK(0);
        }
        free(fc_print(g));
        fc_graph_free(g);
    }

    /* Profiles: NULL gives the neutral values. */
    fc_profile_options po;
    fc_profile_options_default(&po);
    CHECK(po.warmup == 3 && po.runs == 20);
    fc_profile_options_default(NULL);
    fc_profile *prof = (fc_profile *)&four; /* set to NULL on an error */
    CHECK_EQ_INT(fc_program_profile(NULL, NULL, 0, NULL, &prof), FC_ERR_USAGE);
    CHECK_EQ_INT(fc_program_profile(NULL, NULL, 0, &po, NULL), FC_ERR_USAGE);
    fc_profile_free(NULL);
    CHECK_EQ_INT(fc_profile_count(NULL), 0);
    CHECK(fc_profile_at(NULL, 0) == NULL);
    CHECK(fc_profile_at(NULL, -1) == NULL);
    fc_profile_summary sum;
    memset(&sum, 0xff, sizeof sum);
    fc_profile_get_summary(NULL, &sum);
    CHECK_EQ_INT(sum.launches, 0);
    CHECK(sum.device == NULL);
    fc_profile_get_summary(NULL, NULL);
    CHECK(fc_profile_text(NULL, FC_PROFILE_TABLE) == NULL);
    CHECK(fc_profile_text(NULL, (fc_profile_format)99) == NULL);
    CHECK_STR(fc_profile_format_name(FC_PROFILE_CSV), "csv");
    CHECK_STR(fc_profile_format_name((fc_profile_format)99), "?");
    CHECK_STR(fc_profile_format_name((fc_profile_format)-1), "?");
    CHECK_EQ_INT(fc_profile_format_from_name(NULL), -1);
    CHECK_EQ_INT(fc_profile_format_from_name("nosuch"), -1);
    CHECK_EQ_INT(fc_profile_format_from_name("trace"), FC_PROFILE_TRACE);
    int launch = 7;
    double t0 = 1, t1 = 2;
    CHECK(!fc_profile_timeline(NULL, 0, &launch, &t0, &t1));
    CHECK(!fc_profile_timeline(NULL, -1, NULL, NULL, NULL));
    CHECK(launch == 7 && t0 == 1 && t1 == 2);

    /* Program files and plans of NULL. */
    CHECK(fc_program_plan_dot(NULL) == NULL);
    CHECK(fc_program_weights(NULL) == NULL);
    CHECK(fc_program_save_file_weights(NULL, "x", NULL) != FC_OK);
    CHECK(fc_program_check_save_path(ctx, NULL) != FC_OK);
    CHECK(fc_program_check_save_path(ctx, "") != FC_OK);
    CHECK(fc_program_check_save_path(NULL, NULL) != FC_OK);
    CHECK(fc_program_check_save_path(ctx, "/nonexistent-dir/x/y.fcp") != FC_OK);

    /* fc_check_outputs: a NULL graph, NULL outputs, a negative count. */
    fc_output_diff od[1];
    fc_tensor got[1];
    memset(got, 0, sizeof got);
    CHECK_EQ_INT(fc_check_outputs(NULL, NULL, 0, got, 1, od), FC_ERR_USAGE);
    fc_graph *cg = NULL;
    const char *small = "graph s(%x: f32[4]) {\n  %y = add(%x, %x)\n  return %y\n}\n";
    CHECK_EQ_INT(fc_parse(ctx, "s", small, strlen(small), NULL, NULL, 0, &cg), FC_OK);
    CHECK_EQ_INT(fc_check_outputs(cg, NULL, 0, NULL, 1, od), FC_ERR_USAGE);
    CHECK_EQ_INT(fc_check_outputs(cg, NULL, 0, got, 1, NULL), FC_ERR_USAGE);
    CHECK_EQ_INT(fc_check_outputs(cg, NULL, 0, got, -1, od), FC_ERR_USAGE);
    CHECK(fc_check_outputs(cg, NULL, 1, got, 1, od) != FC_OK); /* NULL inputs */
    CHECK(fc_check_outputs(cg, got, 1, got, 1, od) != FC_OK);  /* an empty input tensor */

    /* A reference program: no plan, no profile, no file. */
    fc_compile_options o;
    fc_compile_options_default(&o);
    o.device = FC_DEVICE_REF;
    fc_program *prog = NULL;
    CHECK_EQ_INT(fc_compile(cg, &o, &prog), FC_OK);
    if (prog) {
        CHECK(fc_program_plan_dot(prog) == NULL);
        prof = (fc_profile *)&four;
        CHECK(fc_program_profile(prog, NULL, 0, NULL, &prof) != FC_OK);
        CHECK(prof == NULL);
        CHECK(fc_program_profile(prog, NULL, -1, &po, &prof) != FC_OK);
        CHECK(fc_program_weights(prog) == NULL);
        CHECK(fc_program_save_file_weights(prog, NULL, NULL) != FC_OK);
        CHECK(fc_program_save_file_weights(prog, "", NULL) != FC_OK);
        CHECK(fc_program_save_file_weights(prog, "/nonexistent-dir/x.fcp", NULL) != FC_OK);
        fc_program_free(prog);
    }
    fc_graph_free(cg);
    fc_context_free(ctx);
}

/* Every function that fusec.h declares is called above: a new one joins
 * the sweep or this fails. */
static void test_sweep_covers_the_header(void) {
    char path[4096];
    snprintf(path, sizeof path, "%s/include/fusec.h", getenv("FUSEC_SRC") ? getenv("FUSEC_SRC") : ".");
    FILE *f = fopen(path, "r");
    snprintf(path, sizeof path, "%s/tests/test_api_misuse.c", getenv("FUSEC_SRC") ? getenv("FUSEC_SRC") : ".");
    FILE *me = fopen(path, "r");
    CHECK(f != NULL && me != NULL);
    if (!f || !me) {
        if (f) fclose(f);
        if (me) fclose(me);
        return;
    }
    static char self[200000];
    size_t n = fread(self, 1, sizeof self - 1, me);
    self[n] = 0;
    fclose(me);
    char line[1024];
    int functions = 0;
    while (fgets(line, sizeof line, f)) {
        /* A declaration starts at column 0 with a type and names fc_...( */
        if (line[0] < 'a' || line[0] > 'z' || !strstr(line, "(") || strncmp(line, "typedef", 7) == 0) continue;
        char *paren = strchr(line, '(');
        char *p = paren;
        while (p > line && (p[-1] == '_' || (p[-1] >= 'a' && p[-1] <= 'z') || (p[-1] >= '0' && p[-1] <= '9'))) p--;
        if (strncmp(p, "fc_", 3) != 0) continue;
        size_t len = (size_t)(paren - p);
        functions++;
        /* Called, or named in a table of functions that are: the name, then
         * no more of an identifier. */
        bool named = false;
        for (const char *q = self; !named && (q = strstr(q, "fc_")) != NULL; q++) {
            char after = q[len];
            named = strncmp(q, p, len) == 0 && !(after == '_' || (after >= 'a' && after <= 'z') || (after >= '0' && after <= '9'));
        }
        if (!named) {
            fprintf(stderr, "test_api_misuse: %.*s is not called by the sweep\n", (int)(paren - p), p);
            CHECK(false);
        }
    }
    fclose(f);
    CHECK(functions > 150);
}

/* Tensor parallelism (docs/PARALLEL.md): NULL and bad arguments. */
static void test_tensor_parallel_misuse(void) {
    fc_context *ctx = fc_context_new();
    CHECK(fc_all_reduce(NULL, NULL, 2) == NULL);
    CHECK(fc_all_gather(NULL, NULL, 0, 2) == NULL);
    CHECK(fc_reduce_scatter(NULL, NULL, 0, 2) == NULL);
    fc_graph *out = (fc_graph *)1;
    CHECK(fc_graph_shard(NULL, 2, &out) == FC_ERR_USAGE && out == NULL);
    CHECK(fc_graph_shard(NULL, 2, NULL) == FC_ERR_USAGE);
    CHECK(fc_graph_param_shard_axis(NULL, 0) == -1);
    fc_tensor t = {0};
    CHECK(fc_tensor_shard(NULL, &t, 0, 2, 0, &t) == FC_ERR_USAGE);
    CHECK(fc_tensor_shard(ctx, NULL, 0, 2, 0, &t) == FC_ERR_USAGE);
    fc_tp_group *grp = (fc_tp_group *)1;
    CHECK(fc_tp_group_create(NULL, FC_DEVICE_REF, 2, &grp) == FC_ERR_USAGE && grp == NULL);
    CHECK(fc_tp_group_create(ctx, FC_DEVICE_REF, 2, NULL) == FC_ERR_USAGE);
    CHECK(fc_tp_group_create(ctx, (fc_device)99, 2, &grp) == FC_ERR_USAGE && grp == NULL);
    CHECK(fc_tp_group_degree(NULL) == 0);
    fc_weights *ws = (fc_weights *)1;
    CHECK(fc_weights_shard(NULL, NULL, 2, 0, &ws) == FC_ERR_USAGE && ws == NULL);
    CHECK(fc_weights_shard(NULL, NULL, 2, 0, NULL) == FC_ERR_USAGE);
    fc_tp_group_free(NULL);
    fc_graph *g = fc_graph_new(ctx, "tp");
    fc_dim dims[1] = {4};
    fc_value *x = fc_param(g, "x", FC_F32, 1, dims);
    CHECK(fc_all_reduce(g, x, 0) != NULL && fc_graph_status(g) == FC_ERR_INPUT); /* ranks 0 */
    fc_graph_free(g);
    g = fc_graph_new(ctx, "tp2");
    fc_graph *other = fc_graph_new(ctx, "other");
    fc_value *y = fc_param(other, "y", FC_F32, 1, dims);
    CHECK(fc_all_gather(g, y, 0, 2) != NULL && fc_graph_status(g) == FC_ERR_USAGE); /* a foreign value */
    fc_graph_free(other);
    fc_graph_free(g);
    fc_context_free(ctx);
}

int main(void) {
    test_tensor_parallel_misuse();
    test_foreign_values();
    test_null_sweep();
    test_null_sweep_rest();
    test_null_sweep_late();
    test_sweep_covers_the_header();
    return check_report("test_api_misuse");
}
