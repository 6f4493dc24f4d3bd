/*
 * test_format.c - the .ir text format: parse/print round trips, the
 * canonical print form, and the exact diagnostic for each kind of bad input.
 *
 * As in TCC's and QBE's tests, each input sits beside its expected output.
 * Diagnostics are compared whole: "file:line:col: error: message", the
 * source line and the caret line.
 */
#include "check.h"
#include "fusec.h"
#include "ir.h"
#include "test_util.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static fc_context *ctx;

/* Parse text (as "t.ir") and print it; NULL, with the error reported as a
 * failure naming `line`, if either step fails. */
static char *parse_print(int line, const char *text, size_t len, const char *graph, const fc_binding *b, int nb) {
    fc_graph *g = NULL;
    if (fc_parse(ctx, "t.ir", text, len, graph, b, nb, &g) != FC_OK) {
        check_failed++;
        fprintf(stderr, "test_format.c:%d: parse failed:\n%s\n", line, fc_last_error(ctx));
        return NULL;
    }
    char *s = fc_print(g);
    if (!s) {
        check_failed++;
        fprintf(stderr, "test_format.c:%d: print failed: %s\n", line, fc_last_error(ctx));
    }
    fc_graph_free(g);
    return s;
}

/* ------------------------------------------------------------------ */
/* Round trips of every .ir file in the source tree                    */
/* ------------------------------------------------------------------ */

/* Symbol bindings a test file asks for, in a comment line as tests/passes/
 * has them: "# BIND: N=4, B=2". Names point into `store`. */
static int file_binds(const char *text, char *store, size_t cap, fc_binding *binds, int max) {
    const char *line = strstr(text, "# BIND:");
    if (!line || (line != text && line[-1] != '\n')) return 0;
    line += 7;
    size_t n = strcspn(line, "\n");
    snprintf(store, cap, "%.*s", (int)n, line);
    int nb = 0;
    for (char *tok = strtok(store, ", "); tok && nb < max; tok = strtok(NULL, ", ")) {
        char *eq = strchr(tok, '=');
        if (!eq) continue;
        *eq = 0;
        binds[nb++] = (fc_binding){tok, strtoll(eq + 1, NULL, 10)};
    }
    return nb;
}

/* print(parse(print(parse(x)))) == print(parse(x)) for every graph of a file. */
static void roundtrip_file(const char *path) {
    size_t len;
    char *text = read_file(path, &len);
    if (!text) {
        check_failed++;
        fprintf(stderr, "cannot read %s\n", path);
        return;
    }
    char store[256];
    fc_binding binds[16];
    int nbinds = file_binds(text, store, sizeof store, binds, 16);
    char **names;
    int n;
    if (fc_parse_graph_names(ctx, path, text, len, &names, &n) != FC_OK) {
        check_failed++;
        fprintf(stderr, "%s: cannot list graphs:\n%s\n", path, fc_last_error(ctx));
        free(text);
        return;
    }
    for (int i = 0; i < n; i++) {
        fc_graph *g;
        if (fc_parse(ctx, path, text, len, names[i], binds, nbinds, &g) != FC_OK) {
            check_failed++;
            fprintf(stderr, "%s: graph %s does not parse:\n%s\n", path, names[i], fc_last_error(ctx));
            continue;
        }
        CHECK_STR(fc_graph_name(g), names[i]);
        char *once = fc_print(g);
        fc_graph_free(g);
        char *twice = once ? parse_print(__LINE__, once, strlen(once), NULL, NULL, 0) : NULL;
        if (once && twice && strcmp(once, twice) == 0) {
            check_passed++;
        } else {
            check_failed++;
            fprintf(stderr, "%s: graph %s does not round-trip:\n--- first print:\n%s--- second print:\n%s", path,
                    names[i], once ? once : "(null)\n", twice ? twice : "(null)\n");
        }
        fc_free(once);
        fc_free(twice);
    }
    for (int i = 0; i < n; i++) fc_free(names[i]);
    fc_free(names);
    free(text);
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Visit every .ir file under dir. Files named bad_*.ir hold invalid input on
 * purpose (for other tests) and are skipped. A bound symbol prints as its
 * value, so the printed text needs no bindings to parse back. */
static int walk(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(path, &st) != 0) continue;
        if (S_ISDIR(st.st_mode)) count += walk(path);
        else if (ends_with(e->d_name, ".ir") && strncmp(e->d_name, "bad_", 4) != 0) {
            roundtrip_file(path);
            count++;
        }
    }
    closedir(d);
    return count;
}

static void test_roundtrip_tree(void) {
    const char *src = getenv("FUSEC_SRC");
    if (!src) src = ".";
    static const char *const dirs[] = {"examples", "tests", "bench"};
    int files = 0;
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", src, dirs[i]);
        files += walk(path);
    }
    /* At least tests/format/ must have been found: otherwise the walk ran
     * in the wrong directory and tested nothing. */
    CHECK(files >= 1);
    printf("round-tripped %d .ir files\n", files);
}

/* The files of tests/format/ are written in canonical form: each graph
 * prints back to exactly its text in the file. */
static void test_canonical_files(void) {
    const char *src = getenv("FUSEC_SRC");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/format/all_ops.ir", src ? src : ".");
    size_t len;
    char *text = read_file(path, &len);
    CHECK(text != NULL);
    if (!text) return;
    static const char *const graphs[] = {"all_ops", "shapes", "conv"};
    for (size_t i = 0; i < sizeof graphs / sizeof graphs[0]; i++) {
        char *s = parse_print(__LINE__, text, len, graphs[i], NULL, 0);
        if (s && strstr(text, s)) check_passed++;
        else {
            check_failed++;
            fprintf(stderr, "%s: graph %s is not in canonical form; it prints as:\n%s", path, graphs[i], s ? s : "");
        }
        fc_free(s);
    }
    free(text);
}

