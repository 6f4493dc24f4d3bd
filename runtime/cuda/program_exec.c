/* program_exec.c - freeing a program, its accessors, its plan text, source and PTX, and the CUDA backend's table (runtime/backend.h). Its graph and plan for introspection are program_plan.c's. */
#include "runtime/cuda/nccl.h"
#include "runtime/cuda/program_impl.h"

/* ------------------------------------------------------------------ */
/* Freeing.                                                            */
/* ------------------------------------------------------------------ */

/* A dynamic program: its dynamic state (variant, instances,
 * specializations), then its signature and introspection. */
static void dynamic_free(fc_prog_dynamic *dp) {
    fc_dynamic_free(dp->dyn);
    fc_program_desc_release(&dp->d);
    fc_prog_introspection_free(&dp->g, &dp->plan);
    fc_ctx_freemem(dp->ctx, dp);
}

static void cuda_free(fc_program *p) {
    if (!p) return;
    fc_prog_dynamic *dp = fc_prog_dyn_of(p);
    if (dp) {
        dynamic_free(dp);
        return;
    }
    fc_prog_instance *in = fc_prog_instance_of(p);
    fc_prog_variant *vr = fc_prog_variant_of(p);
    free(p->nvtx_names);
    p->nvtx_names = NULL;
    if (in) {
        /* The device, module, kernels, cuBLASLt handle and arena are the
         * variant's. No synchronize: an instance owns no device memory, and
         * a graph still running is freed by the driver when it completes
         * (cuGraphExecDestroy). */
        fc_replay_free(p->replay, p->dev);
        if (p->blas)
            for (int i = 0; i < p->d.src.nlaunches; i++)
                if (fc_program_gemm(&p->d, i)) fc_cublaslt_forget(p->blas, &p->d.gemm[i]);
        p->replay = NULL;
        p->func = NULL;
        p->blas = NULL;
        p->arena = 0;
        p->dev = NULL;
        memset(&p->args, 0, sizeof p->args); /* the variant's scratch */
    }
    if (in) {
        /* Everything is in p's own allocation, or the variant's. */
        fc_ctx_freemem(p->ctx, p);
        return;
    }
    if (p->dev) {
        const double t0 = fc_now_ms();
        fc_replay_free(p->replay, p->dev);
        if (vr) {
            fc_replay_free(vr->shared_replay, p->dev);
            fc_frame_free(vr->frame, p->dev);
        }
        spec_step(p, "freeing: graph", t0);
        /* Teardown errors are ignored, and kept off the context: nothing can
         * be done about them, and they must not hide an earlier error. The
         * synchronize makes sure no queued launch still uses the arena. */
        const fc_cuda_driver *cu = p->dev->cu;
        double t = fc_now_ms();
        (void)cu->CtxSetCurrent(p->dev->cuctx);
        (void)cu->CtxSynchronize();
        spec_step(p, "freeing: synchronized", t);
        t = fc_now_ms();
        fc_cublaslt_destroy(p->blas); /* it uses the device: before it is closed */
        fc_cudnn_destroy(p->dnn);
        spec_step(p, "freeing: cuBLASLt handle", t);
        t = fc_now_ms();
        if (p->arena_region.base) fc_cuda_region_free(p->dev, &p->arena_region);
        else if (p->arena) (void)cu->MemFree(p->arena);
        spec_step(p, "freeing: arena", t);
        t = fc_now_ms();
        for (int k = 0; p->kmodules && k < p->d.src.nkernels; k++)
            if (p->kmodules[k]) (void)cu->ModuleUnload(p->kmodules[k]);
        spec_step(p, "freeing: module unloaded", t);
        t = fc_now_ms();
        fc_cuda_device_close(p->dev);
        spec_step(p, "freeing: device closed", t);
    }
    fc_ctx_freemem(p->ctx, p->func);
    fc_ctx_freemem(p->ctx, p->loaded_from);
    fc_launch_params_free(p->ctx, &p->args);
    if (vr) fc_variant_desc_release(p->ctx, &vr->lowered, p->d.src.nlaunches);
    fc_weights_free(p->weights);
    for (int k = 0; p->kcubins && k < p->d.src.nkernels; k++) fc_bytes_free(&p->kcubins[k]);
    fc_ctx_freemem(p->ctx, p->kcubins);
    fc_ctx_freemem(p->ctx, p->kmodules);
    fc_program_desc_release(&p->d);
    fc_prog_introspection_free(&p->g, &p->plan);
    fc_ctx_freemem(p->ctx, p);
}

/* ------------------------------------------------------------------ */
/* Accessors.                                                          */
/* ------------------------------------------------------------------ */

/* The description a program shows: an executable's, or a dynamic
 * program's signature (no launches). */
