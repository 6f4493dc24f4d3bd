/*
 * fusec.c - the command-line tool.
 *
 *   fusec FILE.ir [--graph NAME] [--bind SYM=INT,...] --emit=ir|plan|cuda|ptx
 *   fusec FILE.ir --run [--device=NAME] [--inputs a.npy,...] [--seed N] [--save-outputs DIR]
 *   fusec FILE.ir -o FILE.cubin [--arch sm_90]     (ahead of time)
 *   fusec FILE.cubin --run | --emit=plan           (a compiled program file)
 *   fusec --cache-info [--verify] | --cache-clear
 *
 * main() reads as the pipeline: parse the command line, then either work on
 * the cache, or get a program (parse and verify the graph, or load a
 * compiled program file), emit, save and/or run it. Flags live in one table
 * (`flags` below): to add one, write a row, and a handler for a value that
 * needs more checking than a path's. Devices are the library's backends
 * (fc_device_list): a backend added there is a device here.
 *
 * Only the public header (fusec.h) and the tool's own npy.h are included:
 * what the tool needs of the library is public API.
 *
 * Exit codes: 0 success, 1 input error, 2 usage error, 3 failure while
 * running, 4 --check failed, 5 out of memory, 6 unsupported (the fc_status
 * values, and 4).
 */
#include "fusec.h"
#include "npy.h"

#include <time.h>

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

enum {
    EXIT_OK = 0,
    EXIT_INPUT = 1,
    EXIT_USAGE = 2,
    EXIT_RUNTIME = 3,
    EXIT_CHECK = 4, /* --check: an output exceeds its dtype tolerance */
    EXIT_NOMEM = 5,
    EXIT_UNSUPPORTED = 6,
};

/* ------------------------------------------------------------------ */
/* Clock.                                                              */
/* ------------------------------------------------------------------ */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* ------------------------------------------------------------------ */
/* Devices: the library's backends.                                    */
/* ------------------------------------------------------------------ */

/* What a run reports besides the outputs. */
typedef struct run_stats {
    double median_ms;       /* with --bench: the median run time */
    bool compiled;          /* the graph was compiled for CUDA: times holds how */
    fc_compile_times times; /* for --time */
} run_stats;

/* Compiled kernels have static shapes: a copy of g with the symbols bound
 * to the sizes the inputs give (g itself when it has none). */
static fc_graph *specialize_to_inputs(fc_graph *g, const fc_tensor *in, int nin) {
    fc_binding binds[64];
    int nb = 0;
    for (int i = 0; i < nin && i < fc_graph_num_params(g); i++) {
        const fc_value *pv = fc_graph_param(g, i);
        for (int d = 0; d < fc_value_rank(pv) && d < in[i].rank; d++) {
            const char *sym = fc_sym_name(g, fc_value_dim(pv, d));
            bool known = false;
            for (int k = 0; k < nb && sym; k++) known |= !strcmp(binds[k].name, sym);
            if (sym && !known && nb < 64) binds[nb++] = (fc_binding){sym, in[i].shape[d]};
        }
    }
    return nb ? fc_graph_specialize(g, binds, nb) : g;
}

/* Run g on device dev from host memory: compile a copy with the inputs'
 * shapes (passes, codegen and, on CUDA, NVRTC or the cache), then
 * fc_program_run_host (its --bench timing: CUDA events on the GPU, the
 * monotonic clock on the host). */
static fc_status run_on_device(fc_device dev, fc_graph *g, const fc_tensor *in, int nin, fc_tensor *out, int nout,
                               int bench_iters, int sm, run_stats *rs) {
    memset(rs, 0, sizeof *rs);
    fc_compile_options co;
    fc_compile_options_default(&co);
    co.device = dev;
    co.sm = sm;
    fc_graph *sg = specialize_to_inputs(g, in, nin);
    if (!sg) return fc_graph_status(g) ? fc_graph_status(g) : FC_ERR_INPUT;
    fc_program *p = NULL;
    fc_status st = fc_compile(sg, &co, &p);
    if (!st) st = fc_program_run_host(p, in, nin, out, nout, &rs->median_ms, bench_iters);
    if (p && dev == FC_DEVICE_CUDA) {
        rs->compiled = true;
        fc_program_times(p, &rs->times);
    }
    fc_program_free(p);
    if (sg != g) fc_graph_free(sg);
    return st;
}

/* ------------------------------------------------------------------ */
/* Options.                                                            */
/* ------------------------------------------------------------------ */

typedef struct options {
    const char *file;
    const char *graph;
    fc_binding *binds; /* names are malloc'd */
    int nbinds;
    bool emit_ir, emit_plan, emit_cuda, emit_ptx;
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
    int sm;             /* --arch, when arch_given */
    bool arch_given;
    bool time;          /* --time: where the compile time went */
    bool no_graphs;     /* --no-graphs: launch by launch, no CUDA Graph replay */
    const char *cache_dir;
    bool cache_info, verify, cache_clear;
    bool help, version, list_devices;
} options;

static void options_free(options *o) {
    for (int i = 0; i < o->nbinds; i++) free((char *)o->binds[i].name);
    free(o->binds);
    for (int i = 0; i < o->ninputs; i++) free(o->inputs[i]);
    free(o->inputs);
}

/* Print a usage error (one line and a hint) and return EXIT_USAGE. */
static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("fusec: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\ntry 'fusec --help'\n", stderr);
    va_end(ap);
    return EXIT_USAGE;
}

/* An error that is not about usage: one line on stderr; returns code. */
static int fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("fusec: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return code;
}

/* The context's diagnostic, verbatim, ended by one newline. */
static void print_last_error(const fc_context *ctx) {
    const char *msg = fc_last_error(ctx);
    if (!msg || !*msg) msg = "fusec: unknown error";
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
            char *name = malloc(name_len + 1);
            if (!name) return fail(EXIT_NOMEM, "out of memory");
            memcpy(name, p, name_len);
            name[name_len] = '\0';
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
    else return usage_error("unknown %s format '%s' (supported: ir, plan, cuda, ptx)", flag, val);
    return 0;
}

static int flag_bench(options *o, const char *flag, const char *val) {
    uint64_t n;
    if (!parse_u64(val, 1000000, &n) || n < 1) return usage_error("bad %s '%s': expected a count from 1", flag, val);
    o->bench_iters = (int)n;
    return 0;
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
        char *s = malloc(len + 1);
        if (!s) return fail(EXIT_NOMEM, "out of memory");
        memcpy(s, p, len);
        s[len] = '\0';
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
    o->arch_given = true;
    return 0;
}