/* ------------------------------------------------------------------ */
/* The canonical print form                                            */
/* ------------------------------------------------------------------ */

/* Parse `in`, print it, compare with `want`; `want` must print as itself. */
static void check_print(int line, const char *in, size_t len, const char *want) {
    char *s = parse_print(line, in, len, NULL, NULL, 0);
    if (!s) return;
    if (strcmp(s, want) == 0) check_passed++;
    else {
        check_failed++;
        fprintf(stderr, "test_format.c:%d: printed text differs\n--- got:\n%s--- expected:\n%s", line, s, want);
    }
    char *again = parse_print(line, s, strlen(s), NULL, NULL, 0);
    if (again && strcmp(again, s) == 0) check_passed++;
    else {
        check_failed++;
        fprintf(stderr, "test_format.c:%d: print is not a fixed point:\n%s", line, again ? again : "");
    }
    fc_free(s);
    fc_free(again);
}
#define PRINTS(in, want) check_print(__LINE__, in, sizeof(in) - 1, want)

static void test_print_form(void) {
    /* The form of docs/IR.md prints as itself. */
    static const char canonical[] =
        "graph mlp(%x: bf16[B, 768], %w1: bf16[768, 3072]) {\n"
        "  %h = matmul(%x, %w1) : bf16[B, 3072]\n"
        "  %a, %b = split(%h, axis=1, sizes=[1536, 1536]) : bf16[B, 1536], bf16[B, 1536]\n"
        "  %s = reduce_sum(%a, axes=[-1], keepdim=true) : bf16[B, 1]\n"
        "  %m = mul(%s, 1.702) : bf16[B, 1]\n"
        "  return %m, %b\n"
        "}\n";
    PRINTS(canonical, canonical);

    /* Free layout, comments, attributes in any order, defaults written out,
     * numbers in every spelling: one canonical text. Integer literals stay
     * integers (an integer scalar keeps an integer tensor integer), float
     * literals always show a '.', an exponent, inf or nan. */
    PRINTS("graph   g ( %x :f32[ 4,8 ] ,%i: i32[4, 8], %w:f32[8] )\n"
           "{ # comment\n"
           "  %a = softmax(%x, axis=-1)   %b = layernorm(%a,\n"
           "     %w, %w, eps=1e-5, axis=-1) : f32[4,8]\n"
           "  %c = reduce_sum(%b, keepdim=false, axes=[1])\n"
           "  %d = mul(%c, 2.) %e = mul(%d, 1e3) %g2 = sub(%e, -0)\n"
           "  %h = mul(%g2, 0.1) %k = max(%h, -nan) %l = add(%k, 100000000000000000000)\n"
           "  %m = add(%i, 7) %n = mul(%i, 3.0) %o = add(%x, 1e-300) %p = add(%x, 123456.789)\n"
           "  %s = slice(%x, axis=0, start=0, end=9223372036854775807, step=1)\n"
           "  %t = attention(%x, %x, %x, causal=false, scale=0)\n"
           "  %u = iota(shape=[4], axis=0, dtype=i32) %v = full(shape=[2], value=1, dtype=f32)\n"
           "  %gg = gather(%x, %i, axis=0) %inf = add(%x, inf) %ninf = add(%x, -inf)\n"
           "  return %o, %p, %m, %n, %l, %s, %t, %u, %v, %gg, %inf, %ninf\n"
           "}\n",
           "graph g(%x: f32[4, 8], %i: i32[4, 8], %w: f32[8]) {\n"
           "  %a = softmax(%x) : f32[4, 8]\n"
           "  %b = layernorm(%a, %w, %w) : f32[4, 8]\n"
           "  %c = reduce_sum(%b, axes=[1]) : f32[4]\n"
           "  %d = mul(%c, 2.0) : f32[4]\n"
           "  %e = mul(%d, 1000.0) : f32[4]\n"
           "  %g2 = sub(%e, -0) : f32[4]\n"
           "  %h = mul(%g2, 0.1) : f32[4]\n"
           "  %k = max(%h, nan) : f32[4]\n"
           "  %l = add(%k, 100000000000000000000) : f32[4]\n"
           "  %m = add(%i, 7) : i32[4, 8]\n"
           "  %n = mul(%i, 3.0) : f32[4, 8]\n"
           "  %o = add(%x, 1e-300) : f32[4, 8]\n"
           "  %p = add(%x, 123456.789) : f32[4, 8]\n"
           "  %s = slice(%x, axis=0) : f32[4, 8]\n"
           "  %t = attention(%x, %x, %x) : f32[4, 8]\n"
           "  %u = iota(shape=[4], axis=0) : i32[4]\n"
           "  %v = full(shape=[2], value=1.0) : f32[2]\n"
           "  %gg = gather(%x, %i) : f32[4, 8, 8]\n"
           "  %inf = add(%x, inf) : f32[4, 8]\n"
           "  %ninf = add(%x, -inf) : f32[4, 8]\n"
           "  return %o, %p, %m, %n, %l, %s, %t, %u, %v, %gg, %inf, %ninf\n"
           "}\n");

    /* A graph without parameters; names with dots and digits; a scalar. */
    PRINTS("graph f() { %1 = full(shape=[], value=-2.5e-3) %a.b = neg(%1) return %a.b, %1 }",
           "graph f() {\n"
           "  %1 = full(shape=[], value=-0.0025) : f32[]\n"
           "  %a.b = neg(%1) : f32[]\n"
           "  return %a.b, %1\n"
           "}\n");

    /* A header longer than 100 columns puts one parameter on each line. */
    PRINTS("graph wide(%activations: bf16[B, T, 4096], %weights: bf16[4096, 4096], %bias: bf16[4096], %s: f32[]) {\n"
           "  return %bias\n"
           "}\n",
           "graph wide(%activations: bf16[B, T, 4096],\n"
           "           %weights: bf16[4096, 4096],\n"
           "           %bias: bf16[4096],\n"
           "           %s: f32[]) {\n"
           "  return %bias\n"
           "}\n");
}

