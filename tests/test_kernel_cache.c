/* test_kernel_cache.c - fc_compile with the compile cache (no GPU needed).
 *
 * Every check runs in a cache directory of its own under a temporary root
 * (fc_cache_configure), never in the user's cache:
 *
 *   - cold compile: misses, one NVRTC compile, one entry per level;
 *   - warm in process: no NVRTC, no passes (the level-2 memory layer);
 *   - warm in a "new process": the handle closed and reopened (empty
 *     memory layer), and a real fork()ed child: hits on disk, no NVRTC;
 *   - only the program entry gone: passes and codegen run, NVRTC does not;
 *   - damaged entries (bit flip, truncated, zero-length, wrong version,
 *     garbage) at either level: rebuilt, and never loaded;
 *   - a program entry with a good checksum but bytes that do not decode;
 *   - eight processes compiling one program into an empty cache at once,
 *     and four threads sharing the process's handle: all succeed, alike;
 *   - FUSEC_CACHE=off always compiles; ro reads and never writes; a bad
 *     FUSEC_CACHE is an error; an unsafe directory warns once;
 *   - other options, other programs: fuse, fast_math, sm and precision are
 *     in the key;
 *   - the serialized program: round trips, every truncation and every
 *     byte flipped is refused or read without harm (ASan watches);
 *   - allocation failures, cold and warm: FC_ERR_NOMEM and no leak;
 *   - --cache-info, --verify and --cache-clear texts; --time text;
 *   - cold against warm compile time of examples/softmax.ir, printed.
 */
#include "check.h"
#include "desc_damage.h"
#include "codegen/cuda/attention.h"
#include "runtime/cuda/aot.h"
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/program.h"
#include "runtime/cuda/program_cache.h"
#include "test_util.h"

#include <dirent.h>
#include <pthread.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char root[256]; /* the temporary root of every cache directory here */
static int ndirs;

/* ---- helpers ------------------------------------------------------------------ */

/* Close the process's cache and point it at a new, empty directory; the
 * mode comes from FUSEC_CACHE (rw unless a test says otherwise). */
static void fresh_cache(char *dir, size_t n, const char *mode) {
    fc_cache_global_close();
    snprintf(dir, n, "%s/cache%d", root, ndirs++);
    setenv("FUSEC_CACHE", mode, 1);
    CHECK_EQ_INT(fc_cache_configure(dir), FC_OK);
}

/* A "new process" without a fork: the same directory, an empty memory layer. */
static void reopen_cache(void) { fc_cache_global_close(); }

static uint64_t nvrtc_count(void) {
    fc_compile_counters c;
    fc_compile_counters_get(&c);
    return c.nvrtc_compiles;
}

/* A layernorm and a row sum side by side, a parameter returned as it is and
 * a value returned twice: every storage kind and result copy. */
static fc_graph *g_mixed(fc_context *ctx) {
    fc_graph *g = fc_graph_new(ctx, "mixed");
    fc_dim d[2] = {16, 128}, w[1] = {128};
    fc_value *x = fc_param(g, "x", FC_F32, 2, d), *h = fc_param(g, "h", FC_F16, 2, d);
    fc_value *gw = fc_param(g, "w", FC_F32, 1, w), *gb = fc_param(g, "b", FC_F32, 1, w);
    int ax = 1;
    fc_value *ln = fc_layernorm(g, x, gw, gb, -1, 1e-5);
    fc_value *outs[4] = {ln, fc_reduce_sum(g, fc_exp(g, h), 1, &ax, false), x, ln};
    fc_graph_return(g, 4, outs);
    return g;
}

/* Attention over a fused QKV projection, read in place: for sm 90 its
 * kernel (fc_attn_fa3) takes tensor maps (fc_launch.tmaps) of rank 4. */
static fc_graph *g_attention(fc_context *ctx) {
    static const char ir[] =
        "graph attn(%qkv: bf16[2, 130, 384]) {\n"
        "  %q0, %k0, %v0 = split(%qkv, axis=-1, sizes=[128, 128, 128])\n"
        "  %q1 = reshape(%q0, shape=[2, 130, 2, 64])\n  %q = permute(%q1, perm=[0, 2, 1, 3])\n"
        "  %k1 = reshape(%k0, shape=[2, 130, 2, 64])\n  %k = permute(%k1, perm=[0, 2, 1, 3])\n"
        "  %v1 = reshape(%v0, shape=[2, 130, 2, 64])\n  %v = permute(%v1, perm=[0, 2, 1, 3])\n"
        "  %o = attention(%q, %k, %v, causal=true)\n  return %o\n}\n";
    fc_graph *g = NULL;
    fc_status st = fc_parse(ctx, "attn.ir", ir, strlen(ir), NULL, NULL, 0, &g);
    if (st != FC_OK) fprintf(stderr, "parse attn: %s\n", fc_last_error(ctx));
    CHECK_EQ_INT(st, FC_OK);
    return g;
}

static fc_graph *parse_softmax(fc_context *ctx, int rows) {
    const char *src = getenv("FUSEC_SRC");
    char path[512];
    snprintf(path, sizeof path, "%s/examples/softmax.ir", src ? src : ".");
    fc_binding b = {"N", rows};
    fc_graph *g = NULL;
    fc_status st = fc_parse_file(ctx, path, "softmax", &b, 1, &g);
    if (st != FC_OK) fprintf(stderr, "parse %s: %s\n", path, fc_last_error(ctx));
    CHECK_EQ_INT(st, FC_OK);
    return g;
}

static fc_program *compile(fc_graph *g, bool fuse, int sm) {
    fc_compile_options o;
    fc_compile_options_default(&o);
    o.fuse = fuse;
    o.sm = sm;
    return compile_checked(g, &o);
}

