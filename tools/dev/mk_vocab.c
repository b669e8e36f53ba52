/*
 * The vocabularies `recur mkmodel` writes (mkmodel.h): the tokenizer of a vocabulary GGUF cut
 * to the first N tokens (gpt2 byte-level BPE with the merges among them, or llama
 * SentencePiece), for the Mamba family; and an RWKV "world" vocabulary built from a gpt2 file,
 * for the RWKV family. Both read GPT-2's byte alphabet from src/vocab (rvocab_gpt2_byte_cp).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/core.h"
#include "core/utf8.h"
#include "gguf/gguf.h"
#include "vocab/vocab.h"
#include "mkmodel.h"
#include "tools.h"

/* ---- the vocabulary file, cut: gpt2 and llama ------------------------------------------------ */

/* Token text -> id over the kept tokens (open addressing, linear probing). */
struct token_set {
    const char **text;
    const size_t *len;
    int32_t *slot; /* token id, -1 empty */
    size_t mask;
};

static uint64_t hash2(const char *a, size_t la, const char *b, size_t lb) {
    return mk_fnv1a64(b, lb, mk_fnv1a64(a, la, MK_FNV_OFFSET));
}

/* The id of the token whose text is a followed by b; -1 when none. */
static int32_t set_find(const struct token_set *s, const char *a, size_t la, const char *b,
                        size_t lb) {
    for (size_t i = hash2(a, la, b, lb) & s->mask;; i = (i + 1) & s->mask) {
        int32_t id = s->slot[i];
        if (id < 0) return -1;
        if (s->len[id] == la + lb && memcmp(s->text[id], a, la) == 0 &&
            memcmp(s->text[id] + la, b, lb) == 0)
            return id;
    }
}

static bool set_init(struct token_set *s, const char **text, const size_t *len, uint32_t n) {
    size_t cap = 1;
    while (cap < 2 * (size_t)n) cap *= 2;
    s->text = text;
    s->len = len;
    s->mask = cap - 1;
    s->slot = malloc(cap * sizeof(*s->slot));
    if (!s->slot) return false;
    for (size_t i = 0; i < cap; i++) s->slot[i] = -1;
    for (uint32_t id = 0; id < n; id++) {
        /* A duplicate text keeps its first id, as llama.cpp's token_to_id map does. */
        if (set_find(s, text[id], len[id], "", 0) >= 0) continue;
        size_t i = hash2(text[id], len[id], "", 0) & s->mask;
        while (s->slot[i] >= 0) i = (i + 1) & s->mask;
        s->slot[i] = (int32_t)id;
    }
    return true;
}

/* The text GPT-2's byte-level BPE gives byte b (bytes_to_unicode: printable bytes stand for
 * themselves, the others for U+0100 on, in order), as UTF-8. */
static size_t byte_text(unsigned b, char out[3]) {
    uint16_t cp[256];
    rvocab_gpt2_byte_cp(cp);
    return rcore_utf8_encode(cp[b & 0xFF], out);
}

/* The byte a token stands for, or -1 when it is not a byte token. */
static int byte_of_token(const char *text, size_t len) {
    if (len > 2) return -1; /* byte texts are one or two UTF-8 bytes */
    for (unsigned b = 0; b < N_BYTES; b++) {
        char t[3];
        size_t n = byte_text(b, t);
        if (n == len && memcmp(t, text, n) == 0) return (int)b;
    }
    return -1;
}

struct vocab_cut {
    bool spm;            /* tokenizer.ggml.model "llama" (else "gpt2") */
    const float *scores; /* spm: the file's scores (the first n are kept), NULL if none */
    const char **text;   /* kept tokens' texts (point into the reader) */
    size_t *len;
    int32_t *type;       /* kept token types */
    const char **merges; /* kept merges, in rank order */
    uint64_t n_merges;
    uint32_t bos, eos;
    struct token_set set;
};

static void vocab_cut_free(struct vocab_cut *v) {
    free(v->text);
    free(v->len);
    free(v->type);
    free(v->merges);
    free(v->set.slot);
}

static bool has_key(const struct rgguf *g, const char *key) {
    return rgguf_find_key(g, key) >= 0;
}

/* A special token id of the file: *id gets it, or n_vocab when absent. */
static bool special_id(const struct rgguf *g, const char *key, uint32_t n_vocab, uint32_t *id) {
    *id = n_vocab;
    return !has_key(g, key) || rgguf_get_u32(g, key, id);
}

