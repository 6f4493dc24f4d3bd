/* options.c - the check of compile options from the caller (options.h). */
#include "options.h"

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