/* The single entry file of a level directory ("" when not exactly one). */
static void only_entry(const char *dir, const char *level, char *out, size_t n) {
    char path[512];
    snprintf(path, sizeof path, "%s/v%u/%s", dir, FC_CACHE_FORMAT_VERSION, level);
    out[0] = 0;
    DIR *d = opendir(path);
    if (!d) return;
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (count++ == 0) snprintf(out, n, "%.400s/%.100s", path, e->d_name);
    }
    closedir(d);
    if (count != 1) out[0] = 0;
}

static bool same_bytes(const fc_bytes *a, const fc_bytes *b) {
    return a->size == b->size && memcmp(a->data, b->data, a->size) == 0;
}

/* ---- cold, warm, new process ---------------------------------------------------- */

static void test_cold_warm(fc_context *ctx) {
    char dir[300];
    fresh_cache(dir, sizeof dir, "rw");
    fc_graph *g = g_pointwise(ctx, "pw", 4);

    uint64_t n0 = nvrtc_count();
    fc_program *cold = compile(g, true, 90);
    CHECK_EQ_INT(nvrtc_count() - n0, 1);
    CHECK_EQ_INT(origin_of(cold), FC_PROGRAM_COMPILED);
    CHECK_EQ_INT(count_entries(dir, "kernels"), 1);
    CHECK_EQ_INT(count_entries(dir, "programs"), 1);
    fc_cache_summary s;
    CHECK_EQ_INT(fc_cache_info(fc_cache_global(ctx), ctx, &s), FC_OK);
    CHECK_EQ_INT(s.counters[FC_CACHE_MISSES], 2); /* the program, then the kernel */
    CHECK_EQ_INT(s.counters[FC_CACHE_HITS], 0);
    CHECK_EQ_INT(s.counters[FC_CACHE_COMPILES], 1);

    /* In process: the memory layer answers; no NVRTC, no passes. */
    fc_program *warm = compile(g, true, 90);
    CHECK_EQ_INT(nvrtc_count() - n0, 1);
    CHECK_EQ_INT(origin_of(warm), FC_PROGRAM_PROGRAM_CACHE);
    fc_compile_times t;
    fc_program_times(warm, &t);
    CHECK(t.passes_ms == 0 && t.codegen_ms == 0 && t.nvrtc_ms == 0);

    /* What the warm program says is what the cold one said. */
    check_same_code(cold, warm);
    CHECK(same_bytes(fc_program_cubin(cold), fc_program_cubin(warm)));
    CHECK_EQ_INT(fc_program_num_inputs(warm), 2);
    fc_tensor ty;
    const char *name = NULL;
    CHECK_EQ_INT(fc_program_input(warm, 1, &ty, &name), FC_OK);
    CHECK(ty.dtype == FC_F32 && ty.rank == 2 && ty.shape[0] == 4 && ty.shape[1] == 256 && !ty.data);
    CHECK_STR(name, "y");
    CHECK_EQ_INT(fc_program_input(warm, 2, &ty, NULL), FC_ERR_USAGE);
    /* The PTX is made from the stored source. */
    char *ptx = fc_program_ptx(warm);
    CHECK(ptx && strstr(ptx, ".entry") != NULL);
    fc_free(ptx);
    /* Its plan is made on demand, from the graph text. */
    const fc_plan *pl = fc_program_plan(warm);
    CHECK(pl != NULL);
    if (pl) CHECK_EQ_INT(pl->arena_bytes, fc_program_plan(cold)->arena_bytes);
    CHECK(fc_program_graph(warm) != NULL);
    fc_program_free(warm);

    /* A new process: the same directory, nothing in memory. */
    reopen_cache();
    CHECK_EQ_INT(fc_cache_info(fc_cache_global(ctx), ctx, &s), FC_OK);
    CHECK_EQ_INT(s.memory_entries, 0);
    warm = compile(g, true, 90);
    CHECK_EQ_INT(nvrtc_count() - n0, 1);
    CHECK_EQ_INT(origin_of(warm), FC_PROGRAM_PROGRAM_CACHE);
    CHECK(same_bytes(fc_program_cubin(cold), fc_program_cubin(warm)));
    fc_program_free(warm);

    /* A real new process. The child drops the parent's handle at fork (it
     * must not use it) and opens its own: a disk hit, no NVRTC. */
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        fc_context *cctx = fc_context_new();
        fc_graph *cg = g_pointwise(cctx, "pw", 4);
        uint64_t before = nvrtc_count();
        fc_program *cp = NULL;
        fc_status st = fc_compile(cg, NULL, &cp);
        fc_cache_summary cs;
        bool ok = st == FC_OK && origin_of(cp) == FC_PROGRAM_PROGRAM_CACHE && nvrtc_count() == before &&
                  fc_cache_info(fc_cache_global(cctx), cctx, &cs) == FC_OK;
        _exit(ok ? 0 : 1);
    }
    int status = -1;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    /* Only the program entry gone: passes and codegen run, NVRTC does not. */
    char path[600];
    only_entry(dir, "programs", path, sizeof path);
    CHECK(path[0] && unlink(path) == 0);
    reopen_cache();
    warm = compile(g, true, 90);
    CHECK_EQ_INT(nvrtc_count() - n0, 1);
    CHECK_EQ_INT(origin_of(warm), FC_PROGRAM_KERNEL_CACHE);
    CHECK_EQ_INT(count_entries(dir, "programs"), 1); /* written again */
    fc_program_free(warm);

    /* Other options make other programs; nothing stale is served. */
    fc_program *unfused = compile(g, false, 90);
    CHECK_EQ_INT(origin_of(unfused), FC_PROGRAM_COMPILED);
    fc_program *sm80 = compile(g, true, 80);
    CHECK_EQ_INT(origin_of(sm80), FC_PROGRAM_COMPILED);
    CHECK_EQ_INT(fc_program_sm(sm80), 80);
    fc_compile_options o;
    fc_compile_options_default(&o);
    o.sm = 90;
    o.fast_math = true;
    fc_program *fast = NULL;
    CHECK_EQ_INT(fc_compile(g, &o, &fast), FC_OK);
    CHECK_EQ_INT(origin_of(fast), FC_PROGRAM_COMPILED);
    /* One NVRTC program per distinct kernel: unfused has several. */
    CHECK(fc_program_nkernels(unfused) > 1);
    CHECK_EQ_INT(nvrtc_count() - n0, 3 + fc_program_nkernels(unfused));
    /* Another precision is another program, even where autocast changes
     * nothing (a pointwise f32 graph: the same source, so the cubin is
     * shared, the program entry is not); its own entry then serves it. */
    int programs = count_entries(dir, "programs");
    o.fast_math = false;
    o.precision = FC_PRECISION_BF16;
    fc_program *bf16 = NULL, *bf16_again = NULL;
    CHECK_EQ_INT(fc_compile(g, &o, &bf16), FC_OK);
    CHECK_EQ_INT(origin_of(bf16), FC_PROGRAM_KERNEL_CACHE);
    CHECK_EQ_INT(count_entries(dir, "programs"), programs + 1);
    reopen_cache();
    CHECK_EQ_INT(fc_compile(g, &o, &bf16_again), FC_OK);
    CHECK_EQ_INT(origin_of(bf16_again), FC_PROGRAM_PROGRAM_CACHE);
    CHECK_EQ_INT(nvrtc_count() - n0, 3 + fc_program_nkernels(unfused));
    fc_program_free(bf16);
    fc_program_free(bf16_again);
    fc_program_free(unfused);
    fc_program_free(sm80);
    fc_program_free(fast);

    /* Another shape is another program. */
    fc_graph *g8 = g_pointwise(ctx, "pw", 8);
    fc_program *p8 = compile(g8, true, 90);
    CHECK_EQ_INT(origin_of(p8), FC_PROGRAM_COMPILED);
    fc_program_free(p8);
    fc_graph_free(g8);

    fc_program_free(cold);
    fc_graph_free(g);
}

