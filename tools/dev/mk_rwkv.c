/*
 * recur mkmodel --arch rwkv6 | rwkv7: random-weight RWKV-6 ("Finch") and RWKV-7 ("Goose")
 * models in the layout llama.cpp's converter writes (conversion/rwkv.py: Rwkv6Model,
 * Rwkv7Model; docs/rwkv6.md and docs/rwkv7.md sections 1 and 2), with the RWKV "world"
 * tokenizer (docs/rwkv6.md section 6).
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

/* ---- flags ---------------------------------------------------------------------------------- */

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

int mk_rwkv_parse(const char *const *given, struct mk *m) {
    const bool v6 = m->arch == MK_RWKV6;
    static const struct {
        enum flag_id id;
        const char *name;
        enum mk_arch arch;
    } only[] = {
        {F_RESCALE, "--rescale", MK_RWKV6},     {F_MIX_DIM, "--mix-dim", MK_RWKV6},
        {F_DECAY_DIM, "--decay-dim", MK_RWKV6}, {F_LORA_W, "--lora-w", MK_RWKV7},
        {F_LORA_A, "--lora-a", MK_RWKV7},       {F_LORA_V, "--lora-v", MK_RWKV7},
        {F_LORA_G, "--lora-g", MK_RWKV7},
    };
    for (size_t i = 0; i < sizeof(only) / sizeof(only[0]); i++)
        if (given[only[i].id] && only[i].arch != m->arch)
            return mk_usage_error("%s is for --arch %s, not %s", only[i].name,
                                  only[i].arch == MK_RWKV6 ? "rwkv6" : "rwkv7",
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

bool mk_rwkv_add_hparams(struct rgguf_writer *w, const struct mk *m) {
    const bool v6 = m->arch == MK_RWKV6;
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

/* ---- vocabulary ----------------------------------------------------------------------------- */

/*
 * The world vocabulary file (rwkv_vocab_v20230424.txt) is not available offline, so a
 * world-style one is built from the gpt2 vocabulary file: id 0 "<s>" (control), ids 1..256 the
 * bytes 0x00..0xff, then the file's other (multi-byte) tokens as raw bytes, in its order. Each
 * text is stored as the converter stores it: Python's repr(bytes)[2:-1].
 */
struct world {
    char *buf; /* escaped texts, each NUL-terminated, one after another */
    size_t used, cap;
    size_t *off; /* n offsets into buf */
    uint32_t count, n;
    int32_t *slot; /* text -> id (open addressing, linear probing), -1 empty */
    size_t mask;
};

static void world_free(struct world *v) {
    free(v->buf);
    free(v->off);
    free(v->slot);
}

static uint64_t text_hash(const char *s) {
    uint64_t h = 0xcbf29ce484222325u;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3u;
    return h;
}

/* Room for `more` bytes at the end of buf. */
static bool world_reserve(struct world *v, size_t more) {
    if (v->cap - v->used >= more) return true;
    size_t cap = v->cap ? v->cap : 4096;
    while (cap - v->used < more) {
        if (cap > SIZE_MAX / 2) return false;
        cap *= 2;
    }
    char *b = realloc(v->buf, cap);
    if (!b) return false;
    v->buf = b;
    v->cap = cap;
    return true;
}

/* Python's repr(bytes)[2:-1] of raw[0..n) into out (room for 4n + 1): printable ASCII as is,
 * backslash and the quote doubled as escapes, \t \n \r, other bytes \xNN in lowercase. repr
 * quotes with ' unless the bytes hold ' and no ", when it takes " and leaves ' alone. */
static void py_repr_bytes(const unsigned char *raw, size_t n, char *out) {
    const bool squote = memchr(raw, '\'', n) != NULL, dquote = memchr(raw, '"', n) != NULL;
    const unsigned char quote = squote && !dquote ? '"' : '\'';
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = raw[i];
        if (c == quote || c == '\\') {
            *out++ = '\\';
            *out++ = (char)c;
        } else if (c == '\t' || c == '\n' || c == '\r') {
            *out++ = '\\';
            *out++ = c == '\t' ? 't' : c == '\n' ? 'n' : 'r';
        } else if (c < 0x20 || c >= 0x7f) {
            *out++ = '\\';
            *out++ = 'x';
            *out++ = hex[c >> 4];
            *out++ = hex[c & 15];
        } else {
            *out++ = (char)c;
        }
    }
    *out = '\0';
}

/* Adds the text just written at buf + used, unless an earlier token has it. */
static void world_commit(struct world *v) {
    const char *t = v->buf + v->used;
    size_t i = text_hash(t) & v->mask;
    for (; v->slot[i] >= 0; i = (i + 1) & v->mask)
        if (strcmp(v->buf + v->off[v->slot[i]], t) == 0) return; /* a duplicate */
    v->slot[i] = (int32_t)v->count;
    v->off[v->count++] = v->used;
    v->used += strlen(t) + 1;
}

/* Adds raw bytes as the next token. False: out of memory. */
static bool world_add_raw(struct world *v, const unsigned char *raw, size_t n) {
    if (n > (SIZE_MAX - 1) / 4 || !world_reserve(v, 4 * n + 1)) return false;
    py_repr_bytes(raw, n, v->buf + v->used);
    world_commit(v);
    return true;
}

/* GPT-2's byte-level text back to raw bytes: inv[codepoint] is the byte it stands for, or -1.
 * Returns the byte count, or -1 when the text is not byte-level BPE text. */
static long gpt2_bytes(const int16_t inv[0x200], const char *text, size_t len, unsigned char *raw) {
    long n = 0;
    for (size_t i = 0; i < len;) {
        const unsigned char c = (unsigned char)text[i];
        unsigned cp;
        if (c < 0x80) {
            cp = c;
            i += 1;
        } else if ((c & 0xe0) == 0xc0 && i + 1 < len &&
                   ((unsigned char)text[i + 1] & 0xc0) == 0x80) {
            cp = (unsigned)(c & 0x1f) << 6 | ((unsigned char)text[i + 1] & 0x3f);
            i += 2;
        } else {
            return -1;
        }
        if (cp >= 0x200 || inv[cp] < 0) return -1;
        raw[n++] = (unsigned char)inv[cp];
    }
    return n;
}

/* Builds the n-token world vocabulary from the gpt2 file g. Returns TOOL_OK, TOOL_FAIL (error
 * set) or TOOL_USAGE (message printed). */
static int world_build(const struct rgguf *g, const char *path, uint32_t n, struct world *v) {
    uint64_t n_tokens;
    const void *types;
    if (!mk_gpt2_tokens(g, "a world vocabulary is built from a gpt2 (byte-level BPE) one",
                        &n_tokens, &types))
        return TOOL_FAIL;

    size_t cap = 1;
    while (cap < 2 * (size_t)n) cap *= 2;
    v->n = n;
    v->mask = cap - 1;
    v->off = malloc(n * sizeof(*v->off));
    v->slot = malloc(cap * sizeof(*v->slot));
    if (!v->off || !v->slot || !world_reserve(v, 4)) goto oom;
    for (size_t i = 0; i < cap; i++) v->slot[i] = -1;

    memcpy(v->buf, "<s>", 4);
    world_commit(v);
    for (unsigned b = 0; b < N_BYTES; b++) {
        const unsigned char raw = (unsigned char)b;
        if (!world_add_raw(v, &raw, 1)) goto oom;
    }

    int16_t inv[0x200];
    for (size_t cp = 0; cp < 0x200; cp++) inv[cp] = -1;
    for (unsigned b = 0; b < N_BYTES; b++) {
        char t[3];
        size_t tl = mk_byte_text(b, t);
        unsigned cp = tl == 1 ? (unsigned char)t[0]
                              : (unsigned)(t[0] & 0x1f) << 6 | ((unsigned char)t[1] & 0x3f);
        inv[cp] = (int16_t)b;
    }

    unsigned char *raw = NULL;
    size_t raw_cap = 0;
    for (uint64_t i = 0; i < n_tokens && v->count < n; i++) {
        /* Control and other special tokens (<|endoftext|>) are names, not byte-level text. */
        if (((const int32_t *)types)[i] != TOKEN_TYPE_NORMAL) continue;
        const char *t;
        size_t tl;
        if (!rgguf_get_arr_str(g, "tokenizer.ggml.tokens", i, &t, &tl)) {
            free(raw);
            return TOOL_FAIL;
        }
        if (tl > raw_cap) {
            unsigned char *r = realloc(raw, tl);
            if (!r) {
                free(raw);
                goto oom;
            }
            raw = r;
            raw_cap = tl;
        }
        long nb = gpt2_bytes(inv, t, tl, raw);
        if (nb < 0) {
            free(raw);
            rcore_error_set("token %llu '%s' is not byte-level BPE text", (unsigned long long)i, t);
            return TOOL_FAIL;
        }
        if (nb > 1 && !world_add_raw(v, raw, (size_t)nb)) {
            free(raw);
            goto oom;
        }
    }
    free(raw);
    if (v->count < n) {
        fprintf(stderr,
                "recur mkmodel: --vocab: %u is more than the %u tokens of the world vocabulary "
                "that %s gives\n\n",
                n, v->count, path);
        return TOOL_USAGE;
    }
    return TOOL_OK;
oom:
    rcore_error_set("out of memory building a vocabulary of %u tokens", n);
    return TOOL_FAIL;
}

int mk_rwkv_add_vocab(struct rgguf_writer *w, const struct mk *m) {
    struct rgguf *g = rgguf_open(m->vocab_file, true);
    if (!g) return TOOL_FAIL;
    struct world v = {0};
    int rc = world_build(g, m->vocab_file, m->n_vocab, &v);
    const char **text = NULL;
    int32_t *type = NULL;
    if (rc == TOOL_OK) {
        text = malloc(m->n_vocab * sizeof(*text));
        type = malloc(m->n_vocab * sizeof(*type));
        if (!text || !type) {
            rcore_error_set("out of memory building a vocabulary of %u tokens", m->n_vocab);
            rc = TOOL_FAIL;
        }
    }
    if (rc == TOOL_OK) {
        for (uint32_t i = 0; i < m->n_vocab; i++) {
            text[i] = v.buf + v.off[i];
            type[i] = i == 0 ? TOKEN_TYPE_CONTROL : TOKEN_TYPE_NORMAL;
        }
        /* As _set_vocab_rwkv_world: no merges, no pre-tokenizer, bos = eos = 0 (from the
         * checkpoint's config), the named chat template. Its eot = 261 is a hack naming the
         * world vocabulary's "\n\n" token; id 261 here is some other text, so no eot is
         * written rather than a wrong one. */
        bool ok =
            rgguf_writer_set_str(w, "tokenizer.ggml.model", "rwkv") &&
            rgguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", text, m->n_vocab) &&
            rgguf_writer_set_arr(w, "tokenizer.ggml.token_type", RGGUF_INT32, type, m->n_vocab) &&
            rgguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 0) &&
            rgguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 0) &&
            rgguf_writer_set_str(w, "tokenizer.chat_template",
                                 m->chat_template ? m->chat_template : "rwkv-world");
        rc = ok ? TOOL_OK : TOOL_FAIL;
    }
    if (rc == TOOL_FAIL) rcore_error_prefix("vocabulary file %s", m->vocab_file);
    if (rc == TOOL_USAGE) mk_usage(stderr);
    free(text);
    free(type);
    world_free(&v);
    rgguf_close(g);
    return rc;
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

bool mk_rwkv_add_tensors(struct rgguf_writer *w, const struct mk *m) {
    const int64_t embd[2] = {m->n_embd, m->n_vocab};
    /* Never tied: both loaders require output.weight. */
    if (!mk_add_tensor(w, m, "token_embd.weight", NULL, m->wtype, 2, embd, INIT_NORMAL, 1.0) ||
        !layer_norm(w, m, "token_embd_norm"))
        return false;
    for (uint32_t l = 0; l < m->n_layer; l++)
        if (!(m->arch == MK_RWKV6 ? rwkv6_layer(w, m, l) : rwkv7_layer(w, m, l))) return false;
    return layer_norm(w, m, "output_norm") && mk_add_tensor(w, m, "output.weight", NULL, m->wtype,
                                                            2, embd, INIT_NORMAL, LIN(m->n_embd));
}
