/* switches.h - the environment switches, read through one table
 * (switches.def). Nothing else in fusec calls getenv for them. */
#ifndef FUSEC_SWITCHES_H
#define FUSEC_SWITCHES_H

#include <stdbool.h>
#include <stddef.h>

typedef enum fc_switch_id {
#define FC_SWITCH(id, name, type, dflt, kind, source, help) FC_SW_##id,
#include "switches.def"
#undef FC_SWITCH
    FC_SW_COUNT
} fc_switch_id;

typedef enum { FC_SWT_BOOL, FC_SWT_INT, FC_SWT_BYTES, FC_SWT_STR } fc_switch_type;
typedef enum { FC_SWK_CONFIG, FC_SWK_FALLBACK, FC_SWK_DIAG } fc_switch_kind;

typedef struct fc_switch_info {
    const char *name;
    fc_switch_type type;
    const char *dflt;
    fc_switch_kind kind;
    bool source; /* changes generated source: part of the kernel-cache key */
    const char *help;
} fc_switch_info;

const fc_switch_info *fc_switch_info_of(fc_switch_id id);

/* The environment's value; NULL when unset. */
const char *fc_switch_raw(fc_switch_id id);
/* The value, or the table's default when unset (never NULL). */
const char *fc_switch_str(fc_switch_id id);
/* A BOOL switch: the value is "1" (or, unset, the default is). */
bool fc_switch_on(fc_switch_id id);
/* An INT switch, or `fallback` when unset or not a number. */
long fc_switch_int(fc_switch_id id, long fallback);

/* The switches whose `source` column is 1 (they change generated source)
 * and that the environment sets to other than their default, as
 * "NAME=value,NAME=value" in table order, into buf (n bytes, cut to fit).
 * False, and buf "", when none is: the source is the default one. A cache
 * that keys compiled code on something other than the source adds this
 * text to its key (codegen/cuda: fc_cuda_source_switches). */
bool fc_switch_source_marker(char *buf, size_t n);

/* A variable of the environment that is not one of fusec's switches but
 * decides a default of one (HOME and XDG_CACHE_HOME, for the cache
 * directory); NULL when unset. */
const char *fc_switch_env(const char *name);

#endif
