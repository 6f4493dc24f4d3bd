/* test_input_bounds.c - fc_parse_file reads only what it should, and fast:
 * regular files or standard input ("-"), refusing devices and FIFOs before
 * a byte is read, files over the size limit before they are read, and
 * binary data at its first NUL; and parameters and symbols are looked up
 * by hash (100,000 parameters parse in well under a second). */
#include "check.h"
#include "frontend/input.h"
#include "fusec.h"
#include "test_util.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static fc_context *ctx;

static double clock_s(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static double now_s(void) { return clock_s(CLOCK_MONOTONIC); }
/* The process's CPU time: a parse's cost, which a loaded machine (CI's two
 * cores shared with other tests) does not stretch as it stretches wall
 * time. */
static double cpu_s(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }

static bool has(const char *s, const char *sub) { return s && strstr(s, sub) != NULL; }

/* fc_parse_file(path) fails with a message holding `want`, within a second. */
static void expect_refused(const char *path, const char *want, int line) {
    fc_graph *g = NULL;
    double t0 = now_s();
    fc_status st = fc_parse_file(ctx, path, NULL, NULL, 0, &g);
    double dt = now_s() - t0;
    if (st == FC_ERR_INPUT && !g && has(fc_last_error(ctx), want) && dt < 1.0) {
        check_passed++;
    } else {
        check_failed++;
        fprintf(stderr, "test_input_bounds.c:%d: %s: status %d in %.2f s, error '%s', expected '%s'\n", line, path,
                (int)st, dt, fc_last_error(ctx), want);
    }
    fc_graph_free(g);
}
#define EXPECT_REFUSED(path, want) expect_refused(path, want, __LINE__)

static void write_text(const char *path, const char *text, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(text, 1, n, f) != n) exit(2);
    fclose(f);
}

static const char good[] = "graph g(%x: f32[4]) {\n  %y = neg(%x)\n  return %y\n}\n";

static void test_not_regular(const char *dir) {
    char path[512];
    EXPECT_REFUSED("/dev/zero", "/dev/zero: error: it is a character device, not a .ir file");
    /* A FIFO with no writer: opening it for reading would block for ever. */
    snprintf(path, sizeof path, "%s/fifo.ir", dir);
    CHECK(mkfifo(path, 0600) == 0);
    EXPECT_REFUSED(path, "it is a FIFO, not a .ir file (fusec reads regular files, or standard input as '-')");
    EXPECT_REFUSED(dir, "it is a directory");
    EXPECT_REFUSED("/nonexistent/x.ir", "/nonexistent/x.ir: error: cannot open");
}

static void test_size_and_bytes(const char *dir) {
    char path[512];
    /* 3 GiB of zeros (a sparse file): refused by its size, unread. */
    snprintf(path, sizeof path, "%s/zeros.ir", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    if (fd >= 0) {
        CHECK(ftruncate(fd, (off_t)3 << 30) == 0);
        close(fd);
        EXPECT_REFUSED(path, "the file is 3221225472 bytes, more than the 1073741824 that a .ir file may have");
        /* Under the limit, zeros fail at the first chunk. */
        fd = open(path, O_WRONLY | O_TRUNC);
        CHECK(fd >= 0 && ftruncate(fd, (off_t)200 << 20) == 0);
        if (fd >= 0) close(fd);
        EXPECT_REFUSED(path, "not a .ir file: a NUL byte at offset 0");
        unlink(path);
    }
    /* A NUL after good text. */
    char text[sizeof good + 8];
    memcpy(text, good, sizeof good - 1);
    memcpy(text + sizeof good - 1, "\0# x\n", 5);
    snprintf(path, sizeof path, "%s/nul.ir", dir);
    write_text(path, text, sizeof good - 1 + 5);
    char want[64];
    snprintf(want, sizeof want, "a NUL byte at offset %zu", sizeof good - 1);
    EXPECT_REFUSED(path, want);
    /* The text itself still parses from a file. */
    snprintf(path, sizeof path, "%s/good.ir", dir);
    write_text(path, good, sizeof good - 1);
    fc_graph *g = NULL;
    CHECK_EQ_INT(fc_parse_file(ctx, path, NULL, NULL, 0, &g), FC_OK);
    fc_graph_free(g);
    /* The reader's own limit. */
    char *t = NULL;
    size_t n = 0;
    CHECK_EQ_INT(fc_read_input(ctx, path, "a .ir file", 10, &t, &n), FC_ERR_INPUT);
    CHECK(has(fc_last_error(ctx), "more than the 10 that a .ir file may have"));
    CHECK_EQ_INT(fc_read_input(ctx, path, "a .ir file", sizeof good - 1, &t, &n), FC_OK);
    CHECK(n == sizeof good - 1 && t && t[n] == 0 && memcmp(t, good, n) == 0);
    free(t);
}

/* "-" reads standard input: here a pipe, fed by a child. */
static void test_stdin(void) {
    int fds[2];
    CHECK(pipe(fds) == 0);
    int saved = dup(STDIN_FILENO);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        ssize_t w = write(fds[1], good, sizeof good - 1);
        _exit(w == (ssize_t)sizeof good - 1 ? 0 : 1);
    }
    close(fds[1]);
    dup2(fds[0], STDIN_FILENO);
    close(fds[0]);
    fc_graph *g = NULL;
    CHECK_EQ_INT(fc_parse_file(ctx, "-", NULL, NULL, 0, &g), FC_OK);
    CHECK(g && fc_graph_num_params(g) == 1);
    fc_graph_free(g);
    dup2(saved, STDIN_FILENO);
    close(saved);
    int status = 0;
    waitpid(pid, &status, 0);
}

