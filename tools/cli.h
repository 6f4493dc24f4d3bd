/*
 * cli.h - what the files of the command-line tool share (tools/; internal
 * to the tool, which includes only the public header and its own headers).
 *
 *   fusec.c    main: the pipeline, reading and loading the input file,
 *              choosing a device
 *   options.c  the command line: the flag table, parsing, errors, --help
 *   run.c      --run: inputs (files, weights, random data), running on a
 *              device, printing, saving and --check of the outputs
 *   compile.c  compiling for CUDA, --emit, the compiled program file's
 *              graph, the cache commands
 */
#ifndef FC_TOOLS_CLI_H
#define FC_TOOLS_CLI_H

#include "fusec.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    EXIT_OK = 0,
    EXIT_INPUT = 1,
    EXIT_USAGE = 2,
    EXIT_RUNTIME = 3,
    EXIT_CHECK = 4, /* --check: an output's error is beyond what its dtypes explain */
    EXIT_NOMEM = 5,
    EXIT_UNSUPPORTED = 6,
};

/* ---- the command line (options.c) ------------------------------------------ */

typedef struct options {
    const char *file;
    const char *graph;
    fc_binding *binds; /* names are malloc'd */
    int nbinds;
    bool emit_ir, emit_plan, emit_cuda, emit_ptx;
    bool emit_dot;      /* --emit=dot: the fused graph for Graphviz */
    bool profile;       /* --profile: the per-launch table (implies --run) */
    int profile_format; /* --profile-format: an fc_profile_format */
    int profile_runs;   /* --profile-runs N (0: the library's default) */
    const char *trace_file;  /* --trace out.json (implies --run) */
    const char *report_file; /* --report out.html (implies --run) */
    bool run;
    bool check;      /* compare with the reference interpreter */
    int bench_iters; /* --bench N */
    const char *device; /* --device, when device_given */
    bool device_given;
    char **inputs; /* malloc'd; "" for a parameter that gets random data */
    int ninputs;
    bool inputs_given;
    uint64_t seed;
    bool seed_given;
    const char *save_dir;
    const char *weights_file; /* --weights x.safetensors */
    const char *output; /* -o FILE: save the compiled program */
    bool dynamic;       /* --dynamic: -o writes a dynamic program (symbols left unbound) */
    int sm;             /* --arch, when arch_given */
    bool arch_given;
    fc_precision precision; /* --precision, when precision_given */
    bool precision_given;
    fc_numerics numerics; /* --numerics=fast|eager */
    bool time;          /* --time: where the compile time went */
    const char *dump_after; /* --dump-after=PASS|all: the graph's .ir after that pass */
    bool no_graphs;     /* --no-graphs: launch by launch, no CUDA Graph replay */
    const char *cache_dir;
    bool cache_info, verify, cache_clear;
    bool help, help_env, version, list_devices;
    bool help_man; /* --help-man: the manual page */
} options;

/* Parse argv into o (zeroed by the caller); 0 or an exit code (the error
 * printed). */
int parse_args(int argc, char **argv, options *o);
void options_free(options *o);
void print_help(void);
/* The manual page (roff) from the same table, with the environment's text. */
void print_man(const char *env_text);
/* Print a usage error (one line and a hint) and return EXIT_USAGE. */
int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* An error that is not about usage: one line on stderr; returns code. */
int fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The context's diagnostic, verbatim, ended by one newline. */
void print_last_error(const fc_context *ctx);

/* ---- running (run.c) ----------------------------------------------------------- */

/* What a run reports besides the outputs. */
typedef struct run_stats {
    double median_ms;       /* with --bench: the median run time */
    bool compiled;          /* the graph was compiled for CUDA: times holds how */
    fc_compile_times times; /* for --time */
} run_stats;

/* What --run runs. */
typedef struct run_target {
    fc_graph *g;          /* a .ir file's graph: names the parameters; runs on dev unless prog is set */
    fc_program *prog;     /* a compiled program (a file's, or one compiled for --emit or -o): runs on the
                             GPU instead of dev; names the parameters when g is NULL */
    fc_device dev;        /* runs g */
    fc_graph *ref;        /* what --check runs with the reference interpreter */
    const char *name;     /* the graph's name, for messages */
    fc_weights *weights;  /* data for parameters by name (initializers, --weights) */
    double parse_ms;      /* the parse's time, for the profile's trace */
} run_target;

/* Compile a copy of g specialized to the inputs' shapes for dev (what
 * --run runs); *sg the copy (g itself when nothing was bound). */
fc_status compile_on_device(fc_device dev, fc_graph *g, const fc_tensor *in, int nin, const options *o,
                            fc_graph **sg, fc_program **p);

/* ---- profiling (profile.c, report.c) --------------------------------------------- */

/* --profile, --trace, --report: profile p on the inputs, print the table
 * (or CSV, JSON) on stdout, write the trace and the report. */
int profile_program(const options *o, fc_program *p, const fc_tensor *in, int nin, double parse_ms);
/* The HTML report of prof into path (report.c). */
int write_report(const char *path, const fc_profile *prof, const char *title);

/* Map a failed call's status to an exit code. */
int run_exit_code(fc_status st);
/* Build the inputs (files, then random data), run, print or save the
 * outputs, and --check and --bench them. */
int run_inputs(const options *o, const run_target *t, run_stats *rs);
/* A compile of a graph with symbolic dims: bind them from the --inputs
 * files' shapes into a specialized copy (*out, or g itself). A symbol no
 * file gives is a usage error naming it. */
int bind_from_inputs(const options *o, fc_graph *g, fc_graph **out);

/* ---- compiling and the cache (compile.c) ---------------------------------------- */

/* The cache's one-time warning, on stderr. */
void print_cache_warning(void);
/* Compile g for CUDA (--emit=plan|cuda|ptx, -o). */
int compile_graph(fc_graph *g, const options *o, fc_program **out);
/* --emit=plan|cuda|ptx of a compiled program. */
int emit_program(fc_program *p, const options *o);
/* The graph a compiled program file carries, for --emit=ir and --check. */
int parse_embedded_graph(fc_context *ctx, fc_program *prog, const char *file, const options *o, fc_graph **g);
/* --cache-clear, then --cache-info [--verify]. */
int cache_commands(const options *o);
/* --dump-after: print the graph after the named pass (or every pass). */
int dump_passes(fc_graph *g, const options *o, fc_device dev);

#endif