/* Graphs built with the C API: invented names, dead nodes, bad states. */
static void test_print_api(void) {
    fc_graph *g = fc_graph_new(ctx, "api");
    fc_dim dims[2] = {4, fc_sym(g, "N")};
    fc_value *x = fc_param(g, "v0", FC_F32, 2, dims);   /* a user name that looks invented */
    fc_value *y = fc_param(g, "my-y", FC_F32, 2, dims); /* not writable in .ir: renamed */
    fc_value *a = fc_add(g, x, y);                      /* no name */
    fc_value *dead = fc_exp(g, a);
    fc_value *b = fc_mul(g, a, fc_scalar(g, 2));
    fc_value *c = fc_sub(g, b, fc_scalar(g, 1e-3));
    b->name = "v2";
    c->name = "v0"; /* taken by the parameter: renamed */
    CHECK_EQ_INT(fc_graph_return(g, 2, (fc_value *[]){c, b}), FC_OK);
    dead->def->dead = true; /* a pass removed it */
    char *s = fc_print(g);
    CHECK_STR(s, "graph api(%v0: f32[4, N], %v1: f32[4, N]) {\n"
                 "  %v3 = add(%v0, %v1) : f32[4, N]\n"
                 "  %v2 = mul(%v3, 2.0) : f32[4, N]\n"
                 "  %v4 = sub(%v2, 0.001) : f32[4, N]\n"
                 "  return %v4, %v2\n"
                 "}\n");
    if (s) {
        char *again = parse_print(__LINE__, s, strlen(s), NULL, NULL, 0);
        CHECK_STR(again, s);
        fc_free(again);
    }
    fc_free(s);
    fc_graph_free(g);

    /* No results yet: nothing to print, and the reason on the context. */
    g = fc_graph_new(ctx, "open");
    fc_param(g, "x", FC_F32, 0, dims);
    CHECK(fc_print(g) == NULL);
    CHECK_STR(fc_last_error(ctx), "fc_print: graph 'open' has no results (fc_graph_return was not called)");
    fc_graph_free(g);

    /* A poisoned graph keeps its first error. */
    g = fc_graph_new(ctx, "poisoned");
    fc_value *p = fc_param(g, "x", FC_F32, 1, (fc_dim[]){4});
    fc_value *q = fc_param(g, "y", FC_F32, 1, (fc_dim[]){5});
    fc_value *r = fc_add(g, p, q);
    fc_graph_return(g, 1, &r);
    CHECK(fc_print(g) == NULL);
    CHECK_STR(fc_last_error(ctx), "add: cannot broadcast dimension 4 with 5 (dimension -1 of the result)");
    fc_graph_free(g);
}

/* ------------------------------------------------------------------ */
/* Diagnostics                                                         */
/* ------------------------------------------------------------------ */

/* Parse src as "t.ir"; it must fail with exactly `want`. */
static void check_error(int line, const char *src, size_t len, const char *want) {
    fc_graph *g = (fc_graph *)&g; /* anything but NULL: fc_parse must clear it */
    fc_status st = fc_parse(ctx, "t.ir", src, len, NULL, NULL, 0, &g);
    const char *got = fc_last_error(ctx);
    if (st == FC_ERR_INPUT && g == NULL && strcmp(got, want) == 0) {
        check_passed++;
        return;
    }
    check_failed++;
    fprintf(stderr, "test_format.c:%d: status %d, graph %s\n--- got:\n%s--- expected:\n%s", line, (int)st,
            g ? "set" : "NULL", st == FC_OK ? "(parsed)\n" : got, want);
    if (st == FC_OK) fc_graph_free(g);
}
#define BAD(src, want) check_error(__LINE__, src, sizeof(src) - 1, want)

/* Most cases share a header and a return. */
#define H "graph g(%x: f32[4, 8], %w: f32[8, 16], %c: bool[4, 8]) {\n"
#define RET "  return %y\n}\n"

