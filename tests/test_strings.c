/* test_strings.c - string tensors: the string dtype in .ir text (a round
 * trip through the printer, escapes included), the verifier's refusals of
 * strings outside string_normalizer, string_normalizer's results on the
 * reference interpreter and the CPU backend (stop words with and without
 * case, the case changes, the all-dropped rule, a count the shape does not
 * hold), and the CUDA backend's refusal, which needs no GPU. */
#include "check.h"
#include "fusec.h"
#include "ir.h"

#include <stdlib.h>
#include <string.h>

static fc_graph *parse(fc_context *ctx, const char *text) {
    fc_graph *g = NULL;
    if (fc_parse(ctx, "t.ir", text, strlen(text), NULL, NULL, 0, &g) != FC_OK) return NULL;
    return g;
}

/* The parse error of text, or "" when it parses. */
static const char *parse_error(fc_context *ctx, const char *text) {
    fc_graph *g = parse(ctx, text);
    if (g) {
        fc_graph_free(g);
        return "";
    }
    return fc_last_error(ctx);
}

static void test_round_trip(void) {
    fc_context *ctx = fc_context_new();
    const char *text =
        "graph s(%x: string[1, 6]) {\n"
        "  %y = string_normalizer(%x, shape=[1, 4], mode=2, case_sensitive=true, stopwords=[\"monday\", "
        "\"a\\\"b\\\\c\\x01\\t\", \"caf\xc3\xa9\"]) : string[1, 4]\n"
        "  return %y\n"
        "}\n";
    fc_graph *g = parse(ctx, text);
    CHECK(g != NULL);
    if (!g) {
        fprintf(stderr, "%s\n", fc_last_error(ctx));
        fc_context_free(ctx);
        return;
    }
    CHECK_EQ_INT(fc_verify(g), FC_OK);
    const fc_node *n = g->nodes[0];
    CHECK_EQ_INT(n->a.nstrs, 3);
    CHECK_STR(n->a.strs[1], "a\"b\\c\x01\t");
    CHECK_STR(n->a.strs[2], "caf\xc3\xa9");
    char *out = fc_print(g);
    /* The printer writes control bytes as \xHH: \t comes back as \x09. */
    CHECK(out && strstr(out, "stopwords=[\"monday\", \"a\\\"b\\\\c\\x01\\x09\", \"caf\xc3\xa9\"]"));
    fc_graph *h = out ? parse(ctx, out) : NULL;
    char *again = h ? fc_print(h) : NULL;
    CHECK_STR(again, out);
    fc_free(out);
    fc_free(again);
    fc_graph_free(h);
    fc_graph_free(g);
    /* An empty list, a NUL escape, a non-string element. */
    CHECK_STR(parse_error(ctx, "graph s(%x: string[2]) {\n  %y = string_normalizer(%x, shape=[2], stopwords=[])\n"
                               "  return %y\n}\n"),
              "");
    CHECK(strstr(parse_error(ctx, "graph s(%x: string[2]) {\n  %y = string_normalizer(%x, shape=[2], "
                                  "stopwords=[\"a\\x00\"])\n  return %y\n}\n"),
                 "cannot hold a NUL byte"));
    CHECK(strstr(parse_error(ctx, "graph s(%x: string[2]) {\n  %y = string_normalizer(%x, shape=[2], stopwords=[1])\n"
                                  "  return %y\n}\n"),
                 "expects a list of strings"));
    fc_context_free(ctx);
}

