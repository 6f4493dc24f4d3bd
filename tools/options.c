/*
 * options.c - fusec's command line: the flag table, parsing it into
 * `options`, the error messages and exit codes of a bad command line, and
 * the --help text. To add a flag, write a row in `flags`, and a handler for
 * a value that needs more checking than a path's.
 */
#include "cli.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Options.                                                            */
/* ------------------------------------------------------------------ */

void options_free(options *o) {
    for (int i = 0; i < o->nbinds; i++) free((char *)o->binds[i].name);
    free(o->binds);
    for (int i = 0; i < o->ninputs; i++) free(o->inputs[i]);
    free(o->inputs);
}

/* "fusec: " and the message on stderr, then `end`. */
static void say(const char *end, const char *fmt, va_list ap) {
    fputs("fusec: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs(end, stderr);
}

/* Print a usage error (one line and a hint) and return EXIT_USAGE. */
int usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    say("\ntry 'fusec --help'\n", fmt, ap);
    va_end(ap);
    return EXIT_USAGE;
}

/* An error that is not about usage: one line on stderr; returns code. */
int fail(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    say("\n", fmt, ap);
    va_end(ap);
    return code;
}

/* The context's diagnostic, verbatim, ended by one newline. */
/* Whether msg starts as "FILE:LINE:COL: ". */
static bool located(const char *msg) {
    const char *p = strchr(msg, ':');
    for (int field = 0; field < 2 && p; field++) {
        const char *d = p + 1;
        while (*d >= '0' && *d <= '9') d++;
        if (d == p + 1 || *d != ':') return false;
        p = d;
    }
    return p && p[1] == ' ';
}

void print_last_error(const fc_context *ctx) {
    const char *msg = fc_last_error(ctx);
    if (!msg || !*msg) msg = "fusec: unknown error";
    /* Every message starts with "fusec:" or with its location in a file. */
    if (strncmp(msg, "fusec:", 6) != 0 && !located(msg)) fputs("fusec: ", stderr);
    size_t n = strlen(msg);
    fputs(msg, stderr);
    if (msg[n - 1] != '\n') fputc('\n', stderr);
}

static bool is_name(const char *s, size_t n) {
    if (n == 0) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool alpha = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
        if (!(alpha || (i > 0 && c >= '0' && c <= '9'))) return false;
    }
    return true;
}

