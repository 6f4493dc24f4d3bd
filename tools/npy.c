/*
 * npy.c - read and write NumPy .npy files. See npy.h for what is supported.
 *
 * The format (numpy/lib/format.py):
 *     "\x93NUMPY" major minor
 *     header_len: 2 bytes little-endian (1.0) or 4 bytes (2.0, 3.0)
 *     header: a Python dict literal, e.g.
 *         {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 *       padded with spaces and ended by '\n'
 *     the data, in C order
 *
 * The reader parses the dict with a small tokenizer that accepts exactly the
 * literals numpy writes (quoted strings, True/False, tuples of integers), and
 * checks the data size against the file size before it allocates anything.
 */
#include "npy.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char NPY_MAGIC[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

static void set_err(char *err, size_t errlen, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void set_err(char *err, size_t errlen, const char *name, const char *fmt, ...) {
    if (!err || errlen == 0) return;
    int n = snprintf(err, errlen, "%s: ", name ? name : "(npy)");
    if (n < 0 || (size_t)n >= errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------------ */
/* Dtypes.                                                             */
/* ------------------------------------------------------------------ */

static size_t elem_size(fc_dtype dt) {
    switch (dt) {
    case FC_F64: case FC_I64: return 8;
    case FC_F32: case FC_I32: return 4;
    case FC_F16: case FC_BF16: return 2;
    case FC_I8: case FC_BOOL: return 1;
    default: return 0;
    }
}

const char *npy_descr(fc_dtype dt) {
    switch (dt) {
    case FC_F64: return "<f8";
    case FC_F32: return "<f4";
    case FC_F16: return "<f2";
    case FC_I64: return "<i8";
    case FC_I32: return "<i4";
    case FC_I8: return "|i1";
    case FC_BOOL: return "|b1";
    default: return NULL; /* bf16 has no numpy dtype */
    }
}

/* Map a descr to a dtype (|u1 reads as bool). Returns false with a message
 * for anything unsupported. */
static bool descr_to_dtype(const char *d, fc_dtype *dt, char *err, size_t errlen, const char *name) {
    size_t n = strlen(d);
    if (n == 3) {
        char order = d[0];
        const char *code = d + 1;
        bool one_byte = strcmp(code, "i1") == 0 || strcmp(code, "b1") == 0 || strcmp(code, "u1") == 0;
        /* Byte order does not matter for one-byte types: numpy writes '|'. */
        if (one_byte && (order == '|' || order == '<' || order == '>' || order == '=')) {
            if (strcmp(code, "i1") == 0) *dt = FC_I8;
            else *dt = FC_BOOL; /* b1, u1 */
            return true;
        }
        static const struct { const char *code; fc_dtype dt; } multi[] = {
            {"f8", FC_F64}, {"f4", FC_F32}, {"f2", FC_F16}, {"i8", FC_I64}, {"i4", FC_I32},
        };
        for (size_t i = 0; i < sizeof multi / sizeof multi[0]; i++) {
            if (strcmp(code, multi[i].code) != 0) continue;
            if (order == '<') { *dt = multi[i].dt; return true; }
            if (order == '>') {
                set_err(err, errlen, name, "big-endian data ('%s') is not supported; save it little-endian", d);
                return false;
            }
            break;
        }
    }
    set_err(err, errlen, name,
            "unsupported dtype '%s' (supported: <f8 <f4 <f2 <i8 <i4 |i1 |b1 |u1)", d);
    return false;
}

/* ------------------------------------------------------------------ */
/* The header dict.                                                    */
/* ------------------------------------------------------------------ */

typedef struct hdr_parser {
    const char *p, *end;
    const char *name;
    char *err;
    size_t errlen;
} hdr_parser;

static void hp_ws(hdr_parser *hp) {
    while (hp->p < hp->end && (*hp->p == ' ' || *hp->p == '\t' || *hp->p == '\n' || *hp->p == '\r'))
        hp->p++;
}

static bool hp_bad(hdr_parser *hp, const char *what) {
    set_err(hp->err, hp->errlen, hp->name, "corrupt .npy header: %s", what);
    return false;
}

static bool hp_expect(hdr_parser *hp, char c, const char *what) {
    hp_ws(hp);
    if (hp->p < hp->end && *hp->p == c) {
        hp->p++;
        return true;
    }
    return hp_bad(hp, what);
}

/* A quoted string ('..' or ".."), without escapes; copied into buf. */
static bool hp_string(hdr_parser *hp, char *buf, size_t n) {
    hp_ws(hp);
    if (hp->p >= hp->end || (*hp->p != '\'' && *hp->p != '"')) return hp_bad(hp, "expected a string");
    char q = *hp->p++;
    size_t len = 0;
    while (hp->p < hp->end && *hp->p != q) {
        if (*hp->p == '\\' || *hp->p == '\n') return hp_bad(hp, "unsupported string literal");
        /* A NUL would end the copy early: "<f4\0junk" must not read as "<f4". */
        if ((unsigned char)*hp->p < 0x20) return hp_bad(hp, "a control character in a string");
        if (len + 1 >= n) return hp_bad(hp, "string too long");
        buf[len++] = *hp->p++;
    }
    if (hp->p >= hp->end) return hp_bad(hp, "unterminated string");
    hp->p++;
    buf[len] = '\0';
    return true;
}

static bool hp_word(hdr_parser *hp, const char *w) {
    size_t n = strlen(w);
    if ((size_t)(hp->end - hp->p) >= n && memcmp(hp->p, w, n) == 0) {
        const char *after = hp->p + n;
        if (after == hp->end || !((*after >= 'A' && *after <= 'Z') || (*after >= 'a' && *after <= 'z') ||
                                  (*after >= '0' && *after <= '9') || *after == '_')) {
            hp->p = after;
            return true;
        }
    }
    return false;
}

static bool hp_bool(hdr_parser *hp, bool *out) {
    hp_ws(hp);
    if (hp_word(hp, "True")) { *out = true; return true; }
    if (hp_word(hp, "False")) { *out = false; return true; }
    return hp_bad(hp, "expected True or False");
}

/* A non-negative integer (Python may write a trailing 'L' in old files). */
static bool hp_int(hdr_parser *hp, int64_t *out) {
    hp_ws(hp);
    if (hp->p >= hp->end || *hp->p < '0' || *hp->p > '9') return hp_bad(hp, "expected a dimension");
    int64_t v = 0;
    while (hp->p < hp->end && *hp->p >= '0' && *hp->p <= '9') {
        int d = *hp->p++ - '0';
        if (v > (INT64_MAX - d) / 10) return hp_bad(hp, "dimension too large");
        v = v * 10 + d;
    }
    if (hp->p < hp->end && *hp->p == 'L') hp->p++;
    *out = v;
    return true;
}

/* A tuple of integers: (), (3,), (2, 3) */
static bool hp_shape(hdr_parser *hp, int *rank, int64_t *shape) {
    if (!hp_expect(hp, '(', "expected '(' for the shape")) return false;
    *rank = 0;
    for (;;) {
        hp_ws(hp);
        if (hp->p < hp->end && *hp->p == ')') { hp->p++; return true; }
        if (*rank >= FC_MAX_RANK) {
            set_err(hp->err, hp->errlen, hp->name, "rank exceeds the maximum of %d", FC_MAX_RANK);
            return false;
        }
        if (!hp_int(hp, &shape[*rank])) return false;
        (*rank)++;
        hp_ws(hp);
        if (hp->p < hp->end && *hp->p == ',') { hp->p++; continue; }
        if (hp->p < hp->end && *hp->p == ')') { hp->p++; return true; }
        return hp_bad(hp, "expected ',' or ')' in the shape");
    }
}

typedef struct npy_header {
    char descr[16];
    bool fortran_order;
    int rank;
    int64_t shape[FC_MAX_RANK];
} npy_header;

static bool parse_header_dict(const char *text, size_t len, const char *name, npy_header *h, char *err,
                              size_t errlen) {
    hdr_parser hp = {text, text + len, name, err, errlen};
    bool have_descr = false, have_fortran = false, have_shape = false;
    if (!hp_expect(&hp, '{', "expected '{'")) return false;
    for (;;) {
        hp_ws(&hp);
        if (hp.p < hp.end && *hp.p == '}') { hp.p++; break; }
        char key[32];
        if (!hp_string(&hp, key, sizeof key)) return false;
        if (!hp_expect(&hp, ':', "expected ':' after a key")) return false;
        if (strcmp(key, "descr") == 0 && !have_descr) {
            hp_ws(&hp);
            if (hp.p < hp.end && (*hp.p == '[' || *hp.p == '('))
                return hp_bad(&hp, "structured dtypes are not supported");
            if (!hp_string(&hp, h->descr, sizeof h->descr)) return false;
            have_descr = true;
        } else if (strcmp(key, "fortran_order") == 0 && !have_fortran) {
            if (!hp_bool(&hp, &h->fortran_order)) return false;
            have_fortran = true;
        } else if (strcmp(key, "shape") == 0 && !have_shape) {
            if (!hp_shape(&hp, &h->rank, h->shape)) return false;
            have_shape = true;
        } else {
            set_err(err, errlen, name, "corrupt .npy header: unexpected or repeated key '%s'", key);
            return false;
        }
        hp_ws(&hp);
        if (hp.p < hp.end && *hp.p == ',') { hp.p++; continue; }
        if (hp.p < hp.end && *hp.p == '}') { hp.p++; break; }
        return hp_bad(&hp, "expected ',' or '}'");
    }
    hp_ws(&hp);
    /* Only padding may follow (numpy pads with spaces and ends with '\n';
     * some writers pad with NULs). */
    while (hp.p < hp.end && *hp.p == '\0') hp.p++;
    if (hp.p != hp.end) return hp_bad(&hp, "unexpected text after the dict");
    if (!have_descr || !have_fortran || !have_shape)
        return hp_bad(&hp, "missing 'descr', 'fortran_order' or 'shape'");
    return true;
}

/* ------------------------------------------------------------------ */
/* Reading.                                                            */
/* ------------------------------------------------------------------ */

static uint32_t le16(const unsigned char *b) { return (uint32_t)b[0] | (uint32_t)b[1] << 8; }
static uint32_t le32(const unsigned char *b) {
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

/* Bytes left in f from the current position, or -1 if f cannot seek. */
static long long remaining_bytes(FILE *f) {
    long pos = ftell(f);
    if (pos < 0) return -1;
    if (fseek(f, 0, SEEK_END) != 0) return -1;
    long end = ftell(f);
    if (fseek(f, pos, SEEK_SET) != 0 || end < pos) return -1;
    return (long long)(end - pos);
}

static bool host_is_little_endian(void) {
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

int npy_read_stream(FILE *f, const char *name, fc_tensor *t, char *err, size_t errlen) {
    memset(t, 0, sizeof *t);
    if (!host_is_little_endian()) {
        set_err(err, errlen, name, ".npy reading needs a little-endian host");
        return -1;
    }
    unsigned char pre[12];
    size_t got = fread(pre, 1, 10, f);
    if (got < 10 || memcmp(pre, NPY_MAGIC, 6) != 0) {
        if (ferror(f)) set_err(err, errlen, name, "read error: %s", strerror(errno));
        else if (got >= 6 && memcmp(pre, NPY_MAGIC, 6) == 0) set_err(err, errlen, name, "truncated .npy header");
        else if (got < 6 && memcmp(pre, NPY_MAGIC, got) == 0) set_err(err, errlen, name, "truncated .npy header");
        else set_err(err, errlen, name, "not a .npy file (bad magic)");
        return -1;
    }
    int major = pre[6], minor = pre[7];
    uint32_t header_len;
    if (major == 1) {
        header_len = le16(pre + 8);
    } else if (major == 2 || major == 3) {
        if (fread(pre + 10, 1, 2, f) != 2) {
            set_err(err, errlen, name, "truncated .npy header");
            return -1;
        }
        header_len = le32(pre + 8);
    } else {
        set_err(err, errlen, name, "unsupported .npy format version %d.%d", major, minor);
        return -1;
    }
    if (header_len == 0 || header_len > NPY_MAX_HEADER_LEN) {
        set_err(err, errlen, name, "corrupt .npy header: header length %u out of range", header_len);
        return -1;
    }
    long long avail = remaining_bytes(f);
    if (avail >= 0 && (unsigned long long)avail < header_len) {
        set_err(err, errlen, name, "truncated .npy header");
        return -1;
    }
    char *text = malloc(header_len);
    if (!text) {
        set_err(err, errlen, name, "out of memory");
        return -1;
    }
    if (fread(text, 1, header_len, f) != header_len) {
        free(text);
        set_err(err, errlen, name, "truncated .npy header");
        return -1;
    }
    npy_header h;
    memset(&h, 0, sizeof h);
    bool ok = parse_header_dict(text, header_len, name, &h, err, errlen);
    free(text);
    if (!ok) return -1;

    fc_dtype dt;
    if (!descr_to_dtype(h.descr, &dt, err, errlen, name)) return -1;
    if (h.fortran_order) {
        set_err(err, errlen, name, "fortran_order arrays are not supported; save a C-ordered array "
                                   "(numpy.ascontiguousarray)");
        return -1;
    }
    size_t es = elem_size(dt);
    uint64_t numel = 1;
    for (int i = 0; i < h.rank; i++) {
        uint64_t d = (uint64_t)h.shape[i];
        if (d != 0 && numel > UINT64_MAX / d) {
            set_err(err, errlen, name, "corrupt .npy header: shape too large");
            return -1;
        }
        numel *= d;
    }
    /* A zero dim makes the product 0, but fusec refuses a shape whose other
     * dims multiply past its element limit (fc_tensor_numel), zero or not. */
    fc_tensor probe = {.dtype = dt, .rank = h.rank};
    for (int i = 0; i < h.rank; i++) probe.shape[i] = h.shape[i];
    if (fc_tensor_numel(&probe) < 0) {
        set_err(err, errlen, name, "corrupt .npy header: shape too large");
        return -1;
    }
    if (numel > (uint64_t)INT64_MAX / es || numel * es > (uint64_t)SIZE_MAX) {
        set_err(err, errlen, name, "corrupt .npy header: shape too large");
        return -1;
    }
    size_t nbytes = (size_t)(numel * es);

    if (avail >= 0) {
        unsigned long long left = (unsigned long long)avail - header_len;
        if (left < nbytes) {
            set_err(err, errlen, name, "truncated data: expected %zu bytes, found %llu", nbytes, left);
            return -1;
        }
        if (left > nbytes) {
            set_err(err, errlen, name, "corrupt .npy file: %llu bytes after the data", left - nbytes);
            return -1;
        }
    }
    unsigned char *data = malloc(nbytes ? nbytes : 1);
    if (!data) {
        set_err(err, errlen, name, "out of memory (%zu bytes)", nbytes);
        return -1;
    }
    size_t nread = fread(data, 1, nbytes, f);
    if (nread != nbytes) {
        if (ferror(f)) set_err(err, errlen, name, "read error: %s", strerror(errno));
        else set_err(err, errlen, name, "truncated data: expected %zu bytes, found %zu", nbytes, nread);
        free(data);
        return -1;
    }
    if (avail < 0 && fgetc(f) != EOF) {
        set_err(err, errlen, name, "corrupt .npy file: bytes after the data");
        free(data);
        return -1;
    }
    if (dt == FC_BOOL) {
        /* fusec bools are 0 or 1; numpy bools are too, but |u1 is not. */
        for (size_t i = 0; i < nbytes; i++) data[i] = data[i] != 0;
    }
    t->dtype = dt;
    t->rank = h.rank;
    for (int i = 0; i < h.rank; i++) t->shape[i] = h.shape[i];
    t->data = data;
    return 0;
}

int npy_read(const char *path, fc_tensor *t, char *err, size_t errlen) {
    memset(t, 0, sizeof *t);
    /* A regular file only: a device never ends, and a FIFO without a writer
     * would block the open (O_NONBLOCK returns at once, then it is refused).
     * npy_read_stream reads a pipe the caller opened on purpose. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        set_err(err, errlen, path, "cannot open: %s", strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        set_err(err, errlen, path, "not a regular file (a .npy input is read from a file)");
        close(fd);
        return -1;
    }
    FILE *f = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) == 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        set_err(err, errlen, path, "cannot open: %s", strerror(errno));
        close(fd);
        return -1;
    }
    int rc = npy_read_stream(f, path, t, err, errlen);
    fclose(f);
    return rc;
}

void npy_tensor_free(fc_tensor *t) {
    if (!t) return;
    free(t->data);
    memset(t, 0, sizeof *t);
}

/* ------------------------------------------------------------------ */
/* Writing.                                                            */
/* ------------------------------------------------------------------ */

int npy_write_stream(FILE *f, const char *name, const fc_tensor *t, char *err, size_t errlen) {
    const char *descr = npy_descr(t->dtype);
    if (!descr) {
        set_err(err, errlen, name, "dtype %s cannot be stored in .npy (convert it to f32 first)",
                (unsigned)t->dtype < FC_DTYPE_COUNT ? fc_dtype_name(t->dtype) : "?");
        return -1;
    }
    if (t->rank < 0 || t->rank > FC_MAX_RANK) {
        set_err(err, errlen, name, "bad rank %d", t->rank);
        return -1;
    }
    uint64_t numel = 1;
    for (int i = 0; i < t->rank; i++) {
        if (t->shape[i] < 0) {
            set_err(err, errlen, name, "bad shape (negative dimension)");
            return -1;
        }
        uint64_t d = (uint64_t)t->shape[i];
        if (d != 0 && numel > UINT64_MAX / d) {
            set_err(err, errlen, name, "shape too large");
            return -1;
        }
        numel *= d;
    }
    size_t es = elem_size(t->dtype);
    if (numel > (uint64_t)SIZE_MAX / es) {
        set_err(err, errlen, name, "shape too large");
        return -1;
    }
    size_t nbytes = (size_t)numel * es;
    if (nbytes && !t->data) {
        set_err(err, errlen, name, "tensor has no data");
        return -1;
    }

    /* The dict, written as numpy writes it: "(3,)" for rank 1, "()" for a
     * scalar. At most 51 + 8 * 21 + 4 characters: it always fits. */
    char dict[320];
    size_t n = (size_t)snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int i = 0; i < t->rank && n < sizeof dict; i++)
        n += (size_t)snprintf(dict + n, sizeof dict - n, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (n < sizeof dict) n += (size_t)snprintf(dict + n, sizeof dict - n, "%s), }", t->rank == 1 ? "," : "");
    if (n >= sizeof dict) {
        set_err(err, errlen, name, "internal error: header too long");
        return -1;
    }
    size_t dict_len = n;
    /* As numpy's _wrap_header: 1 to 64 spaces, then '\n', so that the data
     * starts at a multiple of 64. Version 2.0 only when 1.0's 16-bit length
     * cannot hold the header (never for rank <= 8; kept for completeness). */
    int major = 1;
    size_t prelude = 10;
    size_t padded = prelude + dict_len + 1 + (64 - (prelude + dict_len + 1) % 64);
    if (padded - prelude > 0xffff) {
        major = 2;
        prelude = 12;
        padded = prelude + dict_len + 1 + (64 - (prelude + dict_len + 1) % 64);
    }
    size_t header_len = padded - prelude;
    unsigned char head[12 + sizeof dict + 65];
    memcpy(head, NPY_MAGIC, 6);
    head[6] = (unsigned char)major;
    head[7] = 0;
    if (major == 1) {
        head[8] = (unsigned char)(header_len & 0xff);
        head[9] = (unsigned char)(header_len >> 8);
    } else {
        for (int i = 0; i < 4; i++) head[8 + i] = (unsigned char)(header_len >> (8 * i));
    }
    memcpy(head + prelude, dict, dict_len);
    memset(head + prelude + dict_len, ' ', header_len - dict_len - 1);
    head[padded - 1] = '\n';

    if (fwrite(head, 1, padded, f) != padded || (nbytes && fwrite(t->data, 1, nbytes, f) != nbytes)) {
        set_err(err, errlen, name, "write error: %s", strerror(errno));
        return -1;
    }
    return 0;
}

int npy_write(const char *path, const fc_tensor *t, char *err, size_t errlen) {
    if (!npy_descr(t->dtype)) {
        set_err(err, errlen, path, "dtype %s cannot be stored in .npy (convert it to f32 first)",
                (unsigned)t->dtype < FC_DTYPE_COUNT ? fc_dtype_name(t->dtype) : "?");
        return -1;
    }
    FILE *f = fopen(path, "wb");
    if (!f) {
        set_err(err, errlen, path, "cannot create: %s", strerror(errno));
        return -1;
    }
    int rc = npy_write_stream(f, path, t, err, errlen);
    if (fclose(f) != 0 && rc == 0) {
        set_err(err, errlen, path, "write error: %s", strerror(errno));
        rc = -1;
    }
    if (rc != 0) remove(path);
    return rc;
}