typedef struct flag {
    const char *name;  /* "--graph" */
    const char *alias; /* "-h", or NULL */
    bool takes_value;  /* --name VALUE or --name=VALUE */
    int (*fn)(options *o, const char *flag, const char *val); /* NULL: a switch or a path */
    size_t field;      /* a switch: offsetof the bool in options it sets; a path: of the const char * */
    const char *needs; /* a path: what an empty value lacks ("a directory") */
} flag;

#define OPTION(name, alias, fn) {name, alias, true, fn, 0, NULL}
#define SWITCH(name, alias, field) {name, alias, false, NULL, offsetof(options, field), NULL}
/* A non-empty value kept as it is. */
#define PATH(name, alias, field, needs) {name, alias, true, NULL, offsetof(options, field), needs}

static const flag flags[] = {
    OPTION("--graph", NULL, flag_graph),
    OPTION("--bind", NULL, flag_bind),
    OPTION("--emit", NULL, flag_emit),
    SWITCH("--run", NULL, run),
    SWITCH("--check", NULL, check),
    OPTION("--bench", NULL, flag_bench),
    OPTION("--device", NULL, flag_device),
    OPTION("--inputs", NULL, flag_inputs),
    OPTION("--seed", NULL, flag_seed),
    PATH("--save-outputs", NULL, save_dir, "a directory"),
    PATH("--weights", NULL, weights_file, "a safetensors file"),
    PATH("--output", "-o", output, "a file name"),
    OPTION("--arch", NULL, flag_arch),
    SWITCH("--time", NULL, time),
    SWITCH("--no-graphs", NULL, no_graphs),
    PATH("--cache-dir", NULL, cache_dir, "a directory"),
    SWITCH("--cache-info", NULL, cache_info),
    SWITCH("--verify", NULL, verify),
    SWITCH("--cache-clear", NULL, cache_clear),
    SWITCH("--devices", NULL, list_devices),
    SWITCH("--help", "-h", help),
    SWITCH("--version", NULL, version),
};

static int parse_args(int argc, char **argv, options *o) {
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
    return 0;
}

/* ------------------------------------------------------------------ */
/* Help.                                                               */
/* ------------------------------------------------------------------ */

