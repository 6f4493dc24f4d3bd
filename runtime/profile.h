/*
 * profile.h - what a backend measures for fc_program_profile (internal).
 *
 * The backend's `profile` entry (runtime/backend.h) runs the program and
 * fills an fc_profile_rec: the launches as the plan describes them, then
 * events on one clock (milliseconds; any origin): the host's calls and the
 * device's activity of every measured run, each device event tagged with
 * its launch, and the runs' wall times. runtime/profile.c turns that into
 * the rows and the summary of fusec.h's fc_profile; profile_text.c writes
 * them out. A backend knows nothing of rows, medians or formats.
 */
#ifndef FC_RUNTIME_PROFILE_H
#define FC_RUNTIME_PROFILE_H

#include "fusec.h"
#include "lower/launch.h"

typedef struct fc_profile_info {
    char name[64];
    fc_launch_kind kind;
    char ops[160];
    char source[128];
    int nsource_ops;
    bool loadtime; /* a load-time launch (lower/launch.h): it runs when the weights change, not in a run */
    int64_t bytes;
    double flops;
    /* Value ids it reads and writes (the edges between launches). */
    int nreads, nwrites;
    int *reads, *writes; /* malloc'd */
} fc_profile_info;

typedef enum fc_profile_track {
    FC_TRACK_HOST,   /* an API call on the host: a launch, a synchronization */
    FC_TRACK_DEVICE, /* a kernel or copy on the device */
} fc_profile_track;

typedef struct fc_profile_event {
    fc_profile_track track;
    int run;        /* the measured run (0 .. runs-1) */
    int launch;     /* the launch it belongs to, or -1 */
    double start, end; /* ms */
    int flow;       /* > 0: host and device events with the same flow are one launch */
    char name[96];  /* the device's name for it (a library's kernel), or the call */
} fc_profile_event;

typedef struct fc_profile_rec {
    fc_context *ctx;
    int warmup, runs;  /* asked for (the backend runs them) */
    char device[128];
    double peak_gbps, peak_tflops;
    char peak_source[96];
    int nlaunches;
    fc_profile_info *launches; /* malloc'd, nlaunches */
    fc_profile_event *events;  /* malloc'd, grown with fc_profile_rec_event */
    int nevents, cap_events;
    double *run_start, *run_end; /* per measured run, ms (malloc'd, runs each) */
    double plain_wall_ms;        /* median of `runs` unprofiled runs */
    /* How the measured runs ran: replays of the program's CUDA Graph, or
     * launch by launch (and why); "" when the backend has one way only. */
    bool replayed;
    char mode[256];
    /* The compile phases (fc_compile_times), placed before the runs. */
    fc_compile_times times;
    double parse_ms;
} fc_profile_rec;

/* Allocate r's launch table (n, zeroed) and its run times. FC_ERR_NOMEM. */
fc_status fc_profile_rec_init(fc_profile_rec *r, int nlaunches);
/* Append an event; NULL when out of memory (the error on r->ctx). */
fc_profile_event *fc_profile_rec_event(fc_profile_rec *r, fc_profile_track track, int run, int launch, double start,
                                       double end);
/* Launch info from a launch record: name, kind, summary, cost, arguments. */
fc_status fc_profile_info_from_launch(fc_profile_rec *r, int i, const fc_launch *l);
void fc_profile_rec_release(fc_profile_rec *r);
/* The rows and the summary of what r holds (r's ctx, runs and events
 * filled; *r is moved into the profile and zeroed, also on failure, when
 * it is released). fc_program_profile's second half, for tests too. */
fc_status fc_profile_make(fc_profile_rec *r, const char *name, fc_profile **out);

#endif
