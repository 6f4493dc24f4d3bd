/* test_gemm_algo_cache.c - cuBLASLt algorithms in the on-disk cache
 * (runtime/cublaslt.c, level FC_CACHE_ALGO of cache/; docs/GEMM.md,
 * "Algorithms on disk").
 *
 * Without a GPU:
 *  1. The key: the same problem and device give the same key; a change of
 *     any one field of the problem (fc_cublaslt_key) or of the device
 *     (name, compute capability, SM count, driver, cuBLASLt, cudart) gives
 *     another.
 *  2. The record: encode then decode gives the algorithm back, byte for
 *     byte; a record of another problem or device is refused.
 *  3. Corruption: every truncation, a byte more, every byte flipped (two
 *     ways), the wrong magic or version are refused.
 *  4. The cache's new level: entries go to DIR/v1/algos/, are counted by
 *     fc_cache_info and `--cache-info`, checked by verify, and
 *     fc_cache_remove drops one (from disk in rw mode only).
 * With a GPU (else "skipped: no CUDA device (...)"):
 *  5. One GEMM run by two fresh handles over one cache directory (two
 *     cache handles: the second reads the disk, not the first's memory):
 *     the first asks the heuristic and stores, the second makes no query,
 *     takes the algorithm from the disk, and gives the same bytes.
 *  6. A garbled record (good cache checksum), a flipped byte on disk, and a
 *     well-formed record whose algorithm cuBLASLt refuses: each is not
 *     used, the heuristic is asked, and a good record replaces it.
 *  7. ro stores nothing on disk; off neither reads nor stores.
 *  8. Programs: fc_compile + run, then a "new process" (the process's
 *     cache closed) compiles and runs again: no heuristic query.
 */
#include "check.h"
#include "cache/cache.h"
#include "cache/cache_internal.h"
#include "ir.h"
#include "runtime/cuda/cublaslt.h"
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/program.h"
#include "runtime/cuda/program_cache.h"
#include "test_util.h"

#include <cublasLt.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

/* ---- helpers ------------------------------------------------------------------ */

static char root[512];

/* A fresh directory under the test's root. */
static void fresh_dir(char *out, size_t n, const char *name) {
    snprintf(out, n, "%s/%s", root, name);
    rm_rf(out);
}

static fc_cache *open_cache(fc_context *ctx, const char *dir, fc_cache_mode mode) {
    fc_cache_options o = {.dir = dir, .mode = mode};
    fc_cache *c = NULL;
    CHECK_EQ_INT(fc_cache_open(ctx, &o, &c), FC_OK);
    return c;
}

/* A problem as fc_cublaslt_key_of makes it, and a made-up device. */
static fc_cublaslt_key sample_key(void) {
    fc_gemm_plan p = {0};
    p.ab = p.out = FC_BF16;
    p.nweights = 1;
    p.M = 64, p.N = 96, p.K = 128;
    p.lda = 128, p.ldw = 96;
    p.batch = 1;
    p.has_bias = true;
    p.act = FC_GEMM_ACT_GELU_TANH;
    p.alpha = 1;
    fc_cublaslt_key k;
    fc_cublaslt_key_of(&p, false, 0x10000, 0x20000, 0x30000, 0x40000, 0x40000, FC_CUBLASLT_WORKSPACE_BYTES, &k);
    return k;
}

static fc_cublaslt_device_id sample_device(void) {
    fc_cuda_device_info info = {0};
    snprintf(info.name, sizeof info.name, "NVIDIA H200");
    info.cc_major = 9;
    info.cc_minor = 0;
    info.sm_count = 132;
    info.driver_version = 13000;
    fc_cublaslt_device_id id;
    fc_cublaslt_device_id_of(&info, &id);
    return id;
}

static void sample_algo(uint8_t algo[FC_CUBLASLT_ALGO_BYTES]) {
    for (int i = 0; i < FC_CUBLASLT_ALGO_BYTES; i++) algo[i] = (uint8_t)(i * 37 + 11);
}

/* ---- 1. the key ------------------------------------------------------------------ */

