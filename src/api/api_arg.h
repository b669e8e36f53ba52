/* Private to src/api: the NULL policy of include/recur.h ("NULL arguments") in one place. A
 * public function that needs a handle or a path starts with API_NEED(arg, failure value), or
 * API_NEED_VOID(arg) when it returns nothing: when arg is NULL the last error becomes
 * "FUNCTION: arg is NULL" and the function returns, so no entry point dereferences a NULL. */
#ifndef RECUR_API_ARG_H
#define RECUR_API_ARG_H

#include <stdbool.h>

#include "../core/core.h"

static inline bool api_arg(const void *p, const char *fn, const char *arg) {
    if (p) return true;
    rcore_error_set("%s: %s is NULL", fn, arg);
    return false;
}

#define API_NEED(p, failure)                                                                       \
    do {                                                                                           \
        if (!api_arg((const void *)(p), __func__, #p)) return failure;                             \
    } while (0)

/* The same in a function that returns nothing. */
#define API_NEED_VOID(p)                                                                           \
    do {                                                                                           \
        if (!api_arg((const void *)(p), __func__, #p)) return;                                     \
    } while (0)

#endif