/* The file's token strings (their count to *n_tokens) and types, one type per token. */
static bool tokens_and_types(const struct rgguf *g, uint64_t *n_tokens, const void **types) {
    enum rgguf_vtype et;
    uint64_t n_types;
    if (!rgguf_get_arr(g, "tokenizer.ggml.tokens", &et, n_tokens)) return false;
    if (et != RGGUF_STRING) {
        rcore_error_set("tokenizer.ggml.tokens is an array of %s, strings were expected",
                        rgguf_vtype_name(et));
        return false;
    }
    if (!rgguf_get_arr_data(g, "tokenizer.ggml.token_type", RGGUF_INT32, types, &n_types))
        return false;
    if (n_types != *n_tokens) {
        rcore_error_set("tokenizer.ggml.token_type has %llu entries for %llu tokens",
                        (unsigned long long)n_types, (unsigned long long)*n_tokens);
        return false;
    }
    return true;
}

static bool gpt2_tokens(const struct rgguf *g, const char *why, uint64_t *n_tokens,
                        const void **types) {
    const char *model;
    size_t model_len;
    if (!rgguf_get_str(g, "tokenizer.ggml.model", &model, &model_len)) return false;
    if (strcmp(model, "gpt2") != 0) {
        rcore_error_set("tokenizer.ggml.model is '%s'; %s", model, why);
        return false;
    }
    return tokens_and_types(g, n_tokens, types);
}

/* SentencePiece: the byte a "<0xXX>" token stands for, or -1. */
static int spm_byte_of_token(const char *text, size_t len) {
    unsigned b;
    char end;
    if (len != 6 || sscanf(text, "<0x%2X%c", &b, &end) != 2 || end != '>') return -1;
    return (int)b;
}

/* "llama" (SentencePiece) files: tokens, types and scores, as gpt2_tokens for "gpt2". */
static bool spm_tokens(const struct rgguf *g, uint64_t *n_tokens, const void **types,
                       const float **scores) {
    uint64_t n_scores;
    if (!tokens_and_types(g, n_tokens, types)) return false;
    *scores = NULL;
    if (has_key(g, "tokenizer.ggml.scores")) {
        const void *d;
        if (!rgguf_get_arr_data(g, "tokenizer.ggml.scores", RGGUF_FLOAT32, &d, &n_scores))
            return false;
        if (n_scores != *n_tokens) {
            rcore_error_set("tokenizer.ggml.scores has %llu entries for %llu tokens",
                            (unsigned long long)n_scores, (unsigned long long)*n_tokens);
            return false;
        }
        *scores = d;
    }
    return true;
}

static int token_byte(const struct vocab_cut *v, const char *text, size_t len) {
    return v->spm ? spm_byte_of_token(text, len) : byte_of_token(text, len);
}

/*
 * Cuts the file's vocabulary to its first n tokens. Kept merges are those whose two halves and
 * result are kept tokens, in the file's order; for GPT-2's file (byte tokens first, then one
 * token per merge in merge order) that is exactly the first n - 256 merges. Returns TOOL_OK,
 * TOOL_FAIL (error set) or TOOL_USAGE (message printed).
 */