static void test_diagnostics(void) {
    /* --- Lexical errors: the lexer's message, at the offending byte. */
    /* a character that starts no token */
    BAD(H "  %y = neg(%x) $\n" RET,
        "t.ir:2:16: error: unexpected character '$'\n"
        "      %y = neg(%x) $\n"
        "                   ^\n");
    /* a NUL byte (shown as '?' in the source line) */
    BAD(H "  %y = neg(%x)\0\n" RET,
        "t.ir:2:15: error: unexpected byte 0x00\n"
        "      %y = neg(%x)?\n"
        "                  ^\n");
    /* a string that runs to the end of the line */
    BAD(H "  %y = cast(%x, to=\"f32)\n" RET,
        "t.ir:2:20: error: unterminated string\n"
        "      %y = cast(%x, to=\"f32)\n"
        "                       ^\n");
    /* a malformed number */
    BAD(H "  %y = mul(%x, 1.5.2)\n" RET,
        "t.ir:2:16: error: invalid number '1.5.2'\n"
        "      %y = mul(%x, 1.5.2)\n"
        "                   ^\n");
    /* '%' without a name */
    BAD(H "  %y = neg(% x)\n" RET,
        "t.ir:2:12: error: expected a value name after '%'\n"
        "      %y = neg(% x)\n"
        "               ^\n");

    /* --- Syntax errors: "expected X but found Y" at the token found. */
    /* an unclosed operand list */
    BAD(H "  %y = neg(%x\n" RET,
        "t.ir:3:3: error: expected ',' or ')' but found 'return'\n"
        "      return %y\n"
        "      ^\n");
    /* a statement without '=' */
    BAD(H "  %y neg(%x)\n" RET,
        "t.ir:2:6: error: expected '=' but found 'neg'\n"
        "      %y neg(%x)\n"
        "         ^\n");
    /* an op that is not a name */
    BAD(H "  %y = 3(%x)\n" RET,
        "t.ir:2:8: error: expected an op name but found '3'\n"
        "      %y = 3(%x)\n"
        "           ^\n");
    /* a string where an operand goes */
    BAD(H "  %y = neg(\"x\")\n" RET,
        "t.ir:2:12: error: expected an operand or an attribute but found '\"x\"'\n"
        "      %y = neg(\"x\")\n"
        "               ^\n");
    /* operands come before attributes */
    BAD(H "  %y = softmax(axis=0, %x)\n" RET,
        "t.ir:2:24: error: softmax: operands must come before attributes\n"
        "      %y = softmax(axis=0, %x)\n"
        "                           ^\n");
    /* attribute lists never nest */
    BAD(H "  %y = reshape(%x, shape=[[32]])\n" RET,
        "t.ir:2:27: error: reshape: nested lists are not allowed in attributes\n"
        "      %y = reshape(%x, shape=[[32]])\n"
        "                              ^\n");
    /* a statement without results */
    BAD(H "  neg(%x)\n"
        "  return %x\n"
        "}\n",
        "t.ir:2:3: error: expected a statement or 'return' but found 'neg'\n"
        "      neg(%x)\n"
        "      ^\n");
    /* an unclosed parameter list */
    BAD("graph g(%x: f32[4] {\n"
        "  return %x\n"
        "}\n",
        "t.ir:1:20: error: expected ',' or ')' but found '{'\n"
        "    graph g(%x: f32[4] {\n"
        "                       ^\n");
    /* a parameter without '%' */
    BAD("graph g(x: f32[4]) {\n"
        "  return %x\n"
        "}\n",
        "t.ir:1:9: error: expected a parameter (%name: type) but found 'x'\n"
        "    graph g(x: f32[4]) {\n"
        "            ^\n");
    /* no return before '}' */
    BAD(H "  %y = neg(%x)\n"
        "}\n",
        "t.ir:3:1: error: expected 'return' before '}'\n"
        "    }\n"
        "    ^\n");
    /* no return before the end of the file */
    BAD(H "  %y = neg(%x)\n",
        "t.ir:3:1: error: expected 'return' before end of file\n"
        "    \n"
        "    ^\n");
    /* a return without values */
    BAD(H "  return\n"
        "}\n",
        "t.ir:3:1: error: expected a value name but found '}'\n"
        "    }\n"
        "    ^\n");
    /* a number cannot be a result */
    BAD(H "  return 1\n"
        "}\n",
        "t.ir:2:10: error: expected a value name but found '1'\n"
        "      return 1\n"
        "             ^\n");
    /* junk after the last graph */
    BAD(H "  return %x\n"
        "}\n"
        "foo\n",
        "t.ir:4:1: error: expected 'graph' but found 'foo'\n"
        "    foo\n"
        "    ^\n");
    /* tabs are kept in the caret line, so the caret lines up */
    BAD("graph g(%x: f32[4]) {\n"
        "\t%y = foo(%x)\n"
        "\treturn %y\n"
        "}\n",
        "t.ir:2:7: error: unknown op 'foo'\n"
        "    \t%y = foo(%x)\n"
        "    \t     ^\n");

    /* --- Names: ops, values, graphs, dtypes. */
    /* unknown op */
    BAD(H "  %y = foo(%x)\n" RET,
        "t.ir:2:8: error: unknown op 'foo'\n"
        "      %y = foo(%x)\n"
        "           ^\n");
    /* undefined value */
    BAD(H "  %y = add(%x, %z)\n" RET,
        "t.ir:2:16: error: use of undefined value %z\n"
        "      %y = add(%x, %z)\n"
        "                   ^\n");
    /* undefined value in the return */
    BAD(H "  return %q\n"
        "}\n",
        "t.ir:2:10: error: use of undefined value %q\n"
        "      return %q\n"
        "             ^\n");
    /* redefined value */
    BAD(H "  %y = neg(%x)\n"
        "  %y = exp(%x)\n" RET,
        "t.ir:3:3: error: value %y is already defined\n"
        "      %y = exp(%x)\n"
        "      ^\n");
    /* redefined parameter */
    BAD("graph g(%x: f32[4], %x: f32[8]) {\n"
        "  return %x\n"
        "}\n",
        "t.ir:1:21: error: value %x is already defined\n"
        "    graph g(%x: f32[4], %x: f32[8]) {\n"
        "                        ^\n");
    /* two graphs of one name */
    BAD("graph g(%x: f32[4]) {\n"
        "  return %x\n"
        "}\n"
        "graph g(%x: f32[4]) {\n"
        "  return %x\n"
        "}\n",
        "t.ir:4:7: error: graph 'g' is already defined\n"
        "    graph g(%x: f32[4]) {\n"
        "          ^\n");
    /* bad dtype name in a type */
    BAD("graph g(%x: f8[4]) {\n"
        "  return %x\n"
        "}\n",
        "t.ir:1:13: error: unknown dtype 'f8'\n"
        "    graph g(%x: f8[4]) {\n"
        "                ^\n");
    /* bad dtype name in an attribute */
    BAD(H "  %y = cast(%x, to=float)\n" RET,
        "t.ir:2:20: error: unknown dtype 'float'\n"
        "      %y = cast(%x, to=float)\n"
        "                       ^\n");
    /* as many names as results */
    BAD(H "  %a = split(%x, axis=0, sizes=[2, 2])\n"
        "  return %a\n"
        "}\n",
        "t.ir:2:3: error: split produces 2 results but 1 name is given\n"
        "      %a = split(%x, axis=0, sizes=[2, 2])\n"
        "      ^\n");

    /* --- Attributes, checked against the op's signature in ops.def. */
    /* unknown attribute, at its name */
    BAD(H "  %y = softmax(%x, dim=0)\n" RET,
        "t.ir:2:20: error: softmax: unknown attribute 'dim'\n"
        "      %y = softmax(%x, dim=0)\n"
        "                       ^\n");
    /* missing required attribute, at the op */
    BAD(H "  %y = concat(%x, %x)\n" RET,
        "t.ir:2:8: error: concat: missing required attribute 'axis'\n"
        "      %y = concat(%x, %x)\n"
        "           ^\n");
    /* duplicate attribute, at the second one */
    BAD(H "  %y = softmax(%x, axis=0, axis=1)\n" RET,
        "t.ir:2:28: error: softmax: duplicate attribute 'axis'\n"
        "      %y = softmax(%x, axis=0, axis=1)\n"
        "                               ^\n");
    /* wrong kind: a float for an int */
    BAD(H "  %y = softmax(%x, axis=1.5)\n" RET,
        "t.ir:2:25: error: softmax: attribute 'axis' expects an integer but found '1.5'\n"
        "      %y = softmax(%x, axis=1.5)\n"
        "                            ^\n");
    /* wrong kind: an int for a bool */
    BAD(H "  %y = reduce_sum(%x, axes=[1], keepdim=1)\n" RET,
        "t.ir:2:41: error: reduce_sum: attribute 'keepdim' expects true or false but found '1'\n"
        "      %y = reduce_sum(%x, axes=[1], keepdim=1)\n"
        "                                            ^\n");
    /* wrong kind: a scalar for a list */
    BAD(H "  %y = permute(%x, perm=1)\n" RET,
        "t.ir:2:25: error: permute: attribute 'perm' expects a list of integers but found '1'\n"
        "      %y = permute(%x, perm=1)\n"
        "                            ^\n");
    /* an integer that does not fit in 64 bits */
    BAD(H "  %y = softmax(%x, axis=99999999999999999999)\n" RET,
        "t.ir:2:25: error: integer 99999999999999999999 is out of range\n"
        "      %y = softmax(%x, axis=99999999999999999999)\n"
        "                            ^\n");
    /* -1 is the only negative entry of a shape */
    BAD(H "  %y = reshape(%x, shape=[-3, 4])\n" RET,
        "t.ir:2:27: error: reshape: invalid dimension -3 in 'shape' (a size, a symbol or -1)\n"
        "      %y = reshape(%x, shape=[-3, 4])\n"
        "                              ^\n");

    /* --- Types in the text: dims of parameters, declared result types. */
    /* a negative dimension */
    BAD("graph g(%x: f32[-1]) {\n"
        "  return %x\n"
        "}\n",
        "t.ir:1:17: error: dimension -1 is negative\n"
        "    graph g(%x: f32[-1]) {\n"
        "                    ^\n");
    /* rank above FC_MAX_RANK */
    BAD("graph g(%x: f32[1, 1, 1, 1, 1, 1, 1, 1, 1]) {\n"
        "  return %x\n"
        "}\n",
        "t.ir:1:41: error: too many dimensions (at most 8)\n"
        "    graph g(%x: f32[1, 1, 1, 1, 1, 1, 1, 1, 1]) {\n"
        "                                            ^\n");
    /* declared type mismatch: a dim */
    BAD(H "  %y = matmul(%x, %w) : f32[4, 8]\n" RET,
        "t.ir:2:25: error: declared type f32[4, 8] does not match inferred type f32[4, 16]\n"
        "      %y = matmul(%x, %w) : f32[4, 8]\n"
        "                            ^\n");
    /* declared type mismatch: the dtype */
    BAD(H "  %y = neg(%x) : bf16[4, 8]\n" RET,
        "t.ir:2:18: error: declared type bf16[4, 8] does not match inferred type f32[4, 8]\n"
        "      %y = neg(%x) : bf16[4, 8]\n"
        "                     ^\n");
    /* one declared type per result */
    BAD(H "  %y = neg(%x) : f32[4, 8], f32[4, 8]\n" RET,
        "t.ir:2:16: error: neg has 1 result but 2 types are declared\n"
        "      %y = neg(%x) : f32[4, 8], f32[4, 8]\n"
        "                   ^\n");

    /* --- Builder errors (ir/build.c): arity, dtypes, shapes, axes, all at the op. */
    /* arity */
    BAD(H "  %y = add(%x)\n" RET,
        "t.ir:2:8: error: add: expects 2 operands, got 1\n"
        "      %y = add(%x)\n"
        "           ^\n");
    /* arity of a variadic op */
    BAD(H "  %y = concat(axis=0)\n" RET,
        "t.ir:2:8: error: concat: expects at least 1 operand, got 0\n"
        "      %y = concat(axis=0)\n"
        "           ^\n");
    /* bare numbers only go to elementwise ops */
    BAD(H "  %y = matmul(%x, 2)\n" RET,
        "t.ir:2:8: error: matmul: operand 1 cannot be a bare number\n"
        "      %y = matmul(%x, 2)\n"
        "           ^\n");
    /* an elementwise op needs a tensor */
    BAD(H "  %y = add(1, 2)\n" RET,
        "t.ir:2:8: error: add: needs at least one tensor operand, not only numbers\n"
        "      %y = add(1, 2)\n"
        "           ^\n");
    /* dtype: where needs a bool condition */
    BAD(H "  %y = where(%x, %x, %x)\n" RET,
        "t.ir:2:8: error: where: the condition must be a bool tensor, got f32\n"
        "      %y = where(%x, %x, %x)\n"
        "           ^\n");
    /* dtype: matmul operands must agree */
    BAD("graph g(%a: f32[4, 8], %b: bf16[8, 4]) {\n"
        "  %y = matmul(%a, %b)\n" RET,
        "t.ir:2:8: error: matmul: operands have different dtypes (f32 vs bf16); cast one first\n"
        "      %y = matmul(%a, %b)\n"
        "           ^\n");
    /* dtype: reduce_mean needs floats */
    BAD("graph g(%x: i32[4]) {\n"
        "  %y = reduce_mean(%x, axes=[0])\n" RET,
        "t.ir:2:8: error: reduce_mean: the input must be a float tensor, got i32\n"
        "      %y = reduce_mean(%x, axes=[0])\n"
        "           ^\n");
    /* dtype: gather needs integer indices */
    BAD(H "  %y = gather(%x, %x)\n" RET,
        "t.ir:2:8: error: gather: indices must be an integer tensor, got f32\n"
        "      %y = gather(%x, %x)\n"
        "           ^\n");
    /* dtype: no bool iota */
    BAD(H "  %y = iota(shape=[4], axis=0, dtype=bool)\n" RET,
        "t.ir:2:8: error: iota: dtype cannot be bool\n"
        "      %y = iota(shape=[4], axis=0, dtype=bool)\n"
        "           ^\n");
    /* shape: broadcast failure */
    BAD("graph g(%a: f32[4, 8], %b: f32[3]) {\n"
        "  %y = add(%a, %b)\n" RET,
        "t.ir:2:8: error: add: cannot broadcast dimension 8 with 3 (dimension -1 of the result)\n"
        "      %y = add(%a, %b)\n"
        "           ^\n");
    /* shape: matmul inner dimensions */
    BAD(H "  %y = matmul(%x, %x)\n" RET,
        "t.ir:2:8: error: matmul: inner dimensions differ (8 vs 4)\n"
        "      %y = matmul(%x, %x)\n"
        "           ^\n");
    /* shape: layernorm weight rank */
    BAD(H "  %y = layernorm(%x, %w, %w)\n" RET,
        "t.ir:2:8: error: layernorm: the weight must have rank 1, got rank 2\n"
        "      %y = layernorm(%x, %w, %w)\n"
        "           ^\n");
    /* shape: reshape element count */
    BAD(H "  %y = reshape(%x, shape=[5, 6])\n" RET,
        "t.ir:2:8: error: reshape: cannot reshape f32[4, 8] to [5, 6]: element counts differ\n"
        "      %y = reshape(%x, shape=[5, 6])\n"
        "           ^\n");
    /* shape: expand a non-1 dimension */
    BAD(H "  %y = expand(%x, shape=[4, 9])\n" RET,
        "t.ir:2:8: error: expand: cannot expand dimension 1 from 8 to 9 (only size-1 dimensions expand)\n"
        "      %y = expand(%x, shape=[4, 9])\n"
        "           ^\n");
    /* shape: split sizes must add up */
    BAD(H "  %a, %b = split(%x, axis=1, sizes=[3, 4])\n"
        "  return %a\n"
        "}\n",
        "t.ir:2:12: error: split: sizes add up to 7 but dimension 1 has size 8\n"
        "      %a, %b = split(%x, axis=1, sizes=[3, 4])\n"
        "               ^\n");
    /* two different symbols that must be equal (broadcast) */
    BAD("graph g(%a: f32[A, 8], %b: f32[B, 8]) {\n"
        "  %y = add(%a, %b)\n" RET,
        "t.ir:2:8: error: add: cannot broadcast: symbolic dimensions A and B must be equal (bind them to one value)\n"
        "      %y = add(%a, %b)\n"
        "           ^\n");
    /* two different symbols that must be equal (matmul) */
    BAD("graph g(%a: f32[4, K], %b: f32[J, 4]) {\n"
        "  %y = matmul(%a, %b)\n" RET,
        "t.ir:2:8: error: matmul: inner dimensions differ: symbolic dimensions K and J must be equal (bind them to one value)\n"
        "      %y = matmul(%a, %b)\n"
        "           ^\n");
    /* a symbolic dimension cannot be sliced */
    BAD("graph g(%x: f32[N]) {\n"
        "  %y = slice(%x, axis=0, start=1)\n" RET,
        "t.ir:2:8: error: slice: cannot slice symbolic dimension N (bind it first)\n"
        "      %y = slice(%x, axis=0, start=1)\n"
        "           ^\n");
    /* axis out of range */
    BAD(H "  %y = softmax(%x, axis=2)\n" RET,
        "t.ir:2:8: error: softmax: axis 2 is out of range for rank 2\n"
        "      %y = softmax(%x, axis=2)\n"
        "           ^\n");
    /* an axis twice (-2 is 0 here) */
    BAD(H "  %y = reduce_sum(%x, axes=[0, -2])\n" RET,
        "t.ir:2:8: error: reduce_sum: axis -2 appears twice in axes\n"
        "      %y = reduce_sum(%x, axes=[0, -2])\n"
        "           ^\n");
    /* perm is not a permutation */
    BAD(H "  %y = permute(%x, perm=[0, 0])\n" RET,
        "t.ir:2:8: error: permute: axis 0 appears twice in perm\n"
        "      %y = permute(%x, perm=[0, 0])\n"
        "           ^\n");

    /* --- Files without a graph. */
    /* an empty file */
    BAD("",
        "t.ir:1:1: error: file contains no graph\n"
        "    \n"
        "    ^\n");
    /* only comments */
    BAD("# nothing here\n",
        "t.ir:2:1: error: file contains no graph\n"
        "    \n"
        "    ^\n");
}

