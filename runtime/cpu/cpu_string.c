/* cpu_string.c - string_normalizer on the CPU backend: a library group
 * that calls the op's one definition (ir/strings.c), as the reference
 * interpreter does. Its result's element pointers go where the memory plan
 * puts the value; the bytes they point at are the program's, one buffer per
 * group, reused by the next run (fusec.h: valid until the program's next
 * run or its free). */
#include "runtime/cpu/cpu_impl.h"

#ifdef FUSEC_HAVE_LLVM

#include <stdlib.h>
#include <string.h>

fc_status fc_cpu_run_string(fc_cpu_program *p, int pos, const fc_group *gr, void *const *args) {
    const fc_node *n = gr->nodes[0];
    const fc_value *x = n->in[0], *y = n->out[0];
    const char *const *xs = args[0];
    int64_t numel = x->dims[x->rank - 1];
    int64_t bad = fc_strings_first_null(xs, numel);
    if (bad >= 0)
        return fc_set_error(p->ctx, FC_ERR_USAGE, "string_normalizer %%%s: string element %lld of its input is NULL",
                            y->name ? y->name : "?", (long long)bad);
    int64_t kept = fc_string_normalize_count(&n->a, xs, numel), want = y->dims[y->rank - 1];
    if (kept != want)
        return fc_set_error(p->ctx, FC_ERR_INPUT,
                            "string_normalizer %%%s: %lld strings remain of %lld, but the result's shape holds %lld "
                            "(how many remain depends on the values; the graph's shape attribute says how many it "
                            "expects)",
                            y->name ? y->name : "?", (long long)kept, (long long)numel, (long long)want);
    if (!p->strbuf && !(p->strbuf = calloc((size_t)p->plan.ngroups + 1, sizeof *p->strbuf)))
        return fc_set_error(p->ctx, FC_ERR_NOMEM, "out of memory (string results)");
    size_t bytes = fc_string_normalize_bytes(&n->a, xs, numel);
    char *buf = realloc(p->strbuf[pos], bytes);
    if (!buf) return fc_set_error(p->ctx, FC_ERR_NOMEM, "out of memory (string results)");
    p->strbuf[pos] = buf;
    fc_string_normalize(&n->a, xs, numel, args[gr->ninputs], buf);
    return FC_OK;
}

fc_status fc_cpu_own_strings(fc_cpu_program *p, fc_tensor *outputs, int nout) {
    for (int k = 0; k < nout; k++) {
        if (outputs[k].dtype != FC_STRING) continue;
        void *blk = fc_strings_pack(p->ctx, outputs[k].data, fc_tensor_numel(&outputs[k]));
        if (!blk) return fc_set_error(p->ctx, FC_ERR_NOMEM, "out of memory (string results)");
        free(outputs[k].data);
        outputs[k].data = blk;
    }
    return FC_OK;
}

void fc_cpu_free_strings(fc_cpu_program *p) {
    for (int i = 0; p->strbuf && i < p->plan.ngroups; i++) free(p->strbuf[i]);
    free(p->strbuf);
    p->strbuf = NULL;
}

#endif
