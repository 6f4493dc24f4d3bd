/*
 * report.c - --report out.html: one self-contained HTML file (no network,
 * no external script, style or font) with the profile's summary, the
 * median run's timeline (SVG), the per-launch table (sortable by a click
 * on a column, inline script), a roofline (SVG: each launch at its FLOPs
 * per byte and achieved FLOP rate under the bandwidth and FLOP ceilings)
 * and the launch graph (SVG, laid out here in layers: a launch one layer
 * below the deepest launch whose results it reads).
 */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void html_text(FILE *f, const char *s) {
    for (; s && *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

static const char *kind_fill(const fc_profile_launch *r) { return !strcmp(r->kind, "library") ? "#f59e0b" : "#3b82f6"; }

static const fc_profile_launch *row_of_launch(const fc_profile *prof, int launch) {
    for (int i = 0; i < fc_profile_count(prof); i++)
        if (fc_profile_at(prof, i)->launch == launch) return fc_profile_at(prof, i);
    return NULL;
}

static void timeline_svg(FILE *f, const fc_profile *prof, const fc_profile_summary *s) {
    const double W = 960, H = 70, span = s->wall_ms > 0 ? s->wall_ms : 1;
    fprintf(f, "<svg id=\"timeline\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\">\n", W + 20, H, W + 20, H);
    fprintf(f, "<rect x=\"10\" y=\"10\" width=\"%.0f\" height=\"30\" fill=\"#f3f4f6\"/>\n", W);
    int launch;
    double a, b;
    for (int i = 0; fc_profile_timeline(prof, i, &launch, &a, &b); i++) {
        const fc_profile_launch *r = row_of_launch(prof, launch);
        const double x = 10 + W * a / span, w = W * (b - a) / span;
        fprintf(f, "<rect x=\"%.2f\" y=\"10\" width=\"%.2f\" height=\"30\" fill=\"%s\"><title>", x, w > 0.5 ? w : 0.5,
                r ? kind_fill(r) : "#9ca3af");
        html_text(f, r ? r->name : "?");
        fprintf(f, ": %.4f ms at %.4f ms</title></rect>\n", b - a, a);
    }
    fprintf(f, "<text x=\"10\" y=\"58\" font-size=\"11\">0 ms</text>"
               "<text x=\"%.0f\" y=\"58\" font-size=\"11\" text-anchor=\"end\">%.4f ms (the median profiled run)</text>\n",
            W + 10, span);
    fprintf(f, "</svg>\n");
}

static void table_html(FILE *f, const fc_profile *prof) {
    static const char *const heads[] = {"launch", "name", "kind", "median ms", "min ms", "share %", "bytes", "FLOPs",
                                        "GB/s", "TFLOP/s", "peak %", "bound", "source", "ops"};
    fprintf(f, "<table id=\"kernels\"><thead><tr>");
    for (size_t i = 0; i < sizeof heads / sizeof *heads; i++) fprintf(f, "<th onclick=\"sortBy(%zu)\">%s</th>", i, heads[i]);
    fprintf(f, "</tr></thead><tbody>\n");
    for (int i = 0; i < fc_profile_count(prof); i++) {
        const fc_profile_launch *r = fc_profile_at(prof, i);
        fprintf(f, "<tr><td data-v=\"%d\">%d</td><td>", r->launch, r->launch);
        html_text(f, r->name);
        fprintf(f, "</td><td>%s</td>", r->kind);
        fprintf(f, "<td class=\"median\" data-v=\"%.9g\">%.4f</td><td class=\"min\" data-v=\"%.9g\">%.4f</td>", r->median_ms,
                r->median_ms, r->min_ms, r->min_ms);
        fprintf(f, "<td data-v=\"%.9g\">%.1f</td><td data-v=\"%lld\">%lld</td><td data-v=\"%.0f\">%.0f</td>", r->share,
                100 * r->share, (long long)r->bytes, (long long)r->bytes, r->flops, r->flops);
        fprintf(f, "<td data-v=\"%.9g\">%.1f</td><td data-v=\"%.9g\">%.3f</td><td data-v=\"%.9g\">%.0f</td><td>%s</td><td>",
                r->gbps, r->gbps, r->tflops, r->tflops, r->peak_fraction, 100 * r->peak_fraction,
                r->compute_bound ? "compute" : "memory");
        html_text(f, r->source);
        fprintf(f, "</td><td>");
        html_text(f, r->ops);
        fprintf(f, "</td></tr>\n");
    }
    fprintf(f, "</tbody></table>\n");
}

/* log10 axes from 10^lo to 10^hi onto [x0, x0 + w]. */
static double axis(double v, double lo, double hi, double x0, double w) { return x0 + w * (log10(v) - lo) / (hi - lo); }

static void roofline_svg(FILE *f, const fc_profile *prof, const fc_profile_summary *s) {
    const double W = 520, H = 340, L = 60, B = 40;
    /* Intensity in FLOPs per byte, rate in GFLOP/s. */
    double ilo = -2, ihi = 4, rlo = -1, rhi = 6;
    const double pk = s->peak_tflops * 1e3, bw = s->peak_gbps;
    if (pk > 0) rhi = ceil(log10(pk)) + 0.5;
    rlo = rhi - 7;
    fprintf(f, "<svg id=\"roofline\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\">\n", W + L + 20, H + B + 20,
            W + L + 20, H + B + 20);
    fprintf(f, "<rect x=\"%.0f\" y=\"10\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"#9ca3af\"/>\n", L, W, H);
#define PX(i) axis((i), ilo, ihi, L, W)
#define PY(r) (10 + H - axis((r), rlo, rhi, 0, H))
    for (int e = (int)ilo; e <= (int)ihi; e++)
        fprintf(f, "<text x=\"%.1f\" y=\"%.0f\" font-size=\"10\" text-anchor=\"middle\">1e%d</text>\n", PX(pow(10, e)),
                H + 26, e);
    for (int e = (int)ceil(rlo); e <= (int)floor(rhi); e++)
        fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"end\">1e%d</text>\n", L - 4, PY(pow(10, e)) + 3,
                e);
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"11\" text-anchor=\"middle\">FLOPs per byte</text>\n", L + W / 2,
            H + 44);
    fprintf(f, "<text x=\"12\" y=\"%.0f\" font-size=\"11\" transform=\"rotate(-90 12 %.0f)\" text-anchor=\"middle\">"
               "GFLOP/s</text>\n", 10 + H / 2, 10 + H / 2);
    if (pk > 0 && bw > 0) {
        /* The ceilings: bandwidth times intensity up to the ridge, then the
         * FLOP rate. */
        const double i0 = pow(10, ilo), ridge = pk / bw, i1 = pow(10, ihi);
        const double r0 = bw * i0 > pow(10, rlo) ? bw * i0 : pow(10, rlo), x0 = r0 / bw;
        fprintf(f, "<polyline fill=\"none\" stroke=\"#dc2626\" stroke-width=\"2\" points=\"%.1f,%.1f %.1f,%.1f %.1f,%.1f\"/>\n",
                PX(x0), PY(r0), PX(ridge), PY(pk), PX(i1), PY(pk));
        fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" font-size=\"10\" fill=\"#dc2626\" text-anchor=\"end\">%.0f GB/s, %.2f "
                   "TFLOP/s</text>\n", L + W - 4, PY(pk) - 4, bw, s->peak_tflops);
    }
    for (int i = 0; i < fc_profile_count(prof); i++) {
        const fc_profile_launch *r = fc_profile_at(prof, i);
        if (r->bytes <= 0 || r->flops <= 0 || r->tflops <= 0) continue;
        double in = r->flops / (double)r->bytes, rate = r->tflops * 1e3;
        if (in < pow(10, ilo)) in = pow(10, ilo);
        if (in > pow(10, ihi)) in = pow(10, ihi);
        if (rate < pow(10, rlo)) rate = pow(10, rlo);
        if (rate > pow(10, rhi)) rate = pow(10, rhi);
        fprintf(f, "<circle class=\"point\" cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"%s\" fill-opacity=\"0.8\"><title>", PX(in),
                PY(rate), kind_fill(r));
        html_text(f, r->name);
        fprintf(f, ": %.2f FLOPs/byte, %.1f GFLOP/s, %.4f ms</title></circle>\n", r->flops / (double)r->bytes,
                r->tflops * 1e3, r->median_ms);
    }
#undef PX
#undef PY
    fprintf(f, "</svg>\n");
}

