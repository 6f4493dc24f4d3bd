/* program_launch.c - queueing a run: launch by launch, or a CUDA Graph replayed (per program, or one for every shape of a variant of frame kernels), then the result copies. */
#include "runtime/cuda/program_impl.h"
#include "runtime/collective.h"
#include "runtime/cuda/cupti.h"
#include "runtime/nvtx.h"

static fc_status check_buffers(const fc_program *p, void *const *inputs, int nin, void *const *outputs, int nout);

static fc_replay_env env_of(const fc_program *p) {
    const fc_prog_instance *in = fc_prog_instance_of(p);
    const fc_frame *f = in ? in->variant->frame : NULL;
    fc_replay_env e = {p->dev,   p->ctx,  &p->d,         p->func,         p->arena,           p->blas,
                       p->blas_ws, in ? in->syms : NULL, in ? in->nsyms : 0, fc_frame_device(f), fc_frame_image(f), -1, p->dnn,
                       NULL, 0};
    if (e.frame_image) e.frame_carrier = in->variant->frame_carrier;
    if (p->opts.tp) e.nccl = p->opts.tp->dev, e.tp_rank = p->opts.tp_rank;
    return e;
}

static fc_status copy_dtod(fc_program *p, CUdeviceptr dst, CUdeviceptr src, int64_t bytes, CUstream s) {
    if (bytes == 0 || dst == src) return FC_OK;
    const fc_cuda_driver *cu = p->dev->cu;
    FC_CU_CHECK(p->ctx, cu->CtxSetCurrent(p->dev->cuctx));
    FC_CU_CHECK(p->ctx, cu->MemcpyDtoDAsync(dst, src, (size_t)bytes, s));
    return FC_OK;
}

/* Graphs off for p from now on, for this reason (the stats keep it; the
 * log says it once). */
static void graphs_off(fc_program *p, const char *why) {
    p->replay_off = true;
    snprintf(p->stats.graph_skip_reason, sizeof p->stats.graph_skip_reason, "%s", why);
    fc_trace(FC_LOG_GRAPHS, "program %s: runs launch by launch: %s", p->d.graph_name, why);
}

/* Whether p replays at all, decided at its first run: the options and the
 * environment are read once, not at every run. */
static void decide_graphs(fc_program *p) {
    p->graphs_decided = true;
    if (!p->opts.cuda_graphs) graphs_off(p, "CUDA Graphs are off (fc_compile_options.cuda_graphs, or --no-graphs)");
    else if (!fc_switch_on(FC_SW_CUDA_GRAPHS)) graphs_off(p, "CUDA Graphs are off ($FUSEC_CUDA_GRAPHS=0)");
    else if (p->d.src.nlaunches == 0) graphs_off(p, "the program launches nothing");
}

/* Each launch's NVTX name, made once: what Nsight shows for it. */
static void make_nvtx_names(fc_program *p) {
    p->nvtx_names = malloc(sizeof *p->nvtx_names * (size_t)(p->d.src.nlaunches + 1));
    for (int i = 0; p->nvtx_names && i < p->d.src.nlaunches; i++) {
        const fc_launch *l = &p->d.src.launches[i];
        snprintf(p->nvtx_names[i], sizeof p->nvtx_names[i], "%.48s: %.90s%s%.48s", l->name, l->summary,
                 l->source[0] ? " @ " : "", l->source);
    }
}

/* Launch i (a kernel or a library call) on s. */
static fc_status launch_one(fc_program *p, const fc_replay_env *e, int i, void *const *inputs, void *const *outputs,
                            CUstream s) {
    const fc_launch *l = &p->d.src.launches[i];
    int nparams;
    fc_status st = fc_launch_args(e, i, inputs, outputs, &p->args, &nparams);
    if (st != FC_OK) return st;
    if (l->kind == FC_LAUNCH_LIBRARY) return fc_replay_library_call(e, i, p->args.val, l->nargs, s);
    /* A kernel that waits for the one before it (fc_launch.pdl) is launched
     * as a programmatic dependent here too, as its graph node's edge is
     * (replay.c): the first runs, a program without a graph, a dynamic
     * specialization's eager calls and an AOT program all overlap the
     * launch gaps the same way. The kernel after a frame's carrier is no
     * such kernel: it reads the frame before it waits. */
    fc_cuda_launch_cfg cfg = {{l->grid[0], l->grid[1], l->grid[2]},
                              {l->block[0], l->block[1], l->block[2]},
                              l->smem,
                              s,
                              l->pdl};
    return fc_cuda_launch(p->dev, p->func[i], &cfg, p->args.ptr);
}

