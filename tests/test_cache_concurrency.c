/*
 * test_cache_concurrency.c - many writers on one cache directory.
 *
 * Processes: N children are released at the same moment (a pipe as the
 * starting gun). Each round, each child puts one key that every child puts
 * (same bytes, a 64 KiB payload so writes overlap), puts a key of its own,
 * reads the shared key through a fresh handle (so from disk, while others
 * rename over it), reads another child's key, and counts compiles, flushing
 * its counters after each (an flock'ed read-modify-write, many times over). Afterwards:
 * exactly one good entry per key, no temporary files, no reader ever saw a
 * damaged entry (corrupt = 0), and every counter equals the exact sum of
 * what the children did: no update was lost.
 *
 * Threads: T threads share one handle (each with its own context); the
 * in-process layer and the counters must come out exact as well.
 */
#include "cache/cache.h"
#include "check.h"
#include "test_util.h"

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define NPROC 8
#define ROUNDS 25
#define SHARED_SIZE (64 * 1024)
#define BUMPS 20 /* counter flushes per round */

/* What one child did, sent to the parent through a pipe. */
typedef struct tally {
    int ok;            /* 1 if the child saw nothing wrong */
    uint64_t hits, misses, compiles, bytes_written;
} tally;

static fc_cache_key key_of(const char *s) {
    fc_cache_hasher h;
    fc_cache_key_begin(&h);
    fc_cache_key_add_str(&h, s);
    return fc_cache_key_end(&h);
}

static void payload_of(const char *key, unsigned char *buf, size_t n) {
    fc_cache_key k = key_of(key);
    for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)(k.bytes[i % 16] ^ (i * 31));
}

static fc_cache *open_at(fc_context *ctx, const char *dir) {
    fc_cache_options o = {.dir = dir, .mode = FC_CACHE_RW};
    fc_cache *c = NULL;
    return fc_cache_open(ctx, &o, &c) == FC_OK ? c : NULL;
}

/* get, and check the bytes: 1 hit, 0 miss, -1 wrong */
static int get_expect(fc_cache *c, fc_context *ctx, fc_cache_level level, const char *key, size_t n) {
    fc_cache_key k = key_of(key);
    void *data = NULL;
    size_t size = 0;
    if (fc_cache_get(c, ctx, level, &k, &data, &size) != FC_OK) return -1;
    if (!data) return 0;
    unsigned char *want = malloc(n);
    payload_of(key, want, n);
    int r = size == n && memcmp(data, want, n) == 0 ? 1 : -1;
    free(want);
    fc_free(data);
    return r;
}

static void child(int id, const char *dir, int start_fd, int result_fd) {
    tally t = {.ok = 1};
    fc_context *ctx = fc_context_new();
    fc_cache *c = open_at(ctx, dir);
    static unsigned char shared[SHARED_SIZE];
    payload_of("shared", shared, sizeof shared);
    if (!c || !fc_cache_disk_enabled(c)) t.ok = 0;

    char dummy;
    if (read(start_fd, &dummy, 1) != 0) t.ok = 0; /* blocks until the parent closes it */

    fc_cache_key shared_key = key_of("shared");
    for (int r = 0; c && r < ROUNDS; r++) {
        if (fc_cache_put(c, ctx, FC_CACHE_KERNEL, &shared_key, shared, sizeof shared) != FC_OK) t.ok = 0;
        t.bytes_written += 64 + sizeof shared;

        char own[64];
        snprintf(own, sizeof own, "own-%d-%d", id, r);
        unsigned char buf[300];
        size_t n = 100 + (size_t)(id * 7 + r) % 200;
        payload_of(own, buf, n);
        fc_cache_key k = key_of(own);
        if (fc_cache_put(c, ctx, FC_CACHE_PROGRAM, &k, buf, n) != FC_OK) t.ok = 0;
        t.bytes_written += 64 + n;
        fc_cache_note_compile(c);
        t.compiles++;

        /* The shared key from disk, through a fresh handle: it must always
         * be whole, however the renames interleave. */
        fc_cache *fresh = open_at(ctx, dir);
        int g = fresh ? get_expect(fresh, ctx, FC_CACHE_KERNEL, "shared", sizeof shared) : -1;
        if (g != 1) t.ok = 0;
        t.hits++;
        /* Another child's key of an earlier round: there or not yet. */
        char theirs[64];
        snprintf(theirs, sizeof theirs, "own-%d-%d", (id + 1) % NPROC, r > 0 ? r - 1 : 0);
        size_t tn = 100 + (size_t)(((id + 1) % NPROC) * 7 + (r > 0 ? r - 1 : 0)) % 200;
        g = fresh ? get_expect(fresh, ctx, FC_CACHE_PROGRAM, theirs, tn) : -1;
        if (g < 0) t.ok = 0;
        if (g == 1) t.hits++;
        else t.misses++;
        fc_cache_close(fresh); /* flushes its counts */

        /* In-process hit on the long-lived handle. */
        if (get_expect(c, ctx, FC_CACHE_PROGRAM, own, n) != 1) t.ok = 0;
        t.hits++;
        /* Hammer the shared counters: many small read-modify-writes, racing
         * the other children's. */
        for (int b = 0; b < BUMPS; b++) {
            fc_cache_note_compile(c);
            t.compiles++;
            if (fc_cache_flush_stats(c, ctx) != FC_OK) t.ok = 0;
        }
    }
    fc_cache_close(c);
    fc_context_free(ctx);
    if (write(result_fd, &t, sizeof t) != (ssize_t)sizeof t) _exit(3);
    _exit(0);
}

