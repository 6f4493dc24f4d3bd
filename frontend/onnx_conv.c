/* onnx_conv.c - Conv, ConvTranspose, MaxPool, AveragePool and Resize (and
 * Upsample) as the IR's conv, conv_transpose, max_pool, avg_pool and
 * resize ops (ops.def; passes/lower_conv.c lowers them).
 *
 * The attributes are ONNX's, resolved here to explicit pads (auto_pad
 * SAME_UPPER, SAME_LOWER and VALID, output_shape for ConvTranspose), so the
 * IR's window holds numbers only. The spatial dims must be static.
 */
#include "onnx_ops.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MAX_SPATIAL FC_MAX_SPATIAL
#define MAX_ATTR ((int64_t)1 << 30) /* strides, dilations, pads: keeps the size arithmetic in range */

typedef struct window {
    int ns;                   /* spatial dims */
    int64_t k[MAX_SPATIAL];   /* kernel size */
    int64_t s[MAX_SPATIAL];   /* stride */
    int64_t d[MAX_SPATIAL];   /* dilation */
    int64_t pb[MAX_SPATIAL], pe[MAX_SPATIAL]; /* explicit pads, begin and end */
    int64_t o[MAX_SPATIAL];   /* output size */
} window;

static int ints_attr(const Onnx__NodeProto *n, const char *name, int64_t *out, int cap) {
    const Onnx__AttributeProto *a = attr(n, name);
    if (!a) return -1;
    if ((int)a->n_ints > cap) return -2;
    for (size_t i = 0; i < a->n_ints; i++) out[i] = a->ints[i];
    return (int)a->n_ints;
}

static bool str_attr_is(const Onnx__NodeProto *n, const char *name, const char *want, const char *def) {
    const Onnx__AttributeProto *a = attr(n, name);
    if (!a || !a->has_s) return !strcmp(want, def);
    return a->s.len == strlen(want) && !memcmp(a->s.data, want, a->s.len);
}

/* The window of node n over x (kernel sizes given, or from kernel_shape),
 * its pads and output sizes. ceil: pool's ceil_mode. */
static fc_status make_window(ox_ctx *ox, const Onnx__NodeProto *n, const fc_value *x, const int64_t *kernel, window *w,
                             bool ceil) {
    memset(w, 0, sizeof *w);
    w->ns = x->rank - 2;
    if (w->ns < 1 || w->ns > MAX_SPATIAL) return ERR("expects an input [N, C, D1 .. Dn] with n from 1 to %d", MAX_SPATIAL);
    for (int i = 0; i < x->rank; i++)
        if (fc_dim_is_sym(x->dims[i])) return ERR("dim %d of the input is symbolic; bind it (--bind)", i);
    int64_t v[2 * MAX_SPATIAL];
    if (kernel) {
        memcpy(w->k, kernel, sizeof(int64_t) * (size_t)w->ns);
    } else if (ints_attr(n, "kernel_shape", v, MAX_SPATIAL) != w->ns) {
        return ERR("kernel_shape must have one entry per spatial dim");
    } else {
        memcpy(w->k, v, sizeof(int64_t) * (size_t)w->ns);
    }
    for (int i = 0; i < w->ns; i++) w->s[i] = w->d[i] = 1;
    int c;
    if ((c = ints_attr(n, "strides", v, MAX_SPATIAL)) >= 0) {
        if (c != w->ns) return ERR("strides must have one entry per spatial dim");
        memcpy(w->s, v, sizeof(int64_t) * (size_t)w->ns);
    }
    if ((c = ints_attr(n, "dilations", v, MAX_SPATIAL)) >= 0) {
        if (c != w->ns) return ERR("dilations must have one entry per spatial dim");
        memcpy(w->d, v, sizeof(int64_t) * (size_t)w->ns);
    }
    if ((c = ints_attr(n, "pads", v, 2 * MAX_SPATIAL)) >= 0) {
        if (c != 2 * w->ns) return ERR("pads must have two entries per spatial dim");
        for (int i = 0; i < w->ns; i++) {
            w->pb[i] = v[i];
            w->pe[i] = v[w->ns + i];
        }
    }
    bool same_upper = str_attr_is(n, "auto_pad", "SAME_UPPER", "NOTSET");
    bool same_lower = str_attr_is(n, "auto_pad", "SAME_LOWER", "NOTSET");
    bool valid = str_attr_is(n, "auto_pad", "VALID", "NOTSET");
    if (!same_upper && !same_lower && !valid && !str_attr_is(n, "auto_pad", "NOTSET", "NOTSET"))
        return ERR("auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID");
    for (int i = 0; i < w->ns; i++) {
        if (w->k[i] < 1 || w->s[i] < 1 || w->d[i] < 1 || w->pb[i] < 0 || w->pe[i] < 0)
            return ERR("kernel sizes, strides and dilations must be positive, pads not negative");
        if (w->k[i] > MAX_ATTR || w->s[i] > MAX_ATTR || w->d[i] > MAX_ATTR || w->pb[i] > MAX_ATTR || w->pe[i] > MAX_ATTR)
            return ERR("a kernel size, stride, dilation or pad over 2^30");
        int64_t in = x->dims[i + 2], span = w->d[i] * (w->k[i] - 1) + 1;
        if (valid) w->pb[i] = w->pe[i] = 0;
        if (same_upper || same_lower) {
            int64_t o = (in + w->s[i] - 1) / w->s[i], total = (o - 1) * w->s[i] + span - in;
            if (total < 0) total = 0;
            w->pb[i] = same_upper ? total / 2 : total - total / 2;
            w->pe[i] = total - w->pb[i];
        }
        int64_t padded = in + w->pb[i] + w->pe[i];
        if (padded < span) return ERR("the window (%lld) is larger than the padded input (%lld)", (long long)span, (long long)padded);
        int64_t o = (padded - span) / w->s[i] + 1;
        if (ceil && (padded - span) % w->s[i]) {
            o++;
            if ((o - 1) * w->s[i] >= in + w->pb[i]) o--; /* the last window must start inside the input */
        }
        w->o[i] = o;
    }
    return FC_OK;
}