/* Whether the load-time launches' results (lower/launch.h) are current
 * for these parameters: they ran since the last
 * fc_program_weights_changed, and every parameter they read is where it
 * was then. */
static bool weights_current(const fc_program *p, void *const *inputs) {
    if (!p->weights_loaded || !p->loaded_from) return p->weights_loaded;
    for (int i = 0; i < p->d.nparams; i++)
        if (p->loaded_from[i] && p->loaded_from[i] != (CUdeviceptr)(uintptr_t)inputs[i]) return false;
    return true;
}

/* Run the load-time launches on s if their results are stale. What they
 * compute are GEMM weights, and a concatenation of sibling weights may be
 * made from them: those are marked stale too (copied again before their
 * GEMM, or by refresh_weights before a replay). Instances have none (a
 * dynamic variant's launches are never load-time). */
static fc_status load_weights(fc_program *p, void *const *inputs, void *const *outputs, CUstream s) {
    if (fc_prog_instance_of(p) || weights_current(p, inputs)) return FC_OK;
    const fc_program_desc *d = &p->d;
    bool any = false;
    for (int i = 0; i < d->src.nlaunches && !any; i++) any = d->src.launches[i].loadtime;
    if (!any) {
        p->weights_loaded = true;
        return FC_OK;
    }
    if (!p->loaded_from) {
        p->loaded_from = fc_ctx_malloc(p->ctx, sizeof *p->loaded_from * (size_t)(d->nparams + 1));
        if (!p->loaded_from) return fc_set_error(p->ctx, FC_ERR_NOMEM, "out of memory (load-time launches)");
    }
    memset(p->loaded_from, 0, sizeof *p->loaded_from * (size_t)(d->nparams + 1));
    p->weights_loaded = false;
    fc_replay_env e = env_of(p);
    int n = 0;
    for (int i = 0; i < d->src.nlaunches; i++) {
        const fc_launch *l = &d->src.launches[i];
        /* An alias among them (a reshaped weight) is a view: nothing runs. */
        if (!l->loadtime || l->kind == FC_LAUNCH_ALIAS) continue;
        fc_status st = launch_one(p, &e, i, inputs, outputs, s);
        if (st != FC_OK) return st;
        for (int a = 0; a < l->nreads; a++) {
            const fc_store *st_in = &d->store[l->args[a]];
            if (st_in->kind == FC_STORE_INPUT) p->loaded_from[st_in->index] = (CUdeviceptr)(uintptr_t)inputs[st_in->index];
        }
        n++;
    }
    p->weights_loaded = true;
    fc_cublaslt_weights_changed(p->blas);
    fc_trace(FC_LOG_GRAPHS, "program %s: %d load-time kernels run (weights loaded)", d->graph_name, n);
    return FC_OK;
}

/* The launches one by one (the load-time ones only when stale), each in
 * an NVTX range; while profiled, each tagged for CUPTI too. */
static fc_status enqueue_eager(fc_program *p, void *const *inputs, void *const *outputs, CUstream s) {
    fc_replay_env e = env_of(p);
    if (!p->nvtx_names) make_nvtx_names(p);
    fc_status st = load_weights(p, inputs, outputs, s);
    for (int i = 0; i < p->d.src.nlaunches && st == FC_OK; i++) {
        const fc_launch *l = &p->d.src.launches[i];
        if (l->kind == FC_LAUNCH_ALIAS || l->loadtime) continue; /* a view: nothing to do; or done above */
        if (p->nvtx_names) fc_nvtx_push(p->nvtx_names[i]);
        if (p->profile_tag) fc_cupti_push(p->profile_tag | (uint64_t)i);
        st = launch_one(p, &e, i, inputs, outputs, s);
        if (p->profile_tag) fc_cupti_pop();
        if (p->nvtx_names) fc_nvtx_pop();
    }
    return st;
}

