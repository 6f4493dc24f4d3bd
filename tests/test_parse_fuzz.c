/*
 * test_parse_fuzz.c - robustness of the .ir parser and printer.
 *
 * No input may crash the parser, hang it, or recurse without bound, and every
 * failure must carry a located "f.ir:line:col: error:" diagnostic. Inputs:
 * single bytes, binary garbage, token soup, deep nesting, huge lines, every
 * truncation of every .ir file in the tree, random mutations of them, and
 * allocation failures injected at every point of a parse and a print.
 *
 * Deterministic: a fixed seed (FUSEC_FUZZ_SEED overrides it, and
 * FUSEC_FUZZ_SCALE multiplies the number of random cases for longer runs).
 * Whatever parses must also print, and the print must be a fixed point.
 */
#include "check.h"
#include "fusec.h"
#include "test_util.h"

#include <ctype.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static fc_context *ctx;
static long nparsed, nrejected;

/* xorshift64*: small, fast, and the same on every platform. */
static uint64_t rng = 0x9E3779B97F4A7C15u;
static uint64_t rnd(void) {
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 2685821657736338717u;
}
static size_t rnd_below(size_t n) { return n ? (size_t)(rnd() % n) : 0; }

/* "f.ir:LINE:COL: error: " with LINE, COL >= 1. */
static bool located(const char *msg) {
    if (strncmp(msg, "f.ir:", 5) != 0) return false;
    const char *p = msg + 5;
    for (int field = 0; field < 2; field++) {
        if (!isdigit((unsigned char)*p) || *p == '0') return false;
        while (isdigit((unsigned char)*p)) p++;
        if (*p++ != ':') return false;
    }
    return strncmp(p, " error: ", 8) == 0;
}

static void report(const char *what, const char *text, size_t len, const char *problem) {
    check_failed++;
    fprintf(stderr, "%s: %s\n--- input (%zu bytes, first 300 shown):\n%.*s\n--- error:\n%s\n", what, problem, len,
            (int)(len > 300 ? 300 : len), text, fc_last_error(ctx));
}

/* Parse one input and check the outcome. */
static void try_parse(const char *what, const char *text, size_t len) {
    fc_graph *g = NULL;
    fc_status st = fc_parse(ctx, "f.ir", text, len, NULL, NULL, 0, &g);
    if (st != FC_OK) {
        nrejected++;
        if (st != FC_ERR_INPUT || g != NULL) report(what, text, len, "wrong status or graph left set");
        else if (!located(fc_last_error(ctx))) report(what, text, len, "diagnostic without file:line:col");
        else check_passed++;
        return;
    }
    nparsed++;
    char *once = fc_print(g);
    fc_graph_free(g);
    if (!once) {
        report(what, text, len, "parsed but does not print");
        return;
    }
    char *twice = NULL;
    if (fc_parse(ctx, "f.ir", once, strlen(once), NULL, NULL, 0, &g) == FC_OK) {
        twice = fc_print(g);
        fc_graph_free(g);
    }
    if (twice && strcmp(once, twice) == 0) check_passed++;
    else report(what, once, strlen(once), "print does not round-trip");
    free(once);
    free(twice);
}

/* ------------------------------------------------------------------ */
/* The corpus: every .ir file of the tree                              */
/* ------------------------------------------------------------------ */

typedef struct File {
    char *path;
    char *text;
    size_t len;
} File;

static File corpus[256];
static int ncorpus;

static void collect(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) && ncorpus < (int)(sizeof corpus / sizeof corpus[0])) {
        if (e->d_name[0] == '.') continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(path, &st) != 0) continue;
        size_t n = strlen(e->d_name);
        if (S_ISDIR(st.st_mode)) collect(path);
        else if (n > 3 && strcmp(e->d_name + n - 3, ".ir") == 0) {
            File *f = &corpus[ncorpus];
            f->text = read_file(path, &f->len);
            if (!f->text) continue;
            f->path = strdup(path);
            ncorpus++;
        }
    }
    closedir(d);
}

/* readdir order differs between machines: sort, so the seed decides all. */
static int by_path(const void *a, const void *b) { return strcmp(((const File *)a)->path, ((const File *)b)->path); }

