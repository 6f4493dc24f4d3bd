/*
 * profile.c - fc_program_profile: the backend measures (runtime/profile.h),
 * this file makes the rows and the summary of fusec.h's fc_profile: each
 * launch's min and median device time over the measured runs, its share,
 * its achieved bandwidth and FLOP rate against the device's ceilings, the
 * launch gaps of the median run. profile_text.c writes it out.
 */
#include "runtime/profile.h"
#include "runtime/backend.h"
#include "runtime/profile_impl.h"
#include "ir/ir.h"
#include "ir/timing.h"
#include "lower/program_desc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void fc_profile_options_default(fc_profile_options *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->warmup = 3;
    o->runs = 20;
}

fc_status fc_profile_rec_init(fc_profile_rec *r, int nlaunches) {
    r->nlaunches = nlaunches;
    r->launches = calloc((size_t)nlaunches + 1, sizeof *r->launches);
    r->run_start = calloc((size_t)r->runs + 1, sizeof *r->run_start);
    r->run_end = calloc((size_t)r->runs + 1, sizeof *r->run_end);
    if (!r->launches || !r->run_start || !r->run_end) return fc_set_error(r->ctx, FC_ERR_NOMEM, "out of memory (profile)");
    return FC_OK;
}

fc_profile_event *fc_profile_rec_event(fc_profile_rec *r, fc_profile_track track, int run, int launch, double start,
                                       double end) {
    if (r->nevents == r->cap_events) {
        int cap = r->cap_events ? 2 * r->cap_events : 256;
        fc_profile_event *e = realloc(r->events, sizeof *e * (size_t)cap);
        if (!e) {
            fc_set_error(r->ctx, FC_ERR_NOMEM, "out of memory (profile events)");
            return NULL;
        }
        r->events = e;
        r->cap_events = cap;
    }
    fc_profile_event *e = &r->events[r->nevents++];
    memset(e, 0, sizeof *e);
    *e = (fc_profile_event){.track = track, .run = run, .launch = launch, .start = start, .end = end};
    return e;
}

fc_status fc_profile_info_from_launch(fc_profile_rec *r, int i, const fc_launch *l) {
    fc_profile_info *f = &r->launches[i];
    snprintf(f->name, sizeof f->name, "%s", l->name);
    f->kind = l->kind;
    snprintf(f->ops, sizeof f->ops, "%s", l->summary);
    snprintf(f->source, sizeof f->source, "%s", l->source);
    f->nsource_ops = l->nsource_ops;
    f->loadtime = l->loadtime;
    f->bytes = l->bytes;
    f->flops = l->flops;
    f->nreads = l->nreads;
    f->nwrites = l->nargs - l->nreads;
    f->reads = malloc(sizeof *f->reads * (size_t)(l->nargs + 1));
    if (!f->reads) return fc_set_error(r->ctx, FC_ERR_NOMEM, "out of memory (profile)");
    memcpy(f->reads, l->args, sizeof *f->reads * (size_t)l->nargs);
    f->writes = f->reads + l->nreads;
    return FC_OK;
}

void fc_profile_rec_release(fc_profile_rec *r) {
    for (int i = 0; r->launches && i < r->nlaunches; i++) free(r->launches[i].reads);
    free(r->launches);
    free(r->events);
    free(r->run_start);
    free(r->run_end);
    memset(r, 0, sizeof *r);
}

/* ------------------------------------------------------------------ */
/* Rows and summary.                                                   */
/* ------------------------------------------------------------------ */

static int cmp_row(const void *a, const void *b) {
    const fc_profile_launch *x = a, *y = b;
    if (x->median_ms != y->median_ms) return x->median_ms < y->median_ms ? 1 : -1;
    return x->launch - y->launch;
}

static int cmp_event_start(const void *a, const void *b) {
    const fc_profile_event *x = *(fc_profile_event *const *)a, *y = *(fc_profile_event *const *)b;
    return (x->start > y->start) - (x->start < y->start);
}

static const char *kind_word(fc_launch_kind k) { return k == FC_LAUNCH_LIBRARY ? "library" : "kernel"; }

