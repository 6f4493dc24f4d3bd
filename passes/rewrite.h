/*
 * rewrite.h - graph-rewriting utilities shared by the passes (internal).
 *
 * A graph is an array of nodes in topological order. A pass rewrites it by
 * REBUILDING it: the old array is set aside, the graph's array is emptied
 * (the arena stays), and the pass walks the old nodes in order. For each it
 * either keeps the node (it is appended again, its operands remapped) or
 * builds replacement nodes "here" (fc_build appends them) and maps the old
 * node's results to the new values. Graph results are remapped at the end.
 *
 *     fc_rewriter rw;
 *     if (fc_rw_begin(&rw, g) != FC_OK) return g->status;
 *     for (fc_node *n; (n = fc_rw_next(&rw));) {
 *         fc_rw_remap(&rw, n);                 // operands -> their replacements
 *         if (!want_to_rewrite(n)) { fc_rw_keep(&rw, n); continue; }
 *         fc_value *y = fc_rw_op2(&rw, FC_OP_MUL, n->in[0], n->in[0]);
 *         fc_rw_replace(&rw, n->out[0], y);    // every later use of n's result reads y
 *     }
 *     return fc_rw_end(&rw);
 *
 * Why rebuild instead of editing in place: replacements must come before
 * their uses, and appending at the position of the node being replaced gives
 * that for free; the topological order never has to be repaired.
 *
 * Invariants the rewriter keeps:
 *  - A node is in the graph exactly when its `dead` flag is false: old nodes
 *    are marked dead when the rebuild begins and revived by fc_rw_keep, so a
 *    node the pass dropped stays dead (and its results get id -1, so the
 *    verifier catches a stale use of them).
 *  - Replacements never change a value's dtype or shape (asserted).
 *  - Kept values keep their names; new values have name NULL (the printer
 *    invents %vN names).
 *  - New nodes take their source location from the old node being visited
 *    (g->cur_loc), so a later error still points at the statement. A new
 *    node that replaces an old one (fc_rw_replace) also covers the lines of
 *    the old nodes between its operands and the one it replaces (a fused
 *    pattern's), so a launch's source note names every op it runs.
 *  - When the rebuild ends, node and value ids are renumbered densely (nodes
 *    in array order; params, then each node's weak operands and results), so
 *    arrays indexed by id stay as small as the graph.
 *
 * Errors: every builder returns NULL on failure and leaves the graph
 * poisoned (g->status, message on the context), and a NULL operand makes
 * the next builder return NULL too, so a chain of builds is checked once.
 * fc_rw_end always frees the rewriter and returns g->status; after a
 * failure the graph can only be freed.
 */
#ifndef FC_PASSES_REWRITE_H
#define FC_PASSES_REWRITE_H

#include "ir.h"

typedef struct fc_rewriter {
    fc_graph *g;
    fc_node **old;    /* the node array being walked (a private copy) */
    int nold, next;   /* its length; the index of the next node to visit */
    fc_value **map;   /* by value id: the value replacing it, or NULL */
    int cap_map;
    fc_node **made;   /* nodes made by fc_rw_make: retired at the end if never kept */
    int nmade, cap_made;
    fc_loc saved_loc; /* g->cur_loc before the rebuild, restored at the end */
    int first_new_id; /* nodes with an id from this one on were made by the rebuild */
} fc_rewriter;

/* Start rebuilding g. On failure (out of memory) the graph is poisoned and
 * nothing needs ending. A graph already poisoned is refused. */
fc_status fc_rw_begin(fc_rewriter *rw, fc_graph *g);
/* The next old node (skipping nodes already dead), or NULL at the end or
 * after an error. Sets g->cur_loc to its location. The node is not in the
 * graph until it is kept. */
fc_node *fc_rw_next(fc_rewriter *rw);
/* What v stands for now: its replacement (followed through chains), or v. */
fc_value *fc_rw_value(const fc_rewriter *rw, fc_value *v);
/* Replace every later use of `from` (operands of nodes not yet kept, and
 * graph results) with `to`. Both must have one dtype and shape. Replacing a
 * value that an already-kept node reads is a bug: those uses are not
 * revisited. Returns false on out of memory. */