static fc_status build_graph(fc_program *p, void *const *inputs, void *const *outputs, CUstream s) {
    fc_replay_env e = env_of(p);
    double t = fc_now_ms();
    fc_status st = fc_replay_build(&e, inputs, outputs, &p->args, s, &p->replay);
    p->stats.graph_build_ms += fc_now_ms() - t;
    if (st == FC_OK) {
        p->stats.graph_captures++;
        fc_trace(FC_LOG_GRAPHS, "program %s: graph built, %d programmatic edges", p->d.graph_name,
                 fc_replay_programmatic_edges(p->replay));
    }
    return st;
}

fc_status fc_program_prebuild_graph(fc_program *p, void *const *inputs, int nin, void *const *outputs, int nout) {
    if (!p) return FC_ERR_USAGE;
    fc_status st = check_buffers(p, inputs, nin, outputs, nout);
    if (st == FC_OK) st = fc_prog_prepare_run(p);
    if (st != FC_OK) return st;
    if (!p->graphs_decided) decide_graphs(p);
    if (p->replay) return FC_OK;
    if (p->replay_off) return fc_set_error(p->ctx, FC_ERR_UNSUPPORTED, "%s", p->stats.graph_skip_reason);
    /* Refreshing concatenated weights copies from the caller's buffers,
     * which a build with placeholder pointers must not do. */
    for (int i = 0; i < p->d.src.nlaunches; i++)
        if (fc_program_gemm(&p->d, i) && p->d.gemm[i].plan.nweights > 1)
            return fc_set_error(p->ctx, FC_ERR_UNSUPPORTED,
                                "program %s has fused sibling GEMMs: its graph is built at its second run",
                                p->d.graph_name);
    double t = fc_now_ms();
    st = build_graph(p, inputs, outputs, NULL);
    spec_step(p, "graph built (captured, instantiated)", t);
    /* Uploaded now, and waited for (this is the background thread): the
     * first launch of a graph otherwise uploads it, on the caller's time. */
    if (st == FC_OK) {
        t = fc_now_ms();
        st = fc_replay_upload(p->replay, p->dev, NULL);
        spec_step(p, "graph upload queued", t);
        t = fc_now_ms();
        if (st == FC_OK) st = fc_cuda_stream_sync(p->dev, NULL);
        spec_step(p, "graph upload waited for", t);
    }
    if (st == FC_OK) p->stats.graph_prebuilt++;
    return st;
}

/* Weights written in place (fc_program_weights_changed): the graph
 * launches no copies, so the concatenations of its sibling GEMMs are
 * brought up to date on stream s first. */
static fc_status refresh_weights(fc_program *p, void *const *inputs, void *const *outputs, CUstream s) {
    fc_replay_env e = env_of(p);
    for (int i = 0; i < p->d.src.nlaunches; i++) {
        if (!fc_program_gemm(&p->d, i) || p->d.gemm[i].plan.nweights <= 1) continue;
        int n;
        fc_status st = fc_launch_args(&e, i, inputs, outputs, &p->args, &n);
        if (st == FC_OK) st = fc_cublaslt_refresh_weights(p->blas, p->ctx, &p->d.gemm[i], p->args.val, n, s);
        if (st != FC_OK) return st;
    }
    return FC_OK;
}

fc_status fc_program_weights_changed(fc_program *p) {
    if (!p) return FC_ERR_USAGE;
    if (!fc_program_is(p, FC_DEVICE_CUDA)) return FC_OK; /* the host backends read the weights at every run */
    const fc_prog_dynamic *dp = fc_prog_dyn_of(p);
    if (dp) return fc_dynamic_weights_changed(dp->dyn);
    fc_cublaslt_weights_changed(p->blas);
    p->weights_loaded = false;
    return FC_OK;
}