static void graph_svg(FILE *f, const fc_profile *prof) {
    const int n = fc_profile_count(prof);
    int maxl = 0;
    for (int i = 0; i < n; i++)
        if (fc_profile_at(prof, i)->launch > maxl) maxl = fc_profile_at(prof, i)->launch;
    int *depth = calloc((size_t)maxl + 2, sizeof *depth), *slot = calloc((size_t)maxl + 2, sizeof *slot);
    int *width = calloc((size_t)maxl + 2, sizeof *width);
    if (!depth || !slot || !width) {
        free(depth);
        free(slot);
        free(width);
        return;
    }
    /* Launch order is topological: one pass gives every launch its layer. */
    int layers = 0, widest = 0;
    for (int l = 0; l <= maxl; l++) {
        const fc_profile_launch *r = row_of_launch(prof, l);
        if (!r) continue;
        for (int k = 0; k < r->nafter; k++)
            if (depth[r->after[k]] + 1 > depth[l]) depth[l] = depth[r->after[k]] + 1;
        slot[l] = width[depth[l]]++;
        if (width[depth[l]] > widest) widest = width[depth[l]];
        if (depth[l] + 1 > layers) layers = depth[l] + 1;
    }
    const double BW = 180, BH = 34, GX = 24, GY = 30;
    const double W = widest * (BW + GX) + GX, H = layers * (BH + GY) + GY;
    fprintf(f, "<svg id=\"graph\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\">\n", W, H, W, H);
#define BX(l) (GX + slot[l] * (BW + GX))
#define BY(l) (GY + depth[l] * (BH + GY))
    for (int l = 0; l <= maxl; l++) {
        const fc_profile_launch *r = row_of_launch(prof, l);
        for (int k = 0; r && k < r->nafter; k++) {
            const int a = r->after[k];
            fprintf(f, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"#6b7280\"/>\n", BX(a) + BW / 2,
                    BY(a) + BH, BX(l) + BW / 2, BY(l));
        }
    }
    for (int l = 0; l <= maxl; l++) {
        const fc_profile_launch *r = row_of_launch(prof, l);
        if (!r) continue;
        fprintf(f, "<g><rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" rx=\"6\" fill=\"%s\" fill-opacity=\"0.25\" "
                   "stroke=\"%s\"/><title>", BX(l), BY(l), BW, BH, kind_fill(r), kind_fill(r));
        html_text(f, r->ops);
        fprintf(f, "</title><text x=\"%.0f\" y=\"%.0f\" font-size=\"10\" text-anchor=\"middle\">%d: ", BX(l) + BW / 2,
                BY(l) + 14, l);
        char name[28];
        snprintf(name, sizeof name, "%s", r->name);
        html_text(f, name);
        fprintf(f, "</text><text x=\"%.0f\" y=\"%.0f\" font-size=\"9\" text-anchor=\"middle\">%.4f ms ", BX(l) + BW / 2,
                BY(l) + 27, r->median_ms);
        char src[26];
        snprintf(src, sizeof src, "%s", r->source);
        html_text(f, src);
        fprintf(f, "</text></g>\n");
    }
#undef BX
#undef BY
    fprintf(f, "</svg>\n");
    free(depth);
    free(slot);
    free(width);
}