bool fc_rw_replace(fc_rewriter *rw, fc_value *from, fc_value *to);
/* Remap the operands of n in place through the value map. */
void fc_rw_remap(fc_rewriter *rw, fc_node *n);
/* Append n "here", its operands remapped first. */
bool fc_rw_keep(fc_rewriter *rw, fc_node *n);

/* Make a node with fc_build (operands remapped, types inferred, located at
 * g->cur_loc) WITHOUT placing it: the caller may inspect it, then keep it
 * with fc_rw_keep or drop it. NULL on error. */
fc_node *fc_rw_make(fc_rewriter *rw, fc_op op, fc_value *const *in, int nin, const fc_attrs *a);
/* Make a node and place it here. NULL on error. */
fc_node *fc_rw_build(fc_rewriter *rw, fc_op op, fc_value *const *in, int nin, const fc_attrs *a);

/* Builders placed here that return the (first) result; NULL on error or if
 * an operand is NULL. */
fc_value *fc_rw_op1(fc_rewriter *rw, fc_op op, fc_value *x);
fc_value *fc_rw_op2(fc_rewriter *rw, fc_op op, fc_value *a, fc_value *b);
/* a op s, with s a weak float scalar (it takes a's dtype when a is a float). */
fc_value *fc_rw_op2s(fc_rewriter *rw, fc_op op, fc_value *a, double s);
/* cast(x, to=dt), or x itself when it already has dtype dt. */
fc_value *fc_rw_cast(fc_rewriter *rw, fc_value *x, fc_dtype dt);
fc_value *fc_rw_reduce(fc_rewriter *rw, fc_op op, fc_value *x, int naxes, const int64_t *axes, bool keepdim);
fc_value *fc_rw_reshape(fc_rewriter *rw, fc_value *x, int rank, const fc_dim *shape);
/* A weak scalar operand (a bare number; `is_int` as if written "2", which
 * keeps an integer tensor integer). NULL on out of memory. */
fc_value *fc_rw_scalar(fc_rewriter *rw, double v, bool is_int);

/* Finish: remap the graph results, mark dropped nodes dead, renumber ids,
 * free the rewriter. Returns g->status (FC_OK, or the first error). */
fc_status fc_rw_end(fc_rewriter *rw);

/* ---- helpers outside a rebuild ------------------------------------------ */

/* A whole rebuild that lowers nodes: each node for which lower returns a
 * value is replaced by it, cast back to the node's dtype (one rounding of
 * a wider result); a NULL keeps the node (or, after an error, which
 * poisons the graph, ends the rebuild with it). Returns fc_rw_end's status. */
typedef fc_value *(*fc_rw_lower_fn)(fc_rewriter *rw, fc_node *n, void *arg);
fc_status fc_rw_lower_nodes(fc_graph *g, fc_rw_lower_fn lower, void *arg);

/* What every pass checks first: a graph, not poisoned (its status is
 * returned), whose results were set (else FC_ERR_USAGE, recorded on the
 * context: without results every node would be dead). */
fc_status fc_pass_precheck(fc_graph *g, const char *pass);

/* Same dtype, rank and dims. */
bool fc_same_type(const fc_value *a, const fc_value *b);
/* Whether a and b have the same rank and dims (any dtypes). */
bool fc_same_dims(const fc_value *a, const fc_value *b);
/* In place: every operand of a live node and every graph result that is
 * `from` becomes `to` (same type required). `to` must be defined before the
 * first use of `from`; the caller guarantees it. */
void fc_replace_all_uses(fc_graph *g, fc_value *from, fc_value *to);
/* Uses of every value by live nodes and graph results, indexed by value id
 * (an array of g->next_value_id ints, freed with fc_ctx_freemem). A value
 * returned twice, or read twice by one node, counts twice. NULL on OOM. */
int *fc_use_counts(fc_graph *g);
/* Remove dead nodes from g->nodes (their results get id -1) and renumber
 * node and value ids densely. */
void fc_graph_compact(fc_graph *g);

#endif