static void test_key(void) {
    fc_cublaslt_key k = sample_key();
    fc_cublaslt_device_id dev = sample_device();
    CHECK_EQ_INT(k.version, FC_CUBLASLT_KEY_VERSION);
    CHECK_EQ_INT(dev.lt_version, (int64_t)cublasLtGetVersion());
    CHECK_EQ_INT(dev.cudart_version, (int64_t)cublasLtGetCudartVersion());
    CHECK_STR(dev.name, "NVIDIA H200");
    fc_cache_key k0 = fc_cublaslt_algo_cache_key(&k, &dev);

    /* Same in, same out (copies, not the same objects). */
    fc_cublaslt_key k2 = sample_key();
    fc_cublaslt_device_id dev2 = sample_device();
    fc_cache_key again = fc_cublaslt_algo_cache_key(&k2, &dev2);
    CHECK(fc_cache_key_equal(&k0, &again));

    /* Each field of the problem matters. */
    int nfields = (int)(sizeof k / sizeof(int64_t)), differ = 0;
    for (int i = 0; i < nfields; i++) {
        fc_cublaslt_key m = k;
        int64_t *f = (int64_t *)(void *)&m;
        f[i] += 1;
        fc_cache_key km = fc_cublaslt_algo_cache_key(&m, &dev);
        differ += !fc_cache_key_equal(&k0, &km);
    }
    CHECK_EQ_INT(differ, nfields);

    /* Real problems that differ in one way each. */
    fc_gemm_plan p = {0};
    p.ab = p.out = FC_F32;
    p.nweights = 1;
    p.M = 64, p.N = 96, p.K = 128, p.lda = 128, p.ldw = 96, p.batch = 1, p.alpha = 1;
    fc_cublaslt_key a, b;
    fc_cublaslt_key_of(&p, false, 0, 0, 0, 0, 0, FC_CUBLASLT_WORKSPACE_BYTES, &a);
    fc_cublaslt_key_of(&p, true, 0, 0, 0, 0, 0, FC_CUBLASLT_WORKSPACE_BYTES, &b); /* TF32 */
    fc_cache_key ka = fc_cublaslt_algo_cache_key(&a, &dev), kb = fc_cublaslt_algo_cache_key(&b, &dev);
    CHECK(!fc_cache_key_equal(&ka, &kb));
    fc_cublaslt_key_of(&p, false, 0, 0, 0, 0, 0, 0, &b); /* no workspace */
    kb = fc_cublaslt_algo_cache_key(&b, &dev);
    CHECK(!fc_cache_key_equal(&ka, &kb));
    fc_cublaslt_key_of(&p, false, 0x10, 0, 0, 0, 0, FC_CUBLASLT_WORKSPACE_BYTES, &b); /* x only 16-aligned */
    kb = fc_cublaslt_algo_cache_key(&b, &dev);
    CHECK(!fc_cache_key_equal(&ka, &kb));
    fc_gemm_plan q = p;
    q.trans_b = true, q.ldw = 128;
    fc_cublaslt_key_of(&q, false, 0, 0, 0, 0, 0, FC_CUBLASLT_WORKSPACE_BYTES, &b);
    kb = fc_cublaslt_algo_cache_key(&b, &dev);
    CHECK(!fc_cache_key_equal(&ka, &kb));
    q = p;
    q.batch = 4, q.stride_a = 64 * 128, q.stride_w = 0, q.stride_y = 64 * 96;
    fc_cublaslt_key_of(&q, false, 0, 0, 0, 0, 0, FC_CUBLASLT_WORKSPACE_BYTES, &b);
    kb = fc_cublaslt_algo_cache_key(&b, &dev);
    CHECK(!fc_cache_key_equal(&ka, &kb));
    /* The scale is not part of the problem (it is passed with each call). */
    q = p;
    q.alpha = 0.125;
    fc_cublaslt_key_of(&q, false, 0, 0, 0, 0, 0, FC_CUBLASLT_WORKSPACE_BYTES, &b);
    kb = fc_cublaslt_algo_cache_key(&b, &dev);
    CHECK(fc_cache_key_equal(&ka, &kb));

    /* Each field of the device matters. */
    fc_cublaslt_device_id d;
    fc_cache_key kd;
#define DEVICE_DIFFERS(change)                                                                                     \
    do {                                                                                                           \
        d = dev;                                                                                                   \
        change;                                                                                                    \
        kd = fc_cublaslt_algo_cache_key(&k, &d);                                                                  \
        CHECK(!fc_cache_key_equal(&k0, &kd));                                                                      \
    } while (0)
    DEVICE_DIFFERS(snprintf(d.name, sizeof d.name, "NVIDIA H100 80GB HBM3"));
    DEVICE_DIFFERS(d.cc_major = 10);
    DEVICE_DIFFERS(d.cc_minor = 1);
    DEVICE_DIFFERS(d.sm_count = 66);
    DEVICE_DIFFERS(d.driver_version += 10);
    DEVICE_DIFFERS(d.lt_version += 1);
    DEVICE_DIFFERS(d.cudart_version += 10);
#undef DEVICE_DIFFERS

    /* The name is copied up to its NUL: garbage after it does not matter. */
    fc_cuda_device_info info = {0};
    memset(info.name, 'x', sizeof info.name);
    snprintf(info.name, 16, "NVIDIA H200");
    info.cc_major = 9, info.sm_count = 132, info.driver_version = 13000;
    fc_cublaslt_device_id_of(&info, &d);
    kd = fc_cublaslt_algo_cache_key(&k, &d);
    CHECK(fc_cache_key_equal(&k0, &kd));
}

/* ---- 2 and 3. the record ------------------------------------------------------------ */

static bool decodes(const uint8_t *rec, size_t n, const fc_cublaslt_key *k, const fc_cublaslt_device_id *dev,
                    uint8_t *algo, char *why, size_t wn) {
    return fc_cublaslt_algo_record_decode(rec, n, k, dev, algo, why, wn);
}