static int cut_vocab(const struct rgguf *g, const char *path, uint32_t n, struct vocab_cut *v) {
    uint64_t n_tokens, n_file_merges;
    const void *types;
    const char *model;
    if (!rgguf_get_str(g, "tokenizer.ggml.model", &model, NULL)) return TOOL_FAIL;
    v->spm = strcmp(model, "llama") == 0;
    if (v->spm ? !spm_tokens(g, &n_tokens, &types, &v->scores)
               : !gpt2_tokens(g, "only gpt2 (byte-level BPE) and llama (SentencePiece) can be cut",
                              &n_tokens, &types))
        return TOOL_FAIL;
    if (n > n_tokens) {
        fprintf(stderr, "recur mkmodel: --vocab: %u is more than the %llu tokens of %s\n\n", n,
                (unsigned long long)n_tokens, path);
        return TOOL_USAGE;
    }
    enum rgguf_vtype et;
    n_file_merges = 0; /* SentencePiece has none */
    if (!v->spm && !rgguf_get_arr(g, "tokenizer.ggml.merges", &et, &n_file_merges))
        return TOOL_FAIL;

    v->text = calloc(n, sizeof(*v->text));
    v->len = calloc(n, sizeof(*v->len));
    v->type = calloc(n, sizeof(*v->type));
    if (!v->text || !v->len || !v->type) goto oom;
    memcpy(v->type, types, n * sizeof(*v->type));
    for (uint32_t i = 0; i < n; i++) {
        if (!rgguf_get_arr_str(g, "tokenizer.ggml.tokens", i, &v->text[i], &v->len[i]))
            return TOOL_FAIL;
        if (strlen(v->text[i]) != v->len[i]) {
            rcore_error_set("token %u holds a NUL byte", i);
            return TOOL_FAIL;
        }
    }
    if (!set_init(&v->set, v->text, v->len, n)) goto oom;

    /* Byte-level BPE falls back to byte tokens for anything it cannot merge: every byte token
     * of the file must be kept, or tokenising some text fails. (GPT-NeoX's vocabulary has none
     * for the 13 bytes that never occur in UTF-8; GPT-2's has all 256, first.) */
    for (uint64_t i = n; i < n_tokens; i++) {
        const char *t;
        size_t tl;
        if (!rgguf_get_arr_str(g, "tokenizer.ggml.tokens", i, &t, &tl)) return TOOL_FAIL;
        int b = token_byte(v, t, tl);
        if (b >= 0) {
            fprintf(stderr,
                    "recur mkmodel: --vocab: %u tokens leave out the token of byte 0x%02x (id "
                    "%llu in %s)\n\n",
                    n, (unsigned)b, (unsigned long long)i, path);
            return TOOL_USAGE;
        }
    }

    /* bos/eos must be valid ids. When the file's do not fit, the last kept token takes their
     * place as a control token, and the merge that would make it from text is dropped: else
     * ordinary text would tokenise into a control token that detokenises to nothing. A byte
     * token cannot be spared that way (byte fallback needs it) and stays as it is. */
    uint32_t replaced = n; /* none */
    if (!special_id(g, "tokenizer.ggml.bos_token_id", n, &v->bos) ||
        !special_id(g, "tokenizer.ggml.eos_token_id", n, &v->eos))
        return TOOL_FAIL;
    if (v->bos >= n || v->eos >= n) {
        uint32_t last = n - 1;
        if (v->bos >= n) v->bos = last;
        if (v->eos >= n) v->eos = last;
        if (token_byte(v, v->text[last], v->len[last]) < 0) {
            v->type[last] = TOKEN_TYPE_CONTROL;
            replaced = last;
        }
    }

    v->merges = calloc(n_file_merges ? n_file_merges : 1, sizeof(*v->merges));
    if (!v->merges) goto oom;
    for (uint64_t i = 0; i < n_file_merges; i++) {
        const char *mt;
        size_t ml;
        if (!rgguf_get_arr_str(g, "tokenizer.ggml.merges", i, &mt, &ml)) return TOOL_FAIL;
        if (strlen(mt) != ml) {
            rcore_error_set("merge %llu holds a NUL byte", (unsigned long long)i);
            return TOOL_FAIL;
        }
        /* Split as llama.cpp does: at the first space after the first character. */
        const char *sp = ml > 1 ? memchr(mt + 1, ' ', ml - 1) : NULL;
        if (!sp) {
            rcore_error_set("merge %llu '%s' has no space", (unsigned long long)i, mt);
            return TOOL_FAIL;
        }
        size_t la = (size_t)(sp - mt), lb = ml - la - 1;
        int32_t a = set_find(&v->set, mt, la, "", 0);
        int32_t b = set_find(&v->set, sp + 1, lb, "", 0);
        int32_t ab = set_find(&v->set, mt, la, sp + 1, lb);
        if (a >= 0 && b >= 0 && ab >= 0 && (uint32_t)ab != replaced) v->merges[v->n_merges++] = mt;
    }
    return TOOL_OK;
oom:
    rcore_error_set("out of memory cutting a vocabulary of %u tokens", n);
    return TOOL_FAIL;
}

static bool ends_with(const char *s, const char *end) {
    size_t ls = strlen(s), le = strlen(end);
    return ls >= le && strcmp(s + ls - le, end) == 0;
}

/* The file's other tokenizer keys (unknown_token_id, add_bos_token, chat_template, ...): the
 * special ids that stay valid and the scalars. Other arrays are per token and would need a cut
 * that recur does not know how to make, so they are left out. */