/* Each device event's own time: from its start, or from the end of every
 * event of its run that started before it if that is later, to its end.
 * A kernel launched as a programmatic dependent starts while the kernel
 * before it runs and waits inside for it to end, so CUPTI's span of it
 * holds most of the kernel before (every generated kernel triggers its
 * dependent at its start); its own time is what it adds to the run. Over a
 * run the own times add up to the union of the events (the busy time), and
 * without overlaps they are the spans. excl[e] for event e (0 for host
 * events). */
static fc_status own_times(const fc_profile_rec *r, double *excl) {
    const fc_profile_event **ev = malloc(sizeof *ev * (size_t)(r->nevents + 1));
    if (!ev) return fc_set_error(r->ctx, FC_ERR_NOMEM, "out of memory (profile)");
    for (int e = 0; e < r->nevents; e++) excl[e] = 0;
    for (int k = 0; k < r->runs; k++) {
        int n = 0;
        for (int e = 0; e < r->nevents; e++)
            if (r->events[e].track == FC_TRACK_DEVICE && r->events[e].run == k) ev[n++] = &r->events[e];
        qsort(ev, (size_t)n, sizeof *ev, cmp_event_start);
        double covered = -INFINITY;
        for (int i = 0; i < n; i++) {
            const double a = ev[i]->start > covered ? ev[i]->start : covered;
            excl[ev[i] - r->events] = ev[i]->end > a ? ev[i]->end - a : 0;
            if (ev[i]->end > covered) covered = ev[i]->end;
        }
    }
    free(ev);
    return FC_OK;
}

/* The device time of launch i in each run: the sum of its device events'
 * own times (a library call may run several kernels). */
static void launch_times(const fc_profile_rec *r, const double *excl, int i, double *ms) {
    for (int k = 0; k < r->runs; k++) ms[k] = 0;
    for (int e = 0; e < r->nevents; e++) {
        const fc_profile_event *ev = &r->events[e];
        if (ev->track == FC_TRACK_DEVICE && ev->launch == i && ev->run >= 0 && ev->run < r->runs) ms[ev->run] += excl[e];
    }
}

/* The measured run whose wall time is the median one. */
static int median_run(const fc_profile_rec *r, double *wall) {
    double *w = malloc(sizeof *w * (size_t)(r->runs + 1));
    if (!w || r->runs <= 0) {
        free(w);
        *wall = 0;
        return 0;
    }
    for (int k = 0; k < r->runs; k++) w[k] = r->run_end[k] - r->run_start[k];
    *wall = fc_median(w, r->runs);
    int best = 0;
    for (int k = 0; k < r->runs; k++)
        if (fabs(r->run_end[k] - r->run_start[k] - *wall) < fabs(r->run_end[best] - r->run_start[best] - *wall))
            best = k;
    free(w);
    return best;
}