static const fc_program_desc *desc_of(const fc_program *p) {
    const fc_prog_dynamic *dp = fc_prog_dyn_of(p);
    return dp ? &dp->d : &p->d;
}

int fc_program_num_launches(const fc_program *p) { return p ? desc_of(p)->src.nlaunches : 0; }
const fc_launch *fc_program_launch(const fc_program *p, int i) {
    const fc_program_desc *d = p ? desc_of(p) : NULL;
    return d && i >= 0 && i < d->src.nlaunches ? &d->src.launches[i] : NULL;
}
int fc_program_sm(const fc_program *p) { return p ? desc_of(p)->sm : 0; }
const fc_bytes *fc_program_cubin(const fc_program *p) {
    static const fc_bytes none = {0}; /* a dynamic program's: its executables have the cubins */
    const fc_program *x = fc_prog_exec_of(p);
    if (x && x->kcubins && x->d.src.nkernels > 0) return &x->kcubins[0];
    return p ? &none : NULL;
}
void fc_program_set_weights(fc_program *p, fc_weights *w) {
    fc_program *x = fc_prog_exec_of(p);
    if (!x) {
        fc_weights_free(w);
        return;
    }
    fc_weights_free(x->weights);
    x->weights = w;
}
const fc_weights *fc_program_weights(const fc_program *p) {
    const fc_program *x = p && fc_program_device_of(p) == FC_DEVICE_CUDA ? fc_prog_exec_of(p) : NULL;
    return x ? x->weights : NULL;
}
int fc_program_nkernels(const fc_program *p) {
    const fc_program *x = fc_prog_exec_of(p);
    return x ? x->d.src.nkernels : 0;
}
const fc_bytes *fc_program_kernel_cubin(const fc_program *p, int k) {
    const fc_program *x = fc_prog_exec_of(p);
    return x && x->kcubins && k >= 0 && k < x->d.src.nkernels ? &x->kcubins[k] : NULL;
}
int fc_program_programmatic_edges(const fc_program *p) {
    const fc_program *x = fc_prog_exec_of(p);
    return x && x->replay ? fc_replay_programmatic_edges(x->replay) : 0;
}
fc_program_origin fc_program_origin_of(const fc_program *p) {
    const fc_prog_dynamic *dp = fc_prog_dyn_of(p);
    return dp ? dp->times.origin : p ? p->times.origin : FC_PROGRAM_COMPILED;
}

static void count_launches(const fc_program_desc *d, int *kernels, int *library, int *aliases) {
    int k = 0, l = 0, a = 0;
    for (int i = 0; d && i < d->src.nlaunches; i++) {
        switch (d->src.launches[i].kind) {
        case FC_LAUNCH_KERNEL: k++; break;
        case FC_LAUNCH_LIBRARY: l++; break;
        case FC_LAUNCH_ALIAS: a++; break;
        }
    }
    if (kernels) *kernels = k;
    if (library) *library = l;
    if (aliases) *aliases = a;
}

void fc_program_count_launches(const fc_program *p, int *kernels, int *library, int *aliases) {
    count_launches(p ? desc_of(p) : NULL, kernels, library, aliases);
}

int fc_program_gemm_queries(const fc_program *p) { return p ? fc_cublaslt_heuristic_queries(fc_program_blas(p)) : 0; }
int fc_program_gemm_disk_hits(const fc_program *p) { return p ? fc_cublaslt_disk_hits(fc_program_blas(p)) : 0; }

fc_compile_times *fc_program_times_ref(fc_program *p) {
    fc_prog_dynamic *dp = fc_prog_dyn_of(p);
    return dp ? &dp->times : p ? &p->times : NULL;
}
static fc_context *cuda_context(const fc_program *p) {
    const fc_prog_dynamic *dp = fc_prog_dyn_of(p);
    return dp ? dp->ctx : p->ctx;
}

static const fc_program_desc *cuda_desc(const fc_program *p) { return desc_of(p); }

static void cuda_times(const fc_program *p, fc_compile_times *out) { *out = *fc_program_times_ref((fc_program *)p); }

/* ------------------------------------------------------------------ */
/* Text: the plan, the source, the PTX.                                */
/* ------------------------------------------------------------------ */

/* What a program's plan, source and PTX show: a dynamic program shows its
 * dynamic variant (kernels with the dims as arguments), when it has one. */
static const fc_program *shown(const fc_program *p) {
    const fc_prog_dynamic *dp = fc_prog_dyn_of(p);
    const fc_program *v = dp && dp->dyn ? fc_dynamic_variant(dp->dyn) : NULL;
    return v ? v : p;
}

