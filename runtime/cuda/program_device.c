/* program_device.c - what a run needs on the device: the module, kernels, arena, cuBLASLt handle, the leases a dynamic program's specializations borrow, a variant's frame. */
#include "runtime/cuda/program_impl.h"
#include "runtime/cuda/nccl.h"

/* ------------------------------------------------------------------ */
/* Running.                                                            */
/* ------------------------------------------------------------------ */

/* Every library launch must have a CUDA path: a GEMM description, a
 * convolution description (cuDNN) or a collective (NCCL). */
fc_status fc_prog_check_supported(const fc_program *p) {
    for (int i = 0; i < p->d.src.nlaunches; i++) {
        const fc_launch *l = &p->d.src.launches[i];
        if (l->kind != FC_LAUNCH_LIBRARY || fc_program_gemm(&p->d, i) || fc_program_conv(&p->d, i) ||
            fc_nccl_is_collective(l->name))
            continue;
        if (!strcmp(l->name, "gemm") || !strcmp(l->name, "matmul"))
            return fc_set_error(p->ctx, FC_ERR_UNSUPPORTED,
                                "launch %d (%s: %s): cuBLASLt runs f32, f16 and bf16 GEMMs, and f64 ones without an "
                                "epilogue, not this one",
                                i, l->name, l->summary);
        return fc_set_error(p->ctx, FC_ERR_UNSUPPORTED,
                            "launch %d (%s): %s has no CUDA implementation yet (library calls on CUDA: gemm and "
                            "matmul, through cuBLASLt)",
                            i, l->summary, l->name);
    }
    return FC_OK;
}

/* The arena's size: the intermediates, then the cuBLASLt workspace when
 * the program runs GEMMs (*ws_offset: where it starts, 256-aligned). -1
 * when it does not fit an int64 (only a crafted description does that). */
int64_t fc_prog_arena_size(const fc_program *p, int64_t *ws_offset) {
    const int64_t align = FC_CUBLASLT_WORKSPACE_ALIGN, ws = (int64_t)FC_CUBLASLT_WORKSPACE_BYTES;
    *ws_offset = 0;
    if (p->ngemms == 0 && p->nconvs == 0) return p->d.arena_bytes;
    if (p->d.arena_bytes > INT64_MAX - align - ws) return -1;
    *ws_offset = (p->d.arena_bytes + align - 1) / align * align;
    return *ws_offset + ws;
}


fc_device_lease *fc_device_lease_new(void) {
    fc_device_lease *l = calloc(1, sizeof *l);
    if (!l) return NULL;
    if (!(l->ctx = fc_context_new())) {
        free(l);
        return NULL;
    }
    pthread_mutex_init(&l->mu, NULL);
    return l;
}

