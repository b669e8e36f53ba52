/*
 * The AVX-VNNI table: the AVX2 table (ROPS_KERNELS_AVX2, ops_impl.h) with the q8_0 / q4_0
 * integer dots by vpdpbusd (x86/q8.h), for CPUs that have AVX-VNNI but not AVX-512 (on those with
 * AVX-512 the AVX-512 table has the same dots and more). This file alone is compiled with -mavxvnni
 * (and AVX2, FMA, F16C); nothing in it runs unless ops_probe.c found AVX-VNNI on the CPU. The
 * results are the AVX2 path's bits.
 */
#include "ops_impl.h"

#if defined(__x86_64__) && defined(__AVXVNNI__) && defined(__AVX2__) && defined(__FMA__) &&        \
    defined(__F16C__)

#include <immintrin.h>

#include <string.h>

#define ROPS_VEC_WIDTH 8
#include "x86/pack.h"
#include "x86/vec.h"

/* the VEX form of vpdpbusd (AVX-VNNI) */
#define ROPS_DPBUSD(acc, u, s) _mm256_dpbusd_avx_epi32(acc, u, s)
#define ROPS_Q8_DOT(aw, w, x)                                                                      \
    _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), aw, _mm256_sign_epi8(x, w))
#define ROPS_Q8_NAME matmul_q8_rows_avxvnni
#include "x86/q8.h"

#define ROPS_QDOT_NAME qdot_rows_avxvnni
#include "x86/qdot.h"

static const struct rops_kernels table =
    ROPS_KERNELS_AVX2(ROPS_ISA_AVXVNNI, matmul_q8_rows_avxvnni, qdot_rows_avxvnni);

const struct rops_kernels *rops_kernels_avxvnni(void) {
    return &table;
}

#else /* no AVX-VNNI kernels in this build */

const struct rops_kernels *rops_kernels_avxvnni(void) {
    return NULL;
}

#endif