static void test_record(void) {
    fc_cublaslt_key k = sample_key();
    fc_cublaslt_device_id dev = sample_device();
    uint8_t algo[FC_CUBLASLT_ALGO_BYTES], got[FC_CUBLASLT_ALGO_BYTES];
    sample_algo(algo);
    uint8_t rec[FC_CUBLASLT_ALGO_RECORD_BYTES], rec2[FC_CUBLASLT_ALGO_RECORD_BYTES + 1];
    fc_cublaslt_algo_record_encode(&k, &dev, algo, rec);
    CHECK(memcmp(rec, FC_CUBLASLT_ALGO_MAGIC, 8) == 0);
    char why[200] = "";
    memset(got, 0, sizeof got);
    CHECK(decodes(rec, sizeof rec, &k, &dev, got, why, sizeof why));
    CHECK(memcmp(got, algo, sizeof algo) == 0);
    /* Encoding is a function: the same bytes again. */
    fc_cublaslt_algo_record_encode(&k, &dev, algo, rec2);
    CHECK(memcmp(rec, rec2, sizeof rec) == 0);
    /* A real cublasLtMatmulAlgo_t's bytes come back as the same struct. */
    cublasLtMatmulAlgo_t a, b;
    for (int i = 0; i < 8; i++) a.data[i] = 0x0123456789abcdefull * (uint64_t)(i + 1);
    fc_cublaslt_algo_record_encode(&k, &dev, (const uint8_t *)&a, rec2);
    CHECK(decodes(rec2, FC_CUBLASLT_ALGO_RECORD_BYTES, &k, &dev, (uint8_t *)&b, why, sizeof why));
    CHECK(memcmp(&a, &b, sizeof a) == 0);

    /* Another problem, another device: refused, with the reason. */
    fc_cublaslt_key k2 = k;
    k2.m++;
    CHECK(!decodes(rec, sizeof rec, &k2, &dev, got, why, sizeof why));
    CHECK(strstr(why, "another GEMM problem") != NULL);
    fc_cublaslt_device_id d2 = dev;
    d2.lt_version++;
    CHECK(!decodes(rec, sizeof rec, &k, &d2, got, why, sizeof why));
    CHECK(strstr(why, "another device") != NULL);
    d2 = dev;
    d2.name[0] = 'M';
    CHECK(!decodes(rec, sizeof rec, &k, &d2, got, why, sizeof why));

    /* Every truncation, and a byte more. */
    int refused = 0;
    for (size_t n = 0; n < sizeof rec; n++) refused += !decodes(rec, n, &k, &dev, got, why, sizeof why);
    CHECK_EQ_INT(refused, (int)sizeof rec);
    memcpy(rec2, rec, sizeof rec);
    rec2[sizeof rec] = 0;
    CHECK(!decodes(rec2, sizeof rec + 1, &k, &dev, got, why, sizeof why));
    CHECK(!decodes(NULL, sizeof rec, &k, &dev, got, why, sizeof why));

    /* Every byte flipped, one bit and all bits. */
    refused = 0;
    for (size_t i = 0; i < sizeof rec; i++)
        for (int m = 0; m < 2; m++) {
            memcpy(rec2, rec, sizeof rec);
            rec2[i] ^= m ? 0xff : 0x01;
            refused += !decodes(rec2, sizeof rec, &k, &dev, got, why, sizeof why);
        }
    CHECK_EQ_INT(refused, 2 * (int)sizeof rec);

    /* A wrong version with a good checksum (a record of a later fusec):
     * refused for its version, not its checksum. */
    memcpy(rec2, rec, sizeof rec);
    rec2[8]++;
    uint64_t sum = XXH3_64bits(rec2, FC_CUBLASLT_ALGO_RECORD_BYTES - 8);
    for (int i = 0; i < 8; i++) rec2[FC_CUBLASLT_ALGO_RECORD_BYTES - 8 + i] = (uint8_t)(sum >> (8 * i));
    CHECK(!decodes(rec2, sizeof rec, &k, &dev, got, why, sizeof why));
    CHECK(strstr(why, "version") != NULL);
    /* Zeros: the magic is wrong. */
    memset(rec2, 0, sizeof rec);
    CHECK(!decodes(rec2, sizeof rec, &k, &dev, got, why, sizeof why));
    CHECK(strstr(why, "magic") != NULL);
}

/* ---- 4. the cache level ----------------------------------------------------------- */