static void test_refusals(void) {
    fc_context *ctx = fc_context_new();
    static const struct { const char *body, *msg; } cases[] = {
        {"  %y = cast(%x, to=f32)\n", "cast: operand 0 is a string tensor; only string_normalizer takes strings"},
        {"  %y = reshape(%x, shape=[2, 2])\n", "reshape: operand 0 is a string tensor"},
        {"  %y = eq(%x, %x)\n", "eq: operand 0 is a string tensor"},
        {"  %f = full(shape=[4], value=1.0)\n  %y = cast(%f, to=string)\n", "cast: cannot make a string tensor"},
        {"  %y = full(shape=[4], value=1.0, dtype=string)\n", "full: cannot make a string tensor"},
        {"  %f = full(shape=[4], value=1.0)\n  %y = string_normalizer(%f, shape=[4], stopwords=[])\n",
         "string_normalizer: x must be a string tensor, got f32"},
        {"  %y = string_normalizer(%x, shape=[5], stopwords=[])\n", "cannot hold what remains of x"},
        {"  %y = string_normalizer(%x, shape=[n], stopwords=[])\n", "shape must be static"},
        {"  %y = string_normalizer(%x, shape=[1, 4], stopwords=[])\n", "shape has 2 dims where x has rank 1"},
        {"  %y = string_normalizer(%x, shape=[4], mode=3, stopwords=[])\n", "mode 3"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char text[512];
        snprintf(text, sizeof text, "graph s(%%x: string[4]) {\n%s  return %%y\n}\n", cases[i].body);
        const char *e = parse_error(ctx, text);
        if (!strstr(e, cases[i].msg)) fprintf(stderr, "case %zu: %s\n", i, e);
        CHECK(strstr(e, cases[i].msg) != NULL);
    }
    CHECK(strstr(parse_error(ctx, "graph s(%x: string[2, 3]) {\n  %y = string_normalizer(%x, shape=[2, 3], "
                                  "stopwords=[])\n  return %y\n}\n"),
                 "x must be [C] or [1, C]"));
    fc_context_free(ctx);
}

static const char *const week[] = {"Monday", "tuesday", "WEDNESDAY", "caf\xc3\xa9", "monday", "tuesday"};

/* Run text's graph on `device` (REF: the interpreter) with the 6 strings
 * strs (week when NULL) as a [1, 6] input; *out gets the result. */
static fc_status run_with(fc_context *ctx, const char *text, fc_device device, const char *const *strs, fc_tensor *out) {
    fc_graph *g = parse(ctx, text);
    if (!g) return FC_ERR_INPUT;
    fc_tensor in = {.dtype = FC_STRING, .rank = 2, .shape = {1, 6}, .data = (void *)(strs ? strs : week)};
    fc_status st;
    if (device == FC_DEVICE_REF) {
        st = fc_run_reference(g, &in, 1, out, 1);
    } else {
        fc_compile_options o;
        fc_compile_options_default(&o);
        o.device = device;
        fc_program *p = NULL;
        st = fc_compile(g, &o, &p);
        /* The plan names the library call (lower/launch.c describes it). */
        char *plan = st == FC_OK ? fc_program_plan_text(p) : NULL;
        CHECK(st != FC_OK || (plan && strstr(plan, "string_normalizer")));
        fc_free(plan);
        /* The program is freed before the result is read: a string result
         * of fc_program_run_host is the caller's. */
        if (st == FC_OK) st = fc_program_run_host(p, &in, 1, out, 1, NULL, 0);
        fc_program_free(p);
    }
    fc_graph_free(g);
    return st;
}

static fc_status run(fc_context *ctx, const char *text, fc_device device, fc_tensor *out) {
    return run_with(ctx, text, device, NULL, out);
}

static void check_strings(const fc_tensor *t, int n, const char *const *want) {
    CHECK_EQ_INT(t->dtype, FC_STRING);
    CHECK_EQ_INT(t->shape[t->rank - 1], n);
    for (int i = 0; t->data && i < n; i++) CHECK_STR(((const char *const *)t->data)[i], want[i]);
}

static void test_results(fc_device device) {
    fc_context *ctx = fc_context_new();
    fc_tensor out = {0};
    /* Case-insensitive stop words, then upper case: é keeps its case. */
    const char *upper = "graph s(%x: string[1, 6]) {\n"
                        "  %y = string_normalizer(%x, shape=[1, 2], mode=2, stopwords=[\"monday\", \"Tuesday\"])\n"
                        "  return %y\n}\n";
    CHECK_EQ_INT(run(ctx, upper, device, &out), FC_OK);
    check_strings(&out, 2, (const char *const[]){"WEDNESDAY", "CAF\xc3\xa9"});
    fc_tensor_release(&out);
    /* Case-sensitive: "Monday" stays, "monday" goes; lower case. */
    const char *lower = "graph s(%x: string[1, 6]) {\n"
                        "  %y = string_normalizer(%x, shape=[1, 5], mode=1, case_sensitive=true, stopwords=[\"monday\"])\n"
                        "  return %y\n}\n";
    CHECK_EQ_INT(run(ctx, lower, device, &out), FC_OK);
    check_strings(&out, 5, (const char *const[]){"monday", "tuesday", "wednesday", "caf\xc3\xa9", "tuesday"});
    fc_tensor_release(&out);
    /* Every element dropped: one empty string, [1, 1]. */
    const char *all = "graph s(%x: string[1, 6]) {\n"
                      "  %y = string_normalizer(%x, shape=[1, 1], stopwords=[\"monday\", \"TUESDAY\", \"wednesday\", "
                      "\"CAF\xc3\xa9\"])\n  return %y\n}\n";
    CHECK_EQ_INT(run(ctx, all, device, &out), FC_OK);
    check_strings(&out, 1, (const char *const[]){""});
    CHECK_EQ_INT(out.rank, 2);
    fc_tensor_release(&out);
    /* No stop words, no change: the input as it is. */
    const char *none = "graph s(%x: string[1, 6]) {\n"
                       "  %y = string_normalizer(%x, shape=[1, 6], stopwords=[])\n  return %y\n}\n";
    CHECK_EQ_INT(run(ctx, none, device, &out), FC_OK);
    check_strings(&out, 6, week);
    fc_tensor_release(&out);
    /* More strings remain than the shape holds: an error, not a crash. */
    const char *wrong = "graph s(%x: string[1, 6]) {\n"
                        "  %y = string_normalizer(%x, shape=[1, 2], stopwords=[\"monday\"])\n  return %y\n}\n";
    CHECK_EQ_INT(run(ctx, wrong, device, &out), FC_ERR_INPUT);
    CHECK(strstr(fc_last_error(ctx), "4 strings remain of 6, but the result's shape holds 2") != NULL);
    CHECK(out.data == NULL);
    /* A NULL element of the caller's input: an error, not a crash. */
    const char *const holes[6] = {"a", "b", NULL, "d", "e", "f"};
    fc_status st = run_with(ctx, none, device, holes, &out);
    CHECK_EQ_INT(st, FC_ERR_USAGE);
    CHECK(strstr(fc_last_error(ctx), "string element 2") != NULL);
    fc_context_free(ctx);
}

static void test_cuda_refusal(void) {
    fc_context *ctx = fc_context_new();
    fc_graph *g = parse(ctx, "graph s(%x: string[4]) {\n  %y = string_normalizer(%x, shape=[4], stopwords=[])\n"
                             "  return %y\n}\n");
    CHECK(g != NULL);
    fc_compile_options o;
    fc_compile_options_default(&o);
    o.device = FC_DEVICE_CUDA;
    fc_program *p = NULL;
    fc_status st = g ? fc_compile(g, &o, &p) : FC_ERR_INPUT;
    /* Refused before anything needs a GPU; a build without CUDA says so first. */
    CHECK_EQ_INT(st, FC_ERR_UNSUPPORTED);
    CHECK(p == NULL);
    CHECK(strstr(fc_last_error(ctx), "string tensors (%x is string)") != NULL ||
          strstr(fc_last_error(ctx), "not in this build") != NULL);
    fc_graph_free(g);
    fc_context_free(ctx);
}

int main(void) {
    test_round_trip();
    test_refusals();
    test_results(FC_DEVICE_REF);
    if (fc_device_available(FC_DEVICE_CPU)) test_results(FC_DEVICE_CPU);
    else printf("note: no CPU backend in this build: its string results are not checked\n");
    test_cuda_refusal();
    return check_report("test_strings");
}
