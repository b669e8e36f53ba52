/* The public samplers (include/recur.h, "sampling") over src/sample. A struct recur_sampler *
 * is the struct rsample * itself, converted: recur_sampler is never defined, so nothing is
 * ever read through the public type, and there is no second allocation to keep in step with
 * the chain's ownership of its samplers. Only the public getters of contexts and models are
 * used. */
#include "recur.h"

#include <stdlib.h>

#include "../core/core.h"
#include "api_arg.h"
#include "../sample/sample.h"

static struct rsample *in(struct recur_sampler *smpl) {
    return (struct rsample *)(void *)smpl;
}

static const struct rsample *in_const(const struct recur_sampler *smpl) {
    return (const struct rsample *)(const void *)smpl;
}

static struct recur_sampler *out(struct rsample *smpl) {
    return (struct recur_sampler *)(void *)smpl;
}

struct recur_sampler_params recur_sampler_default_params(void) {
    struct recur_sampler_params p = {
        .seed = 0xdecaf,
        .temp = 0.8f,
        .top_k = 40,
        .top_p = 0.95f,
        .min_p = 0.05f,
        .penalty_last_n = 64,
        .penalty_repeat = 1.0f,
        .penalty_freq = 0.0f,
        .penalty_present = 0.0f,
    };
    return p;
}

struct recur_sampler *recur_sampler_chain_default(const struct recur_model *model,
                                                  struct recur_sampler_params params) {
    API_NEED(model, NULL);
    struct rsample_params p = {
        .seed = params.seed,
        .temp = params.temp,
        .top_k = params.top_k,
        .top_p = params.top_p,
        .min_p = params.min_p,
        .penalty_last_n = params.penalty_last_n,
        .penalty_repeat = params.penalty_repeat,
        .penalty_freq = params.penalty_freq,
        .penalty_present = params.penalty_present,
    };
    if (params.n_logit_bias < 0 || (params.n_logit_bias > 0 && !params.logit_bias)) {
        rcore_error_set("sampler params: %s", params.n_logit_bias < 0 ? "n_logit_bias is negative"
                                                                      : "logit_bias is NULL");
        return NULL;
    }
    /* recur_token is int32_t: the two bias structs have one layout, but a copy does not rely
       on it */
    struct rsample_logit_bias *lb = NULL;
    if (params.n_logit_bias > 0) {
        lb = malloc(sizeof *lb * (size_t)params.n_logit_bias);
        if (!lb) {
            rcore_error_set("sampler params: out of memory for %d logit biases",
                            (int)params.n_logit_bias);
            return NULL;
        }
        for (int32_t i = 0; i < params.n_logit_bias; i++)
            lb[i] =
                (struct rsample_logit_bias){params.logit_bias[i].token, params.logit_bias[i].bias};
        p.n_logit_bias = params.n_logit_bias;
        p.logit_bias = lb;
    }
    struct rsample *chain = rsample_chain_default(&p, recur_model_n_vocab(model));
    free(lb);
    return out(chain);
}

struct recur_sampler *recur_sampler_chain_init(void) {
    return out(rsample_chain_init());
}

bool recur_sampler_chain_add(struct recur_sampler *chain, struct recur_sampler *smpl) {
    if (smpl && !chain) { /* the chain would have owned smpl: it is freed, as on any failure */
        recur_sampler_free(smpl);
        return api_arg(chain, __func__, "chain");
    }
    return rsample_chain_add(in(chain), in(smpl));
}

struct recur_sampler *recur_sampler_init_greedy(void) {
    return out(rsample_init_greedy());
}

struct recur_sampler *recur_sampler_init_logit_bias(int32_t n_vocab, int32_t n_bias,
                                                    const struct recur_logit_bias *bias) {
    if (n_bias < 0 || (n_bias > 0 && !bias)) /* checked here too: the copy below reads bias */
        return out(rsample_init_logit_bias(n_vocab, n_bias, NULL));
    struct rsample_logit_bias *lb = malloc(sizeof *lb * (size_t)(n_bias > 0 ? n_bias : 1));
    if (!lb) {
        rcore_error_set("sampler logit-bias: out of memory for %d biases", (int)n_bias);
        return NULL;
    }
    for (int32_t i = 0; i < n_bias; i++)
        lb[i] = (struct rsample_logit_bias){bias[i].token, bias[i].bias};
    struct rsample *s = rsample_init_logit_bias(n_vocab, n_bias, lb);
    free(lb);
    return out(s);
}

int32_t recur_sampler_get_probs(const struct recur_sampler *smpl, recur_token *ids, float *probs,
                                int32_t n) {
    API_NEED(smpl, -1);
    return rsample_get_probs(in_const(smpl), ids, probs, n);
}

float recur_sampler_get_prob(const struct recur_sampler *smpl, recur_token token) {
    API_NEED(smpl, -1.0f);
    return rsample_get_prob(in_const(smpl), token);
}

struct recur_sampler *recur_sampler_init_dist(uint64_t seed) {
    return out(rsample_init_dist(seed));
}

struct recur_sampler *recur_sampler_init_temp(float temp) {
    return out(rsample_init_temp(temp));
}

struct recur_sampler *recur_sampler_init_top_k(int32_t k) {
    return out(rsample_init_top_k(k));
}

struct recur_sampler *recur_sampler_init_top_p(float p, size_t min_keep) {
    return out(rsample_init_top_p(p, min_keep));
}

struct recur_sampler *recur_sampler_init_min_p(float min_p, size_t min_keep) {
    return out(rsample_init_min_p(min_p, min_keep));
}

struct recur_sampler *recur_sampler_init_penalties(int32_t last_n, float repeat, float freq,
                                                   float present) {
    return out(rsample_init_penalties(last_n, repeat, freq, present));
}

recur_token recur_sampler_sample(struct recur_sampler *smpl, struct recur_context *ctx,
                                 int32_t idx) {
    API_NEED(smpl, -1);
    API_NEED(ctx, -1);
    const float *logits = recur_get_logits_ith(ctx, idx);
    if (!logits) {
        rcore_error_prefix("sampler sample"); /* the message names the output */
        return -1;
    }
    return rsample_sample(in(smpl), logits, recur_model_n_vocab(recur_get_model(ctx)));
}

recur_token recur_sampler_sample_logits(struct recur_sampler *smpl, const float *logits,
                                        int32_t n_vocab) {
    API_NEED(smpl, -1);
    return rsample_sample(in(smpl), logits, n_vocab);
}

void recur_sampler_accept(struct recur_sampler *smpl, recur_token token) {
    API_NEED_VOID(smpl);
    rsample_accept(in(smpl), token);
}

void recur_sampler_reset(struct recur_sampler *smpl) {
    API_NEED_VOID(smpl);
    rsample_reset(in(smpl));
}

const char *recur_sampler_name(const struct recur_sampler *smpl) {
    API_NEED(smpl, NULL);
    return rsample_name(in_const(smpl));
}

void recur_sampler_free(struct recur_sampler *smpl) {
    rsample_free(in(smpl));
}
