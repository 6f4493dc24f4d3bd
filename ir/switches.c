/* switches.c - the one place fusec reads its environment switches. */
#include "switches.h"

#include <stdlib.h>
#include <string.h>

static const fc_switch_info table[FC_SW_COUNT] = {
#define FC_SWITCH(id, name, type, dflt, kind, source, help) \
    [FC_SW_##id] = {name, FC_SWT_##type, dflt, FC_SWK_##kind, source, help},
#include "switches.def"
#undef FC_SWITCH
};

const fc_switch_info *fc_switch_info_of(fc_switch_id id) {
    return (unsigned)id < FC_SW_COUNT ? &table[id] : NULL;
}

const char *fc_switch_raw(fc_switch_id id) {
    return (unsigned)id < FC_SW_COUNT ? getenv(table[id].name) : NULL;
}

const char *fc_switch_str(fc_switch_id id) {
    const char *v = fc_switch_raw(id);
    if (v) return v;
    return (unsigned)id < FC_SW_COUNT ? table[id].dflt : "";
}

bool fc_switch_on(fc_switch_id id) {
    const char *v = fc_switch_str(id);
    return v[0] == '1' && !v[1];
}

long fc_switch_int(fc_switch_id id, long fallback) {
    const char *v = fc_switch_raw(id);
    if (!v || !*v) return fallback;
    char *end;
    long n = strtol(v, &end, 10);
    return *end ? fallback : n;
}