/* ------------------------------------------------------------------ */
/* Files with several graphs                                           */
/* ------------------------------------------------------------------ */

static const char multi[] = "# three graphs\n"
                            "graph first(%x: f32[4]) {\n"
                            "  %y = neg(%x)\n"
                            "  return %y\n"
                            "}\n"
                            "graph second(%x: f32[B]) {\n"
                            "  %y = exp(%x)\n"
                            "  return %y\n"
                            "}\n"
                            "graph third(%x: f32[2]) {\n"
                            "  return %x\n"
                            "}\n";

static void test_multi_graph(void) {
    char **names;
    int n;
    CHECK_EQ_INT(fc_parse_graph_names(ctx, "t.ir", multi, sizeof multi - 1, &names, &n), FC_OK);
    CHECK_EQ_INT(n, 3);
    if (n == 3) {
        CHECK_STR(names[0], "first");
        CHECK_STR(names[1], "second");
        CHECK_STR(names[2], "third");
    }
    for (int i = 0; i < n; i++) fc_free(names[i]);
    fc_free(names);

    /* No name: the first graph. */
    char *s = parse_print(__LINE__, multi, sizeof multi - 1, NULL, NULL, 0);
    CHECK_STR(s, "graph first(%x: f32[4]) {\n"
                 "  %y = neg(%x) : f32[4]\n"
                 "  return %y\n"
                 "}\n");
    fc_free(s);
    s = parse_print(__LINE__, multi, sizeof multi - 1, "second", NULL, 0);
    CHECK_STR(s, "graph second(%x: f32[B]) {\n"
                 "  %y = exp(%x) : f32[B]\n"
                 "  return %y\n"
                 "}\n");
    fc_free(s);

    /* An unknown name lists the graphs there are. */
    fc_graph *g = NULL;
    CHECK_EQ_INT(fc_parse(ctx, "t.ir", multi, sizeof multi - 1, "fourth", NULL, 0, &g), FC_ERR_INPUT);
    CHECK(g == NULL);
    CHECK_STR(fc_last_error(ctx), "t.ir: error: no graph named 'fourth' (available: first, second, third)");

    /* The whole file is checked, not only the graph asked for. */
    static const char broken_last[] = "graph a(%x: f32[4]) {\n"
                                      "  return %x\n"
                                      "}\n"
                                      "graph b(%x: f32[4]) {\n"
                                      "  %y = matmul(%x, %x, %x)\n"
                                      "  return %y\n"
                                      "}\n";
    CHECK_EQ_INT(fc_parse(ctx, "t.ir", broken_last, sizeof broken_last - 1, "a", NULL, 0, &g), FC_ERR_INPUT);
    CHECK_STR(fc_last_error(ctx), "t.ir:5:8: error: matmul: expects 2 operands, got 3\n"
                                  "      %y = matmul(%x, %x, %x)\n"
                                  "           ^\n");
    /* Listing only needs the file's outline: a bad statement does not stop it. */
    CHECK_EQ_INT(fc_parse_graph_names(ctx, "t.ir", broken_last, sizeof broken_last - 1, &names, &n), FC_OK);
    CHECK_EQ_INT(n, 2);
    for (int i = 0; i < n; i++) fc_free(names[i]);
    fc_free(names);

    /* A broken outline is an error for listing too, the same one. */
    static const char junk[] = "graph a(%x: f32[4]) {\n"
                               "  return %x\n"
                               "}\n"
                               "oops\n";
    CHECK_EQ_INT(fc_parse_graph_names(ctx, "t.ir", junk, sizeof junk - 1, &names, &n), FC_ERR_INPUT);
    CHECK(names == NULL && n == 0);
    CHECK_STR(fc_last_error(ctx), "t.ir:4:1: error: expected 'graph' but found 'oops'\n"
                                  "    oops\n"
                                  "    ^\n");
    static const char dup[] = "graph a(%x: f32[4]) {\n"
                              "  return %x\n"
                              "}\n"
                              "graph a(%x: f32[4]) {\n"
                              "  return %x\n"
                              "}\n";
    CHECK_EQ_INT(fc_parse_graph_names(ctx, "t.ir", dup, sizeof dup - 1, &names, &n), FC_ERR_INPUT);
    CHECK_STR(fc_last_error(ctx), "t.ir:4:7: error: graph 'a' is already defined\n"
                                  "    graph a(%x: f32[4]) {\n"
                                  "          ^\n");
    CHECK_EQ_INT(fc_parse_graph_names(ctx, "t.ir", "", 0, &names, &n), FC_ERR_INPUT);
    CHECK_STR(fc_last_error(ctx), "t.ir:1:1: error: file contains no graph\n"
                                  "    \n"
                                  "    ^\n");
}