/* The IR's window of w (stride, dilation, explicit pads, the kernel for
 * the pools). */
static fc_window to_window(const window *w) {
    fc_window fw = {.auto_pad = FC_PAD_EXPLICIT};
    for (int i = 0; i < w->ns; i++) {
        fw.kernel[i] = w->k[i];
        fw.stride[i] = w->s[i];
        fw.dilation[i] = w->d[i];
        fw.pad_begin[i] = w->pb[i];
        fw.pad_end[i] = w->pe[i];
    }
    return fw;
}

fc_status ox_op_pool(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0);
    if (!x) return ERR("needs an input");
    bool is_max = !strcmp(n->op_type, "MaxPool");
    if (is_max && ox->nout > 1) return ERR("the Indices output is not supported");
    window w;
    bool ceil = ai(n, "ceil_mode", 0) != 0;
    fc_status st = make_window(ox, n, x, NULL, &w, ceil);
    if (st) return st;
    if (!is_max && !isf(x->dtype)) return ERR("AveragePool of a %s input", fc_dtype_name(x->dtype));
    fc_window fw = to_window(&w);
    fw.ceil_mode = ceil;
    fw.count_include_pad = ai(n, "count_include_pad", 0) != 0;
    OUT(0, is_max ? fc_max_pool(G, x, &fw) : fc_avg_pool(G, x, &fw));
    return FC_OK;
}

static fc_status check_weight(ox_ctx *ox, const fc_value *x, const fc_value *wt) {
    if (!x || !wt) return ERR("needs an input and a weight");
    if (wt->rank != x->rank) return ERR("the weight must have the input's rank");
    for (int i = 0; i < wt->rank; i++)
        if (fc_dim_is_sym(wt->dims[i])) return ERR("the weight's dims must be static");
    if (!isf(x->dtype) || wt->dtype != x->dtype) return ERR("expects float input and weight of one dtype");
    return FC_OK;
}

