/*
 * test_npy.c - the .npy reader and writer of the CLI (tools/npy.c):
 * round trips for every dtype, the exact bytes numpy writes, and truncated or
 * corrupt files, which must fail cleanly (ASan checks that nothing reads out
 * of bounds or leaks).
 */
#include "../tools/npy.c"

#include "check.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- helpers --------------------------------------------------------- */

/* A stream holding bytes [0, n) of buf, positioned at its start. */
static FILE *stream_of(const void *buf, size_t n) {
    FILE *f = tmpfile();
    if (!f) return NULL;
    if (n && fwrite(buf, 1, n, f) != n) {
        fclose(f);
        return NULL;
    }
    rewind(f);
    return f;
}

/* Read bytes with npy_read_stream; returns its result, err filled. */
static int read_bytes(const void *buf, size_t n, fc_tensor *t, char *err, size_t errlen) {
    FILE *f = stream_of(buf, n);
    if (!f) {
        snprintf(err, errlen, "tmpfile failed");
        memset(t, 0, sizeof *t);
        return -2;
    }
    int rc = npy_read_stream(f, "t.npy", t, err, errlen);
    fclose(f);
    return rc;
}

/* Serialize t to a malloc'd buffer. */
static unsigned char *write_bytes(const fc_tensor *t, size_t *n) {
    FILE *f = tmpfile();
    if (!f) return NULL;
    char err[256];
    unsigned char *buf = NULL;
    if (npy_write_stream(f, "t.npy", t, err, sizeof err) == 0) {
        long len = ftell(f);
        rewind(f);
        buf = malloc(len > 0 ? (size_t)len : 1);
        if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) {
            free(buf);
            buf = NULL;
        }
        *n = (size_t)len;
    } else {
        fprintf(stderr, "write failed: %s\n", err);
    }
    fclose(f);
    return buf;
}

/* Build a .npy file as numpy would: magic, version, length, dict, padding
 * with spaces to a multiple of 64, '\n', data. */
static unsigned char *make_npy(int major, const char *dict, const void *data, size_t ndata, size_t *n) {
    size_t prelude = major == 1 ? 10 : 12, dl = strlen(dict);
    size_t head = prelude + dl + 1;
    head += 64 - head % 64;
    unsigned char *buf = calloc(1, head + ndata + 1);
    if (!buf) return NULL;
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    buf[7] = 0;
    size_t hl = head - prelude;
    for (size_t i = 0; i < prelude - 8; i++) buf[8 + i] = (unsigned char)(hl >> (8 * i));
    memcpy(buf + prelude, dict, dl);
    memset(buf + prelude + dl, ' ', head - prelude - dl - 1);
    buf[head - 1] = '\n';
    if (ndata) memcpy(buf + head, data, ndata);
    *n = head + ndata;
    return buf;
}

/* Expect reading `dict` + data to fail with a message containing `want`. */
static void expect_bad_dict(int major, const char *dict, size_t ndata, const char *want, int line) {
    unsigned char data[64] = {0};
    size_t n;
    unsigned char *buf = make_npy(major, dict, data, ndata, &n);
    fc_tensor t;
    char err[512] = "";
    int rc = buf ? read_bytes(buf, n, &t, err, sizeof err) : -2;
    if (rc == -1 && strstr(err, want) && !t.data) {
        check_passed++;
    } else {
        check_failed++;
        fprintf(stderr, "test_npy.c:%d: dict %s: rc %d, error '%s', expected '%s'\n", line, dict, rc, err, want);
    }
    npy_tensor_free(&t);
    free(buf);
}
#define EXPECT_BAD_DICT(major, dict, ndata, want) expect_bad_dict(major, dict, ndata, want, __LINE__)

/* ---- tests ----------------------------------------------------------- */

