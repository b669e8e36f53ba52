/* What recur embed and recur serve --embedding share (see common.h): the pooling names and
 * llama.cpp's normalisation of embeddings. */
#include <math.h>
#include <string.h>

#include "common.h"

void gen_embd_normalize(const float *in, float *out, int32_t n, int32_t norm) {
    double sum = 0.0;
    if (norm == -1) {
        sum = 1.0;
    } else if (norm == 0) {
        for (int32_t i = 0; i < n; i++)
            if (fabs((double)in[i]) > sum) sum = fabs((double)in[i]);
        sum /= 32760.0;
    } else if (norm == 2) {
        for (int32_t i = 0; i < n; i++) sum += (double)in[i] * (double)in[i];
        sum = sqrt(sum);
    } else {
        for (int32_t i = 0; i < n; i++) sum += pow(fabs((double)in[i]), (double)norm);
        sum = pow(sum, 1.0 / (double)norm);
    }
    const float scale = sum > 0.0 ? (float)(1.0 / sum) : 0.0f;
    for (int32_t i = 0; i < n; i++) out[i] = in[i] * scale;
}

int gen_pooling(const char *name) {
    static const struct {
        const char *name;
        enum recur_pooling_type type;
    } pools[] = {{"none", RECUR_POOLING_TYPE_NONE},
                 {"mean", RECUR_POOLING_TYPE_MEAN},
                 {"cls", RECUR_POOLING_TYPE_CLS},
                 {"last", RECUR_POOLING_TYPE_LAST}};
    if (!name) return (int)RECUR_POOLING_TYPE_LAST;
    for (size_t i = 0; i < sizeof pools / sizeof pools[0]; i++)
        if (strcmp(name, pools[i].name) == 0) return (int)pools[i].type;
    return -1;
}
