/*
 * recur mkmodel --arch rwkv6 | rwkv7: random-weight RWKV-6 ("Finch") and RWKV-7 ("Goose")
 * models in the layout llama.cpp's converter writes (conversion/rwkv.py: Rwkv6Model,
 * Rwkv7Model; docs/rwkv6.md and docs/rwkv7.md sections 1 and 2), with the RWKV "world"
 * tokenizer (docs/rwkv6.md section 6) that mk_vocab.c builds.
 *
 * The weights are drawn so that a 30-token, few-layer run stays well inside float32 and every
 * tensor moves the logits: LayerNorm weights 1 + 0.1 N(0,1) and biases 0.1 N(0,1), linear
 * weights N(0, 1/fan_in), small LoRAs (their tanh/sigmoid inputs and outputs O(0.5)), lerp
 * coefficients U[0,1), decays spread over the range where both memory and forgetting show.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mkmodel.h"
#include "tools.h"

enum { RWKV6, RWKV7 };

/* ---- flags ---------------------------------------------------------------------------------- */

static int check(const char *const *given, const struct mk *m) {
    if (given[F_TIED])
        return mk_usage_error("--tied is for --arch mamba and mamba2: llama.cpp's %s loader "
                              "requires output.weight",
                              m->arch->name);
    return TOOL_OK;
}

/* The converter's default LoRA rank when the checkpoint's config has none:
 * max(1, round(n_embd^e * m / 32)) * 32, with Python's round (half to even, as nearbyint in
 * the default rounding mode). */
static uint32_t lora_rank(uint32_t n_embd, double e, double mult) {
    double r = nearbyint(pow((double)n_embd, e) * mult / 32.0);
    return (uint32_t)(r < 1.0 ? 1.0 : r) * 32;
}

/* Reads flag f into *out when given, else keeps the default already there. */
static bool size_flag(const char *const *given, enum flag_id f, const char *name, uint64_t min,
                      uint32_t *out) {
    return !given[f] || mk_parse_size(name, given[f], min, out);
}

static int parse(const char *const *given, struct mk *m) {
    if (m->pre) return mk_usage_error("--pre: rwkv vocabularies have no pre-tokenizer");
    const bool v6 = m->arch->variant == RWKV6;
    static const struct {
        enum flag_id id;
        const char *name;
        int arch;
    } only[] = {
        {F_RESCALE, "--rescale", RWKV6},     {F_MIX_DIM, "--mix-dim", RWKV6},
        {F_DECAY_DIM, "--decay-dim", RWKV6}, {F_LORA_W, "--lora-w", RWKV7},
        {F_LORA_A, "--lora-a", RWKV7},       {F_LORA_V, "--lora-v", RWKV7},
        {F_LORA_G, "--lora-g", RWKV7},
    };
    for (size_t i = 0; i < sizeof(only) / sizeof(only[0]); i++)
        if (given[only[i].id] && only[i].arch != m->arch->variant)
            return mk_usage_error("%s is for --arch %s, not %s", only[i].name,
                                  only[i].arch == RWKV6 ? "rwkv6" : "rwkv7",
                                  v6 ? "rwkv6" : "rwkv7");

    /* Defaults as the converter's when the checkpoint's config leaves them out. */
    const uint64_t embd = m->n_embd;
    uint64_t ff = v6 ? embd * 7 / 64 * 32 : 4 * embd; /* int(embd*3.5)//32*32 is floor(7e/64)*32 */
    m->n_ff = ff <= INT32_MAX ? (uint32_t)ff : 0;
    m->head_size = 64;
    m->rescale = 0;
    m->mix_dim = embd == 4096 ? 64 : 32;
    m->decay_dim = embd == 4096 ? 128 : 64;
    m->lora_w = lora_rank(m->n_embd, 0.5, 1.8);
    m->lora_a = lora_rank(m->n_embd, 0.5, 1.8);
    m->lora_v = lora_rank(m->n_embd, 0.5, 1.3);
    m->lora_g = lora_rank(m->n_embd, 0.8, 0.6);
    if (!size_flag(given, F_HEAD_SIZE, "--head-size", 1, &m->head_size) ||
        !size_flag(given, F_FF, "--ff", 1, &m->n_ff) ||
        !size_flag(given, F_RESCALE, "--rescale", 0, &m->rescale) ||
        !size_flag(given, F_MIX_DIM, "--mix-dim", 1, &m->mix_dim) ||
        !size_flag(given, F_DECAY_DIM, "--decay-dim", 1, &m->decay_dim) ||
        !size_flag(given, F_LORA_W, "--lora-w", 1, &m->lora_w) ||
        !size_flag(given, F_LORA_A, "--lora-a", 1, &m->lora_a) ||
        !size_flag(given, F_LORA_V, "--lora-v", 1, &m->lora_v) ||
        !size_flag(given, F_LORA_G, "--lora-g", 1, &m->lora_g)) {
        mk_usage(stderr);
        return TOOL_USAGE;
    }
    if (m->n_embd % m->head_size != 0)
        return mk_usage_error("--head-size %u%s does not divide --embd %u", m->head_size,
                              given[F_HEAD_SIZE] ? "" : " (the default)", m->n_embd);
    if (m->n_ff == 0)
        return mk_usage_error("--ff: the default %s is %s for --embd %u; give --ff",
                              v6 ? "int(embd*3.5)//32*32" : "4*embd", ff ? "too large" : "0",
                              m->n_embd);
    return TOOL_OK;
}

