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
 * (`flags` in options.c): to add one, write a row, and a handler for a value that
 * needs more checking than a path's. Devices are the library's backends
 * (fc_device_list): a backend added there is a device here.
 *
 * Only the public header (fusec.h) and the tool's own headers (cli.h,
 * npy.h) are included: what the tool needs of the library is public API.
 * The tool's files are listed in cli.h.
 *
 * Exit codes: 0 success, 1 input error, 2 usage error, 3 failure while
 * running, 4 --check failed, 5 out of memory, 6 unsupported (the fc_status
 * values, and 4).
 */
#include "cli.h"

#include <time.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

/* ------------------------------------------------------------------ */
/* Clock.                                                              */
/* ------------------------------------------------------------------ */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* ------------------------------------------------------------------ */
/* main: the pipeline.                                                 */
/* ------------------------------------------------------------------ */

/* An .onnx model (by its name) or an .ir file's graph into *g, and the
 * weights (initializers, then --weights) into *w. */
/* A --bind that no dim of the graph names is a mistake (a typo, the wrong
 * graph): a usage error that lists the graph's symbols. */
static int check_binds_used(const options *o, fc_graph *g) {
    for (int i = 0; i < o->nbinds; i++) {
        if (fc_graph_bind_used(g, o->binds[i].name)) continue;
        char syms[512] = "";
        for (int k = 0; k < o->nbinds; k++)
            if (fc_graph_bind_used(g, o->binds[k].name))
                snprintf(syms + strlen(syms), sizeof syms - strlen(syms), "%s%s", *syms ? ", " : "", o->binds[k].name);
        /* The unbound symbols, each once (a bound one is a static size now). */
        const char *seen[64];
        int nseen = 0;
        for (int p = 0; p < fc_graph_num_params(g); p++) {
            const fc_value *v = fc_graph_param(g, p);
            for (int d = 0; d < fc_value_rank(v); d++) {
                const char *s = fc_sym_name(g, fc_value_dim(v, d));
                bool listed = false;
                for (int k = 0; k < nseen && s; k++) listed |= !strcmp(seen[k], s);
                if (!s || listed || nseen == 64) continue;
                seen[nseen++] = s;
                snprintf(syms + strlen(syms), sizeof syms - strlen(syms), "%s%s", *syms ? ", " : "", s);
            }
        }
        return usage_error("--bind %s: graph '%s' has no symbol '%s' (its symbols: %s)", o->binds[i].name,
                           fc_graph_name(g), o->binds[i].name, *syms ? syms : "none");
    }
    return 0;
}