/* An instance of a variant of frame kernels: the variant's one graph,
 * built at the first run of any shape, patched for the caller's pointers
 * (and the carrier's words) and launched; a new shape writes the frame,
 * not the graph. Without library calls there is nothing a first eager run
 * must set up, so every run of every shape, the first included, replays.
 * FC_ERR_UNSUPPORTED: the caller runs eagerly (the reason is in the stats
 * and the log). */
/* The variant's shared graph, built from instance p for these buffers (its
 * time and count in p's stats). */
static fc_status build_shared(fc_program *p, void *const *inputs, void *const *outputs, CUstream s) {
    fc_prog_variant *v = fc_prog_instance_of(p)->variant;
    fc_replay_env e = env_of(p);
    const double t = fc_now_ms();
    fc_status st = fc_replay_build(&e, inputs, outputs, &p->args, s, &v->shared_replay);
    p->stats.graph_build_ms += fc_now_ms() - t;
    if (st != FC_OK) return st;
    p->stats.graph_captures++;
    fc_trace(FC_LOG_GRAPHS, "program %s: the variant's graph: %s, %d programmatic edges", p->d.graph_name,
             v->frame_carrier >= 0 ? "frame kernels, the frame carried by the first (its node updated when the frame changes)"
                                   : "frame kernels (never re-pointed)",
             fc_replay_programmatic_edges(v->shared_replay));
    return FC_OK;
}

static fc_status enqueue_shared(fc_program *p, void *const *inputs, void *const *outputs, CUstream s) {
    fc_prog_variant *v = fc_prog_instance_of(p)->variant;
    fc_replay_env e = env_of(p);
    fc_status st = FC_OK;
    const char *failed = NULL;
    if (!v->shared_replay) {
        st = build_shared(p, inputs, outputs, s);
        if (st != FC_OK) failed = "building the graph failed";
    }
    /* Frame kernels read the shape and the arena from the frame: the graph
     * is the same at every shape. */
    if (st == FC_OK) {
        st = fc_replay_launch(v->shared_replay, &e, inputs, outputs, &p->args, s, &p->stats.graph_patches);
        if (st != FC_OK) failed = "patching the graph failed";
    }
    if (failed) {
        /* This run goes launch by launch; the variant's shapes build graphs
         * of their own from now on (enqueue_graph), as with library calls. */
        char reason[200];
        snprintf(reason, sizeof reason, "the variant's shared graph: %s: %.100s", failed, fc_last_error(p->ctx));
        fc_trace(FC_LOG_GRAPHS, "program %s: %s", p->d.graph_name, reason);
        fc_replay_free(v->shared_replay, v->x.dev);
        v->shared_replay = NULL;
        v->shared_graph = false;
        p->stats.graph_skips++;
        snprintf(p->stats.graph_skip_reason, sizeof p->stats.graph_skip_reason, "%.159s", reason);
        return FC_ERR_UNSUPPORTED;
    }
    p->stats.graph_replays++;
    return FC_OK;
}

