/*
 * jit.c - from a plan to callable machine code: one LLVM module per plan,
 * optimized for the host CPU, compiled and linked in memory by ORC LLJIT.
 *
 *   lower (lower*.c) -> verify -> default<O3> (new pass manager, host target
 *   machine: the vectorizers see the host's vector width; no loop unroller)
 *   -> LLJIT (its own target machine for the host, code generation at -O1,
 *   or -O0 for small programs; in-memory linking) -> lookup of every
 *   kernel's address
 *
 * The host's triple, CPU and features and the target machine used for
 * optimization are found once per process and kept (never freed: they live
 * as long as the process may compile). Each program gets its own LLJIT
 * (creating one costs about 0.4 ms), so freeing a program frees its code,
 * and nothing else is shared between programs. LLVM work is serialized
 * under one mutex: programs may be compiled from several threads, and the
 * shared target machine is not documented as safe to use concurrently.
 *
 * Kernels may call libm (f64 math, and sin, cos and pow) and whatever
 * LLVM's code generator emits calls to (memset, ...): the JIT resolves
 * those from the process.
 *
 * LLVM's diagnostics (a failed forced vectorization is a warning) would go
 * to stderr by default; fusec never prints, so a handler keeps the first
 * error message and drops the rest.
 */
#include "codegen/llvm/llvm_internal.h"

#include <llvm-c/Analysis.h>
#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <llvm/Config/llvm-config.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct fc_llvm_module {
    LLVMOrcLLJITRef jit;
    char *ir;           /* optimized IR text, when kept */
    char diag[512];     /* the first error LLVM reported through the handler */
};

/* ---- the host target, once per process -------------------------------------- */

static pthread_once_t host_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t llvm_lock = PTHREAD_MUTEX_INITIALIZER;
static LLVMTargetRef host_target;
static char *host_triple, *host_cpu, *host_features; /* kept for every JIT's target machine */
static LLVMTargetMachineRef host_tm;                 /* the optimizer's */
static char host_desc[256] = "LLVM host target not initialized";
static char host_err[512];

static void init_host(void) {
    if (LLVMInitializeNativeTarget() || LLVMInitializeNativeAsmPrinter()) {
        snprintf(host_err, sizeof host_err, "LLVM has no native target for this host");
        return;
    }
    char *err = NULL;
    host_triple = LLVMGetDefaultTargetTriple();
    if (LLVMGetTargetFromTriple(host_triple, &host_target, &err)) {
        snprintf(host_err, sizeof host_err, "LLVM: no target for %s: %s", host_triple, err ? err : "?");
        LLVMDisposeMessage(err);
        return;
    }
    host_cpu = LLVMGetHostCPUName();
    host_features = LLVMGetHostCPUFeatures();
    host_tm = LLVMCreateTargetMachine(host_target, host_triple, host_cpu, host_features, LLVMCodeGenLevelAggressive,
                                      LLVMRelocPIC, LLVMCodeModelSmall);
    if (!host_tm)
        snprintf(host_err, sizeof host_err, "LLVM: cannot create a target machine for %s (%s)", host_triple, host_cpu);
    snprintf(host_desc, sizeof host_desc, "%s, cpu %s, LLVM %s", host_triple, host_cpu, LLVM_VERSION_STRING);
}

const char *fc_llvm_target_description(void) {
    pthread_once(&host_once, init_host);
    return host_desc;
}

/* ---- errors -------------------------------------------------------------------- */

/* Consume err and record it on ctx. */
static fc_status llvm_error(fc_context *ctx, const char *what, LLVMErrorRef err) {
    char *msg = LLVMGetErrorMessage(err);
    fc_status st = fc_set_error(ctx, FC_ERR_RUNTIME, "LLVM: %s: %s", what, msg ? msg : "unknown error");
    LLVMDisposeErrorMessage(msg);
    return st;
}

static void diag_handler(LLVMDiagnosticInfoRef di, void *opaque) {
    fc_llvm_module *mod = opaque;
    if (LLVMGetDiagInfoSeverity(di) != LLVMDSError || mod->diag[0]) return;
    char *msg = LLVMGetDiagInfoDescription(di);
    snprintf(mod->diag, sizeof mod->diag, "%s", msg ? msg : "?");
    LLVMDisposeMessage(msg);
}

/* ---- compiling --------------------------------------------------------------------- */