/* ---- keys ----------------------------------------------------------------------------------- */

static bool add_hparams(struct rgguf_writer *w, const struct mk *m) {
    const bool v6 = m->arch->variant == RWKV6;
    const char *a = v6 ? "rwkv6" : "rwkv7";
    char key[96];
#define KEY(suffix) (snprintf(key, sizeof key, "%s." suffix, a), key)
    /* As Rwkv6Model / Rwkv7Model's set_gguf_parameters: a 1M context (RWKV has no positional
     * limit), head_count 0 ("required by llama.cpp, unused"); no token_shift_count, whose
     * loader default (2) is what both graphs assert; only RWKV-6 writes the rescale key. */
    bool ok =
        rgguf_writer_set_str(w, "general.architecture", a) &&
        rgguf_writer_set_str(w, "general.name", v6 ? "recur random rwkv6" : "recur random rwkv7") &&
        rgguf_writer_set_u32(w, "general.file_type", mk_file_type(m)) &&
        rgguf_writer_set_u32(w, KEY("context_length"), 1u << 20) &&
        rgguf_writer_set_u32(w, KEY("embedding_length"), m->n_embd) &&
        rgguf_writer_set_u32(w, KEY("block_count"), m->n_layer) &&
        rgguf_writer_set_f32(w, KEY("attention.layer_norm_epsilon"), m->eps) &&
        (!v6 || rgguf_writer_set_u32(w, KEY("rescale_every_n_layers"), m->rescale)) &&
        rgguf_writer_set_u32(w, KEY("wkv.head_size"), m->head_size);
    if (ok && v6)
        ok = rgguf_writer_set_u32(w, KEY("time_mix_extra_dim"), m->mix_dim) &&
             rgguf_writer_set_u32(w, KEY("time_decay_extra_dim"), m->decay_dim);
    if (ok && !v6)
        ok = rgguf_writer_set_u32(w, KEY("attention.decay_lora_rank"), m->lora_w) &&
             rgguf_writer_set_u32(w, KEY("attention.iclr_lora_rank"), m->lora_a) &&
             rgguf_writer_set_u32(w, KEY("attention.value_residual_mix_lora_rank"), m->lora_v) &&
             rgguf_writer_set_u32(w, KEY("attention.gate_lora_rank"), m->lora_g);
    return ok && rgguf_writer_set_u32(w, KEY("feed_forward_length"), m->n_ff) &&
           rgguf_writer_set_u32(w, KEY("attention.head_count"), 0);
#undef KEY
}

/* ---- tensors -------------------------------------------------------------------------------- */

/* Linear weights ~ N(0, 1/fan_in), fan_in = ne[0], so that activations keep their scale. */
#define LIN(fan_in) (1.0 / sqrt((double)(fan_in)))
/* LoRA halves: half that, so that the tanh/sigmoid inputs and the LoRA outputs are ~0.5. */
#define LORA(fan_in) (0.5 * LIN(fan_in))

/* Tensor blk.L.SUFFIX (copy_of: drawn as blk.L.COPY_OF, so equal to it). */
static bool blk(struct rgguf_writer *w, const struct mk *m, uint32_t l, const char *suffix,
                const char *copy_of, uint32_t type, enum init init, double scale, uint32_t n_dims,
                int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3) {
    char name[96], seed[96];
    snprintf(name, sizeof name, "blk.%u.%s", l, suffix);
    if (copy_of) snprintf(seed, sizeof seed, "blk.%u.%s", l, copy_of);
    const int64_t ne[4] = {ne0, ne1, ne2, ne3};
    return mk_add_tensor(w, m, name, copy_of ? seed : NULL, type, n_dims, ne, init, scale);
}