/* A decimal integer in [0, max]: the whole string. */
static bool parse_u64(const char *s, uint64_t max, uint64_t *out) {
    if (!*s) return false;
    uint64_t v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return false;
        unsigned d = (unsigned)(*p - '0');
        if (v > (max - d) / 10) return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

/* --bind B=4,T=128 (may be repeated). */
static int flag_bind(options *o, const char *flag, const char *val) {
    const char *p = val;
    for (;;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        if (!eq || !is_name(p, (size_t)(eq - p)))
            return usage_error("bad %s '%.*s': expected SYM=INT[,SYM=INT...]", flag, (int)len, p);
        size_t name_len = (size_t)(eq - p);
        char num[32];
        size_t num_len = len - name_len - 1;
        uint64_t v;
        if (num_len == 0 || num_len >= sizeof num)
            return usage_error("bad %s '%.*s': expected SYM=INT[,SYM=INT...]", flag, (int)len, p);
        memcpy(num, eq + 1, num_len);
        num[num_len] = '\0';
        if (!parse_u64(num, INT64_MAX, &v))
            return usage_error("bad %s '%.*s': the size must be a non-negative integer", flag, (int)len, p);
        int found = -1;
        for (int i = 0; i < o->nbinds; i++)
            if (strlen(o->binds[i].name) == name_len && memcmp(o->binds[i].name, p, name_len) == 0) found = i;
        if (found >= 0) {
            if (o->binds[found].value != (int64_t)v)
                return usage_error("%s binds '%s' twice, to %" PRId64 " and %" PRIu64, flag,
                                   o->binds[found].name, o->binds[found].value, v);
        } else {
            fc_binding *nb = realloc(o->binds, sizeof *nb * (size_t)(o->nbinds + 1));
            if (!nb) return fail(EXIT_NOMEM, "out of memory");
            o->binds = nb;
            char *name = strndup(p, name_len);
            if (!name) return fail(EXIT_NOMEM, "out of memory");
            o->binds[o->nbinds].name = name;
            o->binds[o->nbinds].value = (int64_t)v;
            o->nbinds++;
        }
        if (!end) return 0;
        p = end + 1;
    }
}

static int flag_graph(options *o, const char *flag, const char *val) {
    if (!is_name(val, strlen(val))) return usage_error("bad %s '%s': not a graph name", flag, val);
    o->graph = val;
    return 0;
}

static int flag_emit(options *o, const char *flag, const char *val) {
    if (!strcmp(val, "ir")) o->emit_ir = true;
    else if (!strcmp(val, "plan")) o->emit_plan = true;
    else if (!strcmp(val, "cuda")) o->emit_cuda = true;
    else if (!strcmp(val, "ptx")) o->emit_ptx = true;
    else if (!strcmp(val, "dot")) o->emit_dot = true;
    else return usage_error("unknown %s format '%s' (supported: ir, plan, cuda, ptx, dot)", flag, val);
    return 0;
}

/* A count in [1, max] into *out. */
static int count_value(const char *flag, const char *val, uint64_t max, int *out) {
    uint64_t n;
    if (!parse_u64(val, max, &n) || n < 1) return usage_error("bad %s '%s': expected a count from 1", flag, val);
    *out = (int)n;
    return 0;
}

static int flag_bench(options *o, const char *flag, const char *val) {
    return count_value(flag, val, 1000000, &o->bench_iters);
}

static int flag_profile_format(options *o, const char *flag, const char *val) {
    const int f = fc_profile_format_from_name(val);
    if (f < 0 || f == FC_PROFILE_TRACE)
        return usage_error("unknown %s '%s' (supported: table, csv, json; --trace writes the trace)", flag, val);
    o->profile_format = f;
    return 0;
}

static int flag_profile_runs(options *o, const char *flag, const char *val) {
    return count_value(flag, val, 100000, &o->profile_runs);
}

static int flag_device(options *o, const char *flag, const char *val) {
    (void)flag;
    o->device = val;
    o->device_given = true;
    return 0;
}

/* --inputs a.npy,,c.npy: one entry per parameter, "" for random data. */
static int flag_inputs(options *o, const char *flag, const char *val) {
    if (o->inputs_given) return usage_error("%s given twice", flag);
    o->inputs_given = true;
    const char *p = val;
    for (;;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char **ni = realloc(o->inputs, sizeof *ni * (size_t)(o->ninputs + 1));
        if (!ni) return fail(EXIT_NOMEM, "out of memory");
        o->inputs = ni;
        char *s = strndup(p, len);
        if (!s) return fail(EXIT_NOMEM, "out of memory");
        o->inputs[o->ninputs++] = s;
        if (!end) return 0;
        p = end + 1;
    }
}

static int flag_seed(options *o, const char *flag, const char *val) {
    if (!parse_u64(val, UINT64_MAX, &o->seed))
        return usage_error("bad %s '%s': expected a non-negative integer", flag, val);
    o->seed_given = true;
    return 0;
}

static int flag_arch(options *o, const char *flag, const char *val) {
    if (!fc_arch_parse(val, &o->sm))
        return usage_error("bad %s '%s': expected a CUDA target such as sm_90 (or sm90, 90, 9.0)", flag, val);
    /* The generated kernels use cp.async and bf16 tensor-core MMA (sm 80);
     * an older target would fail inside NVRTC with its raw log. */
    if (o->sm < 80)
        return usage_error("unsupported %s '%s': fusec generates code for sm_80 and newer (sm_80, sm_86, sm_89, sm_90, "
                           "sm_100, sm_120)", flag, val);
    o->arch_given = true;
    return 0;
}

/* --precision=f32|tf32|bf16|f16 (docs/PRECISION.md). */
static int flag_precision(options *o, const char *flag, const char *val) {
    static const struct {
        const char *name;
        fc_precision p;
    } names[] = {{"f32", FC_PRECISION_F32}, {"tf32", FC_PRECISION_TF32}, {"bf16", FC_PRECISION_BF16},
                 {"f16", FC_PRECISION_F16}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(val, names[i].name) != 0) continue;
        o->precision = names[i].p;
        o->precision_given = true;
        return 0;
    }
    return usage_error("unknown %s '%s' (supported: f32, tf32, bf16, f16)", flag, val);
}