static void init_types(lmod *M) {
    LLVMContextRef c = M->c;
    M->t_void = LLVMVoidTypeInContext(c);
    M->t_i1 = LLVMInt1TypeInContext(c);
    M->t_i8 = LLVMInt8TypeInContext(c);
    M->t_i16 = LLVMInt16TypeInContext(c);
    M->t_i32 = LLVMInt32TypeInContext(c);
    M->t_i64 = LLVMInt64TypeInContext(c);
    M->t_f32 = LLVMFloatTypeInContext(c);
    M->t_f64 = LLVMDoubleTypeInContext(c);
}

/* Build, verify and optimize the module in M (M->m set, in the JIT's
 * triple and data layout). */
static fc_status build_module(lmod *M, const fc_plan *plan, const fc_llvm_options *o, fc_llvm_module *mod,
                              fc_llvm_kernel *kernels) {
    M->b = LLVMCreateBuilderInContext(M->c);
    fc_status st = fc_llvm_lower(M, plan, kernels);
    LLVMDisposeBuilder(M->b);
    M->b = NULL;
    if (st != FC_OK) return st;

    /* A module that does not verify is a bug in lower*.c: report it instead
     * of letting LLVM crash on it. */
    char *msg = NULL;
    if (LLVMVerifyModule(M->m, LLVMReturnStatusAction, &msg)) {
        st = fc_set_error(M->ctx, FC_ERR_RUNTIME, "LLVM: internal error: the generated module does not verify: %.1500s",
                          msg ? msg : "?");
        LLVMDisposeMessage(msg);
        return st;
    }
    LLVMDisposeMessage(msg);

    LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
    LLVMPassBuilderOptionsSetLoopVectorization(po, 1);
    LLVMPassBuilderOptionsSetSLPVectorization(po, 1);
    LLVMPassBuilderOptionsSetLoopInterleaving(po, 1);
    /* No loop unroller: its runtime unrolling copies whole row loops (and
     * the math inlined in them) for nothing, and doubles the compile time.
     * The vectorizer still interleaves the inner loops. */
    LLVMPassBuilderOptionsSetLoopUnrolling(po, 0);
    LLVMErrorRef err = LLVMRunPasses(M->m, "default<O3>", host_tm, po);
    LLVMDisposePassBuilderOptions(po);
    if (err) return llvm_error(M->ctx, "optimizing", err);
    if (mod->diag[0]) return fc_set_error(M->ctx, FC_ERR_RUNTIME, "LLVM: optimizing: %s", mod->diag);

    if (o && o->keep_ir) {
        char *text = LLVMPrintModuleToString(M->m);
        size_t n = strlen(text);
        mod->ir = malloc(n + 1);
        if (mod->ir) memcpy(mod->ir, text, n + 1);
        LLVMDisposeMessage(text);
        if (!mod->ir) return fc_set_error(M->ctx, FC_ERR_NOMEM, "out of memory (LLVM IR text)");
    }
    return FC_OK;
}

/* Below this much work (elements x ops, all kernels together) a program
 * runs in well under a millisecond, and the code generator's time matters
 * more than its code: the JIT then generates code at -O0. */
#define SMALL_PROGRAM_WORK ((int64_t)1 << 22)

/* A JIT whose code generator runs at `level`. */
static fc_status create_jit(fc_context *ctx, fc_llvm_module *mod, LLVMCodeGenOptLevel level) {
    LLVMTargetMachineRef tm = LLVMCreateTargetMachine(host_target, host_triple, host_cpu, host_features, level,
                                                      LLVMRelocPIC, LLVMCodeModelSmall);
    if (!tm) return fc_set_error(ctx, FC_ERR_RUNTIME, "LLVM: cannot create a target machine for the JIT");
    LLVMOrcLLJITBuilderRef jb = LLVMOrcCreateLLJITBuilder();
    LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(jb, LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine(tm));
    LLVMErrorRef err = LLVMOrcCreateLLJIT(&mod->jit, jb); /* consumes the builder, which consumed tm */
    if (err) {
        mod->jit = NULL;
        return llvm_error(ctx, "creating the JIT", err);
    }
    /* Kernels call libm, and whatever the code generator emits calls to. */
    LLVMOrcDefinitionGeneratorRef gen = NULL;
    err = LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(&gen, LLVMOrcLLJITGetGlobalPrefix(mod->jit), NULL, NULL);
    if (err) return llvm_error(ctx, "resolving symbols of the process", err);
    LLVMOrcJITDylibAddGenerator(LLVMOrcLLJITGetMainJITDylib(mod->jit), gen);
    return FC_OK;
}