/* ---- concurrency ---------------------------------------------------------------------- */

/* Eight processes compile the same program at the same moment into an
 * empty cache: all succeed with the same cubin and plan, one good entry
 * per level is left, and --verify finds nothing wrong. */
static void test_processes(fc_context *ctx) {
    enum { NPROC = 8 };
    char dir[300];
    fresh_cache(dir, sizeof dir, "rw");
    int gate[2];
    CHECK(pipe(gate) == 0);
    fflush(NULL);
    pid_t pids[NPROC];
    for (int i = 0; i < NPROC; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            close(gate[1]);
            char c;
            if (read(gate[0], &c, 1) != 0) _exit(2); /* released when the parent closes its end */
            fc_context *cctx = fc_context_new();
            fc_graph *g = g_pointwise(cctx, "together", 7);
            fc_program *p = NULL;
            if (fc_compile(g, NULL, &p) != FC_OK) _exit(1);
            char path[400];
            snprintf(path, sizeof path, "%s/child%d.cubin", root, i);
            const fc_bytes *cb = fc_program_cubin(p);
            FILE *f = fopen(path, "wb");
            char *plan = fc_program_plan_text(p);
            bool ok = f && plan && fwrite(cb->data, 1, cb->size, f) == cb->size && fputs(plan, f) >= 0;
            if (f) fclose(f);
            _exit(ok ? 0 : 1);
        }
    }
    close(gate[0]);
    close(gate[1]); /* go */
    for (int i = 0; i < NPROC; i++) {
        int status = -1;
        CHECK(pids[i] > 0 && waitpid(pids[i], &status, 0) == pids[i]);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    size_t n0 = 0;
    unsigned char *first = NULL;
    for (int i = 0; i < NPROC; i++) {
        char path[400];
        snprintf(path, sizeof path, "%s/child%d.cubin", root, i);
        size_t n;
        unsigned char *b = read_file(path, &n);
        CHECK(b && n > 64);
        if (i == 0) {
            first = b;
            n0 = n;
        } else {
            CHECK(b && n == n0 && memcmp(b, first, n) == 0);
            free(b);
        }
        unlink(path);
    }
    free(first);
    CHECK_EQ_INT(count_entries(dir, "kernels"), 1);
    CHECK_EQ_INT(count_entries(dir, "programs"), 1);
    size_t nbad = 99;
    char *info = fc_cache_info_text(ctx, true, &nbad);
    CHECK(info && nbad == 0 && strstr(info, "\nverify:            2 entries checked, 0 bad\n"));
    CHECK(info && strstr(info, "\ntemporary files:   0\n"));
    fc_free(info);
}

/* Four threads, one shared handle, each with its own context: all succeed
 * with the same program (run under TSan to check the locking). */
typedef struct thread_job {
    fc_bytes cubin;
    char *plan;
    int nkernels;
    fc_status st;
} thread_job;