static int flag_numerics(options *o, const char *flag, const char *val) {
    if (!strcmp(val, "fast")) o->numerics = FC_NUMERICS_FAST;
    else if (!strcmp(val, "eager")) o->numerics = FC_NUMERICS_EAGER;
    else return usage_error("unknown %s '%s' (supported: fast, eager)", flag, val);
    return 0;
}

/* --dump-after=PASS|all: which names are passes is known once they ran
 * (dump_passes). */
static int flag_dump_after(options *o, const char *flag, const char *val) {
    if (strcmp(val, "all") != 0 && !is_name(val, strlen(val)))
        return usage_error("bad %s '%s': expected a pass name or 'all'", flag, val);
    o->dump_after = val;
    return 0;
}

typedef struct flag {
    const char *name;  /* "--graph" */
    const char *alias; /* "-h", or NULL */
    bool takes_value;  /* --name VALUE or --name=VALUE */
    int (*fn)(options *o, const char *flag, const char *val); /* NULL: a switch or a path */
    size_t field;      /* a switch: offsetof the bool in options it sets; a path: of the const char * */
    const char *needs; /* a path: what an empty value lacks ("a directory") */
    /* Its line of --help and of the manual page: the value's name ("NAME";
     * NULL for a switch) and what the flag does. docs/CLI.md has the long
     * form; tests/test_cli.sh checks that every flag of --help has a row in
     * CLI.md. */
    const char *value;
    const char *help;
} flag;

#define OPTION(name, alias, fn, value, help) {name, alias, true, fn, 0, NULL, value, help}
#define SWITCH(name, alias, field, help) {name, alias, false, NULL, offsetof(options, field), NULL, NULL, help}
/* A non-empty value kept as it is. */
#define PATH(name, alias, field, needs, value, help) \
    {name, alias, true, NULL, offsetof(options, field), needs, value, help}

static const flag flags[] = {
    OPTION("--graph", NULL, flag_graph, "NAME", "use graph NAME of a file that holds several (default: the first)"),
    OPTION("--bind", NULL, flag_bind, "SYM=INT,...", "bind symbolic dims to sizes (may be repeated); an unknown SYM is an error"),
    OPTION("--emit", NULL, flag_emit, "KIND", "print ir, the launch plan, cuda (C), ptx or dot (Graphviz)"),
    SWITCH("--run", NULL, run, "run the graph; print one line per output (dtype, shape, checksum, values)"),
    SWITCH("--check", NULL, check, "compare with the reference interpreter; exit 4 beyond dtype rounding"),
    OPTION("--bench", NULL, flag_bench, "N", "time N runs after warm-up; last line: time: X ms median of N"),
    OPTION("--device", NULL, flag_device, "cuda|cpu|ref", "where to run (default: cuda with a GPU, else cpu, else ref)"),
    OPTION("--inputs", NULL, flag_inputs, "A.npy,...", "one .npy file per parameter; an empty entry or a missing one: random"),
    OPTION("--seed", NULL, flag_seed, "N", "seed of the random inputs (splitmix64; scaled by role: docs/CLI.md)"),
    PATH("--save-outputs", NULL, save_dir, "a directory", "DIR", "write output i to DIR/out<i>.npy instead of printing it"),
    PATH("--weights", NULL, weights_file, "a safetensors file", "W.safetensors", "bind parameters by name to the file's tensors"),
    PATH("--output", "-o", output, "a file name", "FILE", "compile for CUDA and write the program to FILE"),
    SWITCH("--dynamic", NULL, dynamic, "with -o: unbound symbols stay unbound (any shape)"),
    OPTION("--arch", NULL, flag_arch, "SM", "the CUDA target: sm_90, sm90, 90 or 9.0; sm_80 and newer"),
    OPTION("--precision", NULL, flag_precision, "f32|tf32|bf16|f16", "compute in this precision, as torch.autocast (docs/PRECISION.md)"),
    OPTION("--numerics", NULL, flag_numerics, "fast|eager", "fast: f32 inside fused kernels (default); eager: round every value"),
    SWITCH("--time", NULL, time, "print where the compile time went (by phase)"),
    SWITCH("--profile", NULL, profile, "run, then print each launch's time (docs/PROFILING.md)"),
    OPTION("--profile-format", NULL, flag_profile_format, "F", "--profile's output: table (default), csv or json"),
    OPTION("--profile-runs", NULL, flag_profile_runs, "N", "measured runs of --profile after 3 warm-ups (20)"),
    PATH("--trace", NULL, trace_file, "a file name", "FILE", "write a Chrome trace (Perfetto) of compile and runs"),
    PATH("--report", NULL, report_file, "a file name", "FILE", "write a self-contained HTML report of the profile"),
    OPTION("--dump-after", NULL, flag_dump_after, "PASS|all", "print the graph's .ir after the compile pass PASS, or after each"),
    SWITCH("--no-graphs", NULL, no_graphs, "on cuda, launch kernel by kernel instead of replaying a CUDA Graph"),
    PATH("--cache-dir", NULL, cache_dir, "a directory", "DIR", "use DIR as the cache directory (instead of FUSEC_CACHE_DIR)"),
    SWITCH("--cache-info", NULL, cache_info, "print the compile cache's directory, entries, size and counters"),
    SWITCH("--verify", NULL, verify, "with --cache-info: check every entry; exit 1 when one is bad"),
    SWITCH("--cache-clear", NULL, cache_clear, "remove fusec's files from the cache"),
    SWITCH("--devices", NULL, list_devices, "list the usable devices; say on stderr why another is not"),
    SWITCH("--help", "-h", help, "print this help"),
    SWITCH("--help-env", NULL, help_env, "list the environment variables fusec reads, their defaults and values"),
    SWITCH("--help-man", NULL, help_man, "print the manual page (roff), as installed in man1/fusec.1"),
    SWITCH("--version", NULL, version, "print the version"),
};