/* ------------------------------------------------------------------ */
/* Bindings                                                            */
/* ------------------------------------------------------------------ */

static void test_bindings(void) {
    /* A bound symbol is static everywhere it appears. */
    fc_binding b4 = {"B", 4};
    fc_graph *g = NULL;
    CHECK_EQ_INT(fc_parse(ctx, "t.ir", multi, sizeof multi - 1, "second", &b4, 1, &g), FC_OK);
    if (g) {
        CHECK_EQ_INT(fc_value_dim(fc_graph_param(g, 0), 0), 4);
        CHECK_EQ_INT(fc_value_dim(fc_graph_output(g, 0), 0), 4);
        char *s = fc_print(g);
        CHECK_STR(s, "graph second(%x: f32[4]) {\n"
                     "  %y = exp(%x) : f32[4]\n"
                     "  return %y\n"
                     "}\n");
        fc_free(s);
        fc_graph_free(g);
    }

    /* Two symbols that must be equal: an error, unless bound to one value.
     * A declared type may still name the symbol. */
    static const char two[] = "graph g(%a: f32[A, 8], %b: f32[B, 8]) {\n"
                              "  %y = add(%a, %b) : f32[A, 8]\n"
                              "  return %y\n"
                              "}\n";
    fc_binding same[2] = {{"A", 4}, {"B", 4}};
    char *s = parse_print(__LINE__, two, sizeof two - 1, NULL, same, 2);
    CHECK_STR(s, "graph g(%a: f32[4, 8], %b: f32[4, 8]) {\n"
                 "  %y = add(%a, %b) : f32[4, 8]\n"
                 "  return %y\n"
                 "}\n");
    fc_free(s);
    fc_binding differ[2] = {{"A", 4}, {"B", 5}};
    CHECK_EQ_INT(fc_parse(ctx, "t.ir", two, sizeof two - 1, NULL, differ, 2, &g), FC_ERR_INPUT);
    CHECK_STR(fc_last_error(ctx), "t.ir:2:8: error: add: cannot broadcast dimension 4 with 5 (dimension -2 of the result)\n"
                                  "      %y = add(%a, %b) : f32[A, 8]\n"
                                  "           ^\n");

    /* Bad bindings are reported as such. */
    fc_binding bad_name = {"1x", 4};
    CHECK_EQ_INT(fc_parse(ctx, "t.ir", two, sizeof two - 1, NULL, &bad_name, 1, &g), FC_ERR_USAGE);
    CHECK(g == NULL);
    CHECK_STR(fc_last_error(ctx), "bind: '1x' is not a valid symbol name");
    fc_binding negative = {"A", -1};
    CHECK_EQ_INT(fc_parse(ctx, "t.ir", two, sizeof two - 1, NULL, &negative, 1, &g), FC_ERR_USAGE);
    CHECK_STR(fc_last_error(ctx), "bind: A=-1 is negative");
}