static fc_status build_rows(fc_profile *pf) {
    const fc_profile_rec *r = &pf->rec;
    pf->rows = calloc((size_t)r->nlaunches + 1, sizeof *pf->rows);
    double *ms = malloc(sizeof *ms * (size_t)(r->runs + 1)), *excl = malloc(sizeof *excl * (size_t)(r->nevents + 1));
    if (!pf->rows || !ms || !excl || own_times(r, excl) != FC_OK) {
        free(ms);
        free(excl);
        return fc_set_error(r->ctx, FC_ERR_NOMEM, "out of memory (profile)");
    }
    fc_profile_summary *s = &pf->summary;
    s->device = r->device;
    s->peak_gbps = r->peak_gbps;
    s->peak_tflops = r->peak_tflops;
    s->peak_source = r->peak_source;
    s->warmup = r->warmup;
    s->runs = r->runs;
    s->plain_wall_ms = r->plain_wall_ms;
    s->replayed = r->replayed;
    s->mode = r->mode;
    const double ridge = r->peak_gbps > 0 ? r->peak_tflops * 1e3 / r->peak_gbps : 0; /* FLOPs per byte */
    for (int i = 0; i < r->nlaunches; i++) {
        const fc_profile_info *f = &r->launches[i];
        if (f->kind == FC_LAUNCH_ALIAS) continue;
        fc_profile_launch *row = &pf->rows[pf->nrows++];
        row->launch = i;
        row->name = f->name;
        row->kind = kind_word(f->kind);
        row->ops = f->ops;
        row->source = f->source;
        row->nsource_ops = f->nsource_ops;
        row->bytes = f->bytes;
        row->flops = f->flops;
        launch_times(r, excl, i, ms);
        row->median_ms = r->runs > 0 ? fc_median(ms, r->runs) : 0; /* sorts ms */
        row->min_ms = r->runs > 0 ? ms[0] : 0;
        const double sec = row->median_ms * 1e-3;
        row->gbps = sec > 0 && f->bytes > 0 ? (double)f->bytes / sec * 1e-9 : 0;
        row->tflops = sec > 0 && f->flops > 0 ? f->flops / sec * 1e-12 : 0;
        const double fb = r->peak_gbps > 0 ? row->gbps / r->peak_gbps : 0;
        const double ff = r->peak_tflops > 0 ? row->tflops / r->peak_tflops : 0;
        row->peak_fraction = fb > ff ? fb : ff;
        row->compute_bound = f->bytes > 0 && f->flops > 0 && f->flops / (double)f->bytes > ridge;
        s->device_ms += row->median_ms;
        if (f->kind == FC_LAUNCH_LIBRARY) s->library++;
        else s->kernels++;
        s->source_ops += f->nsource_ops;
        if (f->nsource_ops > 1) s->fused_ops += f->nsource_ops;
    }
    free(ms);
    free(excl);
    /* The rows point into the launch table by index: `after` lists the
     * launches that wrote what a row reads. */
    pf->after = calloc((size_t)r->nlaunches * (size_t)(r->nlaunches + 1) + 1, sizeof *pf->after);
    if (!pf->after) return fc_set_error(r->ctx, FC_ERR_NOMEM, "out of memory (profile)");
    for (int q = 0; q < pf->nrows; q++) {
        fc_profile_launch *row = &pf->rows[q];
        int *after = pf->after + (size_t)q * (size_t)(r->nlaunches + 1);
        const fc_profile_info *f = &r->launches[row->launch];
        for (int j = 0; j < row->launch; j++) {
            const fc_profile_info *w = &r->launches[j];
            bool reads = false;
            for (int a = 0; a < f->nreads && !reads; a++)
                for (int b = 0; b < w->nwrites && !reads; b++) reads = f->reads[a] == w->writes[b];
            if (reads) after[row->nafter++] = j;
        }
        row->after = after;
    }
    for (int q = 0; q < pf->nrows; q++)
        pf->rows[q].share = s->device_ms > 0 ? pf->rows[q].median_ms / s->device_ms : 0;
    qsort(pf->rows, (size_t)pf->nrows, sizeof *pf->rows, cmp_row);
    s->launches = pf->nrows;

    /* The median run: its wall time, its device events in time order, the
     * gaps between them. */
    pf->run = median_run(r, &s->wall_ms);
    int nd = 0;
    for (int e = 0; e < r->nevents; e++) nd += r->events[e].track == FC_TRACK_DEVICE && r->events[e].run == pf->run;
    pf->timeline = calloc((size_t)nd + 1, sizeof *pf->timeline);
    if (!pf->timeline) return fc_set_error(r->ctx, FC_ERR_NOMEM, "out of memory (profile)");
    for (int e = 0; e < r->nevents; e++)
        if (r->events[e].track == FC_TRACK_DEVICE && r->events[e].run == pf->run) pf->timeline[pf->ntimeline++] = &r->events[e];
    qsort(pf->timeline, (size_t)pf->ntimeline, sizeof *pf->timeline, cmp_event_start);
    /* Busy: the union of the events (a kernel after a programmatic edge
     * may start before the one before it ends). */
    double busy = 0, covered = -INFINITY;
    for (int e = 0; e < pf->ntimeline; e++) {
        const double a = pf->timeline[e]->start > covered ? pf->timeline[e]->start : covered;
        if (pf->timeline[e]->end > a) busy += pf->timeline[e]->end - a;
        if (pf->timeline[e]->end > covered) covered = pf->timeline[e]->end;
        if (e == 0) continue;
        const double gap = pf->timeline[e]->start - pf->timeline[e - 1]->end;
        const int after = pf->timeline[e - 1]->launch;
        if (gap <= 0 || after == pf->timeline[e]->launch) continue; /* one library call's kernels */
        int at = s->ngaps < 3 ? s->ngaps++ : 2;
        if (at == 2 && s->ngaps == 3 && gap <= s->gap_ms[2]) continue;
        s->gap_ms[at] = gap;
        s->gap_after[at] = after;
        for (; at > 0 && s->gap_ms[at] > s->gap_ms[at - 1]; at--) {
            double tg = s->gap_ms[at];
            int ta = s->gap_after[at];
            s->gap_ms[at] = s->gap_ms[at - 1];
            s->gap_after[at] = s->gap_after[at - 1];
            s->gap_ms[at - 1] = tg;
            s->gap_after[at - 1] = ta;
        }
    }
    s->host_bound = s->wall_ms > 0 && busy < 0.5 * s->wall_ms;
    return FC_OK;
}

