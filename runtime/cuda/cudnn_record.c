/* cudnn_record.c - the cache key and the on-disk record of a cuDNN plan
 * choice (cudnn.h): plain bytes, no GPU and no cuDNN needed.
 *
 * The record (little-endian):
 *      0  magic "FCDNPLAN"                    8 bytes
 *      8  record version                      u32
 *     12  the key it was stored under         16 bytes
 *     28  the engine's global index           i64
 *     36  its measured time per run, in ns    u64 (at least 1: only timed choices are stored)
 *     44  number of knobs k                   u32 (at most FC_CUDNN_MAX_KNOBS)
 *     48  k x (knob type i64, knob value i64)
 * The cache's own checksum covers the bytes; the key inside makes a record
 * moved under another key fail to decode. The version is part of the key
 * too, so a record of an older layout (version 1 had no time and its
 * choice was the heuristic's first, untimed) is never found: the plan is
 * searched and timed again, and the old record is left to the cache's
 * eviction. A record of an older version read under this key anyway fails
 * to decode.
 */
#include "runtime/cuda/cudnn.h"
#include "ir/le.h"

#include <string.h>

#define MAGIC "FCDNPLAN"
#define VERSION 2
#define HEAD 48

fc_cache_key fc_cudnn_choice_key(const fc_conv_desc *d, const fc_cuda_device_info *dev, size_t version) {
    fc_cache_hasher hs;
    fc_cache_key_begin(&hs);
    fc_cache_key_add_str(&hs, "fusec cudnn plan");
    fc_cache_key_add_u64(&hs, VERSION);
    const int64_t f[] = {d->dt,          d->out,         d->N,           d->H,           d->W,
                         d->C,           d->M,           d->kh,          d->kw,          d->groups,
                         d->OH,          d->OW,          d->stride[0],   d->stride[1],   d->dilation[0],
                         d->dilation[1], d->pad_begin[0], d->pad_begin[1], d->pad_end[0], d->pad_end[1],
                         d->has_bias,    d->has_residual, d->act};
    fc_cache_key_add_u64(&hs, (uint64_t)(sizeof f / sizeof f[0]));
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) fc_cache_key_add_u64(&hs, (uint64_t)f[i]);
    char name[256] = {0};
    size_t len = strnlen(dev->name, sizeof dev->name);
    memcpy(name, dev->name, len < sizeof name ? len : sizeof name - 1);
    fc_cache_key_add(&hs, name, sizeof name);
    fc_cache_key_add_u64(&hs, (uint64_t)dev->cc_major);
    fc_cache_key_add_u64(&hs, (uint64_t)dev->cc_minor);
    fc_cache_key_add_u64(&hs, (uint64_t)dev->sm_count);
    fc_cache_key_add_u64(&hs, (uint64_t)dev->driver_version);
    fc_cache_key_add_u64(&hs, (uint64_t)version);
    return fc_cache_key_end(&hs);
}

size_t fc_cudnn_choice_encode(const fc_cache_key *k, const fc_cudnn_choice *c, uint8_t *out) {
    int nk = c->nknobs < 0 ? 0 : c->nknobs > FC_CUDNN_MAX_KNOBS ? FC_CUDNN_MAX_KNOBS : c->nknobs;
    memcpy(out, MAGIC, 8);
    fc_put_le(out + 8, VERSION, 4);
    memcpy(out + 12, k->bytes, 16);
    fc_put_le(out + 28, (uint64_t)c->engine, 8);
    double ns = c->ms * 1e6 + 0.5;
    fc_put_le(out + 36, !(ns >= 1) ? 1 : ns > 1e18 ? (uint64_t)1e18 : (uint64_t)ns, 8);
    fc_put_le(out + 44, (uint64_t)nk, 4);
    for (int i = 0; i < nk; i++) {
        fc_put_le(out + HEAD + 16 * i, (uint64_t)c->knob_type[i], 8);
        fc_put_le(out + HEAD + 16 * i + 8, (uint64_t)c->knob_value[i], 8);
    }
    return HEAD + 16 * (size_t)nk;
}

bool fc_cudnn_choice_decode(const fc_cache_key *k, const uint8_t *data, size_t size, fc_cudnn_choice *c) {
    memset(c, 0, sizeof *c);
    if (!data || size < HEAD || memcmp(data, MAGIC, 8) || fc_get_le(data + 8, 4) != VERSION) return false;
    if (memcmp(data + 12, k->bytes, 16)) return false;
    uint64_t nk = fc_get_le(data + 44, 4), ns = fc_get_le(data + 36, 8);
    if (nk > FC_CUDNN_MAX_KNOBS || size != HEAD + 16 * nk || ns == 0 || ns > (uint64_t)1e18) return false;
    c->engine = (int64_t)fc_get_le(data + 28, 8);
    if (c->engine < 0) return false;
    c->ms = (double)ns * 1e-6;
    c->nknobs = (int)nk;
    for (uint64_t i = 0; i < nk; i++) {
        c->knob_type[i] = (int64_t)fc_get_le(data + HEAD + 16 * i, 8);
        c->knob_value[i] = (int64_t)fc_get_le(data + HEAD + 16 * i + 8, 8);
    }
    return true;
}
