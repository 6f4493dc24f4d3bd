/*
 * profile_text.c - a profile written out (fc_profile_text): the terminal
 * table, CSV, JSON, and Chrome's trace event format. JSON goes through
 * cJSON, which the build has with the ONNX importer; without it the JSON
 * forms are FC_ERR_UNSUPPORTED.
 */
#include "runtime/profile_impl.h"
#include "ir/ir.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef FUSEC_HAVE_ONNX
#include <cjson/cJSON.h>
#endif

static const char *const format_names[] = {"table", "csv", "json", "trace"};

const char *fc_profile_format_name(fc_profile_format f) {
    return (unsigned)f < sizeof format_names / sizeof *format_names ? format_names[f] : "?";
}

int fc_profile_format_from_name(const char *name) {
    for (int i = 0; name && i < (int)(sizeof format_names / sizeof *format_names); i++)
        if (!strcmp(name, format_names[i])) return i;
    return -1;
}

static const char *launch_name(const fc_profile *pf, int launch) {
    return launch >= 0 && launch < pf->rec.nlaunches ? pf->rec.launches[launch].name : "?";
}

/* "12.3 MB" style, or "-" for unknown. */
static void fmt_bytes(char *buf, size_t n, int64_t b) {
    if (b < 0) snprintf(buf, n, "-");
    else if (b >= 1000000000) snprintf(buf, n, "%.2f GB", (double)b * 1e-9);
    else if (b >= 1000000) snprintf(buf, n, "%.2f MB", (double)b * 1e-6);
    else if (b >= 1000) snprintf(buf, n, "%.1f kB", (double)b * 1e-3);
    else snprintf(buf, n, "%lld B", (long long)b);
}

static void fmt_flops(char *buf, size_t n, double f) {
    if (f < 0) snprintf(buf, n, "-");
    else if (f >= 1e9) snprintf(buf, n, "%.2f G", f * 1e-9);
    else if (f >= 1e6) snprintf(buf, n, "%.2f M", f * 1e-6);
    else if (f >= 1e3) snprintf(buf, n, "%.1f k", f * 1e-3);
    else snprintf(buf, n, "%.0f", f);
}

/* s cut to w characters (ending in "~" when cut), padded to w. */
static void cell(fc_strbuf *t, const char *s, int w) {
    const int len = (int)strlen(s);
    if (len <= w) fc_strbuf_printf(t, "%-*s", w, s);
    else fc_strbuf_printf(t, "%.*s~", w - 1, s);
}

static int text_width(const fc_profile *pf, int which, int cap) {
    int w = which == 0 ? 6 : 6;
    for (int i = 0; i < pf->nrows; i++) {
        const int l = (int)strlen(which == 0 ? pf->rows[i].name : pf->rows[i].source);
        if (l > w) w = l;
    }
    return w < cap ? w : cap;
}

static void summary_text(const fc_profile *pf, fc_strbuf *t) {
    const fc_profile_summary *s = &pf->summary;
    const double busy = s->wall_ms > 0 ? s->device_ms / s->wall_ms : 0;
    fc_strbuf_printf(&*t, "device time: %.4f ms in a profiled run of %.4f ms wall (%.0f%% busy)%s\n", s->device_ms,
                     s->wall_ms, 100 * busy,
                     s->host_bound ? ": host-bound, the device idles between launches (fewer launches or CUDA Graphs help)"
                                   : "");
    if (s->mode && s->mode[0]) fc_strbuf_printf(t, "profiled runs: %s\n", s->mode);
    fc_strbuf_printf(t, "plain run (as fc_run runs it, unprofiled): %.4f ms median", s->plain_wall_ms);
    if (s->plain_wall_ms > 0 && s->wall_ms > 0)
        fc_strbuf_printf(t, " (a profiled run: %+.1f%%)", 100 * (s->wall_ms / s->plain_wall_ms - 1));
    fc_strbuf_printf(t, "\n");
    if (s->ngaps > 0) {
        fc_strbuf_printf(t, "largest launch gaps:");
        for (int i = 0; i < s->ngaps; i++)
            fc_strbuf_printf(t, "%s %.4f ms after launch %d (%s)", i ? "," : "", s->gap_ms[i], s->gap_after[i],
                             launch_name(pf, s->gap_after[i]));
        fc_strbuf_printf(t, "\n");
    }
    fc_strbuf_printf(t, "launches: %d (%d kernels, %d library calls) for %d source ops: %.2f launches per source op, "
                        "%d ops fused into a launch with others\n",
                     s->launches, s->kernels, s->library, s->source_ops,
                     s->source_ops > 0 ? (double)s->launches / s->source_ops : 0, s->fused_ops);
    fc_strbuf_printf(t, "ceilings: %.0f GB/s, %.2f TFLOP/s (%s)\n", s->peak_gbps, s->peak_tflops, s->peak_source);
}