static void print_help(void) {
    fputs(
        "Usage:\n"
        "  fusec FILE.ir [--graph NAME] [--bind SYM=INT,...] --emit=ir|plan|cuda|ptx\n"
        "  fusec FILE.ir --run [--device=NAME] [--graph NAME] [--bind SYM=INT,...]\n"
        "                [--inputs A.npy,B.npy,...] [--seed N] [--save-outputs DIR]\n"
        "                [--check] [--bench N]\n"
        "  fusec FILE.ir -o OUT.cubin [--arch sm_90] [--graph NAME] [--bind SYM=INT,...]\n"
        "  fusec OUT.cubin --run [--inputs ...] [--seed N] [--check] | --emit=plan\n"
        "  fusec --cache-info [--verify] | --cache-clear\n"
        "  fusec --devices | --help | --version\n"
        "\n"
        "fusec is a JIT operator-fusion compiler for neural-network graphs. It reads a\n"
        "graph in the .ir text format, verifies it, and prints, compiles or runs it.\n"
        "Without --emit, --run or -o it only parses and verifies FILE.ir and prints\n"
        "nothing. Options may come in any order; a value may follow as --opt=VALUE or\n"
        "--opt VALUE.\n"
        "\n"
        "Graph:\n"
        "  --graph NAME          use graph NAME of a file that holds several (default:\n"
        "                        the first graph)\n"
        "  --bind SYM=INT,...    bind symbolic dimensions to sizes, as in --bind B=2,T=16;\n"
        "                        may be repeated\n"
        "\n"
        "Output:\n"
        "  --emit=ir             print the verified graph as .ir text on stdout\n"
        "  --emit=plan           compile for CUDA and print the launch plan: one line per\n"
        "                        launch (kernel or library call, its grid, the ops it\n"
        "                        covers), the arena line, and last exactly\n"
        "                          total: K kernels, L library calls, M bytes of intermediates\n"
        "  --emit=cuda           print the generated CUDA C source\n"
        "  --emit=ptx            compile the source with NVRTC and print the PTX\n"
        "                        plan, cuda and ptx need no GPU (NVRTC targets sm_90 when\n"
        "                        there is none) but need every symbolic dim bound\n"
        "\n"
        "Ahead of time:\n"
        "  -o, --output FILE     compile for CUDA and write the program to FILE: one\n"
        "                        cubin (an ELF file that cuModuleLoadData and cuobjdump\n"
        "                        accept) holding every kernel and the launch plan. Needs\n"
        "                        every symbolic dim bound (--bind) and NVRTC, not a GPU.\n"
        "                        The file is replaced atomically.\n"
        "  --arch SM             the CUDA target of the compile: sm_90, sm90, 90 or 9.0.\n"
        "                        The default is the local GPU's, or sm_90 without one.\n"
        "                        Applies to -o, --emit=plan|cuda|ptx and --run on cuda.\n"
        "  A FILE that fusec wrote with -o is loaded instead of parsed: nothing is\n"
        "  compiled. It runs on the cuda device only (--run, with --inputs, --seed,\n"
        "  --save-outputs, --check and --bench as for .ir files; --check runs the\n"
        "  reference interpreter on the graph embedded in the file), and --emit=ir,\n"
        "  plan, cuda and ptx print what it holds. --graph, --bind and --arch do not\n"
        "  apply to it (its shapes and target are compiled in).\n"
        "\n"
        "Running:\n"
        "  --run                 run the graph and print one line per output, in return\n"
        "                        order:\n"
        "                          out0: f32[4, 8] checksum=12.5 first=[0.1, -0.2, ...]\n"
        "                        checksum is the sum of all values (as double, %.6g);\n"
        "                        first holds at most 8 values, and '...' marks more\n"
        "  --device=NAME         where to run: cuda, cpu or ref. The default is cuda when\n"
        "                        a GPU is present, else cpu when this build has the CPU\n"
        "                        backend, else ref (the reference interpreter: float64,\n"
        "                        slow, the oracle). --devices lists what this machine can\n"
        "                        use; naming a device this build lacks is an error (exit 2)\n"
        "                        and cuda without a GPU fails at run time (exit 3)\n"
        "  --check               also run the reference interpreter on the same inputs and\n"
        "                        compare every output: one line per output,\n"
        "                          check out0: max_abs_err=X max_rel_err=Y ok|FAIL\n"
        "                        exit 4 when an output exceeds its dtype's tolerance\n"
        "                        (docs/RUNTIME-PROGRAM.md has the table)\n"
        "  --bench N             time N runs after warm-up (CUDA events on the GPU, the\n"
        "                        wall clock on the CPU); the last line is exactly\n"
        "                          time: X ms median of N\n"
        "                        On cuda, runs after the first replay the program as one\n"
        "                        CUDA Graph (docs/RUNTIME-GRAPHS.md)\n"
        "  --no-graphs           on cuda, launch kernel by kernel instead of replaying a\n"
        "                        CUDA Graph (the same as FUSEC_CUDA_GRAPHS=0)\n"
        "  --weights W.safetensors  bind parameters by name to the file's tensors (an .ir\n"
        "                        graph: every tensor must name a parameter, and every\n"
        "                        parameter after the --inputs ones must be named; an\n"
        "                        .onnx model: its graph inputs by name; naming an\n"
        "                        initializer is an error)\n"
        "  --inputs A.npy,...    one .npy file per graph parameter, in order. A parameter\n"
        "                        without a file (the list is shorter than the parameters,\n"
        "                        or an entry is empty, as in a.npy,,c.npy) gets random\n"
        "                        data (see --seed). The file's dtype must be the\n"
        "                        parameter's, except that a bf16 parameter takes a\n"
        "                        float32 file (rounded to nearest even) and an f16\n"
        "                        parameter takes float16 or float32. Files must be\n"
        "                        little-endian and C-ordered, with dtype <f8 <f4 <f2 <i8\n"
        "                        <i4 |i1 |b1 or |u1 (read as bool). File names cannot\n"
        "                        contain ','.\n"
        "  --seed N              seed for random inputs (default 0). The data of\n"
        "                        parameter i comes from a splitmix64 generator whose\n"
        "                        state starts at output i+1 of splitmix64 seeded with N:\n"
        "                        floats are uniform in [-1, 1) (53 random bits, then\n"
        "                        rounded to the dtype), integers are in 0..7, bools 0 or\n"
        "                        1. The symbolic dims of a random parameter must be bound\n"
        "                        with --bind or known from an input file's shape.\n"
        "  --save-outputs DIR    write output i to DIR/out<i>.npy instead of printing it\n"
        "                        (DIR and its parents are created; bf16 is saved as\n"
        "                        float32)\n"
        "  --device, --inputs, --seed, --save-outputs, --check and --bench are only\n"
        "  valid with --run.\n"
        "  --time                print to stderr where the time went: parse, passes,\n"
        "                        codegen, NVRTC (or the cache), and with --run on cuda\n"
        "                        the device and module load. Needs a compile: -o,\n"
        "                        --emit=plan|cuda|ptx, --run on cuda, or a compiled file.\n"
        "\n"
        "Cache (compiles go through an on-disk cache of cubins and whole programs):\n"
        "  --cache-info          print the cache directory, its mode, the format version,\n"
        "                        the entries and bytes of each level, the total against\n"
        "                        the limit, the hits, misses and compiles, and the oldest\n"
        "                        and newest entry\n"
        "  --verify              with --cache-info: check every entry and list the bad\n"
        "                        ones; exit 1 when there are any\n"
        "  --cache-clear         remove fusec's files from the cache (nothing else) and\n"
        "                        say how many entries and bytes were freed\n"
        "  --cache-dir DIR       use DIR as the cache directory for this command\n"
        "  --cache-info and --cache-clear take no FILE; given together, fusec clears\n"
        "  first. A cache directory owned by another user, or writable by group or\n"
        "  others, is refused with one warning, and fusec runs without it.\n"
        "\n"
        "Information:\n"
        "  --devices             list the devices this build can run on, one per line\n"
        "  -h, --help            print this help and exit\n"
        "  --version             print the version and exit\n"
        "\n"
        "Exit codes:\n"
        "  0  success\n"
        "  1  error in the input: unreadable or invalid .ir file, a graph that fails\n"
        "     verification or has an unbound dim where a compile needs it, --graph\n"
        "     naming no graph of the file, an input file whose dtype or shape does not\n"
        "     fit its parameter, a damaged compiled program file, bad cache entries\n"
        "     found by --verify (the diagnostic is on stderr)\n"
        "  2  bad usage: unknown option, missing or extra file argument, bad --bind,\n"
        "     --seed or --arch, unknown or unavailable device, too many --inputs, a\n"
        "     random parameter with an unbound symbolic dimension, an option that does\n"
        "     not apply, a bad FUSEC_CACHE or FUSEC_CACHE_MAX_BYTES\n"
        "  3  failure while running: unreadable, truncated or unsupported .npy file,\n"
        "     an output that cannot be written, a runtime or NVRTC error\n"
        "  4  --check: an output exceeds its dtype's tolerance\n"
        "  5  out of memory\n"
        "  6  the graph is valid but the device does not support it\n"
        "\n"
        "Environment:\n"
        "  FUSEC_DEVICE          the device used when --device is not given\n"
        "  FUSEC_CUDA_INCLUDE_DIR  CUDA include folder(s) for NVRTC (':'-separated)\n"
        "  FUSEC_CACHE_DIR       the cache directory (--cache-dir overrides it)\n"
        "  XDG_CACHE_HOME        without FUSEC_CACHE_DIR, the cache is\n"
        "                        $XDG_CACHE_HOME/fusec (when absolute), else\n"
        "                        $HOME/.cache/fusec\n"
        "  FUSEC_CACHE           off, ro (read only) or rw (the default)\n"
        "  FUSEC_CACHE_MAX_BYTES the cache's size limit, as 1073741824, 512M or 1G\n"
        "                        (the default); least recently used entries go first\n"
        "  FUSEC_DEBUG=code      NVRTC errors show more of the generated source\n"
        "  FUSEC_CUDA_GRAPHS=0   launch by launch, no CUDA Graph replay (--no-graphs)\n"
        "  FUSEC_VARIANT_GEMM=cublaslt  (library) a dynamic program's variant runs its\n"
        "                        GEMMs through cuBLASLt, not generated kernels\n"
        "  FUSEC_SKINNY=0        (library) a static program's GEMMs of at most 64 rows\n"
        "                        stay cuBLASLt calls, not skinny GEMM kernels (sm_90a)\n"
        "  FUSEC_SKINNY_ATTN=0   (library) an attention whose result only a skinny GEMM\n"
        "                        reads keeps its own kernel, not computed inside it\n"
        "  FUSEC_GEMM_TUNE=1     (library) choose cuBLASLt algorithms by timing the\n"
        "                        heuristic's first 8 candidates (off: slower in a\n"
        "                        program's graph at small sizes; docs/GEMM.md)\n"
        "  FUSEC_LOG=guards,graphs,spec  log (to stderr) each guard miss of a dynamic\n"
        "                        program with what changed, specializations built and\n"
        "                        evicted, why a program runs without a CUDA Graph, and\n"
        "                        (spec) each step of the background thread, timed\n"
        "  FUSEC_ATTN_TMA, FUSEC_ATTN_PERSIST, FUSEC_ATTN_L2SECT, FUSEC_ATTN_BN,\n"
        "  FUSEC_NORM_PRELOAD, FUSEC_REDUCE_VEC,\n"
        "  FUSEC_VGEMM_WGMMA, FUSEC_VGEMM_CFG, FUSEC_VGEMM_SPLIT128, FUSEC_VGEMM_GATHER,\n"
        "  FUSEC_VGEMM_WS_MIB\n"
        "                        switches of the attention kernel, of row reductions\n"
        "                        and of the dynamic variant's GEMMs, for measuring\n"
        "                        (docs/CLI.md)\n",
        stdout);
}