static void *compile_thread(void *arg) {
    thread_job *job = arg;
    fc_context *ctx = fc_context_new();
    fc_graph *g = g_mixed(ctx);
    fc_program *p = NULL;
    job->st = fc_compile(g, NULL, &p);
    if (job->st == FC_OK) {
        const fc_bytes *c = fc_program_cubin(p);
        job->cubin.data = malloc(c->size);
        memcpy(job->cubin.data, c->data, c->size);
        job->cubin.size = c->size;
        job->plan = fc_program_plan_text(p);
        job->nkernels = fc_program_nkernels(p);
    }
    fc_program_free(p);
    fc_graph_free(g);
    fc_context_free(ctx);
    return NULL;
}

static void test_threads(void) {
    enum { NTHREADS = 4 };
    char dir[300];
    fresh_cache(dir, sizeof dir, "rw");
    int nkernels = 0;
    for (int round = 0; round < 2; round++) { /* cold, then warm */
        pthread_t t[NTHREADS];
        thread_job jobs[NTHREADS];
        memset(jobs, 0, sizeof jobs);
        for (int i = 0; i < NTHREADS; i++) CHECK(pthread_create(&t[i], NULL, compile_thread, &jobs[i]) == 0);
        for (int i = 0; i < NTHREADS; i++) pthread_join(t[i], NULL);
        for (int i = 0; i < NTHREADS; i++) {
            CHECK_EQ_INT(jobs[i].st, FC_OK);
            CHECK(same_bytes(&jobs[i].cubin, &jobs[0].cubin));
            CHECK_STR(jobs[i].plan, jobs[0].plan);
        }
        nkernels = jobs[0].nkernels;
        for (int i = 0; i < NTHREADS; i++) {
            fc_bytes_free(&jobs[i].cubin);
            fc_free(jobs[i].plan);
        }
    }
    CHECK(nkernels > 1); /* one entry per distinct kernel */
    CHECK_EQ_INT(count_entries(dir, "kernels"), nkernels);
}

/* ---- damaged entries ------------------------------------------------------------- */

typedef enum damage { FLIP, TRUNCATE, EMPTY, VERSION, GARBAGE, NDAMAGE } damage;
static const char *damage_name[NDAMAGE] = {"bit flip", "truncated", "zero-length", "wrong version", "garbage"};

static void damage_file(const char *path, damage how) {
    size_t n;
    unsigned char *b = read_file(path, &n);
    CHECK(b != NULL && n > 80);
    if (!b) return;
    switch (how) {
    case FLIP: b[n - 5] ^= 0x10; write_all(path, b, n); break;  /* in the payload */
    case TRUNCATE: write_all(path, b, n / 2); break;
    case EMPTY: write_all(path, b, 0); break;
    case VERSION: b[8] ^= 0x7f; write_all(path, b, n); break;     /* the header's version */
    case GARBAGE: memset(b, 'x', n); write_all(path, b, n); break;
    case NDAMAGE: break;
    }
    free(b);
}

/* A damaged cubin entry is never loaded: the program compiles again, gets
 * NVRTC's cubin, and the rebuilt entry is good. */
static void test_damaged_kernel(fc_context *ctx, damage how) {
    char dir[300], kpath[600], ppath[600];
    int failed_before = check_failed;
    fresh_cache(dir, sizeof dir, "rw");
    fc_graph *g = g_pointwise(ctx, "damage", 2);
    fc_program *cold = compile(g, true, 90);
    only_entry(dir, "kernels", kpath, sizeof kpath);
    only_entry(dir, "programs", ppath, sizeof ppath);
    CHECK(kpath[0] && ppath[0]);
    size_t good_n;
    unsigned char *good = read_file(kpath, &good_n);

    damage_file(kpath, how);
    size_t bad_n;
    unsigned char *bad = read_file(kpath, &bad_n);
    CHECK(unlink(ppath) == 0); /* so that the lookup reaches the kernel level */
    reopen_cache();

    uint64_t n0 = nvrtc_count();
    fc_program *p = compile(g, true, 90);
    CHECK_EQ_INT(nvrtc_count() - n0, 1); /* rebuilt */
    if (p) {
        CHECK_EQ_INT(origin_of(p), FC_PROGRAM_COMPILED);
        const fc_bytes *c = fc_program_cubin(p);
        /* Not the damaged payload (a wrong version keeps a good one)... */
        if (how != VERSION) CHECK(!(c->size + 64 == bad_n && memcmp(bad + 64, c->data, c->size) == 0));
        /* ...but NVRTC's cubin, the one the cold compile had. */
        CHECK(same_bytes(c, fc_program_cubin(cold)));
    }
    /* The rebuilt entry is the good one, and verify finds nothing wrong. */
    size_t now_n;
    unsigned char *now = read_file(kpath, &now_n);
    CHECK(now && now_n == good_n && memcmp(now, good, good_n) == 0);
    fc_cache_summary s;
    CHECK_EQ_INT(fc_cache_info(fc_cache_global(ctx), ctx, &s), FC_OK);
    CHECK_EQ_INT(s.counters[FC_CACHE_CORRUPT], 1);
    size_t nbad = 99;
    char *info = fc_cache_info_text(ctx, true, &nbad);
    CHECK(info && nbad == 0);
    fc_free(info);
    if (check_failed > failed_before) fprintf(stderr, "(damage: %s)\n", damage_name[how]);
    free(good);
    free(bad);
    free(now);
    fc_program_free(p);
    fc_program_free(cold);
    fc_graph_free(g);
}

/* A damaged program entry: the cache refuses it (checksum), the kernel
 * level still answers; an entry whose checksum is good but whose bytes do
 * not decode (a fusec bug, or a crafted entry) is a miss too. */