static void table_text(const fc_profile *pf, fc_strbuf *t) {
    const fc_profile_summary *s = &pf->summary;
    fc_strbuf_printf(t, "profile of %s on %s: %d warm-up runs, %d measured, sorted by median time\n", pf->name, s->device,
                     s->warmup, s->runs);
    const int wn = text_width(pf, 0, 36), ws = text_width(pf, 1, 30);
    fc_strbuf_printf(t, "%3s  ", "#");
    cell(t, "launch", wn);
    fc_strbuf_printf(t, "  %-7s  %10s  %10s  %6s  %10s  %9s  %9s  %8s  %5s  %-7s  ", "kind", "median ms", "min ms",
                     "share", "bytes", "FLOPs", "GB/s", "TFLOP/s", "peak", "bound");
    cell(t, "source", ws);
    fc_strbuf_printf(t, "  ops\n");
    for (int i = 0; i < pf->nrows; i++) {
        const fc_profile_launch *r = &pf->rows[i];
        char b[32], f[32];
        fmt_bytes(b, sizeof b, r->bytes);
        fmt_flops(f, sizeof f, r->flops);
        fc_strbuf_printf(t, "%3d  ", r->launch);
        cell(t, r->name, wn);
        fc_strbuf_printf(t, "  %-7s  %10.4f  %10.4f  %5.1f%%  %10s  %9s  %9.1f  %8.3f  %4.0f%%  %-7s  ", r->kind,
                         r->median_ms, r->min_ms, 100 * r->share, b, f, r->gbps, r->tflops, 100 * r->peak_fraction,
                         r->bytes <= 0 || r->flops < 0 ? "-" : r->compute_bound ? "compute" : "memory");
        cell(t, r->source[0] ? r->source : "-", ws);
        fc_strbuf_printf(t, "  %s\n", r->ops);
    }
    summary_text(pf, t);
}

/* A CSV field: quoted when it holds a comma or a quote. */
static void csv_field(fc_strbuf *t, const char *s) {
    if (!strpbrk(s, ",\"\n")) {
        fc_strbuf_printf(t, "%s", s);
        return;
    }
    fc_strbuf_printf(t, "\"");
    for (; *s; s++) fc_strbuf_printf(t, *s == '"' ? "\"\"" : "%c", *s);
    fc_strbuf_printf(t, "\"");
}

static void csv_text(const fc_profile *pf, fc_strbuf *t) {
    fc_strbuf_printf(t, "launch,name,kind,median_ms,min_ms,share,bytes,flops,gbps,tflops,peak_fraction,bound,"
                        "source_ops,source,ops\n");
    for (int i = 0; i < pf->nrows; i++) {
        const fc_profile_launch *r = &pf->rows[i];
        fc_strbuf_printf(t, "%d,", r->launch);
        csv_field(t, r->name);
        fc_strbuf_printf(t, ",%s,%.6f,%.6f,%.6f,%lld,%.0f,%.3f,%.6f,%.4f,%s,%d,", r->kind, r->median_ms, r->min_ms,
                         r->share, (long long)r->bytes, r->flops, r->gbps, r->tflops, r->peak_fraction,
                         r->compute_bound ? "compute" : "memory", r->nsource_ops);
        csv_field(t, r->source);
        fc_strbuf_printf(t, ",");
        csv_field(t, r->ops);
        fc_strbuf_printf(t, "\n");
    }
}