static void test_cache_level(fc_context *ctx) {
    CHECK_STR(fc_cache_level_name(FC_CACHE_ALGO), "algorithm");
    char dir[600], path[1200];
    fresh_dir(dir, sizeof dir, "level");
    fc_cache *c = open_cache(ctx, dir, FC_CACHE_RW);
    if (!c) return;
    fc_cublaslt_key k = sample_key();
    fc_cublaslt_device_id dev = sample_device();
    uint8_t algo[FC_CUBLASLT_ALGO_BYTES], rec[FC_CUBLASLT_ALGO_RECORD_BYTES];
    sample_algo(algo);
    fc_cublaslt_algo_record_encode(&k, &dev, algo, rec);
    fc_cache_key key = fc_cublaslt_algo_cache_key(&k, &dev);
    CHECK_EQ_INT(fc_cache_put(c, ctx, FC_CACHE_ALGO, &key, rec, sizeof rec), FC_OK);
    CHECK(fc_cache_entry_path(c, FC_CACHE_ALGO, &key, path, sizeof path));
    CHECK(strstr(path, "/v1/algos/") != NULL);
    struct stat st;
    CHECK(stat(path, &st) == 0 && st.st_size == FC_CACHE_HEADER_SIZE + FC_CUBLASLT_ALGO_RECORD_BYTES);
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
    CHECK_EQ_INT(count_entries(dir, "algos"), 1);
    CHECK_EQ_INT(count_entries(dir, "kernels"), 0);

    fc_cache_summary s;
    CHECK_EQ_INT(fc_cache_info(c, ctx, &s), FC_OK);
    CHECK_EQ_INT(s.entries[FC_CACHE_ALGO], 1);
    CHECK_EQ_INT(s.bytes[FC_CACHE_ALGO], FC_CACHE_HEADER_SIZE + FC_CUBLASLT_ALGO_RECORD_BYTES);
    CHECK_EQ_INT(s.entries[FC_CACHE_PROGRAM] + s.entries[FC_CACHE_KERNEL], 0);
    fc_cache_verify_result vr;
    CHECK_EQ_INT(fc_cache_verify(c, ctx, false, &vr), FC_OK);
    CHECK_EQ_INT(vr.checked, 1);
    CHECK_EQ_INT(vr.nbad, 0);
    fc_cache_verify_result_free(&vr);
    fc_cache_close(c);

    /* A new handle reads it from disk. */
    c = open_cache(ctx, dir, FC_CACHE_RW);
    void *data = NULL;
    size_t n = 0;
    uint8_t got[FC_CUBLASLT_ALGO_BYTES];
    char why[200];
    CHECK_EQ_INT(fc_cache_get(c, ctx, FC_CACHE_ALGO, &key, &data, &n), FC_OK);
    CHECK(data && decodes(data, n, &k, &dev, got, why, sizeof why) && !memcmp(got, algo, sizeof got));
    fc_free(data);
    /* The levels are apart: the same key in another level is a miss. */
    CHECK_EQ_INT(fc_cache_get(c, ctx, FC_CACHE_PROGRAM, &key, &data, &n), FC_OK);
    CHECK(data == NULL);

    /* ro: remove leaves the disk alone (but the memory layer forgets). */
    fc_cache *ro = open_cache(ctx, dir, FC_CACHE_RO);
    CHECK_EQ_INT(fc_cache_remove(ro, ctx, FC_CACHE_ALGO, &key), FC_OK);
    CHECK(stat(path, &st) == 0);
    fc_cache_close(ro);

    /* rw: remove drops the file and the in-process copy. */
    CHECK_EQ_INT(fc_cache_remove(c, ctx, FC_CACHE_ALGO, &key), FC_OK);
    CHECK(stat(path, &st) != 0);
    CHECK_EQ_INT(fc_cache_get(c, ctx, FC_CACHE_ALGO, &key, &data, &n), FC_OK);
    CHECK(data == NULL);
    /* Removing what is not there is fine; misuse is refused. */
    CHECK_EQ_INT(fc_cache_remove(c, ctx, FC_CACHE_ALGO, &key), FC_OK);
    CHECK_EQ_INT(fc_cache_remove(NULL, ctx, FC_CACHE_ALGO, &key), FC_ERR_USAGE);
    CHECK_EQ_INT(fc_cache_remove(c, ctx, FC_CACHE_LEVEL_COUNT, &key), FC_ERR_USAGE);
    CHECK_EQ_INT(fc_cache_remove(c, ctx, FC_CACHE_ALGO, NULL), FC_ERR_USAGE);
    /* A directory planted under an entry's name is not removed. */
    CHECK(mkdir(path, 0700) == 0);
    CHECK_EQ_INT(fc_cache_remove(c, ctx, FC_CACHE_ALGO, &key), FC_OK);
    CHECK(stat(path, &st) == 0 && S_ISDIR(st.st_mode));
    rmdir(path);

    /* Corrupt counted by the caller. */
    CHECK_EQ_INT(fc_cache_info(c, ctx, &s), FC_OK);
    uint64_t corrupt = s.counters[FC_CACHE_CORRUPT];
    fc_cache_note_corrupt(c);
    CHECK_EQ_INT(fc_cache_info(c, ctx, &s), FC_OK);
    CHECK_EQ_INT(s.counters[FC_CACHE_CORRUPT], corrupt + 1);
    fc_cache_close(c);

    /* --cache-info names the level (the process's handle, on this dir). */
    fc_cache_global_close();
    setenv("FUSEC_CACHE_DIR", dir, 1);
    c = open_cache(ctx, dir, FC_CACHE_RW);
    CHECK_EQ_INT(fc_cache_put(c, ctx, FC_CACHE_ALGO, &key, rec, sizeof rec), FC_OK);
    fc_cache_close(c);
    char *info = fc_cache_info_text(ctx, true, NULL);
    CHECK(info && strstr(info, "\ngemm algorithms:   1 entries, ") != NULL);
    CHECK(info && strstr(info, "verify:            1 entries checked, 0 bad") != NULL);
    fc_free(info);
    fc_cache_global_close();
}