/* ------------------------------------------------------------------ */
/* Random inputs: splitmix64 (Steele, Lea and Flood, 2014).             */
/* ------------------------------------------------------------------ */

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void fill_random(fc_tensor *t, uint64_t seed, int param_index) {
    uint64_t s = seed, state = 0;
    for (int i = 0; i <= param_index; i++) state = splitmix64(&s);
    int64_t n = fc_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = splitmix64(&state);
        double u = (double)(r >> 11) * 0x1.0p-53 * 2.0 - 1.0; /* [-1, 1) */
        switch (t->dtype) {
        case FC_F64: ((double *)t->data)[i] = u; break;
        case FC_F32: ((float *)t->data)[i] = (float)u; break;
        case FC_F16: ((uint16_t *)t->data)[i] = fc_f32_to_f16((float)u); break;
        case FC_BF16: ((uint16_t *)t->data)[i] = fc_f32_to_bf16((float)u); break;
        case FC_I64: ((int64_t *)t->data)[i] = (int64_t)(r >> 61); break;
        case FC_I32: ((int32_t *)t->data)[i] = (int32_t)(r >> 61); break;
        case FC_I8: ((int8_t *)t->data)[i] = (int8_t)(r >> 61); break;
        case FC_BOOL: ((uint8_t *)t->data)[i] = (uint8_t)(r >> 63); break;
        default: break;
        }
    }
}

/* ------------------------------------------------------------------ */
/* Tensors as text.                                                    */
/* ------------------------------------------------------------------ */

static double tensor_get(const fc_tensor *t, int64_t i) {
    switch (t->dtype) {
    case FC_F64: return ((const double *)t->data)[i];
    case FC_F32: return ((const float *)t->data)[i];
    case FC_F16: return fc_f16_to_f32(((const uint16_t *)t->data)[i]);
    case FC_BF16: return fc_bf16_to_f32(((const uint16_t *)t->data)[i]);
    case FC_I64: return (double)((const int64_t *)t->data)[i];
    case FC_I32: return ((const int32_t *)t->data)[i];
    case FC_I8: return ((const int8_t *)t->data)[i];
    case FC_BOOL: return ((const uint8_t *)t->data)[i];
    default: return 0;
    }
}

static void format_shape(const int64_t *shape, int rank, char *buf, size_t n) {
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < rank && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%" PRId64, i ? ", " : "", shape[i]);
}

static void print_output(FILE *out, int index, const fc_tensor *t) {
    char shape[FC_MAX_RANK * 24];
    format_shape(t->shape, t->rank, shape, sizeof shape);
    int64_t n = fc_tensor_numel(t);
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += tensor_get(t, i);
    fprintf(out, "out%d: %s[%s] checksum=%.6g first=[", index, fc_dtype_name(t->dtype), shape, sum);
    bool is_float = t->dtype == FC_F64 || t->dtype == FC_F32 || t->dtype == FC_F16 || t->dtype == FC_BF16;
    for (int64_t i = 0; i < n && i < 8; i++) {
        if (i) fputs(", ", out);
        if (is_float) fprintf(out, "%.6g", tensor_get(t, i));
        else if (t->dtype == FC_I64) fprintf(out, "%" PRId64, ((const int64_t *)t->data)[i]);
        else fprintf(out, "%.0f", tensor_get(t, i));
    }
    fputs(n > 8 ? ", ...]\n" : "]\n", out);
}

/* ------------------------------------------------------------------ */
/* Running.                                                            */
/* ------------------------------------------------------------------ */

/* Symbol values learned from input files. */
typedef struct sym_values {
    const char *name[64];
    int64_t value[64];
    int n;
} sym_values;

static bool sym_lookup(const sym_values *sv, const char *name, int64_t *v) {
    for (int i = 0; i < sv->n; i++)
        if (strcmp(sv->name[i], name) == 0) {
            *v = sv->value[i];
            return true;
        }
    return false;
}

/* A parameter as the run sees it: one of a graph (its dims may be
 * symbolic) or one of a compiled program (all static). */
typedef struct param_info {
    char name[128];               /* for messages: "%x", or "parameter 2" */
    char type[256];               /* for messages: "f32[N, 4]" */
    fc_dtype dtype;
    int rank;
    int64_t dims[FC_MAX_RANK];    /* the static sizes */
    const char *sym[FC_MAX_RANK]; /* the symbol of dim d (owned by the graph), or NULL when static */
} param_info;

static void param_finish(param_info *pi, const char *name, int index) {
    if (name && *name) snprintf(pi->name, sizeof pi->name, "%%%s", name);
    else snprintf(pi->name, sizeof pi->name, "parameter %d", index);
    size_t n = sizeof pi->type;
    size_t len = (size_t)snprintf(pi->type, n, "%s[", fc_dtype_name(pi->dtype));
    for (int d = 0; d < pi->rank && len < n; d++) {
        if (pi->sym[d]) len += (size_t)snprintf(pi->type + len, n - len, "%s%s", d ? ", " : "", pi->sym[d]);
        else len += (size_t)snprintf(pi->type + len, n - len, "%s%" PRId64, d ? ", " : "", pi->dims[d]);
    }
    if (len < n) snprintf(pi->type + len, n - len, "]");
}

static void param_of_graph(fc_graph *g, int i, param_info *pi) {
    const fc_value *p = fc_graph_param(g, i);
    memset(pi, 0, sizeof *pi);
    pi->dtype = fc_value_dtype(p);
    pi->rank = fc_value_rank(p);
    for (int d = 0; d < pi->rank; d++) {
        fc_dim dim = fc_value_dim(p, d);
        pi->sym[d] = fc_sym_name(g, dim);
        pi->dims[d] = pi->sym[d] ? 0 : dim;
    }
    param_finish(pi, fc_value_name(p), i);
}

static void param_of_program(const fc_program *prog, int i, param_info *pi) {
    fc_tensor t;
    const char *name = NULL;
    memset(pi, 0, sizeof *pi);
    if (fc_program_input(prog, i, &t, &name) == FC_OK) {
        pi->dtype = t.dtype;
        pi->rank = t.rank;
        for (int d = 0; d < t.rank; d++) pi->dims[d] = t.shape[d];
    }
    param_finish(pi, name, i);
}

