/* pass_file.h - the pass-test file format that tests/passes/ and
 * tests/gemm/ share (include after check.h): an input graph and, in
 * comments, the passes to run and the exact IR expected after them.
 *
 *     # RUN: decompose,canonicalize      (passes, in order; autocast_bf16 is
 *                                        fc_pass_autocast at FC_PRECISION_BF16)
 *     # BIND: N=4                        (optional: symbol bindings)
 *     # EXPECT:
 *     # graph f(%x: f32[4]) {
 *     #   ...
 *     # }
 *     graph f(%x: f32[4]) { ... }
 *
 * The EXPECT block ends at the first line that is not a comment.
 *
 *   char **files = list_ir(dir);        the sorted .ir files of dir; free_list(files)
 *   read_directives(text, &d)           RUN, BIND and EXPECT; free(d.expect)
 *   run_passes(g, d.run, where)         each pass, then fc_verify
 *   pass_through_alloc_failures(text, prep, pass)
 *                                       pass (after prep) with its nth allocation
 *                                       failing, n = 1, 2, ...: how many runs failed
 *   run_pass_file(path, same)           one file: parsed with its BIND, its passes
 *                                       run, the result against EXPECT, the passes
 *                                       a fixpoint, EXPECT canonical; then
 *                                       same(path, before, after) when given
 */
#ifndef FC_TEST_PASS_FILE_H
#define FC_TEST_PASS_FILE_H
#include "ir.h"
#include "passes/passes.h"
#include "passes/recognize.h"
#include "test_util.h"

#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* NULL-terminated and sorted; NULL when dir cannot be opened. */
static inline char **list_ir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return NULL;
    char **v = NULL;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t l = strlen(e->d_name);
        if (l < 4 || strcmp(e->d_name + l - 3, ".ir")) continue;
        v = realloc(v, sizeof *v * (size_t)(n + 2));
        v[n] = malloc(strlen(dir) + l + 2);
        sprintf(v[n++], "%s/%s", dir, e->d_name);
    }
    closedir(d);
    if (!v) v = calloc(1, sizeof *v);
    v[n] = NULL;
    qsort(v, (size_t)n, sizeof *v, cmp_str);
    return v;
}

static inline void free_list(char **v) {
    for (int i = 0; v && v[i]; i++) free(v[i]);
    free(v);
}

typedef struct {
    char run[256], bind[256];
    char *expect; /* malloc'd */
} directives;

/* Read the RUN, BIND and EXPECT comments of a test file: false when RUN
 * or EXPECT is missing. */
static inline bool read_directives(const char *text, directives *d) {
    memset(d, 0, sizeof *d);
    size_t cap = strlen(text) + 1, len = 0;
    d->expect = malloc(cap);
    d->expect[0] = 0;
    bool in_expect = false, have_expect = false;
    for (const char *line = text; *line;) {
        const char *eol = strchr(line, '\n');
        size_t n = eol ? (size_t)(eol - line) : strlen(line);
        if (in_expect) {
            if (n == 0 || line[0] != '#') {
                in_expect = false;
            } else {
                /* "# text" -> "text"; "#" alone -> an empty line */
                size_t skip = n >= 2 && line[1] == ' ' ? 2 : 1;
                memcpy(d->expect + len, line + skip, n - skip);
                len += n - skip;
                d->expect[len++] = '\n';
                d->expect[len] = 0;
            }
        }
        if (!in_expect) {
            if (!strncmp(line, "# RUN:", 6)) snprintf(d->run, sizeof d->run, "%.*s", (int)(n - 6), line + 6);
            else if (!strncmp(line, "# BIND:", 7)) snprintf(d->bind, sizeof d->bind, "%.*s", (int)(n - 7), line + 7);
            else if (!strncmp(line, "# EXPECT:", 9)) in_expect = have_expect = true;
        }
        line += n + (eol ? 1 : 0);
    }
    return d->run[0] && have_expect;
}