static void test_without_device(fc_context *ctx) {
    CHECK_EQ_INT(fc_cublaslt_disk_hits(NULL), 0);
    CHECK_EQ_INT(fc_cublaslt_heuristic_queries(NULL), 0);
    CHECK_EQ_INT(fc_cublaslt_disk_hits_total(), 0);
    CHECK_EQ_INT(fc_cublaslt_heuristic_queries_total(), 0);
    fc_cublaslt *h = (fc_cublaslt *)1;
    fc_cublaslt_options o = {0};
    CHECK_EQ_INT(fc_cublaslt_create(ctx, NULL, &o, &h), FC_ERR_RUNTIME);
    CHECK(h == NULL);
}

/* ---- 5 to 7. with a GPU: handles ------------------------------------------------- */

typedef struct gemm_env {
    fc_context *ctx;
    fc_cuda_device *dev;
    fc_graph *g;
    fc_gemm_desc desc;
    CUdeviceptr args[4], ws;
    size_t ybytes;
} gemm_env;

/* y = gelu_tanh(x @ w + b), bf16 [64, 128] x [128, 96]. */
static bool env_setup(gemm_env *e) {
    static const char ir[] = "graph f(%x: bf16[64, 128], %w: bf16[128, 96], %b: bf16[96]) {\n"
                             "  %y = gemm(%x, %w, %b, to=bf16, spec=[0, 0, 1, 1, 0, 2])\n  return %y\n}\n";
    if (fc_parse(e->ctx, "gemm", ir, strlen(ir), NULL, NULL, 0, &e->g) != FC_OK) return false;
    fc_graph *g = e->g;
    int ids[4] = {g->params[0]->id, g->params[1]->id, g->params[2]->id, g->nodes[0]->out[0]->id};
    fc_status st = fc_gemm_desc_of(e->ctx, g->nodes[0], ids, 4, &e->desc);
    size_t sizes[4] = {64 * 128 * 2, 128 * 96 * 2, 96 * 2, 64 * 96 * 2};
    e->ybytes = sizes[3];
    for (int i = 0; i < 4 && st == FC_OK; i++) {
        st = fc_cuda_alloc(e->dev, sizes[i], &e->args[i]);
        if (st == FC_OK && i < 3) {
            uint16_t *h = malloc(sizes[i]);
            for (size_t j = 0; j < sizes[i] / 2; j++) {
                float f = (float)((int)((j * 7919 + (size_t)i * 131) % 17) - 8) / 16.0f;
                uint32_t u;
                memcpy(&u, &f, 4);
                h[j] = (uint16_t)(u >> 16);
            }
            st = fc_cuda_upload(e->dev, e->args[i], h, sizes[i]);
            free(h);
        }
    }
    if (st == FC_OK) st = fc_cuda_alloc(e->dev, FC_CUBLASLT_WORKSPACE_BYTES, &e->ws);
    if (st != FC_OK) fprintf(stderr, "GPU setup: %s\n", fc_last_error(e->ctx));
    return st == FC_OK;
}

static void env_free(gemm_env *e) {
    for (int i = 0; i < 4; i++) fc_cuda_free(e->dev, e->args[i]);
    fc_cuda_free(e->dev, e->ws);
    fc_gemm_desc_release(&e->desc);
    fc_graph_free(e->g);
}

typedef struct run_result {
    int queries, disk_hits, tuned;
    fc_cublaslt_key key; /* the problem's key (the table's first entry) */
    uint8_t algo[FC_CUBLASLT_ALGO_BYTES];
    uint8_t y[64 * 96 * 2];
    double launch_us; /* the first launch: descriptors, the algorithm, queueing */
    bool ok;
} run_result;

/* Run the GEMM once in a fresh handle over cache c (choosing by timing:
 * tune); what it did. */
static run_result run_once_tuned(gemm_env *e, fc_cache *c, bool tune) {
    run_result r;
    memset(&r, 0, sizeof r);
    fc_cublaslt_options o = {.cache = c, .tune = tune};
    fc_cublaslt *h = NULL;
    fc_status st = fc_cublaslt_create(e->ctx, e->dev, &o, &h);
    if (st == FC_OK) st = fc_cuda_memset_async(e->dev, e->args[3], 0, e->ybytes, NULL);
    if (st == FC_OK) st = fc_cuda_stream_sync(e->dev, NULL);
    double t0 = fc_now_ms();
    if (st == FC_OK)
        st = fc_cublaslt_launch(h, e->ctx, &e->desc, e->args, 4, e->ws, FC_CUBLASLT_WORKSPACE_BYTES, NULL);
    r.launch_us = (fc_now_ms() - t0) * 1e3;
    if (st == FC_OK) st = fc_cuda_download(e->dev, r.y, e->args[3], e->ybytes);
    if (st != FC_OK) fprintf(stderr, "run: %s\n", fc_last_error(e->ctx));
    CHECK_EQ_INT(st, FC_OK);
    r.ok = st == FC_OK;
    r.queries = fc_cublaslt_heuristic_queries(h);
    r.disk_hits = fc_cublaslt_disk_hits(h);
    r.tuned = fc_cublaslt_tuned(h, NULL);
    CHECK_EQ_INT(fc_cublaslt_num_algos(h), 1);
    CHECK(fc_cublaslt_algo_at(h, 0, &r.key, r.algo));
    fc_cublaslt_destroy(h);
    return r;
}

static run_result run_once(gemm_env *e, fc_cache *c) { return run_once_tuned(e, c, false); }

