/*
 * profile_impl.h - the public fc_profile's layout, shared by profile.c
 * (measuring, rows, summary) and profile_text.c (table, CSV, JSON, trace).
 */
#ifndef FC_RUNTIME_PROFILE_IMPL_H
#define FC_RUNTIME_PROFILE_IMPL_H

#include "runtime/profile.h"

struct fc_profile {
    fc_context *ctx;
    char name[128];          /* the graph's */
    fc_profile_rec rec;      /* what the backend measured */
    fc_profile_launch *rows; /* sorted by median time, longest first */
    int nrows;
    int *after;              /* the rows' `after` lists, one block per row */
    fc_profile_summary summary;
    int run;                 /* the median measured run */
    const fc_profile_event **timeline; /* its device events by start */
    int ntimeline;
};

#endif