fc_status ox_op_conv(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0), *wt = in(ox, 1), *b = in(ox, 2);
    fc_status st = check_weight(ox, x, wt);
    if (st) return st;
    int64_t groups = ai(n, "group", 1);
    if (groups < 1 || x->dims[1] % groups || wt->dims[0] % groups || wt->dims[1] * groups != x->dims[1])
        return ERR("the channels (%lld in, weight [%lld, %lld, ..]) do not fit group %lld", (long long)x->dims[1],
                   (long long)wt->dims[0], (long long)wt->dims[1], (long long)groups);
    window w;
    if ((st = make_window(ox, n, x, wt->dims + 2, &w, false))) return st;
    if (b && (b->rank != 1 || b->dims[0] != wt->dims[0])) return ERR("the bias must be [M]");
    fc_window fw = to_window(&w);
    fw.groups = groups;
    OUT(0, fc_conv(G, x, wt, b, &fw));
    return FC_OK;
}

fc_status ox_op_conv_transpose(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0), *wt = in(ox, 1), *b = in(ox, 2);
    fc_status st = check_weight(ox, x, wt);
    if (st) return st;
    int64_t groups = ai(n, "group", 1), C = x->dims[1];
    if (groups < 1 || C % groups || wt->dims[0] != C) return ERR("the weight must be [C, M/group, k..]");
    int ns = x->rank - 2;
    if (ns < 1 || ns > MAX_SPATIAL) return ERR("expects an input [N, C, D1 .. Dn] with n from 1 to %d", MAX_SPATIAL);
    for (int i = 0; i < x->rank; i++)
        if (fc_dim_is_sym(x->dims[i])) return ERR("dim %d of the input is symbolic; bind it (--bind)", i);
    int64_t s[MAX_SPATIAL], d[MAX_SPATIAL], pads[2 * MAX_SPATIAL] = {0}, opad[MAX_SPATIAL] = {0}, oshape[MAX_SPATIAL];
    for (int i = 0; i < ns; i++) s[i] = d[i] = 1;
    int c;
    if ((c = ints_attr(n, "strides", s, MAX_SPATIAL)) >= 0 && c != ns) return ERR("strides must have one entry per spatial dim");
    if ((c = ints_attr(n, "dilations", d, MAX_SPATIAL)) >= 0 && c != ns) return ERR("dilations must have one entry per spatial dim");
    if ((c = ints_attr(n, "pads", pads, 2 * MAX_SPATIAL)) >= 0 && c != 2 * ns) return ERR("pads must have two entries per spatial dim");
    if ((c = ints_attr(n, "output_padding", opad, MAX_SPATIAL)) >= 0 && c != ns) return ERR("output_padding must have one entry per spatial dim");
    int nos = ints_attr(n, "output_shape", oshape, MAX_SPATIAL);
    bool same_upper = str_attr_is(n, "auto_pad", "SAME_UPPER", "NOTSET");
    bool same_lower = str_attr_is(n, "auto_pad", "SAME_LOWER", "NOTSET");
    if (nos >= 0 && nos != ns) return ERR("output_shape must have one entry per spatial dim");
    /* Negative pads (an output_shape past the full result) become zero
     * blocks after the op, the bias added after them. */
    int64_t grow[2 * MAX_SPATIAL] = {0};
    bool grows = false;
    fc_window fw = {.auto_pad = FC_PAD_EXPLICIT, .groups = groups};
    for (int i = 0; i < ns; i++) {
        int64_t lim[] = {s[i], d[i], pads[i], pads[ns + i], opad[i], nos >= 0 ? oshape[i] : 0, wt->dims[i + 2]};
        for (size_t j = 0; j < sizeof lim / sizeof *lim; j++)
            if (lim[j] > MAX_ATTR || lim[j] < -MAX_ATTR) return ERR("a stride, dilation, pad, size or kernel dim over 2^30");
        if (s[i] < 1 || d[i] < 1) return ERR("strides and dilations must be positive");
        int64_t in = x->dims[i + 2], k = wt->dims[i + 2], full = s[i] * (in - 1) + opad[i] + (k - 1) * d[i] + 1;
        if (nos >= 0 || same_upper || same_lower) {
            int64_t out = nos >= 0 ? oshape[i] : in * s[i], total = full - out;
            /* as the ONNX reference computes them: SAME_UPPER puts the smaller
             * half first, anything else (SAME_LOWER, output_shape) the larger,
             * halves rounded down */
            int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
            pads[i] = same_upper ? half : total - half;
            pads[ns + i] = total - pads[i];
        } else if (pads[i] < 0 || pads[ns + i] < 0) {
            return ERR("pads must not be negative");
        }
        for (int e = 0; e < 2; e++) {
            int64_t *p = &pads[e * ns + i];
            if (*p < 0) {
                grow[e * ns + i] = -*p;
                *p = 0;
                grows = true;
            }
        }
        fw.stride[i] = s[i];
        fw.dilation[i] = d[i];
        fw.pad_begin[i] = pads[i];
        fw.pad_end[i] = pads[ns + i];
        fw.output_padding[i] = opad[i];
    }
    if (b && (b->rank != 1 || b->dims[0] != groups * wt->dims[1])) return ERR("the bias must be [M]");
    fc_value *y = fc_conv_transpose(G, x, wt, grows ? NULL : b, &fw);
    if (grows) {
        int64_t p[2 * FC_MAX_RANK] = {0};
        for (int i = 0; i < ns; i++) {
            p[i + 2] = grow[i];
            p[x->rank + i + 2] = grow[ns + i];
        }
        y = fc_pad(G, y, p, FC_PAD_CONSTANT, 0);
        if (b) {
            fc_dim bd[FC_MAX_RANK];
            bd[0] = b->dims[0];
            for (int i = 0; i < ns; i++) bd[i + 1] = 1;
            y = fc_add(G, y, fc_reshape(G, b, ns + 1, bd));
        }
    }
    OUT(0, y);
    return FC_OK;
}