/* Parameters and symbols by hash: 100,000 parameters over 1,000 symbols
 * parse in well under a second (the duplicate check compared each new
 * parameter with every earlier one: 22 s). */
static void test_many_params(const char *dir) {
    enum { N = 100000 };
    size_t cap = (size_t)N * 32 + 256, len = 0;
    char *text = malloc(cap);
    CHECK(text != NULL);
    if (!text) return;
    len += (size_t)snprintf(text + len, cap - len, "graph big(");
    for (int i = 0; i < N; i++)
        len += (size_t)snprintf(text + len, cap - len, "%s%%p%d: f32[S%d]", i ? ", " : "", i, i % 1000);
    len += (size_t)snprintf(text + len, cap - len, ") {\n  %%y = neg(%%p%d)\n  return %%y\n}\n", N - 1);
    char path[512];
    snprintf(path, sizeof path, "%s/params.ir", dir);
    write_text(path, text, len);
    free(text);
    fc_graph *g = NULL;
    double t0 = cpu_s();
    CHECK_EQ_INT(fc_parse_file(ctx, path, NULL, NULL, 0, &g), FC_OK);
    double dt = cpu_s() - t0;
    CHECK_EQ_INT(fc_graph_num_params(g), N);
    if (dt >= 1.0) fprintf(stderr, "100,000 parameters parsed in %.2f s of CPU time\n", dt);
    CHECK(dt < 1.0);
    /* A duplicate is still found, by hash. */
    fc_dim four = 4;
    CHECK(fc_value_is_poison(fc_param(g, "p77", FC_F32, 1, &four)));
    CHECK(has(fc_last_error(ctx), "parameter %p77 is already defined"));
    fc_graph_free(g);
    /* Symbols: the same name is the same dim, a bound one its value. */
    g = fc_graph_new(ctx, "s");
    CHECK_EQ_INT(fc_graph_bind(g, "B", 8), FC_OK);
    CHECK(fc_sym(g, "B") == 8);
    fc_dim t = fc_sym(g, "T");
    CHECK(fc_sym(g, "T") == t && fc_sym(g, "U") != t);
    CHECK_EQ_INT(fc_graph_bind(g, "T", 3), FC_ERR_USAGE); /* already in use */
    fc_graph_free(g);
}

int main(void) {
    ctx = fc_context_new();
    char dir[256];
    if (!temp_dir(dir, sizeof dir, "fusec-input-test")) return 2;
    test_not_regular(dir);
    test_size_and_bytes(dir);
    test_stdin();
    test_many_params(dir);
    rm_rf(dir);
    fc_context_free(ctx);
    return check_report("test_input_bounds");
}