/* bf16 results a and b (n values) agree within 1/64 relative, 1/256 absolute:
 * two algorithms may sum in another order. */
static bool bf16_close(const uint8_t *a, const uint8_t *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint16_t ua, ub;
        memcpy(&ua, a + 2 * i, 2);
        memcpy(&ub, b + 2 * i, 2);
        uint32_t wa = (uint32_t)ua << 16, wb = (uint32_t)ub << 16;
        float fa, fb;
        memcpy(&fa, &wa, 4);
        memcpy(&fb, &wb, 4);
        if (fabsf(fa - fb) > 1.0f / 256 + fabsf(fb) / 64) return false;
    }
    return true;
}

/* Choosing by timing (fc_cublaslt_options.tune): the choice is kept under a
 * key of its own (a handle that takes the heuristic's first neither gives
 * it nor takes it), a second tuned handle reads it without timing again,
 * and the result agrees with the heuristic's choice's. */
static void test_gpu_tuned(gemm_env *e) {
    char dir[600];
    fresh_dir(dir, sizeof dir, "tuned");
    CHECK(mkdir(dir, 0700) == 0);
    fc_cache *c = open_cache(e->ctx, dir, FC_CACHE_RW);
    run_result plain = run_once(e, c), t1 = run_once_tuned(e, c, true), t2 = run_once_tuned(e, c, true);
    run_result plain2 = run_once(e, c);
    fc_cache_close(c);
    printf("tuned: first handle %d queries, %d timed; second %d queries, %d disk hits, %d timed\n", t1.queries, t1.tuned,
           t2.queries, t2.disk_hits, t2.tuned);
    CHECK(plain.ok && t1.ok && t2.ok && plain2.ok);
    CHECK_EQ_INT(t1.queries, 1); /* the untuned record is not taken */
    CHECK_EQ_INT(t1.tuned, 1);
    CHECK_EQ_INT(t2.queries, 0);
    CHECK_EQ_INT(t2.disk_hits, 1);
    CHECK_EQ_INT(t2.tuned, 0);
    CHECK(memcmp(t1.algo, t2.algo, sizeof t1.algo) == 0);
    CHECK_EQ_INT(plain2.queries, 0); /* its own record, not the timed one */
    CHECK(memcmp(plain.algo, plain2.algo, sizeof plain.algo) == 0);
    CHECK_EQ_INT(count_entries(dir, "algos"), 2);
    CHECK(bf16_close(t1.y, plain.y, sizeof plain.y / 2));
}

/* The one algorithm entry's file in dir, and the problem's cache key. */
static bool algo_entry(fc_context *ctx, const char *dir, const run_result *r, const fc_cublaslt_device_id *dev,
                       fc_cache_key *key, char *path, size_t n) {
    fc_cache *c = open_cache(ctx, dir, FC_CACHE_RO);
    *key = fc_cublaslt_algo_cache_key(&r->key, dev);
    bool ok = c && fc_cache_entry_path(c, FC_CACHE_ALGO, key, path, n);
    fc_cache_close(c);
    return ok;
}

/* Whether the entry on disk now holds a good record of r's problem. */
static bool entry_is_good(fc_context *ctx, const char *dir, const run_result *r, const fc_cublaslt_device_id *dev) {
    fc_cache *c = open_cache(ctx, dir, FC_CACHE_RO);
    fc_cache_key key = fc_cublaslt_algo_cache_key(&r->key, dev);
    void *data = NULL;
    size_t n = 0;
    uint8_t algo[FC_CUBLASLT_ALGO_BYTES];
    char why[200];
    bool ok = c && fc_cache_get(c, ctx, FC_CACHE_ALGO, &key, &data, &n) == FC_OK && data &&
              fc_cublaslt_algo_record_decode(data, n, &r->key, dev, algo, why, sizeof why);
    fc_free(data);
    fc_cache_close(c);
    return ok;
}

static uint64_t corrupt_count(fc_context *ctx, const char *dir) {
    fc_cache *c = open_cache(ctx, dir, FC_CACHE_RO);
    fc_cache_summary s;
    uint64_t n = c && fc_cache_info(c, ctx, &s) == FC_OK ? s.counters[FC_CACHE_CORRUPT] : 0;
    fc_cache_close(c);
    return n;
}

/* Put bytes under the problem's key through a cache of its own. */
static void plant(fc_context *ctx, const char *dir, const fc_cache_key *key, const void *bytes, size_t n) {
    fc_cache *c = open_cache(ctx, dir, FC_CACHE_RW);
    CHECK_EQ_INT(fc_cache_put(c, ctx, FC_CACHE_ALGO, key, bytes, n), FC_OK);
    fc_cache_close(c);
}

/* A run over a fresh cache handle on dir that must not use what is there. */
static void expect_requery(gemm_env *e, const char *dir, const char *what, const run_result *first,
                           const fc_cublaslt_device_id *dev) {
    uint64_t corrupt0 = corrupt_count(e->ctx, dir);
    fc_cache *c = open_cache(e->ctx, dir, FC_CACHE_RW);
    run_result r = run_once(e, c);
    fc_cache_close(c);
    printf("%s: %d heuristic queries, %d disk hits, corrupt +%llu\n", what, r.queries, r.disk_hits,
           (unsigned long long)(corrupt_count(e->ctx, dir) - corrupt0));
    CHECK_EQ_INT(r.queries, 1);
    CHECK_EQ_INT(r.disk_hits, 0);
    CHECK(r.ok && memcmp(r.y, first->y, e->ybytes) == 0);
    CHECK(corrupt_count(e->ctx, dir) > corrupt0 || strstr(what, "refuses"));
    CHECK(entry_is_good(e->ctx, dir, first, dev)); /* replaced by a good one */
}

