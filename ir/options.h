/*
 * options.h - the check of fc_compile_options that every compile entry
 * makes before it reads a field: the struct comes from the caller, so an
 * enum may hold any int.
 */
#ifndef FC_OPTIONS_H
#define FC_OPTIONS_H

#include "ir.h"

/* FC_OK, or FC_ERR_USAGE naming the bad field and its value. NULL options
 * are fine (the defaults). Checks the device, specialize mode and precision
 * are members of their enums, sm is 0 or a target 10..999, and
 * max_specializations is >= 0 (0: the default). */
fc_status fc_compile_options_check(fc_context *ctx, const fc_compile_options *o);

#endif
