/*
 * compile.c - fusec's compile-side commands: compiling a graph for CUDA
 * (--emit=plan|cuda|ptx, -o), printing what a program holds, the graph a
 * compiled program file carries, and --cache-info / --cache-clear.
 */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Compiling, emitting, the cache.                                     */
/* ------------------------------------------------------------------ */

/* The cache's one-time warning (a directory that was refused, ...), on
 * stderr; fusec calls this after every compile and cache command, and the
 * library gives the warning out once. */
void print_cache_warning(void) {
    const char *w = fc_cache_global_take_warning();
    if (w) fprintf(stderr, "%s\n", w);
}

/* Compile g for CUDA (--emit=plan|cuda|ptx, -o). No GPU is needed: NVRTC
 * targets --arch, else the local GPU, else sm_90. */
int compile_graph(fc_graph *g, const options *o, fc_program **out) {
    fc_compile_options co;
    fc_compile_options_default(&co);
    co.device = FC_DEVICE_CUDA;
    co.sm = o->arch_given ? o->sm : 0;
    co.precision = o->precision;
    co.numerics = o->numerics;
    /* -o --dynamic: a dynamic program, its variant alone (a file runs no
     * specializations, which would need NVRTC). */
    co.dynamic = o->dynamic;
    if (o->dynamic) co.specialize = FC_SPECIALIZE_OFF;
    fc_status st = fc_compile(g, &co, out);
    print_cache_warning();
    if (st) {
        print_last_error(fc_graph_context(g));
        return run_exit_code(st);
    }
    return 0;
}

/* --emit=plan|cuda|ptx: print what was asked for, in that order: source,
 * PTX, plan. */
int emit_program(fc_program *p, const options *o) {
    int rc = 0;
    char *texts[4] = {o->emit_cuda ? fc_program_cuda_source(p) : NULL, o->emit_ptx ? fc_program_ptx(p) : NULL,
                      o->emit_plan ? fc_program_plan_text(p) : NULL, o->emit_dot ? fc_program_plan_dot(p) : NULL};
    bool wanted[4] = {o->emit_cuda, o->emit_ptx, o->emit_plan, o->emit_dot};
    for (int i = 0; i < 4; i++) {
        if (!wanted[i]) continue;
        if (!texts[i]) {
            print_last_error(fc_program_context(p));
            rc = EXIT_RUNTIME;
            break;
        }
        fputs(texts[i], stdout);
    }
    for (int i = 0; i < 4; i++) fc_free(texts[i]);
    if (!rc && fflush(stdout) != 0) rc = fail(EXIT_RUNTIME, "cannot write to stdout: %s", strerror(errno));
    return rc;
}

/* The graph a compiled program file carries (the text fc_compile was
 * given, its shapes bound), for --emit=ir and --check; a dynamic
 * program's, for --run, with --bind's symbols bound. */
int parse_embedded_graph(fc_context *ctx, fc_program *prog, const char *file, const options *o, fc_graph **g) {
    const char *graph_text = fc_program_graph_text(prog);
    if (!graph_text || !*graph_text)
        return fail(EXIT_UNSUPPORTED, "%s carries no graph text, which --emit=ir and --check need", file);
    char name[4200];
    snprintf(name, sizeof name, "%s (embedded graph)", file);
    fc_status st = fc_parse(ctx, name, graph_text, strlen(graph_text), NULL, o->binds, o->nbinds, g);
    if (st == FC_OK) st = fc_verify(*g);
    if (st != FC_OK) {
        print_last_error(ctx);
        return st == FC_ERR_NOMEM ? EXIT_NOMEM : EXIT_INPUT;
    }
    return 0;
}

/* The first option given that works on a FILE, or NULL. */
static const char *file_option(const options *o) {
    return o->graph ? "--graph" : o->nbinds ? "--bind" : o->dynamic ? "--dynamic" : o->emit_ir || o->emit_plan || o->emit_cuda || o->emit_ptx
           ? "--emit" : o->run ? "--run" : o->output ? "-o" : o->arch_given ? "--arch"
           : o->precision_given ? "--precision" : o->time ? "--time"
           : o->check ? "--check" : o->bench_iters ? "--bench" : o->device_given ? "--device"
           : o->inputs_given ? "--inputs" : o->seed_given ? "--seed" : o->save_dir ? "--save-outputs" : NULL;
}

/* --cache-clear, then --cache-info [--verify]. */
/* Prints a report the library made (and frees it); NULL: its error. */
static bool put_text(fc_context *ctx, char *text) {
    if (!text) {
        print_last_error(ctx);
        return false;
    }
    fputs(text, stdout);
    fc_free(text);
    return true;
}

int cache_commands(const options *o) {
    const char *cmd = o->cache_info ? "--cache-info" : "--cache-clear";
    if (o->file) return usage_error("%s takes no FILE (got '%s')", cmd, o->file);
    const char *other = file_option(o);
    if (other) return usage_error("%s does not apply to %s", other, cmd);
    fc_context *ctx = fc_context_new();
    if (!ctx) return fail(EXIT_NOMEM, "out of memory");
    int rc = 0;
    fc_cache *c = NULL;
    fc_status st = fc_cache_global_open(ctx, &c);
    print_cache_warning();
    if (st != FC_OK) {
        print_last_error(ctx);
        rc = run_exit_code(st);
        goto done;
    }
    if (o->cache_clear) {
        if (!put_text(ctx, fc_cache_clear_text(ctx))) {
            rc = EXIT_RUNTIME;
            goto done;
        }
    }
    if (o->cache_info) {
        size_t nbad = 0;
        if (!put_text(ctx, fc_cache_info_text(ctx, o->verify, &nbad))) {
            rc = EXIT_RUNTIME;
            goto done;
        }
        if (nbad) {
            rc = fail(EXIT_INPUT, "--verify found %zu bad cache entr%s (listed above); the next compile that "
                      "meets one rebuilds it, and --cache-clear removes them all",
                      nbad, nbad == 1 ? "y" : "ies");
        }
    }
    if (fflush(stdout) != 0 && !rc) rc = fail(EXIT_RUNTIME, "cannot write to stdout: %s", strerror(errno));
done:
    fc_context_free(ctx);
    return rc;
}

