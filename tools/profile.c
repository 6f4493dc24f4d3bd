/*
 * profile.c - --profile, --profile-format, --profile-runs, --trace and
 * --report: fc_program_profile on the run's inputs, the table (or CSV,
 * JSON) on stdout, the trace and the HTML report (report.c) into files.
 */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static int write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return fail(EXIT_RUNTIME, "cannot write %s: %s", path, strerror(errno));
    const bool ok = fputs(text, f) >= 0;
    if (fclose(f) != 0 || !ok) return fail(EXIT_RUNTIME, "cannot write %s: %s", path, strerror(errno));
    return 0;
}

/* The text of one format, printed or written; the library's error if it
 * cannot make it. */
static int emit(fc_program *p, const fc_profile *prof, fc_profile_format f, const char *path) {
    char *s = fc_profile_text(prof, f);
    if (!s) {
        print_last_error(fc_program_context(p));
        return EXIT_UNSUPPORTED;
    }
    int rc = 0;
    if (path) rc = write_text(path, s);
    else if (fputs(s, stdout) < 0 || fflush(stdout) != 0) rc = fail(EXIT_RUNTIME, "cannot write to stdout: %s", strerror(errno));
    fc_free(s);
    return rc;
}

int profile_program(const options *o, fc_program *p, const fc_tensor *in, int nin, double parse_ms) {
    fc_profile_options po;
    fc_profile_options_default(&po);
    if (o->profile_runs > 0) po.runs = o->profile_runs;
    po.parse_ms = parse_ms;
    fc_profile *prof = NULL;
    fc_status st = fc_program_profile(p, in, nin, &po, &prof);
    if (st != FC_OK) {
        print_last_error(fc_program_context(p));
        return run_exit_code(st);
    }
    int rc = 0;
    /* --trace or --report alone write their files; the table is for
     * --profile (or when nothing else was asked). */
    if (o->profile || (!o->trace_file && !o->report_file)) rc = emit(p, prof, (fc_profile_format)o->profile_format, NULL);
    if (!rc && o->trace_file) rc = emit(p, prof, FC_PROFILE_TRACE, o->trace_file);
    if (!rc && o->report_file) rc = write_report(o->report_file, prof, fc_program_name(p));
    fc_profile_free(prof);
    return rc;
}