void fc_device_lease_free(fc_device_lease *l) {
    if (!l) return;
    if (l->dev) {
        (void)l->dev->cu->CtxSetCurrent(l->dev->cuctx);
        (void)l->dev->cu->CtxSynchronize();
    }
    fc_cublaslt_destroy(l->blas);
    fc_cuda_device_close(l->dev);
    fc_context_free(l->ctx);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

void fc_program_use_lease(fc_program *p, fc_device_lease *l) {
    if (p && !p->dev) p->lease = l;
    if (p) p->specialization = true;
}

/* The lease's failure, said on p's context. Under l->mu. */
static fc_status lease_error(fc_program *p, fc_status st) {
    return fc_set_error(p->ctx, st, "%s", fc_last_error(p->lease->ctx));
}

/* p->dev: a handle on the lease's device, opened by its first borrower. */
static fc_status lease_device(fc_program *p) {
    fc_device_lease *l = p->lease;
    pthread_mutex_lock(&l->mu);
    fc_status st = l->dev ? FC_OK : fc_cuda_device_open(l->ctx, 0, &l->dev);
    if (st != FC_OK) st = lease_error(p, st);
    else st = fc_cuda_device_borrow(p->ctx, l->dev, &p->dev);
    pthread_mutex_unlock(&l->mu);
    return st;
}

/* The lease's cuBLASLt handle (made by its first borrower with GEMMs),
 * for p's own handle to share. */
static fc_status lease_blas(fc_program *p, const fc_cublaslt **out) {
    fc_device_lease *l = p->lease;
    pthread_mutex_lock(&l->mu);
    fc_status st = FC_OK;
    if (!l->blas && (st = fc_cublaslt_create(l->ctx, l->dev, NULL, &l->blas)) != FC_OK) st = lease_error(p, st);
    *out = l->blas;
    pthread_mutex_unlock(&l->mu);
    return st;
}

/* Scratch for the kernel parameters of the largest launch. */
static fc_status ensure_args(fc_program *p) {
    if (p->args.block) return FC_OK;
    return fc_launch_params_alloc(p->ctx, p->max_args, &p->args);
}

/* An instance (one shape of a dynamic program's variant) borrows the
 * variant's module, kernels and cuBLASLt handle, and shares one arena with
 * every other instance: the variant's, grown (doubled) when a shape needs
 * more. A grown arena moves, so instances made for the old one drop their
 * graphs (arena_gen tells them). */
static fc_status ensure_instance(fc_prog_instance *in) {
    fc_program *p = &in->x, *v = &in->variant->x;
    fc_prog_variant *vr = in->variant;
    fc_status st = fc_prog_ensure_device(v);
    if (st != FC_OK) return st;
    p->func = v->func;
    p->funcs_ready = true;
    if (p->ngemms > 0 && !v->blas) {
        double t = fc_now_ms();
        /* The variant meets every size of its GEMMs: a new one reuses the
         * algorithm of its family when cuBLASLt accepts it (docs/DYNAMIC.md). */
        fc_cublaslt_options lo = {.reuse_family = true, .allow_tf32 = v->d.tf32};
        st = fc_cublaslt_create(v->ctx, v->dev, &lo, &v->blas);
        v->times.load_ms += fc_now_ms() - t;
        if (st != FC_OK) return st;
    }
    p->blas = v->blas;
    /* The variant's parameter scratch: its largest launch is every
     * instance's, and one caller thread runs them one at a time. */
    p->args = v->args;
    int64_t ws_offset = 0, bytes = fc_prog_arena_size(p, &ws_offset);
    if (bytes < 0) return fc_set_error(p->ctx, FC_ERR_RUNTIME, "program %s: an arena too large", p->d.graph_name);
    if (bytes > __atomic_load_n(&vr->shared_arena_bytes, __ATOMIC_ACQUIRE)) {
        pthread_mutex_lock(&fc_prog_arena_lock);
        st = fc_prog_grow_arena(vr, bytes, false);
        pthread_mutex_unlock(&fc_prog_arena_lock);
        if (st != FC_OK) return st;
    }
    if (in->arena_gen != vr->arena_gen) {
        fc_replay_free(p->replay, p->dev);
        p->replay = NULL;
        in->arena_gen = vr->arena_gen;
    }
    p->arena = v->arena;
    p->blas_ws = v->arena + (CUdeviceptr)ws_offset;
    return FC_OK;
}

/*
 * A variant with frame kernels: one grid per kernel for every shape, and
 * the frame. A kernel whose grid depends on the symbols gets twice as many
 * blocks as the device holds at once (its occupancy on every SM), at most
 * its grid_max: its grid-stride loop covers any size with them, and extra
 * blocks at a small shape find no work and exit. Twice, not once: with one
 * wave a row loop per block (the GPT-2 block's softmax) is slower at
 * mid-size shapes than shape-sized grids, with two it matches them, for a
 * little more time at small shapes (docs/PERF.md). Constant grids (a
 * GEMM's persistent grid, a batched launch) stay.
 */
static fc_status frame_setup(fc_prog_variant *vr) {
    fc_program *v = &vr->x;
    const int mul = 2;
    for (int i = 0; i < v->d.src.nlaunches; i++) {
        fc_launch *l = &v->d.src.launches[i];
        if (l->kind != FC_LAUNCH_KERNEL || !l->frame) continue;
        for (int a = 0; a < 3; a++) {
            if (fc_mono_is_static(&l->grid_work[a])) continue;
            int per_sm = 0;
            fc_status st = fc_cuda_occupancy(v->dev, v->func[i], (int)(l->block[0] * l->block[1] * l->block[2]),
                                             l->smem, &per_sm);
            if (st != FC_OK) return st;
            int64_t n = (int64_t)(per_sm > 0 ? per_sm : 1) * v->dev->info.sm_count * mul;
            if (l->grid_max[a] > 0 && n > l->grid_max[a]) n = l->grid_max[a];
            l->grid[a] = (unsigned)(n < 1 ? 1 : n);
        }
    }
    vr->frame_carrier = fc_cuda_src_frame_carrier(&v->d.src);
    return fc_frame_create(v->dev, v->d.src.frame_words, vr->frame_carrier >= 0, &vr->frame);
}

/* The modules: one cubin per distinct kernel. */
static fc_status load_modules(fc_program *p, fc_cuda_device *d) {
    const int n = p->d.src.nkernels;
    CUmodule *m = fc_ctx_malloc(p->ctx, sizeof *m * (size_t)(n + 1));
    if (!m) return FC_ERR_NOMEM;
    memset(m, 0, sizeof *m * (size_t)(n + 1));
    p->kmodules = m;
    for (int k = 0; k < n; k++) {
        fc_status st = fc_cuda_module_load(d, p->kcubins[k].data, p->kcubins[k].size, &m[k]);
        if (st != FC_OK) { /* all or none: the next run tries again */
            while (k-- > 0) (void)d->cu->ModuleUnload(m[k]);
            fc_ctx_freemem(p->ctx, m);
            p->kmodules = NULL;
            return st;
        }
    }
    return FC_OK;
}

/* The module that has launch l's kernel. */
static CUmodule module_of(const fc_program *p, const fc_launch *l) {
    if (!p->kmodules) return NULL;
    for (int k = 0; k < p->d.src.nkernels; k++)
        if (!strcmp(p->d.src.kernels[k].name, l->name)) return p->kmodules[k];
    return NULL;
}

/* Open the device, load the module, resolve the kernels and allocate the
 * arena, each once; a step that failed is tried again by the next run.
 * The first two are timed for fc_program_times: at a warm start they are
 * most of the time to the first output. */
fc_status fc_prog_ensure_device(fc_program *p) {
    fc_status st;
    fc_prog_instance *in = fc_prog_instance_of(p);
    if (in) {
        /* An instance uses its variant's device: no context or stream of
         * its own to make at a new shape's first call. */
        if ((st = fc_prog_ensure_device(&in->variant->x)) != FC_OK) return st;
        p->dev = in->variant->x.dev;
        return ensure_instance(in);
    }
    if (!p->dev) {
        double t = fc_now_ms();
        /* A tensor-parallel rank runs on its own GPU (runtime/cuda/nccl.h). */
        st = p->lease ? lease_device(p) : fc_cuda_device_open(p->ctx, p->opts.tp ? p->opts.tp_rank : 0, &p->dev);
        p->times.device_ms += fc_now_ms() - t;
        spec_step(p, p->lease ? "device borrowed" : "device opened", t);
        if (st != FC_OK) return st;
    }
    fc_cuda_device *d = p->dev;
    if (!p->kmodules) {
        /* A cubin runs on its own major architecture, on the same or a
         * newer minor one; say so plainly instead of the driver's
         * CUDA_ERROR_NO_BINARY_FOR_GPU. */
        int major = p->d.sm / 10, minor = p->d.sm % 10;
        if (d->info.cc_major != major || d->info.cc_minor < minor)
            return fc_set_error(p->ctx, FC_ERR_RUNTIME,
                                "the program was compiled for sm_%d but CUDA device 0 (%s) is sm_%d%d: compile "
                                "with sm 0 (the device's own) or %d",
                                p->d.sm, d->info.name, d->info.cc_major, d->info.cc_minor,
                                d->info.cc_major * 10 + d->info.cc_minor);
        double t = fc_now_ms();
        st = load_modules(p, d);
        p->times.load_ms += fc_now_ms() - t;
        spec_step(p, "module loaded", t);
        if (st != FC_OK) return st;
    }
    if (!p->funcs_ready) {
        double t = fc_now_ms();
        if (!p->func) {
            p->func = fc_ctx_malloc(p->ctx, sizeof *p->func * (size_t)(p->d.src.nlaunches + 1));
            if (!p->func) return FC_ERR_NOMEM;
            memset(p->func, 0, sizeof *p->func * (size_t)(p->d.src.nlaunches + 1));
        }
        for (int i = 0; i < p->d.src.nlaunches; i++) {
            const fc_launch *l = &p->d.src.launches[i];
            if (l->kind != FC_LAUNCH_KERNEL || p->func[i]) continue;
            st = fc_cuda_module_function(d, module_of(p, l), l->name, &p->func[i]);
            if (st == FC_OK && l->smem > DEFAULT_MAX_SHARED)
                st = fc_cuda_function_set_max_shared(d, p->func[i], (int)l->smem);
            if (st != FC_OK) {
                p->func[i] = NULL;
                return st;
            }
        }
        p->funcs_ready = true;
        p->times.load_ms += fc_now_ms() - t;
        p->times.loaded = true;
        spec_step(p, "kernels looked up", t);
    }
    if ((st = ensure_args(p)) != FC_OK) return st;
    fc_prog_variant *vr = fc_prog_variant_of(p);
    if (vr && p->d.src.frame_words > 0 && !vr->frame && (st = frame_setup(vr)) != FC_OK) return st;
    /* One allocation for the intermediates and the cuBLASLt workspace:
     * cuMemAlloc's base is 256-aligned, and so is the workspace's offset. */
    int64_t ws_offset = 0, bytes = fc_prog_arena_size(p, &ws_offset);
    if (bytes < 0)
        return fc_set_error(p->ctx, FC_ERR_RUNTIME, "program %s: an arena of %lld bytes is too large",
                            p->d.graph_name, (long long)p->d.arena_bytes);
    if (!p->arena && bytes > 0) {
        /* A lease's programs map theirs: freeing it then waits for nothing. */
        const double t = fc_now_ms();
        st = p->lease ? fc_cuda_region_grow(d, &p->arena_region, (size_t)bytes) : FC_ERR_UNSUPPORTED;
        if (st == FC_OK) p->arena = p->arena_region.base;
        else if (st == FC_ERR_UNSUPPORTED) st = fc_cuda_alloc(d, (size_t)bytes, &p->arena);
        spec_step(p, p->arena_region.base ? "arena mapped" : "arena allocated", t);
        if (st != FC_OK) return st;
    }
    if (p->ngemms > 0 && !p->blas) {
        /* cublasLtCreate loads the library's kernels: timed with the load. */
        double t = fc_now_ms();
        /* FUSEC_GEMM_TUNE=1: algorithms chosen by timing (once per problem:
         * the disk cache keeps them). Off by default: timed alone, the
         * choices made the GPT-2 block at T = 64 18-26% slower in its graph
         * than the heuristic's first (docs/GEMM.md, "Choosing by timing"). */
        fc_cublaslt_options lo = {.allow_tf32 = p->d.tf32, .tune = fc_switch_on(FC_SW_GEMM_TUNE)};
        if (p->lease && (st = lease_blas(p, &lo.share)) != FC_OK) return st;
        lo.mapped = p->lease != NULL;
        st = fc_cublaslt_create(p->ctx, d, &lo, &p->blas);
        p->times.load_ms += fc_now_ms() - t;
        spec_step(p, lo.share ? "cuBLASLt handle shared" : "cuBLASLt handle created", t);
        if (st != FC_OK) return st;
        p->blas_ws = p->arena + (CUdeviceptr)ws_offset;
    }
    if (p->nconvs > 0 && !p->dnn) {
        /* The handle and every convolution's plan (from the disk cache, or
         * the heuristic once per shape), timed with the load: the first
         * run then builds nothing, and a CUDA Graph captures launches only. */
        double t = fc_now_ms();
        st = fc_cudnn_create(p->ctx, d, NULL, &p->dnn);
        for (int i = 0; i < p->d.src.nlaunches && st == FC_OK; i++)
            if (fc_program_conv(&p->d, i))
                st = fc_cudnn_prepare(p->dnn, p->ctx, &p->d.conv[i], FC_CUBLASLT_WORKSPACE_BYTES);
        p->times.load_ms += fc_now_ms() - t;
        spec_step(p, "cuDNN handle and plans", t);
        if (st != FC_OK) return st;
        p->blas_ws = p->arena + (CUdeviceptr)ws_offset;
    }
    return FC_OK;
}
