/* plan_dot.c - a launch plan in Graphviz's DOT language (plan_dot.h). */
#include "lower/plan_dot.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Fill and border colours by group kind, so that a picture shows at a
 * glance where the library calls and the row kernels are. */
static const char *kind_color(fc_group_kind k) {
    switch (k) {
    case FC_GROUP_POINTWISE: return "#dbeafe";
    case FC_GROUP_REDUCE: return "#dcfce7";
    case FC_GROUP_LIBRARY: return "#fde68a";
    case FC_GROUP_ALIAS: return "#e5e7eb";
    case FC_GROUP_ATTENTION: return "#fbcfe8";
    }
    return "#ffffff";
}

static const char *kind_name(fc_group_kind k) {
    switch (k) {
    case FC_GROUP_POINTWISE: return "pointwise";
    case FC_GROUP_REDUCE: return "reduce";
    case FC_GROUP_LIBRARY: return "library";
    case FC_GROUP_ALIAS: return "view";
    case FC_GROUP_ATTENTION: return "attention";
    }
    return "?";
}

/* A quoted DOT string of s. */
static void quoted(fc_strbuf *t, const char *s) {
    fc_strbuf_printf(t, "\"");
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fc_strbuf_printf(t, "\\%c", *s);
        else if (*s == '\n') fc_strbuf_printf(t, "\\n");
        else fc_strbuf_printf(t, "%c", *s);
    }
    fc_strbuf_printf(t, "\"");
}

static const char *type_of(const fc_graph *g, const fc_value *v, char *buf, size_t n) {
    return fc_type_str(g, v->dtype, v->rank, v->dims, buf, n);
}

/* The DOT node a value comes from: its defining op, or the parameter. */
static void source_node(fc_strbuf *t, const fc_value *v) {
    if (v->def) fc_strbuf_printf(t, "n%d", v->def->id);
    else fc_strbuf_printf(t, "v%d", v->id);
}

char *fc_plan_dot(fc_context *ctx, const fc_plan *plan) {
    const fc_graph *g = plan->g;
    fc_strbuf t = {.ctx = ctx};
    char ty[160];
    fc_strbuf_printf(&t, "digraph ");
    quoted(&t, g->name ? g->name : "graph");
    fc_strbuf_printf(&t, " {\n  rankdir=TB;\n  node [shape=box, style=\"rounded,filled\", fillcolor=white, "
                         "fontname=\"Helvetica\", fontsize=10];\n  edge [fontname=\"Helvetica\", fontsize=8];\n");
    for (int i = 0; i < g->nparams; i++) {
        const fc_value *v = g->params[i];
        char label[256];
        snprintf(label, sizeof label, "%%%s\n%s", v->name ? v->name : "?", type_of(g, v, ty, sizeof ty));
        fc_strbuf_printf(&t, "  v%d [shape=ellipse, fillcolor=\"#f3f4f6\", label=", v->id);
        quoted(&t, label);
        fc_strbuf_printf(&t, "];\n");
    }
    for (int gi = 0; gi < plan->ngroups; gi++) {
        const fc_group *gr = plan->groups[gi];
        fc_strbuf_printf(&t, "  subgraph cluster_%d {\n    style=filled; color=\"#6b7280\"; fillcolor=\"%s\";\n    label=",
                         gi, kind_color(gr->kind));
        char label[96];
        snprintf(label, sizeof label, "launch %d: %s", gi, kind_name(gr->kind));
        quoted(&t, label);
        fc_strbuf_printf(&t, ";\n");
        for (int k = 0; k < gr->nnodes; k++) {
            const fc_node *nd = gr->nodes[k];
            char nl[128];
            const char *src = fc_graph_src_op(g, nd->loc);
            if (src) snprintf(nl, sizeof nl, "%s\n%s", fc_op_table[nd->op].name, src);
            else if (nd->loc.line > 0) snprintf(nl, sizeof nl, "%s\nline %d", fc_op_table[nd->op].name, nd->loc.line);
            else snprintf(nl, sizeof nl, "%s", fc_op_table[nd->op].name);
            fc_strbuf_printf(&t, "    n%d [label=", nd->id);
            quoted(&t, nl);
            fc_strbuf_printf(&t, "];\n");
        }
        fc_strbuf_printf(&t, "  }\n");
    }
    /* Edges: every operand of every planned op, labelled with its type. */
    for (int gi = 0; gi < plan->ngroups; gi++) {
        const fc_group *gr = plan->groups[gi];
        for (int k = 0; k < gr->nnodes; k++) {
            const fc_node *nd = gr->nodes[k];
            for (int a = 0; a < nd->nin; a++) {
                const fc_value *v = nd->in[a];
                if (v->weak) continue; /* a bare number: part of the op */
                fc_strbuf_printf(&t, "  ");
                source_node(&t, v);
                fc_strbuf_printf(&t, " -> n%d [label=", nd->id);
                quoted(&t, type_of(g, v, ty, sizeof ty));
                fc_strbuf_printf(&t, "];\n");
            }
        }
    }
    for (int k = 0; k < g->noutputs; k++) {
        const fc_value *v = g->outputs[k];
        fc_strbuf_printf(&t, "  r%d [shape=ellipse, fillcolor=\"#f3f4f6\", label=\"result %d\"];\n  ", k, k);
        source_node(&t, v);
        fc_strbuf_printf(&t, " -> r%d [label=", k);
        quoted(&t, type_of(g, v, ty, sizeof ty));
        fc_strbuf_printf(&t, "];\n");
    }
    fc_strbuf_printf(&t, "}\n");
    if (t.oom || !t.buf) {
        free(t.buf);
        fc_set_error(ctx, FC_ERR_NOMEM, "out of memory (plan dot)");
        return NULL;
    }
    return t.buf;
}