/* ------------------------------------------------------------------ */
/* Files and the lifetime of the source                                */
/* ------------------------------------------------------------------ */

static void test_files(void) {
    const char *src = getenv("FUSEC_SRC");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/format/all_ops.ir", src ? src : ".");
    fc_graph *g = NULL;
    CHECK_EQ_INT(fc_parse_file(ctx, path, "shapes", NULL, 0, &g), FC_OK);
    CHECK(g && strcmp(fc_graph_name(g), "shapes") == 0);
    fc_graph_free(g);

    CHECK_EQ_INT(fc_parse_file(ctx, "no/such/file.ir", NULL, NULL, 0, &g), FC_ERR_INPUT);
    CHECK(g == NULL);
    CHECK_STR(fc_last_error(ctx), "no/such/file.ir: error: cannot open: No such file or directory");

    /* The graph keeps its own copy of the text and file name: diagnostics
     * made later (by the verifier, at a node's location) still show the
     * source line after the caller's buffer is gone. */
    static const char text[] = "graph g(%x: f32[4]) {\n"
                               "  %y = neg(%x)\n"
                               "  return %y\n"
                               "}\n";
    char *buf = malloc(sizeof text);
    char *name = malloc(16);
    memcpy(buf, text, sizeof text);
    strcpy(name, "heap.ir");
    CHECK_EQ_INT(fc_parse(ctx, name, buf, sizeof text - 1, NULL, NULL, 0, &g), FC_OK);
    memset(buf, 'X', sizeof text);
    free(buf);
    free(name);
    if (g) {
        CHECK_EQ_INT(g->cur_loc.line, 0); /* later builder errors have no stale location */
        fc_diag(ctx, g->src_file, g->src_text, g->src_len, g->nodes[0]->loc, "here");
        CHECK_STR(fc_last_error(ctx), "heap.ir:2:8: error: here\n"
                                      "      %y = neg(%x)\n"
                                      "           ^\n");
        fc_graph_free(g);
    }

    /* NULL text of length 0 is an empty file; bad arguments are usage errors. */
    CHECK_EQ_INT(fc_parse(ctx, NULL, NULL, 0, NULL, NULL, 0, &g), FC_ERR_INPUT);
    CHECK_STR(fc_last_error(ctx), "<input>:1:1: error: file contains no graph\n");
    CHECK_EQ_INT(fc_parse(ctx, "t.ir", NULL, 5, NULL, NULL, 0, &g), FC_ERR_USAGE);
    CHECK_EQ_INT(fc_parse(ctx, "t.ir", "", 0, NULL, NULL, 1, &g), FC_ERR_USAGE);
}

int main(void) {
    ctx = fc_context_new();
    test_roundtrip_tree();
    test_canonical_files();
    test_print_form();
    test_print_api();
    test_diagnostics();
    test_multi_graph();
    test_bindings();
    test_files();
    fc_context_free(ctx);
    return check_report("test_format");
}