static void test_damaged_program(fc_context *ctx) {
    char dir[300], ppath[600];
    fresh_cache(dir, sizeof dir, "rw");
    fc_graph *g = g_pointwise(ctx, "damage_program", 2);
    fc_program *cold = compile(g, true, 90);
    only_entry(dir, "programs", ppath, sizeof ppath);
    damage_file(ppath, FLIP);
    reopen_cache();
    uint64_t n0 = nvrtc_count();
    fc_program *p = compile(g, true, 90);
    CHECK_EQ_INT(origin_of(p), FC_PROGRAM_KERNEL_CACHE);
    CHECK_EQ_INT(nvrtc_count() - n0, 0);
    fc_program_free(p);

    /* Put bytes that are not a program under the program's key. */
    const char *base = strrchr(ppath, '/') + 1;
    fc_cache_key key;
    CHECK(fc_cache_key_from_hex(base, 32, &key));
    fc_cache *c = fc_cache_global(ctx);
    static const char junk[] = "FCPROGRM\x01\0\0\0\0\0\0\0 not really a program";
    CHECK_EQ_INT(fc_cache_put(c, ctx, FC_CACHE_PROGRAM, &key, junk, sizeof junk), FC_OK);
    fc_cache_summary s0, s1;
    CHECK_EQ_INT(fc_cache_info(c, ctx, &s0), FC_OK);
    p = compile(g, true, 90);
    CHECK_EQ_INT(origin_of(p), FC_PROGRAM_KERNEL_CACHE); /* re-planned; the entry replaced */
    fc_program_free(p);
    /* The undecodable program entry is corrupt, not a hit: the one hit is
     * the kernel's. */
    CHECK_EQ_INT(fc_cache_info(c, ctx, &s1), FC_OK);
    CHECK_EQ_INT(s1.counters[FC_CACHE_CORRUPT] - s0.counters[FC_CACHE_CORRUPT], 1);
    CHECK_EQ_INT(s1.counters[FC_CACHE_HITS] - s0.counters[FC_CACHE_HITS], 1);
    reopen_cache();
    p = compile(g, true, 90);
    CHECK_EQ_INT(origin_of(p), FC_PROGRAM_PROGRAM_CACHE);
    char *a = fc_program_plan_text(cold), *b = fc_program_plan_text(p);
    CHECK_STR(b, a);
    fc_free(a);
    fc_free(b);
    fc_program_free(p);
    fc_program_free(cold);
    fc_graph_free(g);
}

/* ---- modes ---------------------------------------------------------------------- */

static bool dir_exists(const char *d) {
    struct stat st;
    return stat(d, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Names, sizes and mtimes of every file under dir, as one string. */
static void snapshot(const char *dir, char *out, size_t n) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "cd '%s' && find . -type f -printf '%%p %%s %%T@\\n' | sort", dir);
    FILE *f = popen(cmd, "r");
    size_t len = f ? fread(out, 1, n - 1, f) : 0;
    out[len] = 0;
    if (f) pclose(f);
}

static void test_modes(fc_context *ctx) {
    char dir[300];
    fc_graph *g = g_pointwise(ctx, "modes", 3);

    /* off: always compiles, creates nothing. */
    fresh_cache(dir, sizeof dir, "off");
    uint64_t n0 = nvrtc_count();
    for (int i = 0; i < 2; i++) {
        fc_program *p = compile(g, true, 90);
        CHECK_EQ_INT(origin_of(p), FC_PROGRAM_COMPILED);
        fc_program_free(p);
    }
    CHECK_EQ_INT(nvrtc_count() - n0, 2);
    CHECK(!dir_exists(dir));

    /* ro on an empty cache: compiles, writes nothing (the memory layer
     * still spares a second NVRTC run in this process). */
    fresh_cache(dir, sizeof dir, "ro");
    n0 = nvrtc_count();
    fc_program *p = compile(g, true, 90);
    CHECK_EQ_INT(origin_of(p), FC_PROGRAM_COMPILED);
    fc_program_free(p);
    p = compile(g, true, 90);
    CHECK_EQ_INT(origin_of(p), FC_PROGRAM_PROGRAM_CACHE);
    fc_program_free(p);
    CHECK_EQ_INT(nvrtc_count() - n0, 1);
    CHECK(!dir_exists(dir));

    /* ro on a filled cache: reads it, and touches nothing (no new file, no
     * LRU touch, no counters). */
    setenv("FUSEC_CACHE", "rw", 1);
    reopen_cache();
    p = compile(g, true, 90);
    fc_program_free(p);
    fc_cache_global_close();
    char before[4096], after[4096];
    snapshot(dir, before, sizeof before);
    CHECK(strstr(before, "/kernels/") && strstr(before, "/programs/") && strstr(before, "./v1/stats"));
    setenv("FUSEC_CACHE", "ro", 1);
    n0 = nvrtc_count();
    struct timespec pause = {0, 20 * 1000 * 1000}; /* so that a touch would show in the mtimes */
    nanosleep(&pause, NULL);
    p = compile(g, true, 90);
    CHECK_EQ_INT(origin_of(p), FC_PROGRAM_PROGRAM_CACHE);
    CHECK_EQ_INT(nvrtc_count() - n0, 0);
    fc_program_free(p);
    fc_graph *other = g_pointwise(ctx, "modes_other", 5); /* another shape: another kernel */
    p = compile(other, true, 90); /* a miss in ro: compiled, not written */
    CHECK_EQ_INT(origin_of(p), FC_PROGRAM_COMPILED);
    fc_program_free(p);
    fc_graph_free(other);
    fc_cache_global_close();
    snapshot(dir, after, sizeof after);
    CHECK_STR(after, before);

    /* A bad FUSEC_CACHE is an error that names it. */
    setenv("FUSEC_CACHE", "yes", 1);
    fc_program *bad = (fc_program *)&bad;
    CHECK_EQ_INT(fc_compile(g, NULL, &bad), FC_ERR_USAGE);
    CHECK(bad == NULL);
    CHECK(strstr(fc_last_error(ctx), "FUSEC_CACHE") != NULL);
    setenv("FUSEC_CACHE", "rw", 1);

    /* configure: only before the cache is open. */
    p = compile(g, true, 90);
    fc_program_free(p);
    CHECK_EQ_INT(fc_cache_configure(dir), FC_ERR_USAGE);
    fc_cache_global_close();
    CHECK_EQ_INT(fc_cache_configure(""), FC_ERR_USAGE);
    fc_graph_free(g);
}