/* LayerNorm PREFIX.weight and PREFIX.bias, both F32 {n_embd}. Biases of 0.1 N(0,1) rather
 * than 0, so that leaving one out shows. */
static bool layer_norm(struct rgguf_writer *w, const struct mk *m, const char *prefix) {
    char name[96];
    const int64_t ne[1] = {m->n_embd};
    snprintf(name, sizeof name, "%s.weight", prefix);
    if (!mk_add_tensor(w, m, name, NULL, RGGUF_F32, 1, ne, INIT_NEAR_ONE, 0)) return false;
    snprintf(name, sizeof name, "%s.bias", prefix);
    return mk_add_tensor(w, m, name, NULL, RGGUF_F32, 1, ne, INIT_NORMAL, 0.1);
}

static bool layer_norms(struct rgguf_writer *w, const struct mk *m, uint32_t l) {
    char p[64];
    snprintf(p, sizeof p, "blk.%u.attn_norm", l);
    if (!layer_norm(w, m, p)) return false;
    snprintf(p, sizeof p, "blk.%u.attn_norm_2", l);
    if (!layer_norm(w, m, p)) return false;
    snprintf(p, sizeof p, "blk.%u.time_mix_ln", l);
    return layer_norm(w, m, p);
}

/*
 * One RWKV-6 layer (docs/rwkv6.md section 2). F32 whatever --type: every 1-D tensor, the
 * converter's "always F32" time_mix_first, w1, w2, decay_w1, decay_w2 and lerp_fused. The
 * converter squeezes lerp_x and the channel-mix lerps to 1-D and writes lerp_fused as
 * {n_embd, 1, 1, 5} (w, k, v, r, g). No division of time_mix_output / channel_mix_value by
 * 2^(l / rescale) as the converter does for a trained checkpoint: the weights stay those of
 * --rescale 0, so that the same seed with and without --rescale differs only by the halving.
 */
static bool rwkv6_layer(struct rgguf_writer *w, const struct mk *m, uint32_t l) {
    const int64_t E = m->n_embd, ff = m->n_ff, dmix = m->mix_dim, ddec = m->decay_dim;
    const int64_t hs = m->head_size, heads = E / hs;
    const uint32_t wt = m->wtype, f32 = RGGUF_F32;
    return layer_norms(w, m, l) &&
           blk(w, m, l, "time_mix_lerp_x.weight", NULL, f32, INIT_UNIT, 0, 1, E, 1, 1, 1) &&
           blk(w, m, l, "time_mix_lerp_fused.weight", NULL, f32, INIT_UNIT, 0, 4, E, 1, 1, 5) &&
           blk(w, m, l, "time_mix_w1.weight", NULL, f32, INIT_NORMAL, LORA(E), 2, E, 5 * dmix, 1,
               1) &&
           blk(w, m, l, "time_mix_w2.weight", NULL, f32, INIT_NORMAL, LORA(dmix), 3, dmix, E, 5,
               1) &&
           blk(w, m, l, "time_mix_decay.weight", NULL, f32, INIT_RWKV6_DECAY, 0, 1, E, 1, 1, 1) &&
           blk(w, m, l, "time_mix_decay_w1.weight", NULL, f32, INIT_NORMAL, LORA(E), 2, E, ddec, 1,
               1) &&
           blk(w, m, l, "time_mix_decay_w2.weight", NULL, f32, INIT_NORMAL, LORA(ddec), 2, ddec, E,
               1, 1) &&
           /* the bonus u: the current token's k v^T is weighted by u next to the state */
           blk(w, m, l, "time_mix_first.weight", NULL, f32, INIT_NORMAL, 0.5, 2, hs, heads, 1, 1) &&
           blk(w, m, l, "time_mix_receptance.weight", NULL, wt, INIT_NORMAL, LIN(E), 2, E, E, 1,
               1) &&
           blk(w, m, l, "time_mix_key.weight", NULL, wt, INIT_NORMAL, LIN(E), 2, E, E, 1, 1) &&
           blk(w, m, l, "time_mix_value.weight", NULL, wt, INIT_NORMAL, LIN(E), 2, E, E, 1, 1) &&
           blk(w, m, l, "time_mix_gate.weight", NULL, wt, INIT_NORMAL, LIN(E), 2, E, E, 1, 1) &&
           blk(w, m, l, "time_mix_output.weight", NULL, wt, INIT_NORMAL, LIN(E), 2, E, E, 1, 1) &&
           blk(w, m, l, "channel_mix_lerp_k.weight", NULL, f32, INIT_UNIT, 0, 1, E, 1, 1, 1) &&
           blk(w, m, l, "channel_mix_lerp_r.weight", NULL, f32, INIT_UNIT, 0, 1, E, 1, 1, 1) &&
           blk(w, m, l, "channel_mix_key.weight", NULL, wt, INIT_NORMAL, LIN(E), 2, E, ff, 1, 1) &&
           blk(w, m, l, "channel_mix_value.weight", NULL, wt, INIT_NORMAL, LIN(ff), 2, ff, E, 1,
               1) &&
           blk(w, m, l, "channel_mix_receptance.weight", NULL, wt, INIT_NORMAL, LIN(E), 2, E, E, 1,
               1);
}