/* Convert a tensor read from .npy to parameter dtype pt (see --help).
 * Returns 0, EXIT_INPUT (message printed) or EXIT_NOMEM. */
static int convert_input(fc_tensor *t, fc_dtype pt, const char *file, const char *pname) {
    if (t->dtype == pt) return 0;
    if (t->dtype == FC_F32 && (pt == FC_BF16 || pt == FC_F16)) {
        int64_t n = fc_tensor_numel(t);
        uint16_t *h = malloc((size_t)(n ? n : 1) * sizeof *h);
        if (!h) return fail(EXIT_NOMEM, "%s: out of memory", file);
        const float *f = t->data;
        for (int64_t i = 0; i < n; i++) h[i] = pt == FC_BF16 ? fc_f32_to_bf16(f[i]) : fc_f32_to_f16(f[i]);
        free(t->data);
        t->data = h;
        t->dtype = pt;
        return 0;
    }
    return fail(EXIT_INPUT, "%s: dtype %s does not fit parameter %s of dtype %s", file, fc_dtype_name(t->dtype),
                pname, fc_dtype_name(pt));
}

/* Check a file's shape against the parameter's and learn its symbols. */
static int match_shape(const param_info *pi, const fc_tensor *t, sym_values *sv, const char *file) {
    char shape[FC_MAX_RANK * 24];
    bool ok = pi->rank == t->rank;
    for (int d = 0; ok && d < t->rank; d++) {
        const char *sym = pi->sym[d];
        if (!sym) {
            ok = pi->dims[d] == t->shape[d];
            continue;
        }
        int64_t known;
        if (sym_lookup(sv, sym, &known)) {
            if (known != t->shape[d])
                return fail(EXIT_INPUT, "%s: dimension %d of parameter %s (%s) is %s = %" PRId64
                            " by an earlier input, but the file has %" PRId64,
                            file, d, pi->name, pi->type, sym, known, t->shape[d]);
        } else if (sv->n < 64) {
            sv->name[sv->n] = sym;
            sv->value[sv->n] = t->shape[d];
            sv->n++;
        }
    }
    if (!ok) {
        format_shape(t->shape, t->rank, shape, sizeof shape);
        return fail(EXIT_INPUT, "%s: shape [%s] does not fit parameter %s of type %s", file, shape, pi->name,
                    pi->type);
    }
    return 0;
}