static bool copy_other_keys(struct rgguf_writer *w, const struct rgguf *g, uint32_t n,
                            bool skip_template) {
    static const char *const done[] = {
        "tokenizer.ggml.model",        "tokenizer.ggml.pre",        "tokenizer.ggml.tokens",
        "tokenizer.ggml.merges",       "tokenizer.ggml.token_type", "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.eos_token_id",
    };
    for (int64_t i = 0; i < rgguf_n_kv(g); i++) {
        const char *key = rgguf_key_name(g, i);
        bool skip = strncmp(key, "tokenizer.", strlen("tokenizer.")) != 0 ||
                    rgguf_key_type(g, i) == RGGUF_ARRAY;
        for (size_t k = 0; k < sizeof(done) / sizeof(done[0]) && !skip; k++)
            skip = strcmp(key, done[k]) == 0;
        if (skip || (skip_template && strcmp(key, "tokenizer.chat_template") == 0)) continue;
        uint32_t id;
        if (ends_with(key, "_token_id") && (!rgguf_get_u32(g, key, &id) || id >= n)) continue;
        if (!rgguf_writer_copy_kv(w, g, key)) return false;
    }
    return true;
}

int mk_add_bpe_vocab(struct rgguf_writer *w, const struct mk *m) {
    struct rgguf *g = rgguf_open(m->vocab_file, true);
    if (!g) return TOOL_FAIL;
    struct vocab_cut v = {0};
    int rc = cut_vocab(g, m->vocab_file, m->n_vocab, &v);
    if (rc == TOOL_OK) {
        /* tokenizer.ggml.pre is always written, so that llama.cpp and recur read the same
         * pre-tokenizer: --pre, else the file's, else "default" (what both read for a missing
         * key). SentencePiece has none; llama.cpp's converter writes "default" there too. */
        const char *pre = m->pre ? m->pre : "default";
        if (!m->pre && has_key(g, "tokenizer.ggml.pre") &&
            !rgguf_get_str(g, "tokenizer.ggml.pre", &pre, NULL))
            rc = TOOL_FAIL;
        if (v.spm && m->pre) {
            fprintf(stderr,
                    "recur mkmodel: --pre: %s is a llama (SentencePiece) vocabulary, "
                    "which has no pre-tokenizer\n\n",
                    m->vocab_file);
            rc = TOOL_USAGE;
        }
        bool ok =
            rc == TOOL_OK && rgguf_writer_copy_kv(w, g, "tokenizer.ggml.model") &&
            rgguf_writer_set_str(w, "tokenizer.ggml.pre", pre) &&
            rgguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", v.text, m->n_vocab) &&
            rgguf_writer_set_arr(w, "tokenizer.ggml.token_type", RGGUF_INT32, v.type, m->n_vocab) &&
            (v.spm || rgguf_writer_set_arr_str(w, "tokenizer.ggml.merges", v.merges, v.n_merges)) &&
            (!v.spm || !v.scores ||
             rgguf_writer_set_arr(w, "tokenizer.ggml.scores", RGGUF_FLOAT32, v.scores,
                                  m->n_vocab)) &&
            rgguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", v.bos) &&
            rgguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", v.eos) &&
            copy_other_keys(w, g, m->n_vocab, m->chat_template != NULL) &&
            (!m->chat_template ||
             rgguf_writer_set_str(w, "tokenizer.chat_template", m->chat_template));
        if (rc == TOOL_OK) rc = ok ? TOOL_OK : TOOL_FAIL;
    }
    if (rc == TOOL_FAIL) rcore_error_prefix("vocabulary file %s", m->vocab_file);
    if (rc == TOOL_USAGE) mk_usage(stderr);
    vocab_cut_free(&v);
    rgguf_close(g);
    return rc;
}

/* ---- the RWKV world vocabulary -------------------------------------------------------------- */

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
    return mk_fnv1a64(s, strlen(s), MK_FNV_OFFSET);
}

/* Room for `more` bytes at the end of buf. */
static bool world_reserve(struct world *v, size_t more) {
    return more <= SIZE_MAX - v->used && rcore_grow((void **)&v->buf, &v->cap, v->used + more, 1);
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
        size_t k;
        const uint32_t cp = rcore_utf8_decode(text + i, len - i, &k);
        if (k == 0 || cp >= 0x200 || inv[cp] < 0) return -1;
        raw[n++] = (unsigned char)inv[cp];
        i += k;
    }
    return n;
}

/* Builds the n-token world vocabulary from the gpt2 file g. Returns TOOL_OK, TOOL_FAIL (error
 * set) or TOOL_USAGE (message printed). */
static int world_build(const struct rgguf *g, const char *path, uint32_t n, struct world *v) {
    uint64_t n_tokens;
    const void *types;
    if (!gpt2_tokens(g, "a world vocabulary is built from a gpt2 (byte-level BPE) one", &n_tokens,
                     &types))
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
        size_t tl = byte_text(b, t);
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

int mk_add_world_vocab(struct rgguf_writer *w, const struct mk *m) {
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