static void test_roundtrip(void) {
    static const fc_dtype dts[] = {FC_F64, FC_F32, FC_F16, FC_I64, FC_I32, FC_I8, FC_BOOL};
    static const int64_t shapes[][4] = {{0}, {5}, {2, 3}, {2, 0, 3}, {1, 2, 3, 4}};
    static const int ranks[] = {0, 1, 2, 3, 4};
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
        for (size_t s = 0; s < sizeof ranks / sizeof ranks[0]; s++) {
            fc_tensor t = {.dtype = dts[d], .rank = ranks[s]};
            memcpy(t.shape, shapes[s], sizeof shapes[s]);
            int64_t numel = fc_tensor_numel(&t);
            size_t es = elem_size(t.dtype), nbytes = (size_t)numel * es;
            unsigned char *data = malloc(nbytes + 1);
            for (size_t i = 0; i < nbytes; i++) data[i] = (unsigned char)(i * 7 + 3);
            if (t.dtype == FC_BOOL)
                for (size_t i = 0; i < nbytes; i++) data[i] &= 1;
            t.data = data;
            size_t n = 0;
            unsigned char *buf = write_bytes(&t, &n);
            CHECK(buf != NULL);
            CHECK(n % 64 == nbytes % 64); /* data starts at a multiple of 64 */
            fc_tensor r;
            char err[256] = "";
            int rc = buf ? read_bytes(buf, n, &r, err, sizeof err) : -1;
            CHECK_STR(err, "");
            CHECK_EQ_INT(rc, 0);
            if (rc == 0) {
                CHECK_EQ_INT(r.dtype, t.dtype);
                CHECK_EQ_INT(r.rank, t.rank);
                for (int i = 0; i < t.rank; i++) CHECK_EQ_INT(r.shape[i], t.shape[i]);
                CHECK(memcmp(r.data, t.data, nbytes) == 0);
            }
            npy_tensor_free(&r);
            free(buf);
            free(data);
        }
    }
}

/* The header text is exactly what numpy.save writes. */
static void test_numpy_bytes(void) {
    float v[6] = {1.5f, -2, 3, 4, 5, 6.25f};
    fc_tensor t = {.dtype = FC_F32, .rank = 2, .shape = {2, 3}, .data = v};
    size_t n;
    unsigned char *buf = write_bytes(&t, &n);
    CHECK(buf != NULL);
    if (!buf) return;
    CHECK_EQ_INT(n, 128 + sizeof v);
    CHECK(memcmp(buf, "\x93NUMPY\x01\x00\x76\x00", 10) == 0); /* 118 = 128 - 10 */
    const char *dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    CHECK(memcmp(buf + 10, dict, strlen(dict)) == 0);
    CHECK(buf[127] == '\n' && buf[126] == ' ' && buf[10 + strlen(dict)] == ' ');
    CHECK(memcmp(buf + 128, v, sizeof v) == 0);
    free(buf);

    /* 1-D and scalar shapes as Python writes tuples. */
    int32_t iv[3] = {1, -2, 300};
    fc_tensor t1 = {.dtype = FC_I32, .rank = 1, .shape = {3}, .data = iv};
    buf = write_bytes(&t1, &n);
    CHECK(buf && strstr((char *)buf + 10, "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }") ==
                     (char *)buf + 10);
    free(buf);
    unsigned char b = 1;
    fc_tensor t0 = {.dtype = FC_BOOL, .rank = 0, .data = &b};
    buf = write_bytes(&t0, &n);
    CHECK(buf && strstr((char *)buf + 10, "{'descr': '|b1', 'fortran_order': False, 'shape': (), }") ==
                     (char *)buf + 10);
    CHECK_EQ_INT(n, 128 + 1); /* 10 + 55 + 1 bytes of header round up to 128 */
    free(buf);
}

/* Files other writers make: version 2.0, double quotes, no trailing comma,
 * other key order, |u1 as bool, a 16-byte aligned (older numpy) header. */