static void test_processes(const char *dir) {
    int start[2], results[2];
    if (pipe(start) != 0 || pipe(results) != 0) {
        perror("pipe");
        exit(2);
    }
    fflush(NULL);
    pid_t pids[NPROC];
    for (int i = 0; i < NPROC; i++) {
        pids[i] = fork();
        if (pids[i] < 0) {
            perror("fork");
            exit(2);
        }
        if (pids[i] == 0) {
            close(start[1]);
            close(results[0]);
            child(i, dir, start[0], results[1]);
        }
    }
    close(start[0]);
    close(results[1]);
    close(start[1]); /* go */

    tally sum = {.ok = 1};
    for (int i = 0; i < NPROC; i++) {
        tally t;
        ssize_t n = read(results[0], &t, sizeof t); /* < PIPE_BUF: whole records */
        CHECK(n == (ssize_t)sizeof t);
        if (n != (ssize_t)sizeof t) break;
        CHECK(t.ok);
        sum.hits += t.hits;
        sum.misses += t.misses;
        sum.compiles += t.compiles;
        sum.bytes_written += t.bytes_written;
    }
    close(results[0]);
    for (int i = 0; i < NPROC; i++) {
        int status = 0;
        CHECK(waitpid(pids[i], &status, 0) == pids[i]);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }

    fc_context *ctx = fc_context_new();
    fc_cache *c = open_at(ctx, dir);
    fc_cache_summary s;
    CHECK_EQ_INT(fc_cache_info(c, ctx, &s), FC_OK);
    /* One entry per key: the shared one, and each child's own. */
    CHECK_EQ_INT(s.entries[FC_CACHE_KERNEL], 1);
    CHECK_EQ_INT(s.entries[FC_CACHE_PROGRAM], NPROC * ROUNDS);
    CHECK_EQ_INT(s.temp_files, 0);
    /* Exact sums: nothing lost between processes. */
    CHECK_EQ_INT(s.counters[FC_CACHE_HITS], sum.hits);
    CHECK_EQ_INT(s.counters[FC_CACHE_MISSES], sum.misses);
    CHECK_EQ_INT(s.counters[FC_CACHE_COMPILES], sum.compiles);
    CHECK_EQ_INT(s.counters[FC_CACHE_BYTES_WRITTEN], sum.bytes_written);
    CHECK_EQ_INT(s.counters[FC_CACHE_CORRUPT], 0);
    CHECK_EQ_INT(s.counters[FC_CACHE_EVICTIONS], 0);
    CHECK_EQ_INT(sum.compiles, NPROC * ROUNDS * (1 + BUMPS));

    /* Every entry good. */
    fc_cache_verify_result r;
    CHECK_EQ_INT(fc_cache_verify(c, ctx, false, &r), FC_OK);
    CHECK_EQ_INT(r.checked, 1 + NPROC * ROUNDS);
    CHECK_EQ_INT(r.nbad, 0);
    fc_cache_verify_result_free(&r);
    CHECK_EQ_INT(get_expect(c, ctx, FC_CACHE_KERNEL, "shared", SHARED_SIZE), 1);
    char name[64];
    snprintf(name, sizeof name, "own-%d-%d", NPROC - 1, ROUNDS - 1);
    CHECK_EQ_INT(get_expect(c, ctx, FC_CACHE_PROGRAM, name, 100 + (size_t)((NPROC - 1) * 7 + ROUNDS - 1) % 200), 1);
    char path[4096];
    snprintf(path, sizeof path, "%s/v%u/kernels", dir, FC_CACHE_FORMAT_VERSION);
    CHECK_EQ_INT(count_names(path, ".tmp-"), 0);
    fc_cache_close(c);
    fc_context_free(ctx);
}

