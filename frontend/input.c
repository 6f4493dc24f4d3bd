/* input.c - reading a model file whole, within bounds (input.h). */
#include "input.h"
#include "ir/outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

fc_status fc_read_input(fc_context *ctx, const char *path, const char *what, size_t max, char **text, size_t *len) {
    *text = NULL;
    *len = 0;
    bool is_stdin = strcmp(path, "-") == 0;
    const char *shown = is_stdin ? "<stdin>" : path;
    /* O_NONBLOCK: opening a FIFO that no one writes to returns at once (and
     * is then refused) instead of blocking. */
    int fd = is_stdin ? STDIN_FILENO : open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return fc_set_error(ctx, FC_ERR_INPUT, "%s: error: cannot open: %s", shown, strerror(errno));
    fc_status st = FC_OK;
    struct stat sb;
    size_t cap = 65536;
    if (fstat(fd, &sb) != 0) {
        st = fc_set_error(ctx, FC_ERR_INPUT, "%s: error: cannot read: %s", shown, strerror(errno));
    } else if (!is_stdin && !S_ISREG(sb.st_mode)) {
        st = fc_set_error(ctx, FC_ERR_INPUT,
                          "%s: error: it is %s, not %s (fusec reads regular files, or standard input as '-')", shown,
                          fc_file_kind(sb.st_mode), what);
    } else if (S_ISREG(sb.st_mode) && (uint64_t)sb.st_size > max) {
        st = fc_set_error(ctx, FC_ERR_INPUT, "%s: error: the file is %lld bytes, more than the %zu that %s may have",
                          shown, (long long)sb.st_size, max, what);
    } else if (!is_stdin && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
        st = fc_set_error(ctx, FC_ERR_INPUT, "%s: error: cannot read: %s", shown, strerror(errno));
    }
    if (st == FC_OK && S_ISREG(sb.st_mode) && (size_t)sb.st_size + 2 > cap) cap = (size_t)sb.st_size + 2;
    char *buf = NULL;
    size_t n = 0;
    while (st == FC_OK) {
        if (n + 1 >= cap || !buf) {
            if (buf) cap = cap > max / 2 ? max + 2 : 2 * cap;
            char *b = fc_ctx_realloc(ctx, buf, cap);
            if (!b) {
                st = FC_ERR_NOMEM;
                break;
            }
            buf = b;
        }
        /* At most 1 MiB a read, so that a binary file is refused at its
         * first NUL without reading (and paging in) all of it first. */
        size_t want = cap - 1 - n;
        ssize_t r = read(fd, buf + n, want < ((size_t)1 << 20) ? want : ((size_t)1 << 20));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            st = fc_set_error(ctx, FC_ERR_INPUT, "%s: error: cannot read: %s", shown, strerror(errno));
            break;
        }
        if (r == 0) break;
        const char *nul = memchr(buf + n, 0, (size_t)r);
        if (nul) {
            st = fc_set_error(ctx, FC_ERR_INPUT, "%s: error: not %s: a NUL byte at offset %zu (a binary file?)", shown,
                              what, (size_t)(nul - buf));
            break;
        }
        n += (size_t)r;
        if (n > max) {
            st = fc_set_error(ctx, FC_ERR_INPUT, "%s: error: more than the %zu bytes that %s may have", shown, max,
                              what);
            break;
        }
    }
    if (!is_stdin) close(fd);
    if (st != FC_OK) {
        fc_ctx_freemem(ctx, buf);
        return st;
    }
    buf[n] = 0;
    *text = buf;
    *len = n;
    return FC_OK;
}