static void load_corpus(void) {
    const char *src = getenv("FUSEC_SRC");
    static const char *const dirs[] = {"examples", "tests", "bench"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", src ? src : ".", dirs[i]);
        collect(path);
    }
    qsort(corpus, (size_t)ncorpus, sizeof corpus[0], by_path);
    CHECK(ncorpus >= 1); /* tests/format/all_ops.ir at least */
}

/* ------------------------------------------------------------------ */
/* Cases                                                               */
/* ------------------------------------------------------------------ */

static void test_tiny(void) {
    try_parse("empty", "", 0);
    try_parse("NULL", NULL, 0);
    for (int c = 0; c < 256; c++) {
        char b = (char)c;
        try_parse("one byte", &b, 1);
    }
    /* Each byte value in the middle of a valid graph. */
    static const char base[] = "graph g(%x: f32[4]) {\n  %y = neg(%x)\n  return %y\n}\n";
    char buf[sizeof base];
    for (int c = 0; c < 256; c++) {
        memcpy(buf, base, sizeof base);
        buf[28] = (char)c;
        try_parse("one byte in a graph", buf, sizeof base - 1);
    }
}

static void test_garbage(int scale) {
    char buf[512];
    for (int i = 0; i < 500 * scale; i++) {
        size_t n = 1 + rnd_below(sizeof buf);
        for (size_t k = 0; k < n; k++) buf[k] = (char)rnd();
        try_parse("binary garbage", buf, n);
    }
}

/* Token soup: valid tokens in random order reach deeper parser states than
 * random bytes do. A valid prefix is sometimes put in front. */
static void test_token_soup(int scale) {
    static const char *const toks[] = {
        "graph", "g", "(", ")", "{", "}", "[", "]", ",", "=", ":", "%x", "%y", "%z", "return", "f32", "bf16",
        "bool", "i32", "B", "T", "4", "8", "-1", "0", "1.5", "-inf", "nan", "1e999", "axis", "axes", "shape",
        "sizes", "perm", "keepdim", "true", "false", "to", "dtype", "eps", "value", "add", "neg", "matmul",
        "split", "reshape", "concat", "softmax", "where", "iota", "full", "reduce_sum", "\"s\"", "#c\n", "\n",
        "99999999999999999999", "-9223372036854775808", "slice", "start", "end", "step", "expand", "gather",
    };
    static const char prefix[] = "graph g(%x: f32[B, 8], %y: f32[8]) {\n  %z = add(%x, %y)\n";
    char buf[1024];
    for (int i = 0; i < 3000 * scale; i++) {
        size_t n = 0;
        if (rnd() & 1) {
            memcpy(buf, prefix, sizeof prefix - 1);
            n = sizeof prefix - 1;
        }
        int count = 1 + (int)rnd_below(40);
        for (int k = 0; k < count; k++) {
            const char *t = toks[rnd_below(sizeof toks / sizeof toks[0])];
            size_t m = strlen(t);
            if (n + m + 1 >= sizeof buf) break;
            memcpy(buf + n, t, m);
            n += m;
            buf[n++] = rnd() % 4 ? ' ' : '\n';
        }
        try_parse("token soup", buf, n);
    }
}

static char *repeat(const char *head, char c, size_t n, const char *tail, size_t *len) {
    size_t h = strlen(head), t = strlen(tail);
    char *s = malloc(h + n + t + 1);
    memcpy(s, head, h);
    memset(s + h, c, n);
    memcpy(s + h + n, tail, t + 1);
    *len = h + n + t;
    return s;
}