static void test_read_variants(void) {
    float v[2] = {1, 2};
    const char *dicts[] = {
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
        "{\"shape\": (2,), \"descr\": \"<f4\", \"fortran_order\": False}",
        "{'shape':(2L,),'fortran_order':False,'descr':'<f4'}",
    };
    for (int major = 1; major <= 3; major++) {
        for (size_t i = 0; i < sizeof dicts / sizeof dicts[0]; i++) {
            size_t n = 0;
            unsigned char *buf = make_npy(major, dicts[i], v, sizeof v, &n);
            fc_tensor t;
            char err[256] = "";
            CHECK_EQ_INT(read_bytes(buf, n, &t, err, sizeof err), 0);
            CHECK_STR(err, "");
            CHECK(t.dtype == FC_F32 && t.rank == 1 && t.shape[0] == 2 && t.data &&
                  memcmp(t.data, v, sizeof v) == 0);
            npy_tensor_free(&t);
            free(buf);
        }
    }

    /* Old numpy: padded to 16 bytes only. */
    const char *dict = "{'descr': '<i8', 'fortran_order': False, 'shape': (1,), }";
    unsigned char buf[256];
    size_t hl = strlen(dict) + 1;
    hl += (16 - (10 + hl) % 16) % 16;
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (unsigned char)hl;
    buf[9] = 0;
    memset(buf + 10, ' ', hl);
    memcpy(buf + 10, dict, strlen(dict));
    buf[10 + hl - 1] = '\n';
    int64_t one = -7;
    memcpy(buf + 10 + hl, &one, 8);
    fc_tensor t;
    char err[256] = "";
    CHECK_EQ_INT(read_bytes(buf, 10 + hl + 8, &t, err, sizeof err), 0);
    CHECK(t.dtype == FC_I64 && t.data && ((int64_t *)t.data)[0] == -7);
    npy_tensor_free(&t);

    /* |u1 reads as bool, any nonzero byte as 1. */
    unsigned char u[4] = {0, 1, 2, 255};
    size_t n;
    unsigned char *ub = make_npy(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (4,), }", u, 4, &n);
    CHECK_EQ_INT(read_bytes(ub, n, &t, err, sizeof err), 0);
    CHECK(t.dtype == FC_BOOL && t.data && memcmp(t.data, "\0\1\1\1", 4) == 0);
    npy_tensor_free(&t);
    free(ub);
}

static void test_bad_headers(void) {
    EXPECT_BAD_DICT(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", 4, "big-endian");
    EXPECT_BAD_DICT(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 16, "fortran_order");
    EXPECT_BAD_DICT(1, "{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", 8, "unsupported dtype '<c8'");
    EXPECT_BAD_DICT(1, "{'descr': '<u4', 'fortran_order': False, 'shape': (1,), }", 4, "unsupported dtype '<u4'");
    EXPECT_BAD_DICT(1, "{'descr': '|O', 'fortran_order': False, 'shape': (1,), }", 8, "unsupported dtype");
    EXPECT_BAD_DICT(1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", 4, "structured");
    EXPECT_BAD_DICT(1, "{'descr': '<f4', 'shape': (1,), }", 4, "missing");
    EXPECT_BAD_DICT(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", 4, "unexpected");
    EXPECT_BAD_DICT(1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}", 4, "repeated");
    EXPECT_BAD_DICT(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", 4, "expected a dimension");
    EXPECT_BAD_DICT(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1.5,), }", 4, "shape");
    EXPECT_BAD_DICT(1, "{'descr': '<f4', 'fortran_order': False, 'shape': [1], }", 4, "expected '('");
    EXPECT_BAD_DICT(1, "{'descr': '<f4', 'fortran_order': false, 'shape': (1,), }", 4, "True or False");
    EXPECT_BAD_DICT(1, "{'descr': '<f4', 'fortran_order': Falsey, 'shape': (1,), }", 4, "True or False");
    EXPECT_BAD_DICT(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), } x", 4, "after the dict");
    EXPECT_BAD_DICT(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)", 4, "expected ',' or '}'");
    EXPECT_BAD_DICT(1, "{'descr: '<f4', 'fortran_order': False, 'shape': (1,)}", 4, "corrupt");
    EXPECT_BAD_DICT(1, "", 0, "expected '{'");
    EXPECT_BAD_DICT(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 1), }", 4,
                    "rank exceeds");
    EXPECT_BAD_DICT(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", 4,
                    "too large");
    EXPECT_BAD_DICT(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", 4,
                    "too large");
    EXPECT_BAD_DICT(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (1152921504606846976,), }", 4,
                    "too large");
    /* A huge but representable size must fail on the file size, before any
     * allocation of that size. */
    EXPECT_BAD_DICT(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000,), }", 4,
                    "truncated data");
    EXPECT_BAD_DICT(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 20, "truncated data");
    EXPECT_BAD_DICT(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 12, "after the data");
    EXPECT_BAD_DICT(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 0, "truncated data");
}