static char *cuda_plan_text(fc_program *p) {
    if (!p) return NULL;
    p = (fc_program *)shown(p);
    fc_context *ctx = cuda_context(p);
    const fc_program_desc *d = desc_of(p);
    fc_strbuf t = {.ctx = ctx};
    for (int i = 0; i < d->src.nlaunches; i++) {
        const fc_launch *l = &d->src.launches[i];
        switch (l->kind) {
        case FC_LAUNCH_KERNEL:
            fc_strbuf_printf(&t, "launch %d: kernel %s grid=(%u,%u,%u) block=(%u,%u,%u) ops: %s%s\n", i, l->name,
                        l->grid[0], l->grid[1], l->grid[2], l->block[0], l->block[1], l->block[2], l->summary,
                        l->loadtime ? " (at weight load)" : "");
            break;
        case FC_LAUNCH_LIBRARY:
            fc_strbuf_printf(&t, "launch %d: library %s ops: %s\n", i, l->name[0] ? l->name : "matmul", l->summary);
            break;
        case FC_LAUNCH_ALIAS:
            fc_strbuf_printf(&t, "launch %d: alias (a view, nothing runs) ops: %s\n", i, l->summary);
            break;
        }
    }
    int kernels, library;
    count_launches(d, &kernels, &library, NULL);
    int at_load = 0;
    for (int i = 0; i < d->src.nlaunches; i++) /* aliases at load (reshaped weights) run nothing */
        at_load += d->src.launches[i].loadtime && d->src.launches[i].kind == FC_LAUNCH_KERNEL;
    if (at_load)
        fc_strbuf_printf(&t, "at weight load: %d kernels (run when the weights are loaded, not at every run)\n",
                         at_load);
    if (p->conv_note[0]) fc_strbuf_printf(&t, "%s\n", p->conv_note);
    fc_strbuf_printf(&t, "arena: %lld bytes peak (%lld bytes if every intermediate had its own buffer)\n",
                (long long)d->arena_bytes, (long long)d->intermediate_bytes);
    /* The last line, exactly: tests and scripts parse it. */
    fc_strbuf_printf(&t, "total: %d kernels, %d library calls, %lld bytes of intermediates\n", kernels, library,
                (long long)d->intermediate_bytes);
    if (t.oom || !t.buf) {
        fc_ctx_freemem(ctx, t.buf);
        fc_set_error(ctx, FC_ERR_NOMEM, "out of memory (plan text)");
        return NULL;
    }
    return t.buf;
}

/* One line per step; the "why" column says what a zero means. */
char *fc_compile_times_text(const fc_compile_times *t) {
    if (!t) return NULL;
    fc_strbuf s = {0};
    const char *how = "";
    switch (t->origin) {
    case FC_PROGRAM_COMPILED: how = "compiled: passes, codegen and NVRTC ran"; break;
    case FC_PROGRAM_KERNEL_CACHE: how = "passes and codegen ran; the cubin came from the cache"; break;
    case FC_PROGRAM_PROGRAM_CACHE: how = "warm start: the whole program came from the cache"; break;
    case FC_PROGRAM_FILE: how = "loaded from a compiled program file"; break;
    }
    bool cached = t->origin == FC_PROGRAM_PROGRAM_CACHE || t->origin == FC_PROGRAM_FILE;
    /* What fc_compile spent outside the named steps: the clone, the
     * graph's text, building the program. */
    double other = t->compile_ms - t->passes_ms - t->codegen_ms - t->nvrtc_ms - t->cache_ms;
    if (other < 0) other = 0;
    double total = t->parse_ms + t->compile_ms + t->device_ms + t->load_ms;
    fc_strbuf_printf(&s, "time: %.3f ms to %s (%s)\n", total, t->loaded ? "the first run" : "a compiled program", how);
    fc_strbuf_printf(&s, "  parse    %10.3f ms\n", t->parse_ms);
    fc_strbuf_printf(&s, "  passes   %10.3f ms%s\n", t->passes_ms, cached ? "  (skipped)" : "");
    fc_strbuf_printf(&s, "  codegen  %10.3f ms%s\n", t->codegen_ms, cached ? "  (skipped)" : "");
    fc_strbuf_printf(&s, "  nvrtc    %10.3f ms%s\n", t->nvrtc_ms,
                t->origin == FC_PROGRAM_COMPILED ? "" : "  (skipped: cubin from the cache or the file)");
    fc_strbuf_printf(&s, "  cache    %10.3f ms\n", t->cache_ms);
    fc_strbuf_printf(&s, "  other    %10.3f ms\n", other);
    fc_strbuf_printf(&s, "  device   %10.3f ms%s\n", t->device_ms, t->loaded ? "" : "  (no run yet)");
    fc_strbuf_printf(&s, "  load     %10.3f ms%s\n", t->load_ms, t->loaded ? "" : "  (no run yet)");
    if (s.oom || !s.buf) {
        free(s.buf);
        return NULL;
    }
    return s.buf;
}

