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

/* Print a usage error (one line and a hint) and return EXIT_USAGE. */
int usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("fusec: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\ntry 'fusec --help'\n", stderr);
    va_end(ap);
    return EXIT_USAGE;
}

/* An error that is not about usage: one line on stderr; returns code. */
int fail(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("fusec: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return code;
}

/* The context's diagnostic, verbatim, ended by one newline. */
void print_last_error(const fc_context *ctx) {
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
    OPTION("--precision", NULL, flag_precision),
    OPTION("--numerics", NULL, flag_numerics),
    SWITCH("--time", NULL, time),
    OPTION("--dump-after", NULL, flag_dump_after),
    SWITCH("--no-graphs", NULL, no_graphs),
    PATH("--cache-dir", NULL, cache_dir, "a directory"),
    SWITCH("--cache-info", NULL, cache_info),
    SWITCH("--verify", NULL, verify),
    SWITCH("--cache-clear", NULL, cache_clear),
    SWITCH("--devices", NULL, list_devices),
    SWITCH("--help", "-h", help),
    SWITCH("--help-env", NULL, help_env),
    SWITCH("--version", NULL, version),
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
    return 0;
}

/* ------------------------------------------------------------------ */
/* Help.                                                               */
/* ------------------------------------------------------------------ */

void print_help(void) {
    fputs(
        "Usage:\n"
        "  fusec FILE.ir [--graph NAME] [--bind SYM=INT,...] --emit=ir|plan|cuda|ptx\n"
        "  fusec FILE.ir --run [--device=NAME] [--graph NAME] [--bind SYM=INT,...]\n"
        "                [--inputs A.npy,B.npy,...] [--seed N] [--save-outputs DIR]\n"
        "                [--check] [--bench N]\n"
        "  fusec FILE.ir -o OUT.cubin [--arch sm_90] [--precision P] [--graph NAME]\n"
        "                [--bind SYM=INT,...]\n"
        "  fusec OUT.cubin --run [--inputs ...] [--seed N] [--check] | --emit=plan\n"
        "  fusec --cache-info [--verify] | --cache-clear\n"
        "  fusec --devices | --help | --help-env | --version\n"
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
        "  --numerics=fast|eager how kernels round (docs/NUMERICS.md). fast, the default:\n"
        "                        a value inside a fused kernel stays in f32 (f64 for\n"
        "                        f64) and is rounded to its dtype where it is stored;\n"
        "                        eager: every value is rounded to its dtype, as eager\n"
        "                        PyTorch rounds. For --emit, -o and --run (cuda, cpu)\n"
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
        "  --precision=P         compute in P instead of the graph's own dtypes, as\n"
        "                        torch.autocast does (docs/PRECISION.md): bf16 or f16\n"
        "                        run matmuls and attention on tensor cores with f32\n"
        "                        accumulation, and keep reductions, softmax, norms, exp,\n"
        "                        log and pow in f32; f32 widens every 16-bit value; tf32\n"
        "                        keeps the dtypes and runs f32 GEMMs on TF32 tensor\n"
        "                        cores (the CPU backend computes f32). Inputs and outputs\n"
        "                        keep their declared dtypes. Applies to -o,\n"
        "                        --emit=plan|cuda|ptx and --run on cuda or cpu (not to\n"
        "                        ref, the float64 oracle, nor to a compiled program\n"
        "                        file, whose precision is compiled in).\n"
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
        "  --check               also run the reference interpreter on the same inputs, in\n"
        "                        the graph's dtypes and exactly (float64), and compare\n"
        "                        every output: one line per output,\n"
        "                          check out0: max_abs_err=X max_rel_err=Y ok|FAIL (error E,\n"
        "                          in the dtypes R)\n"
        "                        exit 4 when an output's error is well beyond the error\n"
        "                        of rounding to its dtypes (docs/RUNTIME-PROGRAM.md)\n"
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
        "  valid with --run, but that --inputs also gives --emit=plan|cuda|ptx the\n"
        "  sizes of a graph's symbolic dims.\n"
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
        "  --help-env            list the environment variables fusec reads, with their\n"
        "                        defaults and the values set now, and exit\n"
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
        "  4  --check: an output's error is beyond what rounding to its dtypes explains\n"
        "  5  out of memory\n"
        "  6  the graph is valid but the device does not support it\n"
        "\n"
        "Environment:\n"
        "  fusec reads FUSEC_DEVICE, FUSEC_CACHE, FUSEC_CACHE_DIR and a few more;\n"
        "  --help-env lists them all, with their defaults and the values set now\n"
        "  (docs/CLI.md, \"Environment\").\n",
        stdout);
}