/*
 * One RWKV-7 layer (docs/rwkv7.md section 2). F32 whatever --type: every 1-D tensor and the
 * converter's "always F32" w1, w2 and lerp_fused ({n_embd, 1, 1, 6}: r, w, k, v, a, g); the
 * a, v and g LoRAs follow --type as the converter writes them. Layer 0's v0/v1/v2 are unused
 * but required by llama.cpp's loader: the converter writes copies of layer 0's a0/a1/a2 (R_a
 * shapes), so they are drawn from a0/a1/a2's generators.
 */
static bool rwkv7_layer(struct rgguf_writer *w, const struct mk *m, uint32_t l) {
    const int64_t E = m->n_embd, ff = m->n_ff, rw = m->lora_w, ra = m->lora_a, rg = m->lora_g;
    const int64_t rv = l == 0 ? ra : m->lora_v;
    const uint32_t wt = m->wtype, f32 = RGGUF_F32;
    const bool l0 = l == 0;
    return layer_norms(w, m, l) &&
           blk(w, m, l, "time_mix_lerp_fused.weight", NULL, f32, INIT_UNIT, 0, 4, E, 1, 1, 6) &&
           blk(w, m, l, "time_mix_w0.weight", NULL, f32, INIT_RWKV7_W0, 0, 1, E, 1, 1, 1) &&
           blk(w, m, l, "time_mix_w1.weight", NULL, f32, INIT_NORMAL, LORA(E), 2, E, rw, 1, 1) &&
           blk(w, m, l, "time_mix_w2.weight", NULL, f32, INIT_NORMAL, LORA(rw), 2, rw, E, 1, 1) &&
           blk(w, m, l, "time_mix_a0.weight", NULL, f32, INIT_NORMAL, 0.5, 1, E, 1, 1, 1) &&
           blk(w, m, l, "time_mix_a1.weight", NULL, wt, INIT_NORMAL, LORA(E), 2, E, ra, 1, 1) &&
           blk(w, m, l, "time_mix_a2.weight", NULL, wt, INIT_NORMAL, LORA(ra), 2, ra, E, 1, 1) &&
           blk(w, m, l, "time_mix_v0.weight", l0 ? "time_mix_a0.weight" : NULL, f32, INIT_NORMAL,
               0.5, 1, E, 1, 1, 1) &&
           blk(w, m, l, "time_mix_v1.weight", l0 ? "time_mix_a1.weight" : NULL, wt, INIT_NORMAL,
               LORA(E), 2, E, rv, 1, 1) &&
           blk(w, m, l, "time_mix_v2.weight", l0 ? "time_mix_a2.weight" : NULL, wt, INIT_NORMAL,
               LORA(rv), 2, rv, E, 1, 1) &&
           /* g = g2 sigmoid(g1 x): a full-size gate, so N(0, 1/fan_in) on both halves */
           blk(w, m, l, "time_mix_g1.weight", NULL, wt, INIT_NORMAL, LIN(E), 2, E, rg, 1, 1) &&
           blk(w, m, l, "time_mix_g2.weight", NULL, wt, INIT_NORMAL, LIN(rg), 2, rg, E, 1, 1) &&
           blk(w, m, l, "time_mix_k_k.weight", NULL, f32, INIT_NEAR_ONE, 0, 1, E, 1, 1, 1) &&
           blk(w, m, l, "time_mix_k_a.weight", NULL, f32, INIT_NEAR_ONE, 0, 1, E, 1, 1, 1) &&
           blk(w, m, l, "time_mix_r_k.weight", NULL, f32, INIT_NORMAL, 0.3, 1, E, 1, 1, 1) &&
           blk(w, m, l, "time_mix_receptance.weight", NULL, wt, INIT_NORMAL, LIN(E), 2, E, E, 1,
               1) &&
           blk(w, m, l, "time_mix_key.weight", NULL, wt, INIT_NORMAL, LIN(E), 2, E, E, 1, 1) &&
           blk(w, m, l, "time_mix_value.weight", NULL, wt, INIT_NORMAL, LIN(E), 2, E, E, 1, 1) &&
           blk(w, m, l, "time_mix_output.weight", NULL, wt, INIT_NORMAL, LIN(E), 2, E, E, 1, 1) &&
           blk(w, m, l, "channel_mix_lerp_k.weight", NULL, f32, INIT_UNIT, 0, 1, E, 1, 1, 1) &&
           blk(w, m, l, "channel_mix_key.weight", NULL, wt, INIT_NORMAL, LIN(E), 2, E, ff, 1, 1) &&
           blk(w, m, l, "channel_mix_value.weight", NULL, wt, INIT_NORMAL, LIN(ff), 2, ff, E, 1, 1);
}

