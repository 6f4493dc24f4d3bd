/* mono.c - products of dims with symbols kept as symbols (fc_mono). */
#include "ir.h"

#include <string.h>

fc_mono fc_mono_one(void) {
    fc_mono m;
    memset(&m, 0, sizeof m);
    m.c = 1;
    return m;
}

void fc_mono_mul_dim(fc_mono *m, fc_dim d) {
    if (fc_dim_is_sym(d)) {
        int i = fc_dim_sym_index(d);
        FC_ASSERT(i >= 0 && i < FC_DYN_MAX_SYMS);
        m->e[i]++;
    } else {
        m->c *= d;
    }
}

fc_mono fc_mono_of(const fc_dim *dims, int rank) {
    fc_mono m = fc_mono_one();
    for (int i = 0; i < rank; i++) fc_mono_mul_dim(&m, dims[i]);
    return m;
}

fc_mono fc_mono_zero(void) {
    fc_mono m;
    memset(&m, 0, sizeof m);
    return m;
}

fc_mono fc_mono_dim(fc_dim d) {
    fc_mono m = fc_mono_one();
    fc_mono_mul_dim(&m, d);
    return m;
}

fc_mono fc_mono_mul(fc_mono a, const fc_mono *b) {
    a.c *= b->c;
    for (int i = 0; i < FC_DYN_MAX_SYMS; i++) a.e[i] += b->e[i];
    return a;
}

/* Dense strides of an operand's batch dims dims[0 .. rank-2) on the
 * broadcast batch dims [0, nb): 0 where it is broadcast. */
static void batch_strides(const fc_dim *dims, int rank, int nb, fc_mono *out) {
    const int rb = rank - 2;
    fc_mono s = fc_mono_dim(dims[rank - 2]), last = fc_mono_dim(dims[rank - 1]);
    s = fc_mono_mul(s, &last);
    for (int d = nb - 1; d >= 0; d--) {
        int j = d - (nb - rb);
        if (j < 0) {
            out[d] = fc_mono_zero();
            continue;
        }
        out[d] = dims[j] == 1 ? fc_mono_zero() : s;
        fc_mono dj = fc_mono_dim(dims[j]);
        s = fc_mono_mul(s, &dj);
    }
}

int fc_matmul_batch_layout(const fc_dim *ad, int ra, const fc_dim *wd, int rw, fc_mono mn, fc_mono *size,
                           fc_mono *sa, fc_mono *sw, fc_mono *sy) {
    const int nb = (ra > rw ? ra : rw) - 2;
    fc_dim bsize[FC_MAX_RANK];
    batch_strides(ad, ra, nb, sa);
    batch_strides(wd, rw, nb, sw);
    for (int d = 0; d < nb; d++) {
        int ja = d - (nb - (ra - 2)), jw = d - (nb - (rw - 2));
        fc_dim da = ja >= 0 ? ad[ja] : 1, dw = jw >= 0 ? wd[jw] : 1;
        bsize[d] = da == 1 ? dw : da;
    }
    fc_mono s = mn;
    for (int d = nb - 1; d >= 0; d--) {
        sy[d] = bsize[d] == 1 ? fc_mono_zero() : s;
        fc_mono sd = fc_mono_dim(bsize[d]);
        s = fc_mono_mul(s, &sd);
    }
    /* Size-1 dims carry nothing: dropped. */
    int k = 0;
    for (int d = 0; d < nb; d++) {
        if (bsize[d] == 1) continue;
        size[k] = fc_mono_dim(bsize[d]), sa[k] = sa[d], sw[k] = sw[d], sy[k] = sy[d];
        k++;
    }
    return k;
}

bool fc_mono_eq(const fc_mono *a, const fc_mono *b) {
    if (a->c != b->c) return false;
    /* 0 times anything is 0 */
    if (a->c == 0) return true;
    return !memcmp(a->e, b->e, sizeof a->e);
}

bool fc_mono_is_static(const fc_mono *m) {
    for (int i = 0; i < FC_DYN_MAX_SYMS; i++)
        if (m->e[i]) return false;
    return true;
}

int64_t fc_mono_eval(const fc_mono *m, const int64_t *syms, int nsyms) {
    int64_t r = m->c;
    if (r < 0) return -1;
    for (int i = 0; i < FC_DYN_MAX_SYMS; i++)
        for (int k = 0; k < m->e[i]; k++) {
            if (i >= nsyms || syms[i] < 0) return -1;
            if (syms[i] != 0 && r > INT64_MAX / syms[i]) return -1;
            r *= syms[i];
        }
    return r;
}
