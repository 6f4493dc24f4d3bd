/*
 * dump.c - fusec --dump-after=PASS|all: the graph's .ir text after a pass
 * of the compile pipeline (fc_run_passes), on stdout, each dump headed by
 * a comment line "# after PASS" so that the output stays .ir text.
 */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* What the hook learns while the passes run. */
typedef struct dump_state {
    const char *want;     /* a pass name, or "all" */
    int matched;          /* dumps printed */
    bool failed;          /* fc_print failed (out of memory) */
    const char *ran[32];  /* the passes that ran, each once, for an unknown name's message */
    int nran;
} dump_state;

static void after_pass(void *user, const char *pass, fc_graph *g) {
    dump_state *s = user;
    bool listed = false;
    for (int i = 0; i < s->nran; i++) listed |= !strcmp(s->ran[i], pass);
    if (!listed && s->nran < 32) s->ran[s->nran++] = pass; /* the library's names live as long as it */
    if (strcmp(s->want, "all") != 0 && strcmp(s->want, pass) != 0) return;
    char *text = fc_print(g);
    if (!text) {
        s->failed = true;
        return;
    }
    printf("# after %s\n%s", pass, text);
    fc_free(text);
    s->matched++;
}

int dump_passes(fc_graph *g, const options *o, fc_device dev) {
    fc_compile_options co;
    fc_compile_options_default(&co);
    co.device = dev;
    co.precision = o->precision;
    co.numerics = o->numerics;
    dump_state s = {.want = o->dump_after};
    fc_status st = fc_run_passes(g, &co, after_pass, &s);
    if (st != FC_OK) {
        print_last_error(fc_graph_context(g));
        return run_exit_code(st);
    }
    if (s.failed) return fail(EXIT_NOMEM, "out of memory printing the graph for --dump-after");
    if (!s.matched) {
        char ran[512] = "";
        for (int i = 0; i < s.nran; i++)
            snprintf(ran + strlen(ran), sizeof ran - strlen(ran), "%s%s", i ? ", " : "", s.ran[i]);
        return usage_error("--dump-after: no pass named '%s' ran (the passes that ran: %s; or 'all')", s.want, ran);
    }
    if (fflush(stdout) != 0) return fail(EXIT_RUNTIME, "cannot write to stdout: %s", strerror(errno));
    return 0;
}