static int load_model(fc_context *ctx, const options *o, fc_graph **g, fc_weights **w) {
    int rc;
    size_t fl = strlen(o->file);
    bool onnx = fl > 5 && !strcmp(o->file + fl - 5, ".onnx");
    fc_status st = onnx ? fc_graph_from_onnx(ctx, o->file, o->binds, o->nbinds, NULL, g, w)
                        : fc_parse_file(ctx, o->file, o->graph, o->binds, o->nbinds, g);
    if (st == FC_OK) st = fc_verify(*g);
    if (st == FC_OK && (rc = check_binds_used(o, *g)) != 0) return rc;
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
                    fprintf(stderr, "fusec: %s: error: tensor '%s' is an initializer of the model\n", o->weights_file, nm);
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

/* Does p have a symbolic dim (a dynamic program)? Its signature says. */
static bool program_is_dynamic(const fc_program *p) {
    for (int i = 0; i < fc_program_num_inputs(p); i++) {
        fc_tensor t;
        if (fc_program_input(p, i, &t, NULL) != FC_OK) continue;
        for (int d = 0; d < t.rank; d++)
            if (t.shape[d] < 0) return true;
    }
    return false;
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
        const char *na = o->graph ? "--graph" : o->arch_given ? "--arch"
                         : o->precision_given ? "--precision" : NULL;
        if (!na && o->dump_after) na = "--dump-after";
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
        /* --inputs also gives a compile's symbolic dims (--emit=plan|cuda|ptx). */
        bool emits = o->emit_plan || o->emit_cuda || o->emit_ptx || o->emit_dot;
        const char *needs_run = o->inputs_given && !emits ? "--inputs" : o->seed_given ? "--seed"
                              : o->save_dir ? "--save-outputs" : o->device_given ? "--device"
                              : o->check ? "--check" : o->bench_iters ? "--bench" : NULL;
        if (needs_run) return usage_error("%s needs --run", needs_run);
    }
    if (o->dynamic && (!o->output || is_program))
        return usage_error("--dynamic applies to -o of a graph (a compiled program file is dynamic or not already)");
    bool compile_now = !is_program && (o->emit_plan || o->emit_cuda || o->emit_ptx || o->emit_dot || o->output);
    bool compiles = is_program || compile_now || (o->run && dev == FC_DEVICE_CUDA);
    if (o->time && !compiles)
        return usage_error("--time needs a compile: -o, --emit=plan|cuda|ptx, --run on the cuda device, or a "
                           "compiled program file");
    if (o->arch_given && !compiles)
        return usage_error("--arch needs a compile: -o, --emit=plan|cuda|ptx or --run on the cuda device");
    if (o->precision_given && !is_program && !compile_now && !o->run)
        return usage_error("--precision needs a compile: -o, --emit=plan|cuda|ptx or --run");
    if (o->precision_given && !is_program && !compile_now && dev == FC_DEVICE_REF)
        return usage_error("--precision does not apply to the ref device (the float64 oracle)");

    fc_context *ctx = fc_context_new();
    if (!ctx) return fail(EXIT_NOMEM, "out of memory");
    fc_graph *g = NULL;       /* the .ir file's graph, or the one a program file carries */
    fc_program *prog = NULL;  /* the program file's, or the one compiled for --emit and -o */
    fc_weights *weights = NULL; /* an .onnx model's initializers and --weights */
    double parse_ms = 0, save_ms = -1; /* save_ms >= 0: -o wrote the file */
    bool dynamic_file = false;         /* a program file of a dynamic program */
    run_stats rs;
    memset(&rs, 0, sizeof rs);
    fc_status st;

    /* -o's name is checked before anything is compiled: a refusal costs
     * nothing, and nothing is compiled for a file that cannot be written. */
    if (o->output && (st = fc_program_check_save_path(ctx, o->output)) != FC_OK) {
        print_last_error(ctx);
        rc = run_exit_code(st);
        goto done;
    }
    if (is_program) {
        st = fc_program_load_file(ctx, o->file, &prog);
        if (st != FC_OK) {
            print_last_error(ctx);
            rc = run_exit_code(st);
            goto done;
        }
        /* A dynamic program's graph names its symbols, which --run binds
         * from the input files' shapes. */
        dynamic_file = program_is_dynamic(prog);
        if (o->nbinds && (!dynamic_file || !o->run)) {
            rc = usage_error("--bind does not apply to a compiled program file%s: '%s' has its graph, shapes and "
                             "target compiled in", dynamic_file ? " without --run" : "", o->file);
            goto done;
        }
        /* Its graph also names the parameters' roles for random inputs. */
        bool has_text = fc_program_graph_text(prog) && *fc_program_graph_text(prog);
        if ((o->emit_ir || o->check || (o->run && (has_text || dynamic_file))) &&
            (rc = parse_embedded_graph(ctx, prog, o->file, o, &g)) != 0)
            goto done;
    } else {
        double t0 = now_ms();
        rc = load_model(ctx, o, &g, &weights);
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
    /* Unbound symbols of a compile come from the input files' shapes. */
    if ((compile_now || o->dump_after) && o->inputs_given) {
        fc_graph *bound = NULL;
        rc = bind_from_inputs(o, g, &bound);
        if (bound != g) {
            fc_graph_free(g);
            g = bound;
        }
        if (rc) goto done;
    }
    if (o->dump_after && (rc = dump_passes(g, o, o->run ? dev : FC_DEVICE_CUDA)) != 0) goto done;
    if (compile_now && (rc = compile_graph(g, o, &prog)) != 0) goto done;
    if ((o->emit_plan || o->emit_cuda || o->emit_ptx || o->emit_dot) && (rc = emit_program(prog, o)) != 0) goto done;
    if (o->output) {
        double t0 = now_ms();
        /* An imported model's initializers go into the file with it. */
        st = weights ? fc_program_save_file_weights(prog, o->output, weights) : fc_program_save_file(prog, o->output);
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
            .g = is_program && !dynamic_file ? NULL : g,
            .prog = is_program || dev == FC_DEVICE_CUDA ? prog : NULL, /* compiled once, for --emit or -o */
            .dev = dev,
            .ref = g,
            .name = name ? name : "?",
            .weights = weights,
            .parse_ms = parse_ms,
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
            fprintf(stderr, "time: %.3f ms more to write %s (-o: the plan and the kernels' cubins, no compile)\n", save_ms,
                    o->output);
    }
    fc_program_free(prog);
    fc_graph_free(g);
    fc_weights_free(weights);
    fc_context_free(ctx);
    return rc;
}

int main(int argc, char **argv) {
    options o = {0};
    int rc = parse_args(argc, argv, &o);
    if (rc == 0) {
        fc_status st;
        if (o.help) {
            print_help();
        } else if (o.help_env) {
            char *text = fc_env_help();
            if (!text) rc = EXIT_NOMEM;
            else fputs(text, stdout);
            fc_free(text);
        } else if (o.help_man) {
            /* --help-env without the values set now: the page is the same on every machine. */
            char *text = fc_env_help();
            print_man(text);
            fc_free(text);
        } else if (o.version) {
            printf("fusec %s\n", FUSEC_VERSION_STRING);
        } else if (o.list_devices) {
            fc_device all[16];
            int n = fc_device_list(all, 16);
            /* The usable ones on stdout, one a line; why another is not, on stderr. */
            for (int i = 0; i < n && i < 16; i++) {
                if (fc_device_available(all[i])) printf("%s\n", fc_device_name(all[i]));
                else if (!fc_device_built(all[i]))
                    fprintf(stderr, "fusec: device %s: not in this build\n", fc_device_name(all[i]));
                else
                    fprintf(stderr, "fusec: device %s: in this build, but not usable on this machine%s\n",
                            fc_device_name(all[i]), all[i] == FC_DEVICE_CUDA ? " (no CUDA driver or GPU)" : "");
            }
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
