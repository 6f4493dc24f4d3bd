/* cublaslt_record.c - an algorithm cuBLASLt chose, as a record of the on-disk cache: its key, the device it was chosen for, the bytes (cublaslt.h). */
#include "runtime/cuda/cublaslt_impl.h"
#include "ir/le.h"

#include <xxhash.h>

#include <string.h>

/* ------------------------------------------------------------------ */
/* Algorithms on disk                                                   */
/* ------------------------------------------------------------------ */

void fc_cublaslt_device_id_of(const fc_cuda_device_info *info, fc_cublaslt_device_id *id) {
    memset(id, 0, sizeof *id);
    /* Copied up to the first NUL and padded with NULs: the whole array is
     * hashed and stored, so bytes after the name must not vary. */
    size_t n = strnlen(info->name, sizeof info->name);
    if (n >= sizeof id->name) n = sizeof id->name - 1;
    memcpy(id->name, info->name, n);
    id->cc_major = info->cc_major;
    id->cc_minor = info->cc_minor;
    id->sm_count = info->sm_count;
    id->driver_version = info->driver_version;
    id->lt_version = (int64_t)cublasLtGetVersion();
    id->cudart_version = (int64_t)cublasLtGetCudartVersion();
}

#define KEY_FIELDS ((int)(sizeof(fc_cublaslt_key) / sizeof(int64_t)))
_Static_assert(sizeof(fc_cublaslt_key) % sizeof(int64_t) == 0, "fc_cublaslt_key is not all int64");

/* The device's numbers in record order. */
static void device_fields(const fc_cublaslt_device_id *d, int64_t out[6]) {
    out[0] = d->cc_major;
    out[1] = d->cc_minor;
    out[2] = d->sm_count;
    out[3] = d->driver_version;
    out[4] = d->lt_version;
    out[5] = d->cudart_version;
}

/* Choices made by timing (options.tune) are kept under keys of their own:
 * a handle that takes the heuristic's first must not hand its choice to one
 * that times, nor the other way. */

fc_cache_key fc_cublaslt_algo_cache_key(const fc_cublaslt_key *k, const fc_cublaslt_device_id *dev) {
    return fc_lt_algo_cache_key(k, dev, false);
}

fc_cache_key fc_lt_algo_cache_key(const fc_cublaslt_key *k, const fc_cublaslt_device_id *dev, bool tuned) {
    int64_t f[KEY_FIELDS], df[6];
    memcpy(f, k, sizeof f);
    device_fields(dev, df);
    fc_cache_hasher hs;
    fc_cache_key_begin(&hs);
    fc_cache_key_add_str(&hs, "fusec gemm algorithm");
    if (tuned) fc_cache_key_add_str(&hs, "timed");
    fc_cache_key_add_u64(&hs, FC_CUBLASLT_ALGO_RECORD_VERSION);
    fc_cache_key_add_u64(&hs, (uint64_t)KEY_FIELDS);
    for (int i = 0; i < KEY_FIELDS; i++) fc_cache_key_add_u64(&hs, (uint64_t)f[i]);
    /* Every layout is made column-major (make_layout sets no order). */
    fc_cache_key_add_u64(&hs, (uint64_t)CUBLASLT_ORDER_COL);
    fc_cache_key_add(&hs, dev->name, sizeof dev->name);
    for (int i = 0; i < 6; i++) fc_cache_key_add_u64(&hs, (uint64_t)df[i]);
    return fc_cache_key_end(&hs);
}

/* The record (all little-endian):
 *     0  magic "FCLTALGO"                8 bytes
 *     8  record version                  u32
 *    12  number of problem fields        u32 (25)
 *    16  the problem (fc_cublaslt_key)   25 x i64
 *   216  the device: cc major, minor, SM count, driver, cuBLASLt, cudart  6 x i64
 *   264  the device name                 256 bytes, NUL-padded
 *   520  cublasLtMatmulAlgo_t            64 bytes, as its eight uint64s
 *   584  XXH3-64 of bytes 0 .. 584       u64
 *   592 */
enum { REC_KEY = 16, REC_DEV = REC_KEY + 8 * KEY_FIELDS, REC_NAME = REC_DEV + 6 * 8, REC_ALGO = REC_NAME + 256,
       REC_SUM = REC_ALGO + FC_CUBLASLT_ALGO_BYTES, REC_END = REC_SUM + 8 };