/* ------------------------------------------------------------------ */
/* Threads sharing one handle.                                         */
/* ------------------------------------------------------------------ */
#define NTHREADS 4
#define THREAD_OPS 200

typedef struct thread_arg {
    fc_cache *c;
    int id;
    int bad;
    uint64_t hits, misses;
} thread_arg;

static void *thread_main(void *p) {
    thread_arg *a = p;
    fc_context *ctx = fc_context_new();
    for (int i = 0; i < THREAD_OPS; i++) {
        /* Keys shared between threads, so puts and gets collide. */
        char key[32];
        snprintf(key, sizeof key, "t%d", (i + a->id) % 20);
        int g = get_expect(a->c, ctx, FC_CACHE_KERNEL, key, 64);
        if (g < 0) a->bad++;
        if (g == 1) {
            a->hits++;
        } else {
            a->misses++;
            unsigned char buf[64];
            payload_of(key, buf, sizeof buf);
            fc_cache_key k = key_of(key);
            fc_cache_note_compile(a->c);
            if (fc_cache_put(a->c, ctx, FC_CACHE_KERNEL, &k, buf, sizeof buf) != FC_OK) a->bad++;
        }
    }
    fc_context_free(ctx);
    return NULL;
}

static void test_threads(const char *dir) {
    fc_context *ctx = fc_context_new();
    fc_cache *c = open_at(ctx, dir);
    fc_cache_summary before, after;
    CHECK_EQ_INT(fc_cache_info(c, ctx, &before), FC_OK);
    pthread_t th[NTHREADS];
    thread_arg args[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) {
        args[i] = (thread_arg){.c = c, .id = i};
        CHECK(pthread_create(&th[i], NULL, thread_main, &args[i]) == 0);
    }
    uint64_t hits = 0, misses = 0;
    for (int i = 0; i < NTHREADS; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ_INT(args[i].bad, 0);
        hits += args[i].hits;
        misses += args[i].misses;
    }
    CHECK_EQ_INT(hits + misses, NTHREADS * THREAD_OPS);
    CHECK(misses >= 20 && misses <= 20 * NTHREADS); /* each key compiled at least once, rarely more */
    CHECK_EQ_INT(fc_cache_info(c, ctx, &after), FC_OK);
    CHECK_EQ_INT(after.counters[FC_CACHE_HITS] - before.counters[FC_CACHE_HITS], hits);
    CHECK_EQ_INT(after.counters[FC_CACHE_MISSES] - before.counters[FC_CACHE_MISSES], misses);
    CHECK_EQ_INT(after.counters[FC_CACHE_COMPILES] - before.counters[FC_CACHE_COMPILES], misses);
    CHECK_EQ_INT(after.memory_entries, 20);
    fc_cache_close(c);
    fc_context_free(ctx);
}

int main(void) {
    unsetenv("FUSEC_CACHE");
    unsetenv("FUSEC_CACHE_MAX_BYTES");
    char base[256], dir[300];
    if (!temp_dir(base, sizeof base, "fusec-cache-conc")) return 2;
    snprintf(dir, sizeof dir, "%s/cache", base);
    test_processes(dir);
    test_threads(dir);
    rm_rf(base);
    return check_report("test_cache_concurrency");
}