static void expect_bad_bytes(const void *buf, size_t n, const char *want, int line) {
    fc_tensor t;
    char err[512] = "";
    int rc = read_bytes(buf, n, &t, err, sizeof err);
    if (rc == -1 && strstr(err, want) && !t.data && strncmp(err, "t.npy: ", 7) == 0) {
        check_passed++;
    } else {
        check_failed++;
        fprintf(stderr, "test_npy.c:%d: rc %d, error '%s', expected '%s'\n", line, rc, err, want);
    }
    npy_tensor_free(&t);
}
#define EXPECT_BAD_BYTES(buf, n, want) expect_bad_bytes(buf, n, want, __LINE__)

static void test_bad_prelude(void) {
    EXPECT_BAD_BYTES("", 0, "truncated");
    EXPECT_BAD_BYTES("\x93NUM", 4, "truncated");
    EXPECT_BAD_BYTES("PK\x03\x04 not npy at all", 20, "bad magic");
    EXPECT_BAD_BYTES("\x93NUMPY\x01\x00", 8, "truncated");
    EXPECT_BAD_BYTES("\x93NUMPY\x02\x00\x10\x00", 10, "truncated");
    EXPECT_BAD_BYTES("\x93NUMPY\x04\x00\x10\x00", 10, "version 4.0");
    EXPECT_BAD_BYTES("\x93NUMPY\x01\x00\x00\x00", 10, "header length 0");
    EXPECT_BAD_BYTES("\x93NUMPY\x02\x00\xff\xff\xff\xff{}", 14, "out of range");
    EXPECT_BAD_BYTES("\x93NUMPY\x01\x00\xff\xff{'descr'", 17, "truncated .npy header");
}

/* Every prefix of a valid file fails cleanly, and so does a file with any
 * single header byte changed (it may also parse: it must just not crash). */
static void test_truncation_and_mutation(void) {
    double v[6] = {1, 2, 3, 4, 5, 6};
    fc_tensor t = {.dtype = FC_F64, .rank = 2, .shape = {3, 2}, .data = v};
    size_t n;
    unsigned char *buf = write_bytes(&t, &n);
    CHECK(buf != NULL);
    if (!buf) return;
    int bad = 0;
    for (size_t len = 0; len < n; len++) {
        fc_tensor r;
        char err[256];
        if (read_bytes(buf, len, &r, err, sizeof err) != -1 || r.data) bad++;
        npy_tensor_free(&r);
    }
    CHECK_EQ_INT(bad, 0);

    static const unsigned char values[] = {0, '\'', '"', '(', ')', ',', ':', '{', '}', '9', ' ', 'L', 0x80, 0xff};
    for (size_t pos = 0; pos < 128; pos++) {
        for (size_t k = 0; k < sizeof values; k++) {
            unsigned char *m = malloc(n);
            memcpy(m, buf, n);
            m[pos] = values[k];
            fc_tensor r;
            char err[256];
            int rc = read_bytes(m, n, &r, err, sizeof err);
            if (rc == 0) {
                /* whatever parsed must describe no more data than there is */
                CHECK(r.data != NULL);
                CHECK((size_t)fc_tensor_numel(&r) * elem_size(r.dtype) <= n - 10);
            }
            npy_tensor_free(&r);
            free(m);
        }
    }
    free(buf);
}

/* A stream that cannot seek (a pipe) takes the other size checks. */
static void test_pipe(void) {
    int32_t v[3] = {7, 8, 9};
    fc_tensor t = {.dtype = FC_I32, .rank = 1, .shape = {3}, .data = v};
    size_t n;
    unsigned char *buf = write_bytes(&t, &n);
    CHECK(buf != NULL);
    for (int variant = 0; buf && variant < 3; variant++) {
        /* 0: the file; 1: truncated by 4 bytes; 2: 4 extra bytes */
        size_t len = variant == 1 ? n - 4 : n;
        int fds[2];
        if (pipe(fds) != 0) {
            CHECK(!"pipe");
            break;
        }
        ssize_t w = write(fds[1], buf, len);
        if (variant == 2) w += write(fds[1], "junk", 4);
        close(fds[1]);
        CHECK(w > 0);
        FILE *f = fdopen(fds[0], "rb");
        fc_tensor r;
        char err[256] = "";
        int rc = npy_read_stream(f, "pipe", &r, err, sizeof err);
        if (variant == 0) {
            CHECK_EQ_INT(rc, 0);
            CHECK(r.data && memcmp(r.data, v, sizeof v) == 0);
        } else {
            CHECK_EQ_INT(rc, -1);
            CHECK(strstr(err, variant == 1 ? "truncated data" : "after the data") != NULL);
        }
        npy_tensor_free(&r);
        fclose(f);
    }
    free(buf);
}