fc_status fc_program_profile(fc_program *p, const fc_tensor *inputs, int nin, const fc_profile_options *o,
                             fc_profile **out) {
    if (!p || !out) return FC_ERR_USAGE;
    *out = NULL;
    const fc_backend *b = fc_backend_of(p);
    fc_context *ctx = b->context(p);
    fc_profile_options def;
    if (!o) {
        fc_profile_options_default(&def);
        o = &def;
    }
    if (o->runs < 1 || o->warmup < 0)
        return fc_set_error(ctx, FC_ERR_USAGE, "fc_program_profile: runs %d (at least 1), warmup %d (at least 0)",
                            o->runs, o->warmup);
    if (!b->profile) return fc_backend_unsupported(p, "profiling");
    fc_profile_rec rec = {.ctx = ctx, .warmup = o->warmup, .runs = o->runs, .parse_ms = o->parse_ms};
    const fc_program_desc *d = b->desc(p);
    fc_status st = b->profile(p, inputs, nin, &rec);
    /* After the runs: the first run opens the device and loads the code. */
    if (b->times) b->times(p, &rec.times);
    if (st != FC_OK) {
        fc_profile_rec_release(&rec);
        return st;
    }
    return fc_profile_make(&rec, d && d->graph_name ? d->graph_name : "program", out);
}

fc_status fc_profile_make(fc_profile_rec *r, const char *name, fc_profile **out) {
    *out = NULL;
    fc_profile *pf = calloc(1, sizeof *pf);
    if (!pf) {
        fc_status st = fc_set_error(r->ctx, FC_ERR_NOMEM, "out of memory (profile)");
        fc_profile_rec_release(r);
        return st;
    }
    pf->ctx = r->ctx;
    pf->rec = *r;
    memset(r, 0, sizeof *r);
    snprintf(pf->name, sizeof pf->name, "%s", name);
    fc_status st = build_rows(pf);
    if (st != FC_OK) {
        fc_profile_free(pf);
        return st;
    }
    *out = pf;
    return FC_OK;
}

void fc_profile_free(fc_profile *pf) {
    if (!pf) return;
    fc_profile_rec_release(&pf->rec);
    free(pf->rows);
    free(pf->after);
    free(pf->timeline);
    free(pf);
}

int fc_profile_count(const fc_profile *pf) { return pf ? pf->nrows : 0; }

const fc_profile_launch *fc_profile_at(const fc_profile *pf, int i) {
    return pf && i >= 0 && i < pf->nrows ? &pf->rows[i] : NULL;
}

void fc_profile_get_summary(const fc_profile *pf, fc_profile_summary *out) {
    if (!out) return;
    if (!pf) memset(out, 0, sizeof *out);
    else *out = pf->summary;
}

bool fc_profile_timeline(const fc_profile *pf, int i, int *launch, double *start_ms, double *end_ms) {
    if (!pf || i < 0 || i >= pf->ntimeline) return false;
    const fc_profile_event *e = pf->timeline[i];
    const double t0 = pf->rec.run_start[pf->run];
    if (launch) *launch = e->launch;
    if (start_ms) *start_ms = e->start - t0;
    if (end_ms) *end_ms = e->end - t0;
    return true;
}
