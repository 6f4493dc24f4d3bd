/* launch.c - reading a lowered program's launch list (launch.h): a grid at one shape, the frame's carrier, freeing. */
#include "lower/launch.h"

#include <stdlib.h>
#include <string.h>

void fc_cuda_src_release(fc_cuda_src *s) {
    if (!s) return;
    for (int i = 0; i < s->nlaunches; i++) free(s->launches[i].args);
    free(s->launches);
    free(s->source);
    for (int i = 0; i < s->nkernels; i++) free(s->kernels[i].source);
    free(s->kernels);
    memset(s, 0, sizeof *s);
}

fc_status fc_launch_grid(fc_context *ctx, const fc_launch *l, const int64_t *sym_values, int nsyms, unsigned grid[3]) {
    for (int a = 0; a < 3; a++) grid[a] = l->grid[a];
    if (l->kind != FC_LAUNCH_KERNEL || l->nsyms == 0) return FC_OK;
    if ((nsyms > 0 && !sym_values) || nsyms != l->nsyms)
        return fc_set_error(ctx, FC_ERR_USAGE, "launch %s: %d symbol values for a launch of %d symbols", l->name, nsyms,
                            l->nsyms);
    for (int a = 0; a < 3; a++) {
        int64_t work = fc_mono_eval(&l->grid_work[a], sym_values, nsyms);
        int64_t per = l->grid_per[a] > 0 ? l->grid_per[a] : 1;
        if (work < 0) return fc_set_error(ctx, FC_ERR_INPUT, "launch %s: the grid overflows 64 bits", l->name);
        int64_t n = work / per + (work % per != 0);
        int64_t max = l->grid_max[a] > 0 ? l->grid_max[a] : 1;
        if (n > max) n = max;
        if (n < 1) n = 1;
        grid[a] = (unsigned)n;
    }
    return FC_OK;
}

int fc_cuda_src_frame_carrier(const fc_cuda_src *s) {
    if (!s->frame_carried) return -1;
    for (int i = 0; i < s->nlaunches; i++)
        if (s->launches[i].kind == FC_LAUNCH_KERNEL) return i;
    return -1;
}

int fc_launch_arg_position(const int *arg_ids, int nargs, int id) {
    for (int a = 0; a < nargs; a++)
        if (arg_ids[a] == id) return a;
    return -1;
}