static void test_gpu_handles(gemm_env *e) {
    char dir[600], path[1200];
    fresh_dir(dir, sizeof dir, "handles");
    fc_cublaslt_device_id dev;
    fc_cublaslt_device_id_of(&e->dev->info, &dev);
    printf("device: %s, sm_%lld%lld, %lld SMs, driver %lld, cuBLASLt %lld (cudart %lld)\n", dev.name,
           (long long)dev.cc_major, (long long)dev.cc_minor, (long long)dev.sm_count, (long long)dev.driver_version,
           (long long)dev.lt_version, (long long)dev.cudart_version);

    /* 5. Cold, then warm from the disk in a new handle and a new cache. */
    long q0 = fc_cublaslt_heuristic_queries_total(), d0 = fc_cublaslt_disk_hits_total();
    fc_cache *c1 = open_cache(e->ctx, dir, FC_CACHE_RW);
    run_result first = run_once(e, c1);
    fc_cache_close(c1);
    CHECK_EQ_INT(first.queries, 1);
    CHECK_EQ_INT(first.disk_hits, 0);
    CHECK_EQ_INT(count_entries(dir, "algos"), 1);
    CHECK(entry_is_good(e->ctx, dir, &first, &dev));

    fc_cache *c2 = open_cache(e->ctx, dir, FC_CACHE_RW);
    run_result second = run_once(e, c2);
    fc_cache_close(c2);
    printf("cold: %d heuristic queries, %d disk hits, first launch %.1f us (query and store); warm: %d heuristic "
           "queries, %d disk hits, first launch %.1f us (read, decode, check)\n",
           first.queries, first.disk_hits, first.launch_us, second.queries, second.disk_hits, second.launch_us);
    CHECK_EQ_INT(second.queries, 0);
    CHECK_EQ_INT(second.disk_hits, 1);
    CHECK(!memcmp(&second.key, &first.key, sizeof first.key));
    CHECK(!memcmp(second.algo, first.algo, sizeof first.algo));
    CHECK(first.ok && second.ok && memcmp(first.y, second.y, e->ybytes) == 0); /* same algorithm: same bytes */
    CHECK_EQ_INT(fc_cublaslt_heuristic_queries_total() - q0, 1);
    CHECK_EQ_INT(fc_cublaslt_disk_hits_total() - d0, 1);

    /* Within one cache handle, a second handle hits the in-process layer. */
    fc_cache *c3 = open_cache(e->ctx, dir, FC_CACHE_RW);
    run_result a = run_once(e, c3), b = run_once(e, c3);
    fc_cache_close(c3);
    CHECK(a.queries == 0 && a.disk_hits == 1 && b.queries == 0 && b.disk_hits == 1);

    /* 6. Damaged entries. */
    fc_cache_key key;
    CHECK(algo_entry(e->ctx, dir, &first, &dev, &key, path, sizeof path));
    uint8_t rec[FC_CUBLASLT_ALGO_RECORD_BYTES];
    /* Garbage that the cache's own checksum vouches for. */
    memset(rec, 0x5a, sizeof rec);
    plant(e->ctx, dir, &key, rec, sizeof rec);
    expect_requery(e, dir, "garbled record", &first, &dev);
    /* A record of the right size and checksum, for another problem. */
    fc_cublaslt_key other = first.key;
    other.k *= 2;
    fc_cublaslt_algo_record_encode(&other, &dev, first.algo, rec);
    plant(e->ctx, dir, &key, rec, sizeof rec);
    expect_requery(e, dir, "record of another problem", &first, &dev);
    /* A bit flipped on disk: the cache itself refuses the entry. */
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    if (f) {
        fseek(f, FC_CACHE_HEADER_SIZE + 100, SEEK_SET);
        int ch = fgetc(f);
        fseek(f, FC_CACHE_HEADER_SIZE + 100, SEEK_SET);
        fputc(ch ^ 4, f);
        fclose(f);
    }
    expect_requery(e, dir, "flipped byte on disk", &first, &dev);
    /* Truncated on disk. */
    CHECK(truncate(path, FC_CACHE_HEADER_SIZE + 10) == 0);
    expect_requery(e, dir, "truncated entry", &first, &dev);
    /* A well-formed record of this very problem whose algorithm the library
     * refuses (an upgrade that the key did not see, or a lie). */
    uint8_t bogus[FC_CUBLASLT_ALGO_BYTES];
    memset(bogus, 0xff, sizeof bogus);
    fc_cublaslt_algo_record_encode(&first.key, &dev, bogus, rec);
    plant(e->ctx, dir, &key, rec, sizeof rec);
    expect_requery(e, dir, "an algorithm the library refuses", &first, &dev);

    /* 7. ro reads but stores nothing; off neither reads nor stores. */
    char dir2[600];
    fresh_dir(dir2, sizeof dir2, "modes");
    CHECK(mkdir(dir2, 0700) == 0);
    fc_cache *ro = open_cache(e->ctx, dir2, FC_CACHE_RO);
    run_result r = run_once(e, ro);
    fc_cache_close(ro);
    CHECK_EQ_INT(r.queries, 1);
    CHECK_EQ_INT(count_entries(dir2, "algos"), 0);
    fc_cache *off = open_cache(e->ctx, dir, FC_CACHE_OFF);
    r = run_once(e, off);
    fc_cache_close(off);
    printf("cache off: first launch %.1f us (query only)\n", r.launch_us);
    CHECK_EQ_INT(r.queries, 1);
    CHECK_EQ_INT(r.disk_hits, 0);
    ro = open_cache(e->ctx, dir, FC_CACHE_RO); /* the good entry from above */
    r = run_once(e, ro);
    fc_cache_close(ro);
    CHECK_EQ_INT(r.queries, 0);
    CHECK_EQ_INT(r.disk_hits, 1);
}