/* Deep nesting and huge lines: a recursive or quadratic parser shows here. */
static void test_extremes(void) {
    static const struct {
        const char *what, *head;
        char c;
        const char *tail;
    } cases[] = {
        {"100k '['", "", '[', ""},
        {"100k '('", "", '(', ""},
        {"100k '{'", "", '{', ""},
        {"100k '[' in an attribute", "graph g(%x: f32[4]) {\n  %y = reshape(%x, shape=", '[', ""},
        {"100k '(' in an operand list", "graph g(%x: f32[4]) {\n  %y = neg(", '(', ""},
        {"100k '[' in a type", "graph g(%x: f32", '[', ""},
        {"1M comment", "#", 'c', "\ngraph g(%x: f32[4]) {\n  return %x\n}\n"},
        {"1M value name", "graph g(%", 'v', ": f32[4]) {\n  return %x\n}\n"},
        {"1M graph name", "graph g", 'g', "(%x: f32[4]) {\n  return %x\n}\n"},
        {"1M symbol", "graph g(%x: f32[S", 'S', "]) {\n  return %x\n}\n"},
        {"100k-digit integer", "graph g(%x: f32[4]) {\n  %y = softmax(%x, axis=1", '0', ")\n  return %y\n}\n"},
        {"100k-digit float", "graph g(%x: f32[4]) {\n  %y = mul(%x, 1.", '5', ")\n  return %y\n}\n"},
        {"100k-digit dim", "graph g(%x: f32[1", '0', "]) {\n  return %x\n}\n"},
        {"1M op name", "graph g(%x: f32[4]) {\n  %y = neg", 'g', "(%x)\n  return %y\n}\n"},
        {"1M spaces", "graph g(%x: f32[4]) {", ' ', "return %x }"},
        {"1M newlines", "graph g(%x: f32[4]) {", '\n', "return %x } junk"},
        {"unterminated 1M string", "graph g(%x: f32[4]) {\n  %y = cast(%x, to=\"", 's', ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = strstr(cases[i].what, "1M") ? 1000000 : 100000, len;
        char *s = repeat(cases[i].head, cases[i].c, n, cases[i].tail, &len);
        try_parse(cases[i].what, s, len);
        free(s);
    }

    /* Valid but wide: a 20k-operand concat on one line, 20k statements. */
    size_t cap = 1 << 22, n = 0;
    char *s = malloc(cap);
    n += (size_t)sprintf(s + n, "graph g(%%x: f32[1]) {\n  %%y = concat(");
    for (int i = 0; i < 20000; i++) n += (size_t)sprintf(s + n, "%s%%x", i ? ", " : "");
    n += (size_t)sprintf(s + n, ", axis=0)\n  %%v0 = neg(%%x)");
    for (int i = 1; i < 20000; i++) n += (size_t)sprintf(s + n, " %%v%d = neg(%%v%d)", i, i - 1);
    n += (size_t)sprintf(s + n, "\n  return %%y, %%v19999\n}\n");
    try_parse("wide", s, n);
    CHECK(nparsed >= 1);

    /* 20k graphs, the last repeating a name: the repeat is found without
     * comparing every pair, and reported at the repeat. */
    n = 0;
    for (int i = 0; i < 20000; i++) n += (size_t)sprintf(s + n, "graph g%d(%%x: f32[4]) {\n  return %%x\n}\n", i);
    n += (size_t)sprintf(s + n, "graph g7(%%x: f32[4]) {\n  return %%x\n}\n");
    fc_graph *g = NULL;
    CHECK_EQ_INT(fc_parse(ctx, "f.ir", s, n, NULL, NULL, 0, &g), FC_ERR_INPUT);
    CHECK_STR(fc_last_error(ctx), "f.ir:60001:7: error: graph 'g7' is already defined\n"
                                  "    graph g7(%x: f32[4]) {\n"
                                  "          ^\n");
    free(s);
}

/* Every prefix of every file: the parser meets end of file everywhere. */
static void test_truncations(void) {
    /* About 60k parses in all, however many files the tree holds: small
     * files get every offset, large ones evenly spaced ones. */
    size_t per_file = ncorpus ? 60000 / (size_t)ncorpus : 0;
    if (per_file < 200) per_file = 200;
    for (int i = 0; i < ncorpus; i++) {
        const File *f = &corpus[i];
        size_t step = f->len / per_file + 1;
        for (size_t n = 0; n < f->len; n += step) try_parse(f->path, f->text, n);
    }
}

/* Random edits of the corpus: bytes flipped, ranges deleted, duplicated or
 * swapped, tokens inserted. */
static void test_mutations(int scale) {
    static const char *const inserts[] = {"%x", "(", ")", "[", "]", "{", "}", ",", "=", ":", "-1", "1e999",
                                          "graph g(", "return", "\"", "#", "\n", "\0", "nan", "[[", "%",
                                          "f32[", "axis=", "shape=[B, -1]", "%q = neg(%x)"};
    if (ncorpus == 0) return;
    size_t cap = 0;
    char *buf = NULL;
    for (int i = 0; i < 4000 * scale; i++) {
        const File *f = &corpus[rnd_below((size_t)ncorpus)];
        if (cap < f->len * 2 + 256) {
            cap = f->len * 2 + 256;
            buf = realloc(buf, cap);
        }
        memcpy(buf, f->text, f->len);
        size_t n = f->len;
        int edits = 1 + (int)rnd_below(4);
        for (int e = 0; e < edits && n > 0; e++) {
            size_t at = rnd_below(n), span = 1 + rnd_below(n - at < 16 ? n - at : 16);
            switch (rnd_below(5)) {
            case 0: buf[at] = (char)rnd(); break;
            case 1:
                memmove(buf + at, buf + at + span, n - at - span);
                n -= span;
                break;
            case 2:
                if (n + span < cap) {
                    memmove(buf + at + span, buf + at, n - at);
                    n += span;
                }
                break;
            case 3: {
                size_t other = rnd_below(n - span + 1);
                for (size_t k = 0; k < span && other + k < n; k++) {
                    char t = buf[at + k];
                    buf[at + k] = buf[other + k];
                    buf[other + k] = t;
                }
                break;
            }
            default: {
                const char *t = inserts[rnd_below(sizeof inserts / sizeof inserts[0])];
                size_t m = *t ? strlen(t) : 1;
                if (n + m < cap) {
                    memmove(buf + at + m, buf + at, n - at);
                    memcpy(buf + at, t, m);
                    n += m;
                }
            }
            }
        }
        try_parse(f->path, buf, n);
    }
    free(buf);
}

/* Fail the Nth allocation of a parse, and of a print, for every N: each
 * must fail cleanly with FC_ERR_NOMEM (LeakSanitizer checks nothing leaks)
 * until N is past the last allocation. */
static void test_alloc_failures(void) {
    const File *f = NULL;
    for (int i = 0; i < ncorpus; i++)
        if (!f || (strstr(corpus[i].path, "all_ops.ir") && !strstr(f->path, "all_ops.ir"))) f = &corpus[i];
    if (!f) return;
    fc_graph *g = NULL;
    long n = 1;
    for (;; n++) {
        fc_context_fail_alloc_after(ctx, n);
        fc_status st = fc_parse(ctx, "f.ir", f->text, f->len, NULL, NULL, 0, &g);
        fc_context_fail_alloc_after(ctx, 0);
        if (st == FC_OK) break;
        if (st != FC_ERR_NOMEM || g) {
            report("allocation failure in parse", f->text, f->len, "expected FC_ERR_NOMEM");
            return;
        }
        check_passed++;
    }
    printf("parse survived an allocation failure at each of its %ld allocations\n", n - 1);
    for (n = 1;; n++) {
        fc_context_fail_alloc_after(ctx, n);
        char *s = fc_print(g);
        fc_context_fail_alloc_after(ctx, 0);
        if (s) {
            free(s);
            break;
        }
        check_passed++;
    }
    fc_graph_free(g);
}

int main(void) {
    const char *seed = getenv("FUSEC_FUZZ_SEED");
    const char *sc = getenv("FUSEC_FUZZ_SCALE");
    if (seed) rng ^= strtoull(seed, NULL, 0) * 0x2545F4914F6CDD1Du; /* any seed, never 0 */
    if (!rng) rng = 1;
    int scale = sc && atoi(sc) > 0 ? atoi(sc) : 1;
    printf("seed 0x%llx, scale %d\n", (unsigned long long)rng, scale);

    ctx = fc_context_new();
    clock_t t0 = clock();
    load_corpus();
    test_tiny();
    test_garbage(scale);
    test_token_soup(scale);
    test_extremes();
    test_truncations();
    test_mutations(scale);
    test_alloc_failures();
    printf("%d files; %ld inputs parsed, %ld rejected with a located error; %.1f s\n", ncorpus, nparsed, nrejected,
           (double)(clock() - t0) / CLOCKS_PER_SEC);
    for (int i = 0; i < ncorpus; i++) {
        free(corpus[i].path);
        free(corpus[i].text);
    }
    fc_context_free(ctx);
    return check_report("test_parse_fuzz");
}
