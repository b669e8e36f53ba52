/*
 * The machine probes of an x86 table (struct rops_kernels' probe_fma and probe_sum, which
 * ops_probe.c times), written once over x86/vec.h. Included by ops_avx2.c and ops_avx512.c after
 * x86/kernels.inc's settings (VEC_FN) and ROPS_PROBE_FMA_CHAINS, the independent FMA chains
 * that keep the FMA ports busy (latency x ports, and some slack).
 */

/* Flops done by iters rounds of the chains. */
VEC_FN double VEC_NAME(rops_probe_fma)(int64_t iters) {
    vf a[ROPS_PROBE_FMA_CHAINS];
    const vf b = vec_set1(0.999999f), c = vec_set1(1e-7f);
    for (int j = 0; j < ROPS_PROBE_FMA_CHAINS; j++) a[j] = vec_set1(1.0f + (float)j);
    for (int64_t i = 0; i < iters; i++)
        for (int j = 0; j < ROPS_PROBE_FMA_CHAINS; j++) a[j] = vec_fma(a[j], b, c);
    vf s = a[0];
    for (int j = 1; j < ROPS_PROBE_FMA_CHAINS; j++) s = vec_add(s, a[j]);
    volatile float sink = vec_hsum(s);
    (void)sink;
    return (double)iters * ROPS_PROBE_FMA_CHAINS * VL * 2;
}

/* The sum of p[0, n) in whole steps of 4 vectors (the result keeps the compiler from skipping
 * the reads). */
VEC_FN float VEC_NAME(rops_probe_sum)(const float *p, size_t n) {
    vf s0 = vec_zero(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i + 4 * VL <= n; i += 4 * VL) {
        s0 = vec_add(s0, vec_load(p + i));
        s1 = vec_add(s1, vec_load(p + i + VL));
        s2 = vec_add(s2, vec_load(p + i + 2 * VL));
        s3 = vec_add(s3, vec_load(p + i + 3 * VL));
    }
    return vec_hsum(vec_add(vec_add(s0, s1), vec_add(s2, s3)));
}