static const char script[] =
    "function sortBy(c){var t=document.getElementById('kernels').tBodies[0];"
    "var rows=Array.prototype.slice.call(t.rows);var asc=t.getAttribute('data-col')==String(c)&&"
    "t.getAttribute('data-dir')!='asc';"
    "rows.sort(function(a,b){var x=a.cells[c],y=b.cells[c];var u=x.getAttribute('data-v'),v=y.getAttribute('data-v');"
    "var r=(u!==null&&v!==null)?parseFloat(u)-parseFloat(v):x.textContent.localeCompare(y.textContent);"
    "return asc?r:-r;});"
    "rows.forEach(function(r){t.appendChild(r);});t.setAttribute('data-col',String(c));"
    "t.setAttribute('data-dir',asc?'asc':'desc');}\n";

int write_report(const char *path, const fc_profile *prof, const char *title) {
    FILE *f = fopen(path, "w");
    if (!f) return fail(EXIT_RUNTIME, "cannot write %s: %s", path, strerror(errno));
    fc_profile_summary s;
    fc_profile_get_summary(prof, &s);
    fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>fusec profile: ");
    html_text(f, title);
    fprintf(f, "</title>\n<style>body{font-family:sans-serif;margin:20px;color:#111}"
               "table{border-collapse:collapse;font-size:12px}th,td{border:1px solid #d1d5db;padding:2px 6px}"
               "th{background:#e5e7eb;cursor:pointer}td[data-v]{text-align:right}h2{font-size:16px}"
               "</style></head><body>\n<h1>Profile of ");
    html_text(f, title);
    fprintf(f, "</h1>\n<ul id=\"summary\"><li>device: ");
    html_text(f, s.device);
    fprintf(f, "</li><li>%d warm-up runs, %d measured</li>"
               "<li>device time <span id=\"device_ms\">%.4f</span> ms of <span id=\"wall_ms\">%.4f</span> ms wall"
               "%s</li><li>an unprofiled run (as fc_run runs it): %.4f ms</li>"
               "<li>%d launches (%d kernels, %d library calls) for %d source ops; %d ops fused</li><li>ceilings: %.0f GB/s, "
               "%.2f TFLOP/s (",
            s.warmup, s.runs, s.device_ms, s.wall_ms, s.host_bound ? ": host-bound" : "", s.plain_wall_ms, s.launches,
            s.kernels, s.library, s.source_ops, s.fused_ops, s.peak_gbps, s.peak_tflops);
    html_text(f, s.peak_source);
    fprintf(f, ")</li>");
    if (s.mode && s.mode[0]) {
        fprintf(f, "<li>profiled runs: ");
        html_text(f, s.mode);
        fprintf(f, "</li>");
    }
    fprintf(f, "</ul>\n<h2>Timeline</h2>\n");
    timeline_svg(f, prof, &s);
    fprintf(f, "<h2>Launches (click a column to sort)</h2>\n");
    table_html(f, prof);
    fprintf(f, "<h2>Roofline</h2>\n");
    roofline_svg(f, prof, &s);
    fprintf(f, "<h2>Launch graph</h2>\n");
    graph_svg(f, prof);
    fprintf(f, "<script>%s</script>\n</body></html>\n", script);
    if (fclose(f) != 0) return fail(EXIT_RUNTIME, "cannot write %s: %s", path, strerror(errno));
    return 0;
}