static void test_files(void) {
    fc_tensor t;
    char err[512] = "";
    CHECK_EQ_INT(npy_read("/nonexistent/dir/x.npy", &t, err, sizeof err), -1);
    CHECK(strstr(err, "/nonexistent/dir/x.npy: cannot open") == err);
    CHECK(t.data == NULL);

    uint16_t h[2] = {0x3f80, 0x4000};
    fc_tensor bf = {.dtype = FC_BF16, .rank = 1, .shape = {2}, .data = h};
    CHECK_EQ_INT(npy_write("/nonexistent/dir/y.npy", &bf, err, sizeof err), -1);
    CHECK(strstr(err, "bf16") != NULL);
    CHECK(npy_descr(FC_BF16) == NULL);

    fc_tensor f16 = {.dtype = FC_F16, .rank = 1, .shape = {2}, .data = h};
    CHECK_EQ_INT(npy_write("/nonexistent/dir/y.npy", &f16, err, sizeof err), -1);
    CHECK(strstr(err, "cannot create") != NULL);

    char path[] = "/tmp/test_npy_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) return;
    close(fd);
    CHECK_EQ_INT(npy_write(path, &f16, err, sizeof err), 0);
    CHECK_EQ_INT(npy_read(path, &t, err, sizeof err), 0);
    CHECK(t.dtype == FC_F16 && t.rank == 1 && t.shape[0] == 2 && t.data && memcmp(t.data, h, 4) == 0);
    npy_tensor_free(&t);
    remove(path);
}

/* A NUL (or any control character) inside a header string is refused: it
 * would end the copy early and "<f4\0junk" would read as "<f4". */
static void test_nul_in_descr(void) {
    const char *dicts[] = {"{'descr': '<f4#x', 'fortran_order': False, 'shape': (1,), }",
                           "{'descr': '<f#', 'fortran_order': False, 'shape': (1,), }",
                           "{'descr': '#<f4', 'fortran_order': False, 'shape': (1,), }"};
    for (size_t k = 0; k < sizeof dicts / sizeof *dicts; k++) {
        float one = 1;
        size_t n = 0;
        unsigned char *buf = make_npy(1, dicts[k], &one, 4, &n);
        CHECK(buf != NULL);
        if (!buf) return;
        unsigned char *hash = memchr(buf, '#', n);
        CHECK(hash != NULL);
        if (hash) *hash = 0;
        EXPECT_BAD_BYTES(buf, n, "control character");
        free(buf);
    }
}

/* npy_read reads regular files only: a device never ends, and a FIFO
 * without a writer would block the open. */
static void test_not_regular(void) {
    fc_tensor t;
    char err[512] = "";
    CHECK_EQ_INT(npy_read("/dev/zero", &t, err, sizeof err), -1);
    CHECK(strstr(err, "/dev/zero: not a regular file") == err);
    char dir[] = "/tmp/test_npy_fifo_XXXXXX", fifo[64];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(fifo, sizeof fifo, "%s/f.npy", dir);
    CHECK(mkfifo(fifo, 0600) == 0);
    CHECK_EQ_INT(npy_read(fifo, &t, err, sizeof err), -1); /* returns at once */
    CHECK(strstr(err, "not a regular file") != NULL);
    CHECK_EQ_INT(npy_read(dir, &t, err, sizeof err), -1);
    unlink(fifo);
    rmdir(dir);
}

int main(void) {
    test_roundtrip();
    test_numpy_bytes();
    test_read_variants();
    test_bad_headers();
    test_bad_prelude();
    test_truncation_and_mutation();
    test_pipe();
    test_files();
    test_nul_in_descr();
    test_not_regular();
    return check_report("test_npy");
}
