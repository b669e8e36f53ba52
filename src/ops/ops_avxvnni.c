/*
 * The AVX-VNNI table: the AVX2 kernels (ops_avx2.c) with the q8_0 / q4_0 integer dots by
 * vpdpbusd (ops_vnni.h), for CPUs that have AVX-VNNI but not AVX-512 (on those with AVX-512 the
 * AVX-512 table has the same dots and more). This file alone is compiled with -mavxvnni (and
 * AVX2, FMA, F16C); nothing in it runs unless ops_probe.c found AVX-VNNI on the CPU. The results
 * are the AVX2 path's bits.
 */
#include "ops_impl.h"

#if defined(__x86_64__) && defined(__AVXVNNI__) && defined(__AVX2__) && defined(__FMA__) &&        \
    defined(__F16C__)

#include <immintrin.h>

/* the VEX form of vpdpbusd (AVX-VNNI) */
#define ROPS_VNNI_DPBUSD(acc, u, s) _mm256_dpbusd_avx_epi32(acc, u, s)
#define ROPS_VNNI_NAME              matmul_q8_rows_avxvnni
#include "ops_vnni.h"

static const struct rops_kernels table = {
    .isa = ROPS_ISA_AVXVNNI,
    .matmul_rows = rops_matmul_rows_avx2,
    .q8_rows = matmul_q8_rows_avxvnni,
    .quantize_x = rops_quantize_x_avx2,
    .softplus_bias = rops_softplus_bias_avx2,
    .layernorm = rops_layernorm_avx2,
    .rmsnorm = rops_rmsnorm_avx2,
    .map_rows = rops_map_rows_avx2,
    .conv_channels = rops_conv_channels_avx2,
    .scan_channels = rops_scan_channels_avx2,
    .scan2_heads = rops_scan2_heads_avx2,
    .ssd_mm = rops_ssd_mm_avx2,
    .ssd_decays = rops_ssd_decays_avx2,
    .ssd_scale_rows = rops_ssd_scale_rows_avx2,
    .ssd_transpose = rops_ssd_transpose_avx2,
    .wkv6_run = rops_wkv6_run_avx2,
    .wkv7_run = rops_wkv7_run_avx2,
    .probe_fma = rops_probe_fma_avx2,
    .probe_sum = rops_probe_sum_avx2,
};

const struct rops_kernels *rops_kernels_avxvnni(void) {
    return &table;
}

#else /* no AVX-VNNI kernels in this build */

const struct rops_kernels *rops_kernels_avxvnni(void) {
    return NULL;
}

#endif