/* A directory others can write: refused with one warning; compiles still
 * work, and the memory layer still saves the second NVRTC run. */
static void test_unsafe_dir(fc_context *ctx) {
    char dir[300];
    fresh_cache(dir, sizeof dir, "rw");
    CHECK(mkdir(dir, 0700) == 0 && chmod(dir, 0777) == 0);
    fc_graph *g = g_pointwise(ctx, "unsafe", 5);
    uint64_t n0 = nvrtc_count();
    fc_program *p = compile(g, true, 90);
    fc_program *q = compile(g, true, 90);
    CHECK_EQ_INT(nvrtc_count() - n0, 1);
    const char *w = fc_cache_global_take_warning();
    CHECK(w && strstr(w, "writable by others") && strstr(w, "running without the cache"));
    CHECK(fc_cache_global_take_warning() == NULL); /* once */
    CHECK_EQ_INT(count_entries(dir, "kernels"), 0);
    fc_program_free(p);
    fc_program_free(q);
    fc_graph_free(g);
    chmod(dir, 0700);
}

/* ---- the serialized program -------------------------------------------------------- */

/* Tensor maps a decoder must refuse: each field of a good one spoiled in
 * turn, the description encoded again (encode trusts what it is given) and
 * decoded: FC_ERR_INPUT with the field's message. (A count above
 * FC_LAUNCH_MAX_TMAPS is among the flipped bytes of test_serialization.) */
static void test_tmap_decode(fc_context *ctx) {
    if (!fc_cuda_attention_hopper(90)) return;
    fc_graph *g = g_attention(ctx);
    fc_program *p = compile(g, true, 90);
    if (!p) {
        fc_graph_free(g);
        return;
    }
    fc_bytes a = {NULL, 0};
    CHECK_EQ_INT(fc_program_desc_encode(ctx, fc_program_desc_of(p), &a), FC_OK);
    fc_program_desc d;
    CHECK_EQ_INT(fc_program_desc_decode(ctx, a.data, a.size, &d), FC_OK);
    fc_bytes_free(&a);
    fc_launch *l = NULL;
    for (int i = 0; i < d.src.nlaunches; i++)
        if (d.src.launches[i].ntmaps) l = &d.src.launches[i];
    CHECK(l != NULL && l->ntmaps == 3 && l->tmaps[1].rank == 4);
    if (!l) {
        fc_program_desc_release(&d);
        fc_program_free(p);
        fc_graph_free(g);
        return;
    }
    static const struct {
        const char *what, *message;
    } spoil[] = {
        {"rank 6", "rank 6"},
        {"rank 0", "rank 0"},
        {"dtype f32", "dtype"},
        {"argument past nargs", "argument"},
        {"negative offset", "offset -"},
        {"box 300", "box dim 1 is 300"},
        {"box 0", "box dim 2 is 0"},
        {"box[0] 128 (256 bytes under the 128-byte swizzle)", "box dim 0 is 128"},
        {"stride 24", "stride 1 is 24 bytes"},
        {"stride 2^40", "stride 2 is"},
        {"dim 0", "dim 3 is 0"},
        {"dim 2^33", "dim 1 is"},
        {"past its buffer", "reaches past argument"},
        {"offset past its buffer", "reaches past argument"},
    };
    const fc_tmap good = l->tmaps[1];
    const int good_n = l->ntmaps;
    for (size_t s = 0; s < sizeof spoil / sizeof *spoil; s++) {
        fc_tmap *m = &l->tmaps[1];
        *m = good;
        l->ntmaps = good_n;
        switch (s) {
        case 0: m->rank = 6; break;
        case 1: m->rank = 0; break;
        case 2: m->dtype = FC_F32; break;
        case 3: m->arg = l->nargs; break;
        case 4: m->offset = -8; break;
        case 5: m->box[1] = 300; break;
        case 6: m->box[2] = 0; break;
        case 7: m->box[0] = 128; break;
        case 8: m->strides[0] = 24; break;
        case 9: m->strides[1] = (int64_t)1 << 40; break;
        case 10: m->dims[3] = 0; break;
        case 11: m->dims[1] = (int64_t)1 << 33; break;
        case 12: m->dims[3] *= 2; break;
        case 13: m->offset = 2 * 130 * 384; break;
        }
        fc_bytes e = {NULL, 0};
        CHECK_EQ_INT(fc_program_desc_encode(ctx, &d, &e), FC_OK);
        fc_program_desc x;
        fc_status st = fc_program_desc_decode(ctx, e.data, e.size, &x);
        CHECK_EQ_INT(st, FC_ERR_INPUT);
        if (!strstr(fc_last_error(ctx), spoil[s].message))
            fprintf(stderr, "tensor map %s: \"%s\" not in: %s\n", spoil[s].what, spoil[s].message, fc_last_error(ctx));
        CHECK(strstr(fc_last_error(ctx), spoil[s].message) != NULL);
        fc_bytes_free(&e);
    }
    l->tmaps[1] = good;
    l->ntmaps = good_n;
    fc_program_desc_release(&d);
    fc_program_free(p);
    fc_graph_free(g);
}

