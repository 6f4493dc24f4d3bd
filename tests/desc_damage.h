/* desc_damage.h - a program description's encoding (runtime/cuda/program_cache.h)
 * damaged every way a file can be, for the tests of the formats that carry
 * it (include after check.h):
 *
 *   check_desc_damage(ctx, &bytes, ntrunc, nflip)
 *       the first ntrunc truncations (0 .. ntrunc-1 bytes) refused with
 *       FC_ERR_INPUT and the description left zeroed; each of the first
 *       nflip bytes flipped: refused or read as a valid description; every
 *       allocation of the decode failing in turn: FC_ERR_NOMEM until it
 *       succeeds.
 */
#ifndef FC_TEST_DESC_DAMAGE_H
#define FC_TEST_DESC_DAMAGE_H
#include "check.h"
#include "runtime/cuda/program_cache.h"

static inline void check_desc_damage(fc_context *ctx, fc_bytes *a, size_t ntrunc, size_t nflip) {
    int refused = 0;
    for (size_t n = 0; n < ntrunc; n++) {
        fc_program_desc x;
        refused += fc_program_desc_decode(ctx, a->data, n, &x) == FC_ERR_INPUT;
        CHECK(x.src.source == NULL && x.store == NULL); /* zeroed on failure */
    }
    CHECK_EQ_INT(refused, (long long)ntrunc);
    for (size_t i = 0; i < nflip; i++) {
        a->data[i] ^= 0xa5;
        fc_program_desc x;
        fc_status st = fc_program_desc_decode(ctx, a->data, a->size, &x);
        CHECK(st == FC_OK || st == FC_ERR_INPUT);
        if (st == FC_OK) fc_program_desc_release(&x);
        a->data[i] ^= 0xa5;
    }
    for (long n = 1; n < 10000; n++) {
        fc_program_desc x;
        fc_context_fail_alloc_after(ctx, n);
        fc_status st = fc_program_desc_decode(ctx, a->data, a->size, &x);
        fc_context_fail_alloc_after(ctx, 0);
        if (st == FC_OK) {
            fc_program_desc_release(&x);
            break;
        }
        CHECK_EQ_INT(st, FC_ERR_NOMEM);
    }
}
#endif