fc_status fc_program_prebuild_shared_graph(fc_program *inst) {
    fc_prog_instance *in = fc_prog_instance_of(inst);
    fc_prog_variant *v = in ? in->variant : NULL;
    if (!v) return fc_set_error(inst->ctx, FC_ERR_USAGE, "fc_program_prebuild_shared_graph: not an instance");
    fc_status st = fc_prog_ensure_device(inst);
    if (st != FC_OK) return st;
    if (!inst->graphs_decided) decide_graphs(inst);
    if (!v->frame || !v->shared_graph || inst->replay_off || v->shared_replay) return FC_OK;
    /* No caller's buffers yet: frame kernels' nodes hold none, and the
     * carrier's words (made with NULL for them) differ from the first
     * run's, which updates its node. */
    const int np = inst->d.nparams, no = inst->d.noutputs;
    void **none = calloc((size_t)(np + no) + 1, sizeof *none);
    if (!none) return fc_set_error(inst->ctx, FC_ERR_NOMEM, "out of memory (a graph)");
    fc_replay_env e = env_of(inst);
    CUstream s = inst->dev->stream;
    bool wrote = false;
    st = fc_frame_write(v->frame, inst->dev, &e, none, none + np, s, &wrote);
    if (st == FC_OK) st = build_shared(inst, none, none + np, s);
    if (st == FC_OK) st = fc_replay_upload(v->shared_replay, inst->dev, s);
    if (st == FC_OK) st = fc_cuda_stream_sync(inst->dev, s);
    free(none);
    if (st != FC_OK) {
        /* The first run tries again (and reports what it meets); a graph
         * built but not uploaded is not counted. */
        if (v->shared_replay) inst->stats.graph_captures--;
        fc_replay_free(v->shared_replay, inst->dev);
        v->shared_replay = NULL;
        return st;
    }
    inst->stats.graph_prebuilt++;
    fc_trace(FC_LOG_GRAPHS, "program %s: the variant's graph built ahead of its first run (fc_program_reserve)",
             inst->d.graph_name);
    return FC_OK;
}

/* The launches as a CUDA Graph (runtime/cuda/replay.c), built at the second run
 * (the first runs eagerly: it makes cuBLASLt's choices and concatenated
 * weights, which a capture must not allocate). FC_ERR_UNSUPPORTED: run
 * eagerly instead (the reason is in the stats and the log). */
static fc_status enqueue_graph(fc_program *p, void *const *inputs, void *const *outputs, CUstream s) {
    if (!p->graphs_decided) decide_graphs(p);
    const fc_prog_instance *in = fc_prog_instance_of(p);
    if (in && in->variant->shared_graph && !p->replay_off)
        return enqueue_shared(p, inputs, outputs, s);
    /* The first run is eager by design, unless the graph was built before
     * it (fc_program_prebuild_graph); a later eager one is a skip. */
    if (p->stats.runs == 0 && !p->replay) return FC_ERR_UNSUPPORTED;
    if (p->replay_off) {
        p->stats.graph_skips++;
        return FC_ERR_UNSUPPORTED;
    }
    fc_replay_env e = env_of(p);
    fc_status st = FC_OK;
    const char *failed = NULL;
    if (!p->replay) {
        st = build_graph(p, inputs, outputs, s);
        if (st != FC_OK) failed = "building the graph failed";
    }
    /* A failed load or refresh is the run's error (nothing of the graph
     * was launched), not a reason to give up the graph. The graph holds
     * no load-time launch: they run here, before it, when stale. */
    if (st == FC_OK && (st = load_weights(p, inputs, outputs, s)) != FC_OK) return st;
    if (st == FC_OK && fc_cublaslt_weights_stale(p->blas) && (st = refresh_weights(p, inputs, outputs, s)) != FC_OK)
        return st;
    if (st == FC_OK) {
        if (p->profile_tag) fc_cupti_push(p->profile_tag | FC_CUPTI_REPLAY);
        st = fc_replay_launch(p->replay, &e, inputs, outputs, &p->args, s, &p->stats.graph_patches);
        if (p->profile_tag) fc_cupti_pop();
        /* A graph that could not be patched is never launched again (nothing
         * of it was queued: the launch is the last step). */
        if (st != FC_OK) failed = "patching the graph failed";
    }
    if (failed) {
        /* This run and the later ones go launch by launch. */
        char reason[160];
        snprintf(reason, sizeof reason, "%s: %.120s", failed, fc_last_error(p->ctx));
        fc_replay_free(p->replay, p->dev);
        p->replay = NULL;
        graphs_off(p, reason);
        p->stats.graph_skips++;
        return FC_ERR_UNSUPPORTED;
    }
    p->stats.graph_replays++;
    return FC_OK;
}

/* Queue every launch, then the result copies, on stream s. The device is
 * ready (ensure_device) and every library call is a GEMM
 * (check_supported). */