static bool add_tensors(struct rgguf_writer *w, const struct mk *m) {
    const int64_t embd[2] = {m->n_embd, m->n_vocab};
    /* Never tied: both loaders require output.weight. */
    if (!mk_add_tensor(w, m, "token_embd.weight", NULL, m->wtype, 2, embd, INIT_NORMAL, 1.0) ||
        !layer_norm(w, m, "token_embd_norm"))
        return false;
    for (uint32_t l = 0; l < m->n_layer; l++)
        if (!(m->arch->variant == RWKV6 ? rwkv6_layer(w, m, l) : rwkv7_layer(w, m, l)))
            return false;
    return layer_norm(w, m, "output_norm") && mk_add_tensor(w, m, "output.weight", NULL, m->wtype,
                                                            2, embd, INIT_NORMAL, LIN(m->n_embd));
}

static void summary(const struct mk *m) {
    switch (m->arch->variant) {
    case RWKV6:
        printf("wrote %s: rwkv6, layers %u, embd %u, head_size %u, ff %u, mix_dim %u, "
               "decay_dim %u, rescale %u, vocab %u, %s, seed %llu\n",
               m->out, m->n_layer, m->n_embd, m->head_size, m->n_ff, m->mix_dim, m->decay_dim,
               m->rescale, m->n_vocab, rgguf_type_name(m->wtype), (unsigned long long)m->seed);
        break;
    case RWKV7:
        printf("wrote %s: rwkv7, layers %u, embd %u, head_size %u, ff %u, lora w/a/v/g "
               "%u/%u/%u/%u, vocab %u, %s, seed %llu\n",
               m->out, m->n_layer, m->n_embd, m->head_size, m->n_ff, m->lora_w, m->lora_a,
               m->lora_v, m->lora_g, m->n_vocab, rgguf_type_name(m->wtype),
               (unsigned long long)m->seed);
        break;
    }
}

/* The flags that a Mamba model has no use for: no wkv heads or LoRAs. */
static const enum flag_id rwkv_only[] = {F_HEAD_SIZE, F_FF,     F_RESCALE, F_MIX_DIM, F_DECAY_DIM,
                                         F_LORA_W,    F_LORA_A, F_LORA_V,  F_LORA_G};
static const struct mk_arch archs[] = {{"rwkv6", "RWKV-6", RWKV6}, {"rwkv7", "RWKV-7", RWKV7}};

const struct mk_family mk_family_rwkv = {
    .archs = archs,
    .n_archs = sizeof archs / sizeof archs[0],
    .names = "rwkv6 and rwkv7",
    .only = rwkv_only,
    .n_only = sizeof rwkv_only / sizeof rwkv_only[0],
    .needs_state = false,
    .min_vocab = N_BYTES + 1,
    .min_vocab_why = "a world vocabulary has at least 257 tokens, <s> and one per byte",
    .help = "RWKV: a world-style vocabulary (tokenizer model \"rwkv\"): <s>, the 256 bytes, then\n"
            "the file's longer tokens as raw bytes, in its order, until N tokens.\n",
    .load_back = false,
    .check = check,
    .parse = parse,
    .add_hparams = add_hparams,
    .add_vocab = mk_add_world_vocab,
    .add_tensors = add_tensors,
    .summary = summary,
};