_Static_assert(REC_END == FC_CUBLASLT_ALGO_RECORD_BYTES, "FC_CUBLASLT_ALGO_RECORD_BYTES is stale");
_Static_assert(sizeof(((fc_cublaslt_device_id *)0)->name) == 256, "device name size");

/* The algorithm as bytes: its eight uint64s, little-endian. */
static void algo_to_le(const uint8_t algo[FC_CUBLASLT_ALGO_BYTES], uint8_t *out) {
    cublasLtMatmulAlgo_t a;
    memcpy(&a, algo, sizeof a);
    for (int i = 0; i < 8; i++) fc_put_le(out + 8 * i, a.data[i], 8);
}

void fc_cublaslt_algo_record_encode(const fc_cublaslt_key *k, const fc_cublaslt_device_id *dev,
                                    const uint8_t algo[FC_CUBLASLT_ALGO_BYTES],
                                    uint8_t out[FC_CUBLASLT_ALGO_RECORD_BYTES]) {
    int64_t f[KEY_FIELDS], df[6];
    memcpy(f, k, sizeof f);
    device_fields(dev, df);
    memset(out, 0, FC_CUBLASLT_ALGO_RECORD_BYTES);
    memcpy(out, FC_CUBLASLT_ALGO_MAGIC, 8);
    fc_put_le(out + 8, FC_CUBLASLT_ALGO_RECORD_VERSION, 4);
    fc_put_le(out + 12, (uint64_t)KEY_FIELDS, 4);
    for (int i = 0; i < KEY_FIELDS; i++) fc_put_le(out + REC_KEY + 8 * i, (uint64_t)f[i], 8);
    for (int i = 0; i < 6; i++) fc_put_le(out + REC_DEV + 8 * i, (uint64_t)df[i], 8);
    memcpy(out + REC_NAME, dev->name, 256);
    algo_to_le(algo, out + REC_ALGO);
    fc_put_le(out + REC_SUM, XXH3_64bits(out, REC_SUM), 8);
}

#define REFUSE(...) return snprintf(why, n, __VA_ARGS__), false

bool fc_cublaslt_algo_record_decode(const void *data, size_t size, const fc_cublaslt_key *k,
                                    const fc_cublaslt_device_id *dev, uint8_t algo[FC_CUBLASLT_ALGO_BYTES],
                                    char *why, size_t n) {
    const uint8_t *in = data;
    if (!in || size != FC_CUBLASLT_ALGO_RECORD_BYTES)
        REFUSE("an algorithm record is %d bytes, not %zu", FC_CUBLASLT_ALGO_RECORD_BYTES, size);
    if (memcmp(in, FC_CUBLASLT_ALGO_MAGIC, 8) != 0) REFUSE("not an algorithm record (bad magic)");
    if (fc_get_le(in + 8, 4) != FC_CUBLASLT_ALGO_RECORD_VERSION || fc_get_le(in + 12, 4) != (uint64_t)KEY_FIELDS)
        REFUSE("algorithm record version %llu with %llu fields, not %d with %d", (unsigned long long)fc_get_le(in + 8, 4),
               (unsigned long long)fc_get_le(in + 12, 4), FC_CUBLASLT_ALGO_RECORD_VERSION, KEY_FIELDS);
    if (fc_get_le(in + REC_SUM, 8) != XXH3_64bits(in, REC_SUM)) REFUSE("algorithm record checksum mismatch");
    /* The exact problem and device: a key collision, or a record copied
     * from elsewhere, must not be used. */
    uint8_t want[FC_CUBLASLT_ALGO_RECORD_BYTES];
    uint8_t zero[FC_CUBLASLT_ALGO_BYTES] = {0};
    fc_cublaslt_algo_record_encode(k, dev, zero, want);
    if (memcmp(in + REC_KEY, want + REC_KEY, REC_DEV - REC_KEY) != 0)
        REFUSE("the algorithm record is for another GEMM problem");
    if (memcmp(in + REC_DEV, want + REC_DEV, REC_ALGO - REC_DEV) != 0)
        REFUSE("the algorithm record is for another device, driver or cuBLASLt version");
    cublasLtMatmulAlgo_t a;
    for (int i = 0; i < 8; i++) a.data[i] = fc_get_le(in + REC_ALGO + 8 * i, 8);
    memcpy(algo, &a, FC_CUBLASLT_ALGO_BYTES);
    return true;
}

#undef REFUSE
