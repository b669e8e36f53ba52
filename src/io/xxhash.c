/* The one translation unit that compiles xxhash's implementation (out of line, so that callers
 * hashing a few bytes do not inline it and trip gcc's -Warray-bounds on its internals). */
#include "io.h"

#define XXH_IMPLEMENTATION
#include <xxhash.h>