/* The value of string attribute `name` into buf ("" when absent). */
static void str_attr(const Onnx__NodeProto *n, const char *name, char *buf, size_t cap) {
    const Onnx__AttributeProto *a = attr(n, name);
    size_t len = a && a->has_s ? (a->s.len < cap - 1 ? a->s.len : cap - 1) : 0;
    if (len) memcpy(buf, a->s.data, len);
    buf[len] = 0;
}

/* Resize (opset 10 on: X, [roi], scales or sizes) and Upsample (scales as
 * an attribute, then an input): nearest and linear, over the spatial dims,
 * with the coordinate modes of ops.def's resize. The IR computes a dim's
 * scale as its output over its input size, so a given scale must be
 * exactly that. */
fc_status ox_op_resize(ox_ctx *ox, const Onnx__NodeProto *n) {
    fc_value *x = in(ox, 0);
    if (!x) return ERR("needs an input");
    int r = x->rank;
    if (r < 3 || r > MAX_SPATIAL + 2) return ERR("expects an input [N, C, D1 .. Dn] with n from 1 to %d", MAX_SPATIAL);
    for (int i = 0; i < r; i++)
        if (fc_dim_is_sym(x->dims[i])) return ERR("dim %d of the input is symbolic; bind it (--bind)", i);
    bool upsample = !strcmp(n->op_type, "Upsample");
    char mode[32], coord[32] = "half_pixel", nearest[32] = "round_prefer_floor";
    str_attr(n, "mode", mode, sizeof mode);
    if (!mode[0]) snprintf(mode, sizeof mode, "nearest");
    if (upsample || ox->opset < 11) {
        /* Upsample and Resize-10: asymmetric, nearest rounds down */
        snprintf(coord, sizeof coord, "asymmetric");
        snprintf(nearest, sizeof nearest, "floor");
    } else {
        char a[32];
        str_attr(n, "coordinate_transformation_mode", a, sizeof a);
        if (a[0]) snprintf(coord, sizeof coord, "%s", a);
        str_attr(n, "nearest_mode", a, sizeof a);
        if (a[0]) snprintf(nearest, sizeof nearest, "%s", a);
        if (ai(n, "antialias", 0)) return ERR("antialias is not supported");
        str_attr(n, "keep_aspect_ratio_policy", a, sizeof a);
        if (a[0] && strcmp(a, "stretch")) return ERR("keep_aspect_ratio_policy '%s' is not supported", a);
    }
    fc_resize_mode m;
    if (!strcmp(mode, "linear") || !strcmp(mode, "bilinear")) m = FC_RESIZE_LINEAR;
    else if (strcmp(mode, "nearest")) return ERR("mode '%s' is not supported", mode);
    else if (!strcmp(nearest, "round_prefer_floor")) m = FC_RESIZE_NEAREST;
    else if (!strcmp(nearest, "round_prefer_ceil")) m = FC_RESIZE_NEAREST_HALF_UP;
    else if (!strcmp(nearest, "floor")) m = FC_RESIZE_NEAREST_FLOOR;
    else if (!strcmp(nearest, "ceil")) m = FC_RESIZE_NEAREST_CEIL;
    else return ERR("nearest_mode '%s' is not supported", nearest);
    fc_resize_coord cm;
    if (!strcmp(coord, "half_pixel")) cm = FC_COORD_HALF_PIXEL;
    else if (!strcmp(coord, "align_corners")) cm = FC_COORD_ALIGN_CORNERS;
    else if (!strcmp(coord, "asymmetric")) cm = FC_COORD_ASYMMETRIC;
    else if (!strcmp(coord, "pytorch_half_pixel")) cm = FC_COORD_PYTORCH_HALF_PIXEL;
    else return ERR("coordinate_transformation_mode '%s' is not supported", coord);
    /* the axes (opset 18), then sizes or scales per axis */
    int axes[FC_MAX_RANK], na = r;
    for (int i = 0; i < r; i++) axes[i] = i;
    int64_t ax[FC_MAX_RANK];
    int nax = ints_attr(n, "axes", ax, FC_MAX_RANK);
    if (nax == -2) return ERR("axes has more than %d entries", FC_MAX_RANK);
    if (nax >= 0) {
        na = nax;
        for (int i = 0; i < na; i++) {
            axes[i] = norm_axis(ax[i], r);
            if (axes[i] < 0 || axes[i] >= r) return ERR("axis %lld out of range", (long long)ax[i]);
        }
    }
    double scales[FC_MAX_RANK];
    int64_t sizes[FC_MAX_RANK];
    bool have_sizes = false, have_scales = false;
    int si = upsample || ox->opset < 11 ? 1 : 2;
    const Onnx__AttributeProto *sa = upsample ? attr(n, "scales") : NULL;
    if (sa) {
        if ((int)sa->n_floats != r) return ERR("scales must have one entry per dim");
        for (int i = 0; i < r; i++) scales[i] = sa->floats[i];
        have_scales = true;
    }
    ox_const *ks = has_in(ox, si) ? ox->in[si]->k : NULL, *kz = !upsample && ox->opset >= 11 && has_in(ox, 3) ? ox->in[3]->k : NULL;
    if (has_in(ox, si) && !ks) return ERR("scales must be known when importing");
    if (!upsample && ox->opset >= 11 && has_in(ox, 3) && !kz) return ERR("sizes must be known when importing");
    if (ks && ks->n > 0) {
        if (ks->n != na || !ks->f) return ERR("scales must be floats, one per axis");
        for (int i = 0; i < r; i++) scales[i] = 1;
        for (int i = 0; i < na; i++) scales[axes[i]] = ks->f[i];
        have_scales = true;
    }
    if (kz && kz->n > 0) {
        if (kz->n != na) return ERR("sizes must have one entry per axis");
        for (int i = 0; i < r; i++) sizes[i] = x->dims[i];
        for (int i = 0; i < na; i++) sizes[axes[i]] = ox_const_int(kz, i);
        have_sizes = true;
    }
    if (have_sizes == have_scales) return ERR("needs exactly one of scales and sizes");
    fc_dim shape[FC_MAX_RANK];
    for (int i = 0; i < r; i++) {
        int64_t in_i = x->dims[i];
        if (have_scales) {
            if (!(scales[i] > 0) || scales[i] * (double)in_i > (double)MAX_ATTR) return ERR("scale %g of dim %d", scales[i], i);
            sizes[i] = (int64_t)floor(scales[i] * (double)in_i);
            if ((double)sizes[i] / (double)in_i != scales[i] && sizes[i] != in_i)
                return ERR("scale %g of dim %d is not its output over its input size (%lld -> %lld)", scales[i], i,
                           (long long)in_i, (long long)sizes[i]);
        }
        if (i < 2 && sizes[i] != in_i) return ERR("resizing dim %d (N or C) is not supported", i);
        shape[i] = sizes[i];
    }
    OUT(0, fc_resize(G, x, r, shape, m, cm));
    return FC_OK;
}