static int mkdir_p(const char *dir) {
    char path[4096];
    size_t n = strlen(dir);
    if (n >= sizeof path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(path, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (path[i] != '/' && path[i] != '\0') continue;
        char c = path[i];
        path[i] = '\0';
        if (mkdir(path, 0777) != 0 && errno != EEXIST) return -1;
        path[i] = c;
    }
    struct stat st;
    if (stat(dir, &st) != 0) return -1;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

static int save_outputs(const char *dir, const fc_tensor *outs, int nout) {
    if (mkdir_p(dir) != 0) return fail(EXIT_RUNTIME, "cannot create directory '%s': %s", dir, strerror(errno));
    for (int i = 0; i < nout; i++) {
        char path[4200], err[512];
        snprintf(path, sizeof path, "%s/out%d.npy", dir, i);
        fc_tensor t = outs[i];
        float *tmp = NULL;
        if (t.dtype == FC_BF16) {
            int64_t n = fc_tensor_numel(&t);
            tmp = malloc((size_t)(n ? n : 1) * sizeof *tmp);
            if (!tmp) return fail(EXIT_NOMEM, "out of memory");
            for (int64_t k = 0; k < n; k++) tmp[k] = fc_bf16_to_f32(((const uint16_t *)t.data)[k]);
            t.dtype = FC_F32;
            t.data = tmp;
        }
        int rc = npy_write(path, &t, err, sizeof err);
        free(tmp);
        if (rc != 0) return fail(EXIT_RUNTIME, "%s", err);
    }
    return 0;
}

/* Map a failed call's status to an exit code. */
static int run_exit_code(fc_status st) {
    switch (st) {
    case FC_ERR_INPUT: return EXIT_INPUT;
    case FC_ERR_USAGE: return EXIT_USAGE; /* a bad FUSEC_CACHE, ... */
    case FC_ERR_NOMEM: return EXIT_NOMEM;
    case FC_ERR_UNSUPPORTED: return EXIT_UNSUPPORTED;
    default: return EXIT_RUNTIME;
    }
}

/* --check: run the reference interpreter on the same inputs and compare
 * every output within its dtype's tolerance (runtime/cuda/program.h). */
static int check_outputs(fc_graph *g, const fc_tensor *in, int np, const fc_tensor *out, int nout) {
    fc_context *ctx = fc_graph_context(g);
    fc_tensor *want = calloc((size_t)(nout ? nout : 1), sizeof *want);
    fc_output_diff *d = calloc((size_t)(nout ? nout : 1), sizeof *d);
    if (!want || !d) {
        free(want);
        free(d);
        return fail(EXIT_NOMEM, "out of memory");
    }
    int rc = 0;
    fc_status st = fc_run_reference(g, in, np, want, nout);
    if (st) {
        print_last_error(ctx);
        rc = run_exit_code(st);
    } else {
        st = fc_compare_outputs(ctx, out, want, nout, d);
        for (int i = 0; i < nout; i++) {
            char line[512];
            printf("check out%d: max_abs_err=%.3g max_rel_err=%.3g %s\n", i, d[i].max_abs_err, d[i].max_rel_err,
                   d[i].pass ? "ok" : "FAIL");
            if (!d[i].pass) fprintf(stderr, "fusec: %s\n", fc_output_diff_format(&d[i], i, line, sizeof line));
        }
        if (st) rc = EXIT_CHECK;
    }
    for (int i = 0; i < nout; i++) fc_tensor_release(&want[i]);
    free(want);
    free(d);
    return rc;
}

/* What --run runs. */
typedef struct run_target {
    fc_graph *g;          /* a .ir file's graph: names the parameters; runs on dev unless prog is set */
    fc_program *prog;     /* a compiled program (a file's, or one compiled for --emit or -o): runs on the
                             GPU instead of dev; names the parameters when g is NULL */
    fc_device dev;        /* runs g */
    fc_graph *ref;        /* what --check runs with the reference interpreter */
    const char *name;     /* the graph's name, for messages */
    fc_weights *weights;  /* data for parameters by name (initializers, --weights) */
} run_target;

/* Weights (an ONNX model's initializers, --weights) as the inputs of the
 * parameters they name that no --inputs file gave: copies, which
 * run_inputs frees with the rest. */
static int weights_to_inputs(const fc_weights *w, fc_graph *g, fc_tensor *in, int np) {
    fc_tensor *view = calloc((size_t)(np ? np : 1), sizeof *view);
    bool *bound = calloc((size_t)(np ? np : 1), sizeof *bound);
    if (!view || !bound) {
        free(view);
        free(bound);
        return fail(EXIT_NOMEM, "out of memory");
    }
    int rc = 0;
    if (fc_weights_bind(w, g, view, np, bound, false, 0) != FC_OK) {
        print_last_error(fc_graph_context(g));
        rc = EXIT_INPUT;
    }
    for (int i = 0; i < np && !rc; i++) {
        if (!bound[i] || in[i].data) continue;
        size_t bytes = (size_t)fc_tensor_numel(&view[i]) * fc_dtype_size(view[i].dtype);
        in[i] = view[i];
        in[i].data = malloc(bytes ? bytes : 1);
        if (!in[i].data) rc = fail(EXIT_NOMEM, "out of memory");
        else memcpy(in[i].data, view[i].data, bytes);
    }
    free(view);
    free(bound);
    return rc;
}

/* An .onnx model (by its name) or an .ir file's graph into *g, and the
 * weights (initializers, then --weights) into *w. */
static int load_model(fc_context *ctx, const options *o, const char *text, size_t len, fc_graph **g, fc_weights **w) {
    size_t fl = strlen(o->file);
    bool onnx = fl > 5 && !strcmp(o->file + fl - 5, ".onnx");
    fc_status st = onnx ? fc_graph_from_onnx(ctx, o->file, o->binds, o->nbinds, NULL, g, w)
                        : fc_parse(ctx, o->file, text, len, o->graph, o->binds, o->nbinds, g);
    if (st == FC_OK) st = fc_verify(*g);
    if (st == FC_OK && o->weights_file) {
        fc_weights *extra = NULL;
        st = fc_weights_load_safetensors(ctx, o->weights_file, &extra);
        /* An .ir graph's parameters after its --inputs ones must all be named. */
        if (st == FC_OK && !onnx) {
            fc_tensor *view = calloc((size_t)fc_graph_num_params(*g) + 1, sizeof *view);
            st = view ? fc_weights_bind(extra, *g, view, fc_graph_num_params(*g), NULL, true, o->ninputs) : FC_ERR_NOMEM;
            free(view);
        }
        if (st == FC_OK && *w) {
            for (int i = 0; i < fc_weights_count(extra) && st == FC_OK; i++) {
                const char *nm = fc_weights_name(extra, i);
                /* Which data would win is not for the CLI to guess. */
                if (fc_weights_find(*w, nm)) {
                    fprintf(stderr, "%s: error: tensor '%s' is an initializer of the model\n", o->weights_file, nm);
                    fc_weights_free(extra);
                    return EXIT_INPUT;
                }
                st = fc_weights_add(*w, nm, fc_weights_tensor(extra, i));
            }
            fc_weights_free(extra);
        } else if (st == FC_OK) {
            *w = extra;
        } else {
            fc_weights_free(extra);
        }
    }
    if (st != FC_OK) {
        print_last_error(ctx);
        return st == FC_ERR_NOMEM ? EXIT_NOMEM : EXIT_INPUT;
    }
    return 0;
}

/* Build the inputs (files, then random data), run, print or save the
 * outputs, and --check and --bench them. */
static int run_inputs(const options *o, const run_target *t, run_stats *rs) {
    int np = t->g ? fc_graph_num_params(t->g) : fc_program_num_inputs(t->prog);
    int nout = t->g ? fc_graph_num_outputs(t->g) : fc_program_num_outputs(t->prog);
    if (o->ninputs > np)
        return usage_error("%d input files given, but graph '%s' has %d parameter%s", o->ninputs, t->name, np,
                           np == 1 ? "" : "s");
    fc_tensor *in = calloc((size_t)(np ? np : 1), sizeof *in);
    fc_tensor *out = calloc((size_t)(nout ? nout : 1), sizeof *out);
    param_info *params = calloc((size_t)(np ? np : 1), sizeof *params);
    int rc = 0;
    if (!in || !out || !params) {
        rc = fail(EXIT_NOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < np; i++) {
        if (t->g) param_of_graph(t->g, i, &params[i]);
        else param_of_program(t->prog, i, &params[i]);
    }
    sym_values sv = {.n = 0};
    char err[512];

    /* Files first: their shapes give the symbolic dims of random inputs. */
    for (int i = 0; i < np && i < o->ninputs; i++) {
        const char *file = o->inputs[i];
        if (!*file) continue;
        if (npy_read(file, &in[i], err, sizeof err) != 0) {
            rc = fail(EXIT_RUNTIME, "%s", err);
            goto done;
        }
        if ((rc = convert_input(&in[i], params[i].dtype, file, params[i].name)) != 0) goto done;
        if ((rc = match_shape(&params[i], &in[i], &sv, file)) != 0) goto done;
    }
    if (t->weights && t->g && (rc = weights_to_inputs(t->weights, t->g, in, np)) != 0) goto done;
    for (int i = 0; i < np; i++) {
        if ((i < o->ninputs && *o->inputs[i]) || in[i].data) continue;
        const param_info *p = &params[i];
        fc_tensor *x = &in[i];
        x->dtype = p->dtype;
        x->rank = p->rank;
        uint64_t numel = 1;
        for (int d = 0; d < x->rank; d++) {
            int64_t v = p->dims[d];
            if (p->sym[d] && !sym_lookup(&sv, p->sym[d], &v)) {
                rc = usage_error("parameter %s (%s) gets random data, but dimension '%s' is unknown: bind it "
                                 "with --bind %s=<size> or give an input file",
                                 p->name, p->type, p->sym[d], p->sym[d]);
                goto done;
            }
            x->shape[d] = v;
            if (v != 0 && numel > (uint64_t)INT64_MAX / (uint64_t)v) numel = UINT64_MAX;
            else numel *= (uint64_t)v;
        }
        size_t es = fc_dtype_size(x->dtype);
        if (numel > (uint64_t)SIZE_MAX / 2 / es) {
            rc = fail(EXIT_NOMEM, "parameter %s is too large to allocate", p->name);
            goto done;
        }
        x->data = malloc(numel ? (size_t)numel * es : 1);
        if (!x->data) {
            rc = fail(EXIT_NOMEM, "out of memory for parameter %s", p->name);
            goto done;
        }
        fill_random(x, o->seed, i);
    }

    fc_status st;
    fc_context *ctx;
    if (t->prog) {
        ctx = fc_program_context(t->prog);
        st = fc_program_run_host(t->prog, in, np, out, nout, &rs->median_ms, o->bench_iters);
    } else {
        ctx = fc_graph_context(t->g);
        st = run_on_device(t->dev, t->g, in, np, out, nout, o->bench_iters, o->sm, rs);
    }
    if (st != FC_OK) {
        print_last_error(ctx);
        rc = run_exit_code(st);
        goto done;
    }
    if (o->save_dir) {
        rc = save_outputs(o->save_dir, out, nout);
    } else if (!o->bench_iters || o->check) {
        for (int i = 0; i < nout; i++) print_output(stdout, i, &out[i]);
    }
    if (!rc && o->check) rc = check_outputs(t->ref, in, np, out, nout);
    if (!rc && o->bench_iters) printf("time: %.4f ms median of %d\n", rs->median_ms, o->bench_iters);
    if (fflush(stdout) != 0 && !rc) rc = fail(EXIT_RUNTIME, "cannot write to stdout: %s", strerror(errno));

done:
    if (in)
        for (int i = 0; i < np; i++) free(in[i].data);
    if (out)
        for (int i = 0; i < nout; i++)
            if (out[i].data) fc_tensor_release(&out[i]);
    free(in);
    free(out);
    free(params);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Compiling, emitting, the cache.                                     */
/* ------------------------------------------------------------------ */

/* The cache's one-time warning (a directory that was refused, ...), on
 * stderr; fusec calls this after every compile and cache command, and the
 * library gives the warning out once. */
static void print_cache_warning(void) {
    const char *w = fc_cache_global_take_warning();
    if (w) fprintf(stderr, "%s\n", w);
}

/* Compile g for CUDA (--emit=plan|cuda|ptx, -o). No GPU is needed: NVRTC
 * targets --arch, else the local GPU, else sm_90. */
static int compile_graph(fc_graph *g, const options *o, fc_program **out) {
    fc_compile_options co;
    fc_compile_options_default(&co);
    co.device = FC_DEVICE_CUDA;
    co.sm = o->arch_given ? o->sm : 0;
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
static int emit_program(fc_program *p, const options *o) {
    int rc = 0;
    char *texts[3] = {o->emit_cuda ? fc_program_cuda_source(p) : NULL, o->emit_ptx ? fc_program_ptx(p) : NULL,
                      o->emit_plan ? fc_program_plan_text(p) : NULL};
    bool wanted[3] = {o->emit_cuda, o->emit_ptx, o->emit_plan};
    for (int i = 0; i < 3; i++) {
        if (!wanted[i]) continue;
        if (!texts[i]) {
            print_last_error(fc_program_context(p));
            rc = EXIT_RUNTIME;
            break;
        }
        fputs(texts[i], stdout);
    }
    for (int i = 0; i < 3; i++) fc_free(texts[i]);
    if (!rc && fflush(stdout) != 0) rc = fail(EXIT_RUNTIME, "cannot write to stdout: %s", strerror(errno));
    return rc;
}

/* The graph a compiled program file carries (the text fc_compile was
 * given, its shapes bound), for --emit=ir and --check. */
static int parse_embedded_graph(fc_context *ctx, fc_program *prog, const char *file, fc_graph **g) {
    const char *graph_text = fc_program_graph_text(prog);
    if (!graph_text || !*graph_text)
        return fail(EXIT_UNSUPPORTED, "%s carries no graph text, which --emit=ir and --check need", file);
    char name[4200];
    snprintf(name, sizeof name, "%s (embedded graph)", file);
    fc_status st = fc_parse(ctx, name, graph_text, strlen(graph_text), NULL, NULL, 0, g);
    if (st == FC_OK) st = fc_verify(*g);
    if (st != FC_OK) {
        print_last_error(ctx);
        return st == FC_ERR_NOMEM ? EXIT_NOMEM : EXIT_INPUT;
    }
    return 0;
}

/* The first option given that works on a FILE, or NULL. */
static const char *file_option(const options *o) {
    return o->graph ? "--graph" : o->nbinds ? "--bind" : o->emit_ir || o->emit_plan || o->emit_cuda || o->emit_ptx
           ? "--emit" : o->run ? "--run" : o->output ? "-o" : o->arch_given ? "--arch" : o->time ? "--time"
           : o->check ? "--check" : o->bench_iters ? "--bench" : o->device_given ? "--device"
           : o->inputs_given ? "--inputs" : o->seed_given ? "--seed" : o->save_dir ? "--save-outputs" : NULL;
}

/* --cache-clear, then --cache-info [--verify]. */
static int cache_commands(const options *o) {
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
        char *text = fc_cache_clear_text(ctx);
        if (!text) {
            print_last_error(ctx);
            rc = EXIT_RUNTIME;
            goto done;
        }
        fputs(text, stdout);
        fc_free(text);
    }
    if (o->cache_info) {
        size_t nbad = 0;
        char *text = fc_cache_info_text(ctx, o->verify, &nbad);
        if (!text) {
            print_last_error(ctx);
            rc = EXIT_RUNTIME;
            goto done;
        }
        fputs(text, stdout);
        fc_free(text);
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

/* ------------------------------------------------------------------ */
/* main: the pipeline.                                                 */
/* ------------------------------------------------------------------ */

/* Read a whole file; NULL with errno set on failure. */
static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        char *nb = cap < SIZE_MAX / 2 ? realloc(buf, cap *= 2) : NULL;
        if (!nb) {
            free(buf);
            buf = NULL;
            errno = ENOMEM;
        }
        buf = nb;
    }
    if (buf && ferror(f)) {
        int e = errno;
        free(buf);
        buf = NULL;
        errno = e ? e : EIO;
    }
    fclose(f);
    *len = n;
    return buf;
}

/* True when a regular file starts as an ELF file does. .ir text never
 * does, so such a file is loaded as a compiled program even when it is
 * damaged, and the load says what is wrong with it. (Not a pipe: reading
 * would take bytes away from the parse.) */
static bool starts_as_elf(const char *path) {
    unsigned char magic[4] = {0};
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return false;
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    size_t n = fread(magic, 1, sizeof magic, f);
    fclose(f);
    return n == 4 && memcmp(magic, "\x7f" "ELF", 4) == 0;
}

/* Which device --run uses for a .ir file; NULL after a usage error
 * (printed, *rc set). */
static bool choose_device(const options *o, fc_device *dev, int *rc) {
    bool from_env = false;
    const char *name = o->device_given ? o->device : fc_device_default_name(&from_env);
    if (!fc_device_from_name(name, dev)) {
        fc_device all[16];
        int n = fc_device_list(all, 16);
        char known[256] = "";
        for (int i = 0; i < n && i < 16; i++)
            snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "",
                     fc_device_name(all[i]));
        *rc = usage_error("unknown device '%s'%s (known: %s)", name, from_env ? " in FUSEC_DEVICE" : "", known);
        return false;
    }
    /* The CPU backend exists only in builds with LLVM; a missing GPU is a
     * run-time failure instead (exit 3), since the build supports one. */
    if (!fc_device_built(*dev)) {
        *rc = usage_error("device '%s' is not available in this build", name);
        return false;
    }
    return true;
}

static int run_cli(const options *o) {
    if (!o->file) return usage_error("missing input file");
    /* A compiled program file (fusec -o) is loaded instead of parsed. */
    bool is_program = fc_program_is_file(o->file) || starts_as_elf(o->file);
    fc_device dev = FC_DEVICE_CUDA;
    int rc = 0;
    if (is_program) {
        const char *na = o->nbinds ? "--bind" : o->graph ? "--graph" : o->arch_given ? "--arch" : NULL;
        if (na)
            return usage_error("%s does not apply to a compiled program file: '%s' has its graph, shapes and "
                               "target compiled in", na, o->file);
        if (o->device_given && strcmp(o->device, "cuda") != 0)
            return usage_error("a compiled program file runs on the cuda device only, not '%s'", o->device);
        dev = FC_DEVICE_CUDA;
    } else if (o->run) {
        if (!choose_device(o, &dev, &rc)) return rc;
    }
    if (!o->run) {
        const char *needs_run = o->inputs_given ? "--inputs" : o->seed_given ? "--seed"
                              : o->save_dir ? "--save-outputs" : o->device_given ? "--device"
                              : o->check ? "--check" : o->bench_iters ? "--bench" : NULL;
        if (needs_run) return usage_error("%s needs --run", needs_run);
    }
    bool compile_now = !is_program && (o->emit_plan || o->emit_cuda || o->emit_ptx || o->output);
    bool compiles = is_program || compile_now || (o->run && dev == FC_DEVICE_CUDA);
    if (o->time && !compiles)
        return usage_error("--time needs a compile: -o, --emit=plan|cuda|ptx, --run on the cuda device, or a "
                           "compiled program file");
    if (o->arch_given && !compiles)
        return usage_error("--arch needs a compile: -o, --emit=plan|cuda|ptx or --run on the cuda device");

    fc_context *ctx = fc_context_new();
    if (!ctx) return fail(EXIT_NOMEM, "out of memory");
    fc_graph *g = NULL;       /* the .ir file's graph, or the one a program file carries */
    fc_program *prog = NULL;  /* the program file's, or the one compiled for --emit and -o */
    fc_weights *weights = NULL; /* an .onnx model's initializers and --weights */
    char *text = NULL;
    double parse_ms = 0, save_ms = -1; /* save_ms >= 0: -o wrote the file */
    run_stats rs;
    memset(&rs, 0, sizeof rs);
    fc_status st;

    if (is_program) {
        st = fc_program_load_file(ctx, o->file, &prog);
        if (st != FC_OK) {
            print_last_error(ctx);
            rc = run_exit_code(st);
            goto done;
        }
        if ((o->emit_ir || o->check) && (rc = parse_embedded_graph(ctx, prog, o->file, &g)) != 0) goto done;
    } else {
        double t0 = now_ms();
        size_t len = 0;
        text = read_file(o->file, &len);
        if (!text) {
            rc = fail(EXIT_INPUT, "cannot read '%s': %s", o->file, strerror(errno));
            goto done;
        }
        rc = load_model(ctx, o, text, len, &g, &weights);
        parse_ms = now_ms() - t0;
        if (rc) goto done;
    }

    if (o->emit_ir) {
        char *ir = fc_print(g);
        if (!ir) {
            print_last_error(ctx);
            rc = EXIT_RUNTIME;
            goto done;
        }
        fputs(ir, stdout);
        fc_free(ir);
        if (fflush(stdout) != 0) {
            rc = fail(EXIT_RUNTIME, "cannot write to stdout: %s", strerror(errno));
            goto done;
        }
    }
    if (compile_now && (rc = compile_graph(g, o, &prog)) != 0) goto done;
    if ((o->emit_plan || o->emit_cuda || o->emit_ptx) && (rc = emit_program(prog, o)) != 0) goto done;
    if (o->output) {
        double t0 = now_ms();
        st = fc_program_save_file(prog, o->output);
        if (st != FC_OK) {
            print_last_error(ctx);
            rc = run_exit_code(st);
            goto done;
        }
        save_ms = now_ms() - t0;
    }
    if (o->run) {
        const char *name = is_program ? fc_program_name(prog) : fc_graph_name(g);
        run_target t = {
            .g = is_program ? NULL : g,
            .prog = is_program || dev == FC_DEVICE_CUDA ? prog : NULL, /* compiled once, for --emit or -o */
            .dev = dev,
            .ref = g,
            .name = name ? name : "?",
            .weights = weights,
        };
        rc = run_inputs(o, &t, &rs);
        print_cache_warning();
    }

done:
    if (o->time && (prog || rs.compiled)) {
        fc_compile_times ct;
        if (prog) fc_program_times(prog, &ct);
        else ct = rs.times;
        ct.parse_ms = parse_ms;
        char *s = fc_compile_times_text(&ct);
        if (s) fputs(s, stderr);
        fc_free(s);
        if (save_ms >= 0)
            fprintf(stderr, "time: %.3f ms more to write %s (-o: NVRTC once more, with the plan embedded)\n", save_ms,
                    o->output);
    }
    fc_program_free(prog);
    fc_graph_free(g);
    fc_weights_free(weights);
    fc_context_free(ctx);
    free(text);
    return rc;
}

int main(int argc, char **argv) {
    options o = {0};
    int rc = parse_args(argc, argv, &o);
    if (rc == 0) {
        fc_status st;
        if (o.help) {
            print_help();
        } else if (o.version) {
            printf("fusec %s\n", FUSEC_VERSION_STRING);
        } else if (o.list_devices) {
            fc_device all[16];
            int n = fc_device_list(all, 16);
            for (int i = 0; i < n && i < 16; i++)
                if (fc_device_available(all[i])) printf("%s\n", fc_device_name(all[i]));
        } else if (o.verify && !o.cache_info) {
            rc = usage_error("--verify needs --cache-info");
        } else if (o.cache_dir && (st = fc_cache_configure(o.cache_dir)) != FC_OK) {
            /* Before anything opens the cache, so only a copy can fail. */
            rc = fail(run_exit_code(st), "cannot use --cache-dir '%s'", o.cache_dir);
        } else if (o.cache_info || o.cache_clear) {
            rc = cache_commands(&o);
        } else {
            /* The library reads the switch from the environment, where a
             * user can set it for any program too. */
            if (o.no_graphs) setenv("FUSEC_CUDA_GRAPHS", "0", 1);
            rc = run_cli(&o);
        }
    }
    print_cache_warning();
    fc_cache_global_close();        /* flushes the cache's counters */
    (void)fc_cache_configure(NULL); /* frees the copy of --cache-dir */
    options_free(&o);
    return rc;
}