int parse_args(int argc, char **argv, options *o) {
    bool only_files = false;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (only_files || arg[0] != '-' || arg[1] == '\0') {
            if (o->file) return usage_error("more than one input file ('%s' and '%s')", o->file, arg);
            o->file = arg;
            continue;
        }
        if (strcmp(arg, "--") == 0) {
            only_files = true;
            continue;
        }
        const char *eq = strchr(arg, '=');
        size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
        const flag *f = NULL;
        for (size_t k = 0; k < sizeof flags / sizeof flags[0]; k++) {
            const char *names[2] = {flags[k].name, flags[k].alias};
            for (int j = 0; j < 2; j++)
                if (names[j] && strlen(names[j]) == name_len && memcmp(names[j], arg, name_len) == 0)
                    f = &flags[k];
        }
        if (!f) return usage_error("unknown option '%.*s'", (int)name_len, arg);
        const char *val = NULL;
        if (f->takes_value) {
            if (eq) val = eq + 1;
            else if (i + 1 < argc) val = argv[++i];
            else return usage_error("option '%s' needs a value", f->name);
        } else if (eq) {
            return usage_error("option '%s' takes no value", f->name);
        }
        if (f->fn) {
            int rc = f->fn(o, f->name, val);
            if (rc) return rc;
        } else if (f->takes_value) {
            if (!*val) return usage_error("%s needs %s", f->name, f->needs);
            *(const char **)((char *)o + f->field) = val;
        } else {
            *(bool *)((char *)o + f->field) = true;
        }
    }
    /* A profile is of a run. */
    if (o->profile || o->trace_file || o->report_file) o->run = true;
    return 0;
}

/* ------------------------------------------------------------------ */
/* Help: --help and the manual page (--help-man) from the flag table.  */
/* ------------------------------------------------------------------ */

static const char *const usage_lines[] = {
    "fusec FILE [--graph NAME] [--bind SYM=INT,...] --emit=ir|plan|cuda|ptx",
    "fusec FILE --run [--device=D] [--inputs A.npy,...] [--check] [--bench N]",
    "fusec FILE.ir -o OUT.cubin [--arch SM] [--precision P]",
    "fusec OUT.cubin --run [--inputs ...] [--check] | --emit=plan",
    "fusec --cache-info [--verify] | --cache-clear | --devices | --version",
};

static const char description[] =
    "fusec is a JIT operator-fusion compiler for neural-network graphs. It reads a\n"
    "graph (FILE: .ir text, an .onnx model, or a program fusec compiled with -o),\n"
    "verifies it, and prints, compiles or runs it. Without --emit, --run or -o it\n"
    "only verifies FILE. A value follows as --opt=VALUE or --opt VALUE.\n";