#ifdef FUSEC_HAVE_ONNX

static cJSON *summary_json(const fc_profile *pf) {
    const fc_profile_summary *s = &pf->summary;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "graph", pf->name);
    cJSON_AddStringToObject(o, "device", s->device);
    cJSON_AddNumberToObject(o, "peak_gbps", s->peak_gbps);
    cJSON_AddNumberToObject(o, "peak_tflops", s->peak_tflops);
    cJSON_AddStringToObject(o, "peak_source", s->peak_source);
    cJSON_AddNumberToObject(o, "warmup", s->warmup);
    cJSON_AddNumberToObject(o, "runs", s->runs);
    cJSON_AddNumberToObject(o, "launches", s->launches);
    cJSON_AddNumberToObject(o, "kernels", s->kernels);
    cJSON_AddNumberToObject(o, "library", s->library);
    cJSON_AddNumberToObject(o, "source_ops", s->source_ops);
    cJSON_AddNumberToObject(o, "fused_ops", s->fused_ops);
    cJSON_AddNumberToObject(o, "device_ms", s->device_ms);
    cJSON_AddNumberToObject(o, "wall_ms", s->wall_ms);
    cJSON_AddNumberToObject(o, "plain_wall_ms", s->plain_wall_ms);
    cJSON_AddBoolToObject(o, "host_bound", s->host_bound);
    cJSON_AddBoolToObject(o, "replayed", s->replayed);
    cJSON_AddStringToObject(o, "mode", s->mode ? s->mode : "");
    cJSON *gaps = cJSON_AddArrayToObject(o, "gaps");
    for (int i = 0; i < s->ngaps; i++) {
        cJSON *g = cJSON_CreateObject();
        cJSON_AddNumberToObject(g, "ms", s->gap_ms[i]);
        cJSON_AddNumberToObject(g, "after", s->gap_after[i]);
        cJSON_AddItemToArray(gaps, g);
    }
    return o;
}

static cJSON *row_json(const fc_profile_launch *r) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "launch", r->launch);
    cJSON_AddStringToObject(o, "name", r->name);
    cJSON_AddStringToObject(o, "kind", r->kind);
    cJSON_AddStringToObject(o, "ops", r->ops);
    cJSON_AddStringToObject(o, "source", r->source);
    cJSON_AddNumberToObject(o, "source_ops", r->nsource_ops);
    cJSON_AddNumberToObject(o, "median_ms", r->median_ms);
    cJSON_AddNumberToObject(o, "min_ms", r->min_ms);
    cJSON_AddNumberToObject(o, "share", r->share);
    cJSON_AddNumberToObject(o, "bytes", (double)r->bytes);
    cJSON_AddNumberToObject(o, "flops", r->flops);
    cJSON_AddNumberToObject(o, "gbps", r->gbps);
    cJSON_AddNumberToObject(o, "tflops", r->tflops);
    cJSON_AddNumberToObject(o, "peak_fraction", r->peak_fraction);
    cJSON_AddStringToObject(o, "bound", r->compute_bound ? "compute" : "memory");
    cJSON *after = cJSON_AddArrayToObject(o, "after");
    for (int i = 0; i < r->nafter; i++) cJSON_AddItemToArray(after, cJSON_CreateNumber(r->after[i]));
    return o;
}

static cJSON *profile_json(const fc_profile *pf) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddItemToObject(root, "summary", summary_json(pf));
    cJSON *rows = cJSON_AddArrayToObject(root, "launches");
    for (int i = 0; i < pf->nrows; i++) cJSON_AddItemToArray(rows, row_json(&pf->rows[i]));
    cJSON *tl = cJSON_AddArrayToObject(root, "timeline");
    for (int i = 0; i < pf->ntimeline; i++) {
        int l;
        double a, b;
        fc_profile_timeline(pf, i, &l, &a, &b);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "launch", l);
        cJSON_AddNumberToObject(e, "start_ms", a);
        cJSON_AddNumberToObject(e, "end_ms", b);
        cJSON_AddItemToArray(tl, e);
    }
    return root;
}