static fc_status compile_locked(const fc_plan *plan, const fc_llvm_options *o, fc_llvm_module *mod,
                                fc_llvm_kernel *kernels, bool *row_conflict) {
    fc_context *ctx = plan->g->ctx;
    LLVMOrcThreadSafeContextRef tsc = LLVMOrcCreateNewThreadSafeContext();
    lmod M = {.ctx = ctx, .c = LLVMOrcThreadSafeContextGetContext(tsc)};
    LLVMContextSetDiagnosticHandler(M.c, diag_handler, mod);
    init_types(&M);
    char name[96];
    snprintf(name, sizeof name, "fusec.%.64s", plan->g->name);
    M.m = LLVMModuleCreateWithNameInContext(name, M.c);
    LLVMSetTarget(M.m, host_triple);
    LLVMTargetDataRef layout = LLVMCreateTargetDataLayout(host_tm);
    LLVMSetModuleDataLayout(M.m, layout);
    LLVMDisposeTargetData(layout);
    fc_status st = build_module(&M, plan, o, mod, kernels);
    if (row_conflict) *row_conflict = M.row_conflict;
    /* The code generator runs at -O1 (LLVMCodeGenLevelLess): the IR is
     * optimized already, and on this backend's kernels the machine code is
     * as fast as at -O2 for about half the time. Small programs get -O0,
     * which halves it again (docs/CPU-BACKEND.md). */
    int64_t work = 0;
    for (int i = 0; i < plan->ngroups; i++) work += kernels[i].work;
    if (st == FC_OK)
        st = create_jit(ctx, mod, work < SMALL_PROGRAM_WORK ? LLVMCodeGenLevelNone : LLVMCodeGenLevelLess);
    if (st != FC_OK) {
        LLVMDisposeModule(M.m);
        LLVMOrcDisposeThreadSafeContext(tsc);
        return st;
    }
    /* The JIT owns the module (and, through it, the context) from here. */
    LLVMOrcThreadSafeModuleRef tsm = LLVMOrcCreateNewThreadSafeModule(M.m, tsc);
    LLVMOrcDisposeThreadSafeContext(tsc);
    LLVMErrorRef err = LLVMOrcLLJITAddLLVMIRModule(mod->jit, LLVMOrcLLJITGetMainJITDylib(mod->jit), tsm);
    if (err) return llvm_error(ctx, "adding the module to the JIT", err);

    /* The first lookup compiles the module to machine code. */
    for (int i = 0; i < plan->ngroups; i++) {
        const fc_group *gr = plan->groups[i];
        if (gr->kind != FC_GROUP_POINTWISE && gr->kind != FC_GROUP_REDUCE) continue;
        char sym[32];
        snprintf(sym, sizeof sym, "fc_g%d", i);
        LLVMOrcExecutorAddress addr = 0;
        err = LLVMOrcLLJITLookup(mod->jit, &addr, sym);
        if (err) return llvm_error(ctx, "compiling the kernels", err);
        if (mod->diag[0]) return fc_set_error(ctx, FC_ERR_RUNTIME, "LLVM: compiling the kernels: %s", mod->diag);
        kernels[i].fn = (fc_llvm_kernel_fn)(uintptr_t)addr;
    }
    return FC_OK;
}

fc_status fc_llvm_compile(const fc_plan *plan, const fc_llvm_options *o, fc_llvm_module **out,
                          fc_llvm_kernel *kernels, bool *row_conflict) {
    *out = NULL;
    if (row_conflict) *row_conflict = false;
    fc_context *ctx = plan->g->ctx;
    pthread_once(&host_once, init_host);
    if (!host_tm) return fc_set_error(ctx, FC_ERR_RUNTIME, "%s", host_err);
    fc_llvm_module *mod = calloc(1, sizeof *mod);
    if (!mod) return fc_set_error(ctx, FC_ERR_NOMEM, "out of memory (LLVM module)");
    pthread_mutex_lock(&llvm_lock);
    fc_status st = compile_locked(plan, o, mod, kernels, row_conflict);
    pthread_mutex_unlock(&llvm_lock);
    if (st != FC_OK) {
        fc_llvm_module_free(mod);
        return st;
    }
    *out = mod;
    return FC_OK;
}

const char *fc_llvm_module_ir(const fc_llvm_module *m) { return m ? m->ir : NULL; }

void fc_llvm_module_free(fc_llvm_module *m) {
    if (!m) return;
    if (m->jit) {
        pthread_mutex_lock(&llvm_lock);
        LLVMErrorRef err = LLVMOrcDisposeLLJIT(m->jit);
        pthread_mutex_unlock(&llvm_lock);
        if (err) LLVMConsumeError(err); /* nothing to do about it on teardown */
    }
    free(m->ir);
    free(m);
}
