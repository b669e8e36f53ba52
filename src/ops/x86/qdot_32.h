/*
 * The legacy 32-weight types' integer products (part of x86/qdot.h; see there).
 */

/* False when this file has no kernel for the type. */
static bool qdot_32_rows(const struct rops_qdot_args *a, int64_t r0, int64_t r1) {
    (void)a;
    (void)r0;
    (void)r1;
    return false;
}
