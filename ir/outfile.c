/* outfile.c - writing a file the user named, without replacing what is
 * not a regular file the user could write (outfile.h has the rules). */
#include "outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *fc_file_kind(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
}

/* What the name stands for once checked: the path to rename onto, and the
 * file that was there (exists false for a new file). */
typedef struct {
    char *path; /* malloc'ed: the name itself, or a symlink's target */
    bool exists;
    struct stat st;
} target;

static fc_status refuse(fc_context *ctx, const char *path, const char *why) {
    return fc_set_error(ctx, FC_ERR_RUNTIME, "cannot write %s: %s; fusec writes only regular files", path, why);
}

static fc_status check_target(fc_context *ctx, const char *path, target *t) {
    struct stat st;
    t->exists = false;
    t->path = NULL;
    if (lstat(path, &st) != 0) {
        if (errno != ENOENT) return fc_set_error(ctx, FC_ERR_RUNTIME, "cannot write %s: %s", path, strerror(errno));
        t->path = strdup(path);
        return t->path ? FC_OK : FC_ERR_NOMEM;
    }
    if (S_ISLNK(st.st_mode)) {
        /* Write to the file the link names, as cp does; the link stays. */
        char *real = realpath(path, NULL);
        if (!real) {
            if (errno == ENOENT)
                return refuse(ctx, path, "it is a symlink to a file that does not exist (a dangling symlink)");
            return fc_set_error(ctx, FC_ERR_RUNTIME, "cannot write %s: %s", path, strerror(errno));
        }
        fc_status s = FC_OK;
        if (lstat(real, &st) != 0)
            s = fc_set_error(ctx, FC_ERR_RUNTIME, "cannot write %s: %s", path, strerror(errno));
        else if (!S_ISREG(st.st_mode)) {
            char why[64 + PATH_MAX];
            snprintf(why, sizeof why, "it is a symlink to %s, %s", real, fc_file_kind(st.st_mode));
            s = refuse(ctx, path, why);
        }
        if (s != FC_OK) {
            free(real);
            return s;
        }
        t->path = real;
    } else if (!S_ISREG(st.st_mode)) {
        char why[64];
        snprintf(why, sizeof why, "it is %s", fc_file_kind(st.st_mode));
        return refuse(ctx, path, why);
    } else if (!(t->path = strdup(path))) {
        return FC_ERR_NOMEM;
    }
    /* Replace only what we could have written in place: the open (without
     * O_TRUNC, so it changes nothing) asks the kernel, which knows about
     * root, ACLs and read-only mounts better than the mode bits do. */
    int fd = open(t->path, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        fc_status s = fc_set_error(ctx, FC_ERR_RUNTIME, "cannot write %s: %s", path, strerror(errno));
        free(t->path);
        t->path = NULL;
        return s;
    }
    struct stat opened;
    bool same = fstat(fd, &opened) == 0 && opened.st_dev == st.st_dev && opened.st_ino == st.st_ino;
    close(fd);
    if (!same) {
        free(t->path);
        t->path = NULL;
        return fc_set_error(ctx, FC_ERR_RUNTIME, "cannot write %s: it changed while it was checked", path);
    }
    t->exists = true;
    t->st = st;
    return FC_OK;
}

/* Just before the rename: the name still stands for what was checked (or
 * for nothing, or a regular file, if it was missing). This narrows, but
 * cannot close, the window in which another process swaps the name: the
 * rename itself has no "only if" form. */
static bool unchanged(const target *t) {
    struct stat now;
    if (lstat(t->path, &now) != 0) return errno == ENOENT && !t->exists;
    if (!t->exists) return S_ISREG(now.st_mode);
    return now.st_dev == t->st.st_dev && now.st_ino == t->st.st_ino && S_ISREG(now.st_mode);
}

fc_status fc_output_check(fc_context *ctx, const char *path) {
    if (!path || !*path) return fc_set_error(ctx, FC_ERR_USAGE, "fc_output_check: no path");
    target t;
    fc_status st = check_target(ctx, path, &t);
    if (st == FC_OK && !t.exists) {
        /* A new name: its directory must take a new file (the temporary
         * file and the rename). */
        char *slash = strrchr(t.path, '/');
        const char *dir = ".";
        if (slash == t.path) dir = "/";
        else if (slash) {
            *slash = 0;
            dir = t.path;
        }
        struct stat ds;
        if (stat(dir, &ds) != 0 || !S_ISDIR(ds.st_mode) || access(dir, W_OK | X_OK) != 0)
            st = fc_set_error(ctx, FC_ERR_RUNTIME, "cannot write %s: %s", path,
                              stat(dir, &ds) != 0 ? strerror(errno)
                              : !S_ISDIR(ds.st_mode) ? "its directory is not a directory"
                                                     : "its directory is not writable");
    }
    free(t.path);
    return st;
}

fc_status fc_write_file_atomic(fc_context *ctx, const char *path, const void *data, size_t n) {
    static _Atomic unsigned counter;
    if (!path || !*path || (!data && n)) return fc_set_error(ctx, FC_ERR_USAGE, "fc_write_file_atomic: no path");
    target t;
    fc_status st = check_target(ctx, path, &t);
    if (st != FC_OK) return st;
    size_t plen = strlen(t.path);
    char *tmp = malloc(plen + 64);
    if (!tmp) {
        free(t.path);
        return FC_ERR_NOMEM;
    }
    int fd = -1;
    for (int attempt = 0; attempt < 16 && fd < 0; attempt++) {
        snprintf(tmp, plen + 64, "%s.tmp.%ld.%u", t.path, (long)getpid(), atomic_fetch_add(&counter, 1));
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) {
        st = fc_set_error(ctx, FC_ERR_RUNTIME, "cannot write %s: %s", path, strerror(errno));
        free(tmp);
        free(t.path);
        return st;
    }
    const char *step = NULL;
    int err = 0;
    /* The replaced file's permission bits, as cp keeps them. */
    if (t.exists && fchmod(fd, t.st.st_mode & 07777) != 0) {
        step = "chmod";
        err = errno;
    }
    for (size_t done = 0; !step && done < n;) {
        ssize_t w = write(fd, (const char *)data + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            step = "write";
            err = w < 0 ? errno : EIO;
        } else {
            done += (size_t)w;
        }
    }
    if (!step && fsync(fd) != 0) {
        step = "fsync";
        err = errno;
    }
    if (close(fd) != 0 && !step) {
        step = "close";
        err = errno;
    }
    if (!step && !unchanged(&t)) {
        step = "check";
        err = EAGAIN;
    }
    if (!step && rename(tmp, t.path) != 0) {
        step = "rename";
        err = errno;
    }
    if (step) {
        (void)unlink(tmp);
        if (err == EAGAIN && strcmp(step, "check") == 0)
            st = fc_set_error(ctx, FC_ERR_RUNTIME, "cannot write %s: it was replaced while fusec wrote it", path);
        else
            st = fc_set_error(ctx, FC_ERR_RUNTIME, "cannot write %s (%s): %s", path, step, strerror(err));
    }
    free(tmp);
    free(t.path);
    return st;
}