/* Run a comma-separated list of passes, verifying after each. */
static inline fc_status run_passes(fc_graph *g, const char *list, const char *where) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save, *p = strtok_r(buf, ", ", &save); p; p = strtok_r(NULL, ", ", &save)) {
        fc_status st;
        if (!strcmp(p, "canonicalize")) st = fc_pass_canonicalize(g);
        else if (!strcmp(p, "decompose")) st = fc_pass_decompose(g);
        else if (!strcmp(p, "dce")) st = fc_pass_dce(g);
        else if (!strcmp(p, "epilogue")) st = fc_pass_epilogue(g);
        else if (!strcmp(p, "attention")) st = fc_pass_attention(g);
        else if (!strcmp(p, "autocast_bf16")) st = fc_pass_autocast(g, FC_PRECISION_BF16);
        else if (!strcmp(p, "autocast_f16")) st = fc_pass_autocast(g, FC_PRECISION_F16);
        else if (!strcmp(p, "autocast_f32")) st = fc_pass_autocast(g, FC_PRECISION_F32);
        else if (!strcmp(p, "recognize_views")) st = fc_pass_recognize_views(g);
        else if (!strcmp(p, "recognize_gelu")) st = fc_pass_recognize_gelu(g);
        else if (!strcmp(p, "recognize_norm")) st = fc_pass_recognize_norm(g);
        else if (!strcmp(p, "pad")) st = fc_pass_pad(g);
        else if (!strcmp(p, "residual")) st = fc_pass_residual(g);
        else if (!strcmp(p, "fold_batch_norm")) st = fc_pass_fold_batch_norm(g);
        else if (!strcmp(p, "lower_conv")) st = fc_pass_lower_conv(g);
        else if (!strcmp(p, "lower_conv_library")) st = fc_pass_lower_conv_library(g, FC_PRECISION_AS_WRITTEN);
        else if (!strcmp(p, "lower_conv_library_bf16")) st = fc_pass_lower_conv_library(g, FC_PRECISION_BF16);
        else if (!strcmp(p, "layout")) st = fc_pass_layout(g);
        else if (!strcmp(p, "concat_tree")) st = fc_pass_concat_tree(g);
        else if (!strcmp(p, "concat_tree_4")) st = fc_pass_concat_tree_with(g, 4);
        else if (!strcmp(p, "pad_always")) {
            /* Every unaligned GEMM padded: launches free, unaligned math
             * slow without end (small graphs that the reference runs). */
            static const fc_pad_rule always = {1e12, 1e12, 1e12, 0, 1e30, 1, 0, 0, 0, 0, 0, 0, 0};
            st = fc_pass_pad_with(g, &always);
        }
        else {
            fprintf(stderr, "%s: unknown pass '%s'\n", where, p);
            return FC_ERR_USAGE;
        }
        if (st == FC_OK) st = fc_verify(g);
        if (st != FC_OK) {
            fprintf(stderr, "%s: after %s: %s\n", where, p, fc_last_error(g->ctx));
            return st;
        }
    }
    return FC_OK;
}

/* "N=4, T=8" -> bindings (their names point into a static buffer, valid
 * until the next call). */
static inline int parse_binds(const char *text, fc_binding *binds, int max) {
    static char buf[256];
    snprintf(buf, sizeof buf, "%s", text);
    int n = 0;
    for (char *save, *p = strtok_r(buf, ", ", &save); p && n < max; p = strtok_r(NULL, ", ", &save)) {
        char *eq = strchr(p, '=');
        if (!eq) continue;
        *eq = 0;
        binds[n].name = p;
        binds[n].value = strtoll(eq + 1, NULL, 10);
        n++;
    }
    return n;
}

/* pass on the graph parsed from text (after prep, run unhurt, when given)
 * with its nth allocation failing, for n = 1, 2, ... until it succeeds:
 * each failure is FC_ERR_NOMEM, success comes only when no allocation
 * failed (none is swallowed), and the graph it leaves verifies and prints
 * as the unhurt run's. Returns how many runs failed. */