static void test_serialization(fc_context *ctx) {
    char dir[300];
    fresh_cache(dir, sizeof dir, "off");
    fc_graph *gs[3] = {g_mixed(ctx), g_pointwise(ctx, "ser", 2), g_attention(ctx)};
    for (int k = 0; k < 3; k++) {
        for (int fuse = k == 2; fuse < 2; fuse++) { /* attention's split needs fusion */
            fc_program *p = compile(gs[k], fuse, 90);
            if (!p) continue;
            const fc_program_desc *d = fc_program_desc_of(p);
            int ntmaps = 0;
            for (int i = 0; i < d->src.nlaunches; i++) ntmaps += d->src.launches[i].ntmaps;
            if (k == 2 && fc_cuda_attention_hopper(90)) CHECK(ntmaps == 3);
            fc_bytes a = {NULL, 0}, b = {NULL, 0};
            CHECK_EQ_INT(fc_program_desc_encode(ctx, d, &a), FC_OK);
            fc_program_desc back;
            fc_status st = fc_program_desc_decode(ctx, a.data, a.size, &back);
            if (st != FC_OK) fprintf(stderr, "decode: %s\n", fc_last_error(ctx));
            CHECK_EQ_INT(st, FC_OK);
            CHECK_EQ_INT(fc_program_desc_encode(ctx, &back, &b), FC_OK);
            CHECK(same_bytes(&a, &b)); /* nothing lost, nothing made up */
            fc_program_desc_release(&back);
            fc_bytes_free(&b);

            /* Every truncation refused (no read goes past the end), every
             * byte flipped, every allocation failing. */
            check_desc_damage(ctx, &a, a.size, a.size);
            /* Trailing bytes. */
            uint8_t *longer = malloc(a.size + 1);
            memcpy(longer, a.data, a.size);
            longer[a.size] = 0;
            fc_program_desc x;
            CHECK_EQ_INT(fc_program_desc_decode(ctx, longer, a.size + 1, &x), FC_ERR_INPUT);
            CHECK(strstr(fc_last_error(ctx), "after the end") != NULL);
            free(longer);
            fc_bytes_free(&a);
            fc_program_free(p);
        }
        fc_graph_free(gs[k]);
    }
    test_tmap_decode(ctx);
    /* The header's checks, with their messages. */
    fc_program_desc x;
    CHECK_EQ_INT(fc_program_desc_decode(ctx, "FCPROGRM\x09\0\0\0\0\0\0\0", 16, &x), FC_ERR_INPUT);
    char want_version[64];
    snprintf(want_version, sizeof want_version, "format version 9, this fusec reads %u", FC_PROGRAM_FORMAT_VERSION);
    CHECK(strstr(fc_last_error(ctx), want_version) != NULL);
    CHECK_EQ_INT(fc_program_desc_decode(ctx, "ELF", 3, &x), FC_ERR_INPUT);
    CHECK_EQ_INT(fc_program_desc_decode(ctx, "NOTAPROGRAMATALL", 16, &x), FC_ERR_INPUT);
    CHECK(strstr(fc_last_error(ctx), "not a program") != NULL);
}

/* ---- allocation failures ------------------------------------------------------------- */

/* Cold (mode off: every step runs), cold into an empty cache (the puts),
 * and warm from disk: every failure is FC_ERR_NOMEM, and ASan's leak check
 * sees nothing left behind. */
static void alloc_loop(const char *what, bool reopen_each) {
    fc_context *ctx = fc_context_new();
    fc_graph *g = g_pointwise(ctx, "alloc", 2);
    int failures = 0;
    fc_program *p = compile_through_alloc_failures_each(ctx, g, NULL, &failures, reopen_each ? reopen_cache : NULL);
    CHECK(p != NULL);
    fc_program_free(p);
    printf("allocation failures (%s): %d, each reported\n", what, failures);
    CHECK(failures > 5);
    fc_graph_free(g);
    fc_context_free(ctx);
}

static void test_alloc_failures(void) {
    char dir[300];
    fresh_cache(dir, sizeof dir, "off");
    alloc_loop("cold, cache off", false);
    fresh_cache(dir, sizeof dir, "rw");
    alloc_loop("cold into an empty cache", false);
    alloc_loop("warm from disk", true);
}

/* ---- the CLI's texts -------------------------------------------------------------- */