static const char *const exit_lines[] = {
    "0  success",
    "1  bad input: an invalid file or graph, an input that does not fit",
    "2  bad usage: an unknown option or value, an unknown --bind symbol",
    "3  failure while running: a .npy file, an output, the runtime, NVRTC",
    "4  --check: an output's error is beyond what rounding to its dtypes explains",
    "5  out of memory",
    "6  the graph is valid but the device does not support it",
};

void print_help(void) {
    fputs("Usage:\n", stdout);
    for (size_t i = 0; i < sizeof usage_lines / sizeof usage_lines[0]; i++) printf("  %s\n", usage_lines[i]);
    printf("\n%s\nOptions:\n", description);
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        const flag *f = &flags[i];
        char left[64];
        snprintf(left, sizeof left, "%s%s%s%s%s", f->alias ? f->alias : "", f->alias ? ", " : "", f->name,
                 f->value ? " " : "", f->value ? f->value : "");
        const char *text = f->help;
        /* One line when it fits in 80 columns, else the text under the flag. */
        if (strlen(left) <= 22 && 25 + strlen(text) <= 80) printf("  %-22s %s\n", left, text);
        else printf("  %s\n      %s\n", left, text);
    }
    fputs("\nExit codes:\n", stdout);
    for (size_t i = 0; i < sizeof exit_lines / sizeof exit_lines[0]; i++) printf("  %s\n", exit_lines[i]);
    fputs("\nEnvironment: FUSEC_DEVICE, FUSEC_CACHE, FUSEC_CACHE_DIR and more; --help-env\n"
          "lists them all. The manual: man fusec, or docs/CLI.md.\n",
          stdout);
}

/* roff: a leading '.' or '\'' would be a request, '\' an escape, '-' a hyphen. */
static void man_text(const char *s) {
    if (*s == '.' || *s == '\'') fputs("\\&", stdout);
    for (; *s; s++) {
        if (*s == '\\') fputs("\\e", stdout);
        else if (*s == '-') fputs("\\-", stdout);
        else putchar(*s);
    }
}

void print_man(const char *env_text) {
    printf(".TH FUSEC 1 \"\" \"fusec %s\" \"User Commands\"\n.SH NAME\nfusec \\- a JIT operator-fusion compiler for "
           "neural-network graphs\n.SH SYNOPSIS\n.nf\n", FUSEC_VERSION_STRING);
    for (size_t i = 0; i < sizeof usage_lines / sizeof usage_lines[0]; i++) {
        man_text(usage_lines[i]);
        putchar('\n');
    }
    fputs(".fi\n.SH DESCRIPTION\n", stdout);
    man_text(description);
    fputs(".SH OPTIONS\n", stdout);
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        const flag *f = &flags[i];
        fputs(".TP\n", stdout);
        if (f->alias) {
            fputs("\\fB", stdout);
            man_text(f->alias);
            fputs("\\fR, ", stdout);
        }
        fputs("\\fB", stdout);
        man_text(f->name);
        fputs("\\fR", stdout);
        if (f->value) {
            fputs(" \\fI", stdout);
            man_text(f->value);
            fputs("\\fR", stdout);
        }
        putchar('\n');
        man_text(f->help);
        putchar('\n');
    }
    fputs(".SH EXIT STATUS\n", stdout);
    for (size_t i = 0; i < sizeof exit_lines / sizeof exit_lines[0]; i++) {
        fputs(".TP\n", stdout);
        printf("%.1s\n", exit_lines[i]);
        man_text(exit_lines[i] + 3);
        putchar('\n');
    }
    fputs(".SH ENVIRONMENT\n.nf\n", stdout);
    if (env_text) {
        for (const char *line = env_text; *line;) {
            const char *nl = strchr(line, '\n');
            size_t n = nl ? (size_t)(nl - line) : strlen(line);
            char buf[512];
            snprintf(buf, sizeof buf, "%.*s", (int)(n < sizeof buf ? n : sizeof buf - 1), line);
            man_text(buf);
            putchar('\n');
            line += n + (nl ? 1 : 0);
        }
    }
    fputs(".fi\n.SH SEE ALSO\nThe documentation under share/doc/fusec: CLI.md (this command in full), IR.md (the\n"
          ".ir format), PRECISION.md, NUMERICS.md, CACHE.md, AOT.md, SECURITY.md.\n",
          stdout);
}
