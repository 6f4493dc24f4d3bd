/* options.c - compile options from the caller: their defaults, the --arch spelling, and their check (options.h). */
#include "options.h"

#include <string.h>

/* The defaults, the same in every build (a build without the CUDA backend
 * included): a program compiled for another device ignores the CUDA fields. */
void fc_compile_options_default(fc_compile_options *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->device = FC_DEVICE_CUDA;
    o->sm = 0;
    o->fast_math = false;
    o->fuse = true;
    o->cuda_graphs = true;
    o->dynamic = false;
    o->max_specializations = 8;
    o->specialize = FC_SPECIALIZE_BACKGROUND;
}

/* "sm_90", "sm90", "90" or "9.0": the CLI's --arch, parsed alike in every build. */
bool fc_arch_parse(const char *s, int *sm) {
    if (!s || !sm) return false;
    if (strncmp(s, "sm_", 3) == 0) s += 3;
    else if (strncmp(s, "sm", 2) == 0) s += 2;
    int v = 0, digits = 0;
    for (; *s >= '0' && *s <= '9' && digits < 4; s++, digits++) v = v * 10 + (*s - '0');
    if (*s == '.' && digits > 0 && s[1] >= '0' && s[1] <= '9' && !s[2]) { /* "9.0" */
        v = v * 10 + (s[1] - '0');
        s += 2;
    }
    if (*s || digits == 0 || v < 10 || v > 999) return false;
    *sm = v;
    return true;
}

fc_status fc_compile_options_check(fc_context *ctx, const fc_compile_options *o) {
    if (!o) return FC_OK;
    /* Compared as unsigned ints: an enum read from a struct the caller
     * filled may hold any value, negative ones included. */
    if ((unsigned)o->device >= (unsigned)FC_DEVICE_COUNT)
        return fc_set_error(ctx, FC_ERR_USAGE, "fc_compile: bad device %d", (int)o->device);
    if (o->sm != 0 && (o->sm < 10 || o->sm > 999))
        return fc_set_error(ctx, FC_ERR_USAGE, "fc_compile: bad sm %d (90 means sm_90; 0 the device's own)", o->sm);
    if (o->max_specializations < 0)
        return fc_set_error(ctx, FC_ERR_USAGE, "fc_compile: bad max_specializations %d (at least 1; 0: the default)",
                            o->max_specializations);
    if ((unsigned)o->specialize > (unsigned)FC_SPECIALIZE_OFF)
        return fc_set_error(ctx, FC_ERR_USAGE,
                            "fc_compile: bad specialize mode %d (FC_SPECIALIZE_BACKGROUND, _SYNC or _OFF)",
                            (int)o->specialize);
    if ((unsigned)o->precision >= (unsigned)FC_PRECISION_COUNT)
        return fc_set_error(ctx, FC_ERR_USAGE,
                            "fc_compile: bad precision %d (FC_PRECISION_AS_WRITTEN, _F32, _TF32, _BF16 or _F16)",
                            (int)o->precision);
    if ((unsigned)o->numerics > (unsigned)FC_NUMERICS_EAGER)
        return fc_set_error(ctx, FC_ERR_USAGE, "fc_compile: bad numerics %d (FC_NUMERICS_FAST or _EAGER)",
                            (int)o->numerics);
    return FC_OK;
}