/* A complete ("X") trace event; ts and dur in microseconds. */
static cJSON *trace_slice(cJSON *events, const char *name, const char *cat, int pid, int tid, double ts_us,
                          double dur_us) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "name", name);
    cJSON_AddStringToObject(e, "cat", cat);
    cJSON_AddStringToObject(e, "ph", "X");
    cJSON_AddNumberToObject(e, "pid", pid);
    cJSON_AddNumberToObject(e, "tid", tid);
    cJSON_AddNumberToObject(e, "ts", ts_us);
    cJSON_AddNumberToObject(e, "dur", dur_us > 0 ? dur_us : 0);
    cJSON_AddItemToArray(events, e);
    return e;
}

static void trace_meta(cJSON *events, const char *what, int pid, int tid, const char *name) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "name", what);
    cJSON_AddStringToObject(e, "ph", "M");
    cJSON_AddNumberToObject(e, "pid", pid);
    cJSON_AddNumberToObject(e, "tid", tid);
    cJSON *a = cJSON_AddObjectToObject(e, "args");
    cJSON_AddStringToObject(a, "name", name);
    cJSON_AddItemToArray(events, e);
}

/* A flow event: "s" where the launch is called, "f" (bound to the
 * enclosing slice) where it runs. */
static void trace_flow(cJSON *events, const char *ph, int id, int pid, int tid, double ts_us) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "name", "launch");
    cJSON_AddStringToObject(e, "cat", "launch");
    cJSON_AddStringToObject(e, "ph", ph);
    cJSON_AddNumberToObject(e, "id", id);
    cJSON_AddNumberToObject(e, "pid", pid);
    cJSON_AddNumberToObject(e, "tid", tid);
    cJSON_AddNumberToObject(e, "ts", ts_us);
    if (!strcmp(ph, "f")) cJSON_AddStringToObject(e, "bp", "e");
    cJSON_AddItemToArray(events, e);
}

enum { PID_HOST = 1, PID_DEVICE = 2, TID_COMPILE = 1, TID_RUN = 2, TID_DEVICE = 1 };

