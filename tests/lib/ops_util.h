/* The instruction sets the kernel tests run: every one this CPU (and build) runs, the portable
 * one first. The others are reported once as skipped, never counted as passed. */
#ifndef RECUR_TEST_OPS_UTIL_H
#define RECUR_TEST_OPS_UTIL_H

#include <stdio.h>

#include "ops/ops.h"

/* Fills isas with the instruction sets to test; returns how many. */
static int test_isas(enum rops_isa isas[ROPS_ISA_COUNT]) {
    static int reported;
    int n = 0;
    for (int i = 0; i < ROPS_ISA_COUNT; i++) {
        const char *why = rops_isa_lacks((enum rops_isa)i);
        if (!why)
            isas[n++] = (enum rops_isa)i;
        else if (!reported)
            printf("SKIP: %s (%s)\n", rops_isa_name((enum rops_isa)i), why);
    }
    reported = 1;
    return n;
}

#endif /* RECUR_TEST_OPS_UTIL_H */