static inline int pass_through_alloc_failures(const char *text, fc_status (*prep)(fc_graph *),
                                              fc_status (*pass)(fc_graph *)) {
    char *want = NULL;
    int failures = 0;
    bool done = false;
    for (long n = 0; n < 10000 && !done; n++) {
        fc_context *ctx = fc_context_new();
        fc_graph *g = NULL;
        fc_status st = fc_parse(ctx, "alloc.ir", text, strlen(text), NULL, NULL, 0, &g);
        if (st == FC_OK && prep) st = prep(g);
        CHECK_EQ_INT(st, FC_OK);
        if (st != FC_OK) {
            fprintf(stderr, "alloc.ir: %s\n", fc_last_error(ctx));
            fc_graph_free(g);
            fc_context_free(ctx);
            break;
        }
        fc_context_fail_alloc_after(ctx, n);
        st = pass(g);
        bool injected = n > 0 && ctx->alloc_count >= n;
        fc_context_fail_alloc_after(ctx, 0);
        if (st == FC_OK) {
            CHECK(!injected);
            CHECK_EQ_INT(fc_verify(g), FC_OK);
            char *got = fc_print(g);
            if (n == 0) want = got;
            else {
                CHECK_STR(got, want);
                fc_free(got);
                done = true;
            }
        } else {
            if (st != FC_ERR_NOMEM) fprintf(stderr, "alloc failure %ld: status %d: %s\n", n, st, fc_last_error(ctx));
            CHECK_EQ_INT(st, FC_ERR_NOMEM);
            CHECK(n > 0);
            failures++;
        }
        fc_graph_free(g);
        fc_context_free(ctx);
    }
    CHECK(done);
    fc_free(want);
    return failures;
}

static inline void run_pass_file(const char *path, void (*same)(const char *, fc_graph *, fc_graph *)) {
    char *text = read_file(path, NULL);
    CHECK(text != NULL);
    if (!text) return;
    directives d;
    if (!read_directives(text, &d)) {
        fprintf(stderr, "%s: needs '# RUN:' and '# EXPECT:'\n", path);
        CHECK(false);
        free(d.expect);
        free(text);
        return;
    }
    fc_binding binds[8];
    int nbinds = parse_binds(d.bind, binds, 8);
    fc_context *ctx = fc_context_new();
    fc_graph *g = NULL, *g0 = NULL;
    if (fc_parse(ctx, path, text, strlen(text), NULL, binds, nbinds, &g) != FC_OK) {
        fprintf(stderr, "%s: %s\n", path, fc_last_error(ctx));
        CHECK(false);
    } else if (same && !(g0 = fc_graph_clone(g))) {
        CHECK(false);
    } else if (run_passes(g, d.run, path) != FC_OK) {
        CHECK(false);
    } else {
        char *got = fc_print(g);
        if (!got || strcmp(got, d.expect)) fprintf(stderr, "FAIL %s (RUN:%s)\n", path, d.run);
        CHECK_STR(got, d.expect);
        /* A fixpoint: the same passes again change nothing. */
        if (run_passes(g, d.run, path) == FC_OK) {
            char *again = fc_print(g);
            if (!again || !got || strcmp(again, got)) fprintf(stderr, "FAIL %s: not a fixpoint\n", path);
            CHECK_STR(again, got);
            fc_free(again);
        } else {
            CHECK(false);
        }
        fc_free(got);
        if (same) same(path, g0, g);
        /* The expected text is itself canonical .ir. */
        fc_graph *e = NULL;
        if (fc_parse(ctx, "expect", d.expect, strlen(d.expect), NULL, binds, nbinds, &e) == FC_OK) {
            char *back = fc_print(e);
            CHECK_STR(back, d.expect);
            fc_free(back);
        } else {
            fprintf(stderr, "%s: the EXPECT block does not parse: %s\n", path, fc_last_error(ctx));
            CHECK(false);
        }
        fc_graph_free(e);
    }
    fc_graph_free(g0);
    fc_graph_free(g);
    fc_context_free(ctx);
    free(d.expect);
    free(text);
}
#endif
