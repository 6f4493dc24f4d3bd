/*
 * memo.c - the in-process layer: (level, key) -> bytes, so that a kernel
 * asked for twice in one process is read from disk (or compiled) once.
 *
 * A chained hash table (keys are already uniform hashes, so their first
 * bytes index it directly), bounded in bytes. When full, the least recently
 * used entry goes; finding it is a linear scan, which is fine because it
 * only happens on an insert into a full table, right after a compile or a
 * disk read that cost far more. The handle's mutex guards every call.
 */
#include "cache_internal.h"

#include <stdlib.h>
#include <string.h>

struct fc_memo_entry {
    fc_memo_entry *next;
    fc_cache_key key;
    fc_cache_level level;
    uint64_t last_use;
    size_t size;
    unsigned char data[];
};

void fc_memo_init(fc_memo *m, uint64_t cap) {
    memset(m, 0, sizeof *m);
    m->cap = cap;
}

void fc_memo_release(fc_memo *m) {
    for (size_t b = 0; b < m->nbuckets; b++) {
        fc_memo_entry *e = m->buckets[b];
        while (e) {
            fc_memo_entry *next = e->next;
            free(e);
            e = next;
        }
    }
    free(m->buckets);
    uint64_t cap = m->cap;
    fc_memo_init(m, cap);
}

static size_t bucket_of(const fc_memo *m, fc_cache_level level, const fc_cache_key *key) {
    uint64_t h;
    memcpy(&h, key->bytes, sizeof h);
    return (size_t)((h ^ (uint64_t)level) % m->nbuckets);
}

static fc_memo_entry **find(fc_memo *m, fc_cache_level level, const fc_cache_key *key) {
    if (!m->nbuckets) return NULL;
    fc_memo_entry **pe = &m->buckets[bucket_of(m, level, key)];
    for (; *pe; pe = &(*pe)->next)
        if ((*pe)->level == level && fc_cache_key_equal(&(*pe)->key, key)) return pe;
    return NULL;
}

static void unlink_entry(fc_memo *m, fc_memo_entry **pe) {
    fc_memo_entry *e = *pe;
    *pe = e->next;
    m->count--;
    m->bytes -= e->size;
    free(e);
}

static void evict_lru(fc_memo *m) {
    fc_memo_entry **oldest = NULL;
    for (size_t b = 0; b < m->nbuckets; b++)
        for (fc_memo_entry **pe = &m->buckets[b]; *pe; pe = &(*pe)->next)
            if (!oldest || (*pe)->last_use < (*oldest)->last_use) oldest = pe;
    if (oldest) unlink_entry(m, oldest);
}

/* Keep the load factor at most 1. */
static fc_status grow(fc_memo *m, fc_context *ctx) {
    if (m->count < m->nbuckets) return FC_OK;
    size_t n = m->nbuckets ? 2 * m->nbuckets : 64;
    fc_memo_entry **nb = fc_ctx_malloc(ctx, n * sizeof *nb);
    if (!nb) return FC_ERR_NOMEM;
    memset(nb, 0, n * sizeof *nb);
    fc_memo old = *m;
    m->buckets = nb;
    m->nbuckets = n;
    for (size_t b = 0; b < old.nbuckets; b++) {
        fc_memo_entry *e = old.buckets[b];
        while (e) {
            fc_memo_entry *next = e->next;
            size_t i = bucket_of(m, e->level, &e->key);
            e->next = nb[i];
            nb[i] = e;
            e = next;
        }
    }
    free(old.buckets);
    return FC_OK;
}

fc_status fc_memo_get(fc_memo *m, fc_context *ctx, fc_cache_level level, const fc_cache_key *key,
                      void **data, size_t *size, bool *found) {
    *found = false;
    fc_memo_entry **pe = find(m, level, key);
    if (!pe) return FC_OK;
    fc_memo_entry *e = *pe;
    void *copy = fc_ctx_malloc(ctx, e->size ? e->size : 1);
    if (!copy) return FC_ERR_NOMEM;
    memcpy(copy, e->data, e->size);
    e->last_use = ++m->tick;
    *data = copy;
    *size = e->size;
    *found = true;
    return FC_OK;
}

fc_status fc_memo_put(fc_memo *m, fc_context *ctx, fc_cache_level level, const fc_cache_key *key,
                      const void *data, size_t size) {
    fc_memo_entry **pe = find(m, level, key);
    if (pe) unlink_entry(m, pe); /* replace: same key, (normally) same bytes */
    if (size > m->cap) return FC_OK;
    fc_status st = grow(m, ctx);
    if (st != FC_OK) return st;
    fc_memo_entry *e = fc_ctx_malloc(ctx, sizeof *e + size);
    if (!e) return FC_ERR_NOMEM;
    while (m->count && m->bytes + size > m->cap) evict_lru(m);
    e->key = *key;
    e->level = level;
    e->last_use = ++m->tick;
    e->size = size;
    if (size) memcpy(e->data, data, size);
    size_t b = bucket_of(m, level, key);
    e->next = m->buckets[b];
    m->buckets[b] = e;
    m->count++;
    m->bytes += size;
    return FC_OK;
}

void fc_memo_remove(fc_memo *m, fc_cache_level level, const fc_cache_key *key) {
    fc_memo_entry **pe = find(m, level, key);
    if (pe) unlink_entry(m, pe);
}
