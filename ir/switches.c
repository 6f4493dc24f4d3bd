/* switches.c - the one place fusec reads its environment switches. */
#include "switches.h"

#include "ir.h"

#include <stdio.h>
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

bool fc_switch_source_marker(char *buf, size_t n) {
    size_t at = 0;
    if (n) buf[0] = 0;
    for (int i = 0; i < FC_SW_COUNT; i++) {
        const char *v = table[i].source ? fc_switch_raw((fc_switch_id)i) : NULL;
        /* Set to the default, a switch gives the default source. */
        if (!v || !strcmp(v, table[i].dflt)) continue;
        if (at < n) at += (size_t)snprintf(buf + at, n - at, "%s%s=%s", at ? "," : "", table[i].name, v);
        else at++;
    }
    return at > 0;
}

const char *fc_switch_env(const char *name) { return name ? getenv(name) : NULL; }

static const char *const type_names[] = {"0|1", "N", "SIZE", "TEXT"};
static const char *const kind_names[] = {"configuration", "fallback", "diagnostics"};

/* The table as `fusec --help-env` prints it: the switches grouped by kind,
 * each with its value type, default and help, and the ones set now. */
char *fc_env_help(void) {
    fc_strbuf b = {0};
    for (int k = FC_SWK_CONFIG; k <= FC_SWK_DIAG; k++) {
        fc_strbuf_printf(&b, "%s%s:\n", k ? "\n" : "", kind_names[k]);
        for (int i = 0; i < FC_SW_COUNT; i++) {
            const fc_switch_info *t = &table[i];
            if ((int)t->kind != k) continue;
            char left[64];
            snprintf(left, sizeof left, "%s=%s", t->name, type_names[t->type]);
            fc_strbuf_printf(&b, "  %-30s %s", left, t->help);
            if (t->dflt[0]) fc_strbuf_printf(&b, " (default %s)", t->dflt);
            if (t->source) fc_strbuf_printf(&b, "; part of the kernel-cache key");
            const char *v = fc_switch_raw((fc_switch_id)i);
            if (v) fc_strbuf_printf(&b, "; set: '%s'", v);
            fc_strbuf_printf(&b, "\n");
        }
    }
    return b.buf;
}