fc_status fc_prog_enqueue(fc_program *p, void *const *inputs, void *const *outputs, CUstream s) {
    fc_replay_env e = env_of(p);
    fc_status st = fc_launch_check_pointers(&e, inputs, outputs);
    if (st != FC_OK) return st;
    if (e.frame) {
        /* Frame kernels, replayed or not, read this run's sizes and
         * pointers from the frame: its changed words first. */
        bool wrote = false;
        st = fc_frame_write(fc_prog_instance_of(p)->variant->frame, p->dev, &e, inputs, outputs, s, &wrote);
        if (st != FC_OK) return st;
        p->stats.frame_writes += wrote;
    }
    /* A replay is one range: its kernels are on the device's track, each
     * under its own name. */
    if (p->profile_eager) st = FC_ERR_UNSUPPORTED;
    else {
        fc_nvtx_push(p->d.graph_name ? p->d.graph_name : "fusec run");
        st = enqueue_graph(p, inputs, outputs, s);
        fc_nvtx_pop();
    }
    if (st == FC_ERR_UNSUPPORTED) st = enqueue_eager(p, inputs, outputs, s);
    if (st != FC_OK) return st;
    /* Results no kernel wrote in place: a parameter (or a view of one)
     * returned, or a value returned more than once. */
    for (int k = 0; k < p->d.noutputs; k++) {
        const fc_program_tensor *o = &p->d.outputs[k];
        CUdeviceptr dst = (CUdeviceptr)(uintptr_t)outputs[k], src;
        if (o->copy_from.kind == FC_STORE_INPUT) src = (CUdeviceptr)(uintptr_t)inputs[o->copy_from.index];
        else if (o->copy_from.kind == FC_STORE_OUTPUT) src = (CUdeviceptr)(uintptr_t)outputs[o->copy_from.index];
        else continue;
        st = copy_dtod(p, dst, src, fc_program_tensor_bytes(o), s);
        if (st != FC_OK) return st;
    }
    p->stats.runs++;
    return FC_OK;
}

/* NULL pointers are allowed only for empty tensors. */
static fc_status check_buffers(const fc_program *p, void *const *inputs, int nin, void *const *outputs, int nout) {
    const fc_program_desc *d = &p->d;
    fc_status st = fc_program_desc_check_call(p->ctx, d, inputs, nin, outputs, nout);
    if (st != FC_OK) return st;
    for (int i = 0; i < nin; i++)
        if (!inputs[i] && fc_program_tensor_bytes(&d->params[i]) > 0)
            return fc_set_error(p->ctx, FC_ERR_USAGE, "fc_run: input %d is a NULL device pointer", i);
    for (int k = 0; k < nout; k++)
        if (!outputs[k] && fc_program_tensor_bytes(&d->outputs[k]) > 0)
            return fc_set_error(p->ctx, FC_ERR_USAGE, "fc_run: output %d is a NULL device pointer", k);
    return FC_OK;
}

/* What a run needs: a program it can run (checked first, so that one it
 * cannot allocates nothing), then the device state. */
fc_status fc_prog_prepare_run(fc_program *p) {
    fc_status st = fc_prog_check_supported(p);
    return st != FC_OK ? st : fc_prog_ensure_device(p);
}

fc_status fc_prog_cuda_run(fc_program *p, void *const *inputs, int nin, void *const *outputs, int nout,
                         void *stream) {
    if (fc_prog_dyn_of(p))
        return fc_set_error(fc_program_context(p), FC_ERR_USAGE,
                            "fc_run: program %s is dynamic (some dims are symbolic): run it with fc_run_shaped, "
                            "which takes the shapes",
                            fc_program_desc_of(p)->graph_name ? fc_program_desc_of(p)->graph_name : "?");
    fc_status st = check_buffers(p, inputs, nin, outputs, nout);
    if (st == FC_OK) st = fc_prog_prepare_run(p);
    if (st != FC_OK) return st;
    /* NULL is the caller's default stream, the legacy one, as the CUDA
     * runtime has it (fusec's own stream is internal). */
    return fc_prog_enqueue(p, inputs, outputs, stream ? (CUstream)stream : CU_STREAM_LEGACY);
}