static char *cuda_source(fc_program *p) {
    if (!p) return NULL;
    p = (fc_program *)shown(p);
    fc_context *ctx = cuda_context(p);
    const fc_program_desc *d = desc_of(p);
    if (!d->src.source) {
        fc_set_error(ctx, FC_ERR_UNSUPPORTED, "program %s has no CUDA source", d->graph_name);
        return NULL;
    }
    return dup_str(ctx, d->src.source);
}

static fc_status get_ptx(fc_context *ctx, fc_nvrtc_unit *unit, char *buf) {
    FC_NVRTC_CHECK(ctx, unit, nvrtcGetPTX(unit->prog, buf));
    return FC_OK;
}

/* Compile unit->source again and take the PTX; the caller destroys
 * unit->prog (each failing check already has). */
static fc_status compile_ptx(fc_context *ctx, fc_nvrtc_unit *unit, const fc_nvrtc_options *opts, char **out) {
    fc_status st = fc_nvrtc_unit_compile(ctx, unit, opts->count, opts->opt);
    if (st != FC_OK) return st;
    size_t size = 0;
    FC_NVRTC_CHECK(ctx, unit, nvrtcGetPTXSize(unit->prog, &size));
    char *buf = fc_ctx_malloc(ctx, size + 1);
    if (!buf) return FC_ERR_NOMEM;
    st = get_ptx(ctx, unit, buf);
    if (st != FC_OK) {
        fc_ctx_freemem(ctx, buf);
        return st;
    }
    buf[size] = 0; /* the size counts NVRTC's terminator; this one is for safety */
    *out = buf;
    return FC_OK;
}

static char *cuda_ptx(fc_program *p) {
    if (!p) return NULL;
    p = (fc_program *)shown(p);
    /* Not kept from fc_compile: few callers want it, and NVRTC makes it
     * again in a few milliseconds with exactly the same options. */
    if (!fc_prog_exec_of(p) || !p->d.src.source) {
        const fc_program_desc *d = desc_of(p);
        fc_set_error(cuda_context(p), FC_ERR_UNSUPPORTED, "program %s has no CUDA source", d->graph_name);
        return NULL;
    }
    const char *extra[4];
    int nextra = fc_program_extra_nvrtc_options(p->d.sm, p->d.fast_math, extra);
    fc_nvrtc_options opts;
    if (fc_nvrtc_options_build(p->ctx, p->d.sm / 10, p->d.sm % 10, extra, nextra, &opts) != FC_OK) return NULL;
    char name[96];
    fc_program_unit_name(p->d.graph_name, name, sizeof name);
    fc_nvrtc_unit unit = {NULL, name, p->d.src.source};
    char *ptx = NULL;
    fc_status st = compile_ptx(p->ctx, &unit, &opts, &ptx);
    if (unit.prog) nvrtcDestroyProgram(&unit.prog);
    return st == FC_OK ? ptx : NULL;
}

/* ------------------------------------------------------------------ */
/* The CUDA backend's table (runtime/backend.h).                       */
/* ------------------------------------------------------------------ */

static char *cuda_describe(fc_program *p, fc_describe_kind what) {
    switch (what) {
    case FC_DESCRIBE_PLAN: return cuda_plan_text(p);
    case FC_DESCRIBE_SOURCE: return cuda_source(p);
    case FC_DESCRIBE_ASM: return cuda_ptx(p);
    case FC_DESCRIBE_DOT: return fc_prog_plan_dot(p);
    }
    return NULL;
}

static bool cuda_built(void) { return true; }

static bool cuda_present(void) {
    fc_context *ctx = fc_context_new();
    bool ok = ctx && fc_cuda_available(ctx);
    fc_context_free(ctx);
    return ok;
}

const fc_backend fc_backend_cuda = {
    .name = "cuda",
    .device = FC_DEVICE_CUDA,
    .preference = 3,
    .built = cuda_built,
    .present = cuda_present,
    .compile = fc_prog_cuda_compile,
    .run = fc_prog_cuda_run,
    .run_shaped = fc_cuda_run_shaped,
    .run_host = fc_prog_cuda_run_host,
    .describe = cuda_describe,
    .stats = fc_cuda_program_stats,
    .desc = cuda_desc,
    .context = cuda_context,
    .profile = fc_prog_cuda_profile,
    .times = cuda_times,
    .free = cuda_free,
    .group_new = fc_nccl_group_new,
    .group_free = fc_nccl_group_free,
};
