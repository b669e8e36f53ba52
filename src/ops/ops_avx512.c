/* The AVX-512 kernels: none in this build yet, so its table is absent and ops_probe.c never
 * chooses AVX-512 (the tests report it as skipped). */
#include "ops_impl.h"

const struct rops_kernels *rops_kernels_avx512(void) {
    return NULL;
}