static void test_texts(fc_context *ctx) {
    char dir[300];
    fresh_cache(dir, sizeof dir, "rw");
    fc_graph *g = g_pointwise(ctx, "texts", 6);
    fc_program *p = compile(g, true, 90);
    fc_program *q = compile(g, true, 90);

    size_t nbad = 99;
    char *info = fc_cache_info_text(ctx, false, &nbad);
    CHECK(info != NULL);
    if (info) {
        if (getenv("FUSEC_TEST_VERBOSE")) printf("%s", info);
        char want[400];
        snprintf(want, sizeof want, "cache directory:   %s\n", dir);
        CHECK(strstr(info, want) == info);
        /* Two hits: the warm compile's program, then its cubin. */
        static const char *const lines[] = {
            "\nmode:              rw\n",         "\ndisk cache:        on\n",
            "\nformat version:    1\n",          "\nkernels:           1 entries, ",
            "\nprograms:          1 entries, ", " of 1.0 GiB (1073741824 bytes) (",
            "\nhits:              2\n",          "\nmisses:            2\n",
            "\ncompiles:          1\n",          "\noldest entry:      20",
            "\nnewest entry:      20",
        };
        for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
            if (!strstr(info, lines[i])) fprintf(stderr, "the cache info lacks \"%s\"\n", lines[i]);
            CHECK(strstr(info, lines[i]) != NULL);
        }
        CHECK(strstr(info, "verify:") == NULL);
        CHECK_EQ_INT(nbad, 0);
    }
    fc_free(info);

    /* --verify lists a damaged entry (and leaves it: verify only reports). */
    char kpath[600];
    only_entry(dir, "kernels", kpath, sizeof kpath);
    damage_file(kpath, FLIP);
    info = fc_cache_info_text(ctx, true, &nbad);
    CHECK(info && strstr(info, "\nverify:            2 entries checked, 1 bad\n"));
    char want[700];
    snprintf(want, sizeof want, "\nbad entry:         %s: ", kpath);
    CHECK(info && strstr(info, want));
    CHECK_EQ_INT(nbad, 1);
    fc_free(info);

    /* --cache-clear: what it freed, then an empty cache. */
    char *clr = fc_cache_clear_text(ctx);
    snprintf(want, sizeof want, "cleared %s: 2 entries removed, ", dir);
    CHECK(clr && strstr(clr, want) == clr && strstr(clr, " freed\n"));
    fc_free(clr);
    info = fc_cache_info_text(ctx, false, NULL);
    CHECK(info && strstr(info, "\nkernels:           0 entries, 0 bytes\n"));
    CHECK(info && strstr(info, "\noldest entry:      none "));
    fc_free(info);

    /* --time. */
    fc_compile_times t;
    fc_program_times(p, &t);
    t.parse_ms = 0.25;
    char *tt = fc_compile_times_text(&t);
    CHECK(tt && strstr(tt, "time: ") == tt && strstr(tt, "(compiled: passes, codegen and NVRTC ran)\n"));
    CHECK(tt && strstr(tt, "\n  parse         0.250 ms\n") && strstr(tt, "\n  nvrtc  ") && strstr(tt, "(no run yet)"));
    if (tt && getenv("FUSEC_TEST_VERBOSE")) printf("%s", tt);
    fc_free(tt);
    fc_program_times(q, &t);
    tt = fc_compile_times_text(&t);
    CHECK(tt && strstr(tt, "warm start") && strstr(tt, "(skipped)"));
    fc_free(tt);

    fc_program_free(p);
    fc_program_free(q);
    fc_graph_free(g);
}

/* ---- cold against warm -------------------------------------------------------------- */

static void test_timing(fc_context *ctx) {
    char dir[300];
    fresh_cache(dir, sizeof dir, "rw");
    fc_graph *g = parse_softmax(ctx, 8);
    if (!g) return;
    double t0 = fc_now_ms();
    fc_program *cold = compile(g, true, 90);
    double cold_ms = fc_now_ms() - t0;
    t0 = fc_now_ms();
    fc_program *mem = compile(g, true, 90);
    double mem_ms = fc_now_ms() - t0;
    reopen_cache();
    t0 = fc_now_ms();
    fc_program *disk = compile(g, true, 90);
    double disk_ms = fc_now_ms() - t0;
    /* Parse included: what a warm `fusec` start pays before the device. */
    reopen_cache();
    t0 = fc_now_ms();
    fc_graph *g2 = parse_softmax(ctx, 8);
    fc_program *disk2 = compile(g2, true, 90);
    double parse_disk_ms = fc_now_ms() - t0;
    CHECK_EQ_INT(origin_of(cold), FC_PROGRAM_COMPILED);
    CHECK_EQ_INT(origin_of(mem), FC_PROGRAM_PROGRAM_CACHE);
    CHECK_EQ_INT(origin_of(disk), FC_PROGRAM_PROGRAM_CACHE);
    printf("examples/softmax.ir (N=8), fc_compile: cold %.2f ms, warm in process %.3f ms, warm from disk %.3f ms, "
           "parse + warm from disk %.3f ms\n",
           cold_ms, mem_ms, disk_ms, parse_disk_ms);
    fc_compile_times t;
    fc_program_times(cold, &t);
    printf("  cold: passes %.3f ms, codegen %.3f ms, nvrtc %.2f ms, cache %.3f ms\n", t.passes_ms, t.codegen_ms,
           t.nvrtc_ms, t.cache_ms);
    fc_program_times(disk, &t);
    printf("  warm: cache %.3f ms of %.3f ms\n", t.cache_ms, t.compile_ms);
    CHECK(disk_ms < cold_ms);
    CHECK(disk_ms < 50); /* the warm-start budget, for a small graph with room to spare */
    fc_program_free(cold);
    fc_program_free(mem);
    fc_program_free(disk);
    fc_program_free(disk2);
    fc_graph_free(g);
    fc_graph_free(g2);
}

int main(void) {
    if (!temp_dir(root, sizeof root, "fusec-test-kcache")) return 1;
    unsetenv("FUSEC_CACHE_MAX_BYTES");
    fc_context *ctx = fc_context_new();
    CHECK(fc_build_identity()[0] != 0);
    test_cold_warm(ctx);
    test_processes(ctx);
    test_threads();
    for (int d = 0; d < NDAMAGE; d++) test_damaged_kernel(ctx, (damage)d);
    test_damaged_program(ctx);
    test_modes(ctx);
    test_unsafe_dir(ctx);
    test_serialization(ctx);
    test_alloc_failures();
    test_texts(ctx);
    test_timing(ctx);
    fc_cache_global_close();
    fc_cache_configure(NULL);
    fc_context_free(ctx);
    rm_rf(root);
    return check_report("test_kernel_cache");
}