static cJSON *trace_json(const fc_profile *pf) {
    const fc_profile_rec *r = &pf->rec;
    cJSON *root = cJSON_CreateObject();
    cJSON *ev = cJSON_AddArrayToObject(root, "traceEvents");
    cJSON_AddStringToObject(root, "displayTimeUnit", "ms");
    trace_meta(ev, "process_name", PID_HOST, 0, "fusec (host)");
    trace_meta(ev, "thread_name", PID_HOST, TID_COMPILE, "compile");
    trace_meta(ev, "thread_name", PID_HOST, TID_RUN, "runs (API calls)");
    trace_meta(ev, "process_name", PID_DEVICE, 0, pf->summary.device);
    trace_meta(ev, "thread_name", PID_DEVICE, TID_DEVICE, "device activity");
    /* The compile phases of the program's making, one after another from
     * 0 (fc_compile_times has durations, not start times). */
    const fc_compile_times *ct = &r->times;
    const struct {
        const char *name;
        double ms;
    } phases[] = {{"parse", r->parse_ms},   {"passes", ct->passes_ms}, {"codegen", ct->codegen_ms},
                  {"nvrtc", ct->nvrtc_ms},  {"cache", ct->cache_ms},   {"device open", ct->device_ms},
                  {"load", ct->load_ms}};
    double at = 0, parts = 0;
    for (size_t i = 0; i < sizeof phases / sizeof *phases; i++) {
        if (phases[i].ms <= 0) continue;
        trace_slice(ev, phases[i].name, "compile", PID_HOST, TID_COMPILE, at * 1e3, phases[i].ms * 1e3);
        at += phases[i].ms;
        if (i > 0 && i < 5) parts += phases[i].ms;
    }
    /* What fc_compile spent besides the phases it times (all of it for a
     * backend that times none: the CPU's LLVM compile). */
    if (ct->compile_ms > parts + 1e-3) {
        trace_slice(ev, parts > 0 ? "compile (rest)" : "compile", "compile", PID_HOST, TID_COMPILE, at * 1e3,
                    (ct->compile_ms - parts) * 1e3);
        at += ct->compile_ms - parts;
    }
    /* The runs after the compile, on their own clock's offsets. */
    const double t0 = r->runs > 0 ? r->run_start[0] : 0, base = at + (at > 0 ? 0.1 : 0);
    for (int k = 0; k < r->runs; k++) {
        char name[32];
        snprintf(name, sizeof name, "run %d", k);
        trace_slice(ev, name, "run", PID_HOST, TID_RUN, (base + r->run_start[k] - t0) * 1e3,
                    (r->run_end[k] - r->run_start[k]) * 1e3);
    }
    for (int i = 0; i < r->nevents; i++) {
        const fc_profile_event *e = &r->events[i];
        const bool host = e->track == FC_TRACK_HOST;
        const double ts = (base + e->start - t0) * 1e3;
        const char *name = e->name[0] ? e->name : launch_name(pf, e->launch);
        cJSON *s = trace_slice(ev, name, host ? "api" : "device", host ? PID_HOST : PID_DEVICE,
                               host ? TID_RUN : TID_DEVICE, ts, (e->end - e->start) * 1e3);
        cJSON *a = cJSON_AddObjectToObject(s, "args");
        cJSON_AddNumberToObject(a, "run", e->run);
        if (e->launch >= 0 && e->launch < r->nlaunches) {
            const fc_profile_info *f = &r->launches[e->launch];
            cJSON_AddNumberToObject(a, "launch", e->launch);
            cJSON_AddStringToObject(a, "kernel", f->name);
            cJSON_AddStringToObject(a, "ops", f->ops);
            cJSON_AddStringToObject(a, "source", f->source);
        }
        if (e->flow > 0) trace_flow(ev, host ? "s" : "f", e->flow, host ? PID_HOST : PID_DEVICE, host ? TID_RUN : TID_DEVICE, ts);
    }
    return root;
}

static char *json_text(const fc_profile *pf, fc_profile_format f) {
    cJSON *root = f == FC_PROFILE_TRACE ? trace_json(pf) : profile_json(pf);
    char *s = root ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (!s) {
        fc_set_error(pf->ctx, FC_ERR_NOMEM, "out of memory (profile JSON)");
        return NULL;
    }
    /* fc_free frees with free(); cJSON's allocator is malloc too, but the
     * text is copied so that no caller depends on it. */
    const size_t n = strlen(s);
    char *c = malloc(n + 2);
    if (c) {
        memcpy(c, s, n);
        c[n] = '\n';
        c[n + 1] = 0;
    } else fc_set_error(pf->ctx, FC_ERR_NOMEM, "out of memory (profile JSON)");
    cJSON_free(s);
    return c;
}

#endif

char *fc_profile_text(const fc_profile *pf, fc_profile_format f) {
    if (!pf) return NULL;
    if (f == FC_PROFILE_JSON || f == FC_PROFILE_TRACE) {
#ifdef FUSEC_HAVE_ONNX
        return json_text(pf, f);
#else
        fc_set_error(pf->ctx, FC_ERR_UNSUPPORTED, "profile as %s: this build has no cJSON (scripts/setup.sh installs "
                     "libcjson-dev)", fc_profile_format_name(f));
        return NULL;
#endif
    }
    fc_strbuf t = {.ctx = pf->ctx};
    if (f == FC_PROFILE_CSV) csv_text(pf, &t);
    else if (f == FC_PROFILE_TABLE) table_text(pf, &t);
    else {
        fc_set_error(pf->ctx, FC_ERR_USAGE, "fc_profile_text: format %d", (int)f);
        return NULL;
    }
    if (t.oom || !t.buf) {
        free(t.buf);
        fc_set_error(pf->ctx, FC_ERR_NOMEM, "out of memory (profile text)");
        return NULL;
    }
    return t.buf;
}
