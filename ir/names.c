/* names.c - a graph's name indexes (parameters, symbols, bindings): open
 * addressing over names that live in the graph's arena. Without them each
 * new parameter was compared with every earlier one, and a file of 100,000
 * parameters took tens of seconds to parse. */
#include "ir.h"

#include <string.h>

static uint64_t hash(const char *s, size_t n) {
    uint64_t h = 14695981039346656037u; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211u;
    return h;
}

static fc_name_slot *slot_of(fc_name_slot *slots, size_t cap, const char *name, size_t len) {
    size_t i = (size_t)hash(name, len) & (cap - 1);
    while (slots[i].name && (slots[i].len != len || memcmp(slots[i].name, name, len) != 0)) i = (i + 1) & (cap - 1);
    return &slots[i];
}

int fc_name_index_find(const fc_name_index *ix, const char *name, size_t len) {
    if (!ix->cap) return -1;
    const fc_name_slot *s = slot_of(ix->slots, ix->cap, name, len);
    return s->name ? s->index : -1;
}

bool fc_name_index_put(fc_name_index *ix, fc_arena *ar, const char *name, size_t len, int index) {
    if (2 * (ix->used + 1) > ix->cap) {
        /* The old table stays in the arena until the graph goes: doubling
         * wastes at most as much as the live table. */
        size_t cap = ix->cap ? 2 * ix->cap : 16;
        fc_name_slot *slots = fc_arena_alloc(ar, cap * sizeof *slots);
        if (!slots) return false;
        memset(slots, 0, cap * sizeof *slots);
        for (size_t i = 0; i < ix->cap; i++)
            if (ix->slots[i].name) *slot_of(slots, cap, ix->slots[i].name, ix->slots[i].len) = ix->slots[i];
        ix->slots = slots;
        ix->cap = cap;
    }
    fc_name_slot *s = slot_of(ix->slots, ix->cap, name, len);
    if (!s->name) ix->used++;
    *s = (fc_name_slot){name, len, index};
    return true;
}