/* ---- 8. with a GPU: programs ----------------------------------------------------- */

static void test_gpu_programs(fc_context *ctx) {
    char dir[600];
    fresh_dir(dir, sizeof dir, "programs");
    fc_cache_global_close();
    setenv("FUSEC_CACHE_DIR", dir, 1);
    setenv("FUSEC_CACHE", "rw", 1);
    static const char ir[] = "graph mlp(%x: f32[32, 64], %w: f32[64, 48], %b: f32[48]) {\n"
                             "  %h = matmul(%x, %w)\n  %h1 = add(%h, %b)\n  %y = relu(%h1)\n  return %y\n}\n";
    fc_tensor in[3] = {{FC_F32, 2, {32, 64}, NULL}, {FC_F32, 2, {64, 48}, NULL}, {FC_F32, 1, {48}, NULL}};
    for (int i = 0; i < 3; i++) {
        int64_t n = fc_tensor_numel(&in[i]);
        float *d = malloc(sizeof(float) * (size_t)n);
        for (int64_t j = 0; j < n; j++) d[j] = (float)((j * 13 + i) % 9) - 4;
        in[i].data = d;
    }
    fc_tensor out[2][1];
    memset(out, 0, sizeof out);
    int queries[2] = {-1, -1};
    long hits[2] = {0, 0};
    for (int round = 0; round < 2; round++) {
        fc_graph *g = NULL;
        fc_program *p = NULL;
        fc_status st = fc_parse(ctx, "mlp", ir, strlen(ir), NULL, NULL, 0, &g);
        fc_compile_options o;
        fc_compile_options_default(&o);
        if (st == FC_OK) st = fc_compile(g, &o, &p);
        long d0 = fc_cublaslt_disk_hits_total();
        if (st == FC_OK) st = fc_program_run_host(p, in, 3, out[round], 1, NULL, 0);
        if (st != FC_OK) fprintf(stderr, "program round %d: %s\n", round, fc_last_error(ctx));
        CHECK_EQ_INT(st, FC_OK);
        queries[round] = fc_program_gemm_queries(p);
        hits[round] = fc_cublaslt_disk_hits_total() - d0;
        fc_program_free(p);
        fc_graph_free(g);
        fc_cache_global_close(); /* a new process */
    }
    printf("programs: first run %d heuristic queries, %ld disk hits; in a new process %d, %ld\n", queries[0], hits[0],
           queries[1], hits[1]);
    CHECK_EQ_INT(queries[0], 1);
    CHECK_EQ_INT(hits[0], 0);
    CHECK_EQ_INT(queries[1], 0);
    CHECK_EQ_INT(hits[1], 1);
    CHECK_EQ_INT(count_entries(dir, "algos"), 1);
    CHECK(out[0][0].data && out[1][0].data && memcmp(out[0][0].data, out[1][0].data, 32 * 48 * sizeof(float)) == 0);
    for (int i = 0; i < 3; i++) free(in[i].data);
    fc_tensor_release(&out[0][0]);
    fc_tensor_release(&out[1][0]);
}

int main(void) {
    if (!temp_dir(root, sizeof root, "fusec-algo-cache")) return 2;
    fc_context *ctx = fc_context_new();
    test_key();
    test_record();
    test_cache_level(ctx);

    int skipped = 0;
    if (!fc_cuda_available(ctx)) {
        printf("skipped: no CUDA device (%s)\n", fc_last_error(ctx));
        test_without_device(ctx);
        skipped = 1;
    } else {
        gemm_env e = {.ctx = ctx};
        fc_status st = fc_cuda_device_open(ctx, 0, &e.dev);
        CHECK_EQ_INT(st, FC_OK);
        if (st == FC_OK && env_setup(&e)) {
            test_gpu_handles(&e);
            test_gpu_tuned(&e);
            test_gpu_programs(ctx);
        }
        if (e.dev) env_free(&e);
        fc_cuda_device_close(e.dev);
    }
    fc_cache_global_close();
    fc_context_free(ctx);
    rm_rf(root);
    (void)skipped;
    return check_report("test_gemm_algo_cache");
}
