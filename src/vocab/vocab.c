/*
 * vocab: loading a vocabulary (tokenizer.ggml.model = "gpt2", "llama" or "rwkv") and its
 * properties, with llama.cpp's semantics. Tokenizing and detokenizing are in vocab_tok.c (the
 * byte-level BPE there), the pre-tokenizers in vocab_pre.c, SentencePiece in vocab_spm.c, the
 * RWKV world tokenizer (unescaped token bytes, greedy longest match in a byte trie) in
 * vocab_rwkv.c. This file and its comment describe the tables all of them share (the struct
 * is in vocab_impl.h).
 *
 * Data structures, and why:
 *
 *  - tokens[]: per id, offsets into two byte arenas: `text` (the token as stored, in the GPT-2
 *    byte alphabet, NUL after each) and `pieces` (the bytes token_to_piece hands out, decoded
 *    once at load, as llama.cpp caches them). Two big allocations instead of 50,000 small
 *    ones, and token_to_piece is a bounds check and a memcpy.
 *
 *  - text_table: open addressing (linear probing, power-of-two size, load <= 1/2) from token
 *    text to id, keyed by XXH64 of the text, storing the hash's low 32 bits beside the id so
 *    that most probes skip the memcmp. It is used at load (duplicates, merges, the 256 byte
 *    tokens) and by rvocab_text_to_token; tokenizing hashes a string only for pre-tokenizers
 *    with ignore_merges (each piece is looked up whole, as llama.cpp does).
 *
 *  - merge_table: open addressing from the pair (left id, right id), packed in 64 bits, to
 *    (rank, merged id). Every merge is checked at load to name tokens that exist, so the BPE
 *    works on ids alone: a symbol is an id, a merge is one 64-bit probe. (llama.cpp hashes
 *    the pair of strings and looks the result up by text.)
 *
 *  - BPE on one piece, as llama.cpp and sentencepiece do it: the piece's bytes start as a
 *    doubly linked list of symbols (one byte-token each) and every adjacent pair that has a
 *    merge goes into a binary heap ordered by (rank, position), so the lowest rank wins and the
 *    leftmost on ties. Popping a candidate whose symbols changed since it was queued is
 *    detected by comparing the ids stored in the candidate with the symbols' current ids
 *    (a symbol's id changes exactly when its text does), and skipped. A merge queues at most
 *    two new candidates, so a piece of n bytes costs O(n log n) whatever its shape; a rescan
 *    for the best pair after each merge would be O(n^2) on one long word.
 *
 *  - Pre-tokenization: PCRE2 (8-bit, UTF + UCP), compiled once per vocabulary and owned by it.
 *    The text is first cut into runs of valid UTF-8 (strict RFC 3629) by our own scan; every
 *    byte outside such a run is a piece by itself, so invalid input round-trips byte for byte
 *    and no match ever sees it (a byte the vocabulary has no token for is read as U+FFFD, as
 *    llama.cpp reads it: never the unknown token, GPT-NeoX's end of text). Each valid run is
 *    matched with PCRE2_NO_UTF_CHECK. Why not let
 *    PCRE2 handle invalid UTF: with PCRE2_MATCH_INVALID_UTF the interpreter re-validates the
 *    rest of the subject on every call, which makes splitting a megabyte quadratic (seconds
 *    per hundred kilobytes, measured with PCRE2 10.42). The JIT has no such cost, so the
 *    pattern is compiled with PCRE2_MATCH_INVALID_UTF when JIT compilation succeeds (a second
 *    guard against a validator bug), and without it for the interpreter, which then honours
 *    PCRE2_NO_UTF_CHECK on the runs we validated.
 *
 *  - Special tokens (control, unknown and user-defined types) are kept sorted longest first;
 *    tokenize cuts the text around each in turn, as llama.cpp's tokenizer_st_partition does.
 *
 * A loaded vocabulary is never written again; each tokenize call allocates its own scratch
 * (symbols, heap, fragments, PCRE2 match data), so any number of threads may share one.
 * (The BPE, the splitting and the special-token pass live in vocab_tok.c, the pattern
 * compilation in vocab_pre.c.)
 */
#include "vocab/vocab.h"
#include "vocab/vocab_impl.h"

#include "core/core.h"
#include "gguf/gguf.h"
#include "io/io.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEY_MODEL      "tokenizer.ggml.model"
#define KEY_PRE        "tokenizer.ggml.pre"
#define KEY_TOKENS     "tokenizer.ggml.tokens"
#define KEY_TYPES      "tokenizer.ggml.token_type"
#define KEY_MERGES     "tokenizer.ggml.merges"
#define KEY_SCORES     "tokenizer.ggml.scores"
#define KEY_BOS        "tokenizer.ggml.bos_token_id"
#define KEY_EOS        "tokenizer.ggml.eos_token_id"
#define KEY_UNK        "tokenizer.ggml.unknown_token_id"
#define KEY_PAD        "tokenizer.ggml.padding_token_id"
#define KEY_ADD_BOS    "tokenizer.ggml.add_bos_token"
#define KEY_ADD_EOS    "tokenizer.ggml.add_eos_token"
#define KEY_ADD_PREFIX "tokenizer.ggml.add_space_prefix"

/* Longest token text accepted, and longest decoded piece (a character outside the byte
 * alphabet decodes to a longer text, as in llama.cpp): keeps every size far from INT32_MAX. */
#define MAX_TOKEN_LEN (1u << 20)
#define MAX_PIECE_LEN (1u << 24)

static const char *const model_names[] = {"gpt2", "rwkv", "llama"};

/* ---- small helpers ------------------------------------------------------------------------ */

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c *= 2;
    return c;
}

/* ---- the text -> id table ------------------------------------------------------------------ */

static uint64_t text_hash(const char *s, size_t n) {
    return XXH64(s, n, 0);
}

/* The slot holding text, or the empty slot where it would go. */
static struct text_slot *text_slot_find(const struct rvocab *v, const char *s, size_t n,
                                        uint64_t h) {
    size_t i = (size_t)h & v->text_mask;
    for (;;) {
        struct text_slot *e = &v->text_table[i];
        if (e->id < 0) return e;
        if (e->hash == (uint32_t)h && v->tokens[e->id].text_len == n &&
            memcmp(rvocab_tok_text(v, e->id), s, n) == 0)
            return e;
        i = (i + 1) & v->text_mask;
    }
}

int32_t rvocab_text_to_token(const struct rvocab *v, const char *text, size_t len) {
    if (!v || (!text && len)) return -1;
    return text_slot_find(v, text ? text : "", len, text_hash(text ? text : "", len))->id;
}

/* ---- the pair -> merge table ---------------------------------------------------------------- */

/* ---- load ---------------------------------------------------------------------------------- */

void rvocab_gpt2_byte_cp(uint16_t cp[256]) {
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        cp[b] = (uint16_t)(keep ? b : 256 + extra++);
    }
}

static void byte_alphabet(struct rvocab *v) {
    for (int i = 0; i < N_ALPHABET_CP; i++) v->cp_byte[i] = -1;
    rvocab_gpt2_byte_cp(v->byte_cp);
    for (int b = 0; b < 256; b++) v->cp_byte[v->byte_cp[b]] = (int16_t)b;
}

/* Reads an optional token id key: *id keeps its default when absent (and -1 becomes of a
 * default out of range); an id out of range is ignored with a warning, as llama.cpp does. False
 * only for a key of the wrong type. */
static bool load_special_id(const struct rgguf *g, const char *key, int32_t n_tokens, int32_t *id) {
    if (*id >= n_tokens) *id = -1;
    if (rgguf_find_key(g, key) < 0) return true;
    uint32_t u;
    if (!rgguf_get_u32(g, key, &u)) {
        int32_t s;
        if (rgguf_get_i32(g, key, &s) && s < 0) { /* -1 written for "none" */
            rcore_error_clear();
            *id = -1;
            return true;
        }
        return rgguf_get_u32(g, key, &u); /* false, with the u32 getter's message */
    }
    if (u >= (uint32_t)n_tokens) {
        rcore_log(RCORE_LOG_WARN, "%s = %u is out of range (%d tokens): ignored\n", key, u,
                  n_tokens);
        return true;
    }
    *id = (int32_t)u;
    return true;
}

/* The fill-in-the-middle ids (vocab.h, rvocab_fim): the current keys, then the deprecated
 * ones of the first three, in llama.cpp's order, so that a deprecated key present wins. */
static bool load_fim_ids(const struct rgguf *g, struct rvocab *v) {
    static const char *const keys[RVOCAB_FIM_COUNT + 3] = {
        "tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.fim_suf_token_id",
        "tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.fim_pad_token_id",
        "tokenizer.ggml.fim_rep_token_id", "tokenizer.ggml.fim_sep_token_id",
        "tokenizer.ggml.prefix_token_id",  "tokenizer.ggml.suffix_token_id",
        "tokenizer.ggml.middle_token_id"};
    for (int i = 0; i < RVOCAB_FIM_COUNT + 3; i++)
        if (!load_special_id(g, keys[i], v->n_tokens, &v->fim[i % RVOCAB_FIM_COUNT])) return false;
    return true;
}

static bool load_bool(const struct rgguf *g, const char *key, bool *out) {
    if (rgguf_find_key(g, key) < 0) return true;
    return rgguf_get_bool(g, key, out);
}

/* tokenizer.ggml.model, and for "gpt2" tokenizer.ggml.pre, as llama.cpp reads them: a missing
 * pre-tokenizer is "default", with llama.cpp's warning; "rwkv" and "llama" have none. */
static bool load_model_and_pre(const struct rgguf *g, enum vmodel *model,
                               const struct rvocab_pre **pre) {
    const char *s;
    size_t n;
    *pre = NULL;
    if (!rgguf_get_str(g, KEY_MODEL, &s, &n)) return false;
    int found = -1;
    for (int i = 0; i < (int)(sizeof model_names / sizeof model_names[0]); i++)
        if (strlen(model_names[i]) == n && memcmp(model_names[i], s, n) == 0) found = i;
    if (found < 0) {
        rcore_error_set("%s is \"%.*s\": supported are \"gpt2\" (byte-level BPE), \"llama\" "
                        "(SentencePiece) and \"rwkv\" (RWKV world)",
                        KEY_MODEL, (int)(n > 64 ? 64 : n), s);
        return false;
    }
    *model = (enum vmodel)found;
    if (*model != VM_GPT2) return true; /* llama.cpp reads a pre-tokenizer for BPE only */
    if (rgguf_find_key(g, KEY_PRE) < 0) {
        rcore_log(RCORE_LOG_WARN,
                  "vocab: %s is missing: using the 'default' pre-tokenizer, as llama.cpp does "
                  "(it warns that generation quality will be degraded; write the key the "
                  "vocabulary was trained with)\n",
                  KEY_PRE);
        *pre = rvocab_pre_default();
        return true;
    }
    if (!rgguf_get_str(g, KEY_PRE, &s, &n)) return false;
    *pre = rvocab_pre_find(s, n);
    return *pre != NULL;
}

/* llama: tokenizer.ggml.scores (float32, one per token), all 0 when absent. */
static bool load_scores(struct rvocab *v, const struct rgguf *g) {
    v->scores = calloc((size_t)v->n_tokens, sizeof *v->scores);
    if (!v->scores) {
        rcore_error_set("%s: out of memory", KEY_SCORES);
        return false;
    }
    if (rgguf_find_key(g, KEY_SCORES) < 0) return true;
    const void *data;
    uint64_t n;
    if (!rgguf_get_arr_data(g, KEY_SCORES, RGGUF_FLOAT32, &data, &n)) return false;
    if (n < (uint64_t)v->n_tokens) {
        rcore_error_set("%s holds %llu scores for %d tokens", KEY_SCORES, (unsigned long long)n,
                        (int)v->n_tokens);
        return false;
    }
    memcpy(v->scores, data, (size_t)v->n_tokens * sizeof *v->scores);
    return true;
}

/* llama: the byte-fallback token of every byte, as llama.cpp's byte_to_token. */
static void spm_byte_tokens(struct rvocab *v) {
    for (int b = 0; b < 256; b++) {
        char hex[8], one = (char)b;
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        int32_t id = rvocab_text_to_token(v, hex, 6);
        v->byte_token[b] = id >= 0 ? id : rvocab_text_to_token(v, &one, 1);
    }
}

static bool load_tokens(struct rvocab *v, const struct rgguf *g) {
    enum rgguf_vtype et;
    uint64_t n;
    if (!rgguf_get_arr(g, KEY_TOKENS, &et, &n)) return false;
    if (et != RGGUF_STRING) {
        rcore_error_set("%s is an array of %s, strings were expected", KEY_TOKENS,
                        rgguf_vtype_name(et));
        return false;
    }
    if (n == 0 || n > (uint64_t)INT32_MAX / 4) {
        rcore_error_set("%s holds %llu tokens, 1 to %d are supported", KEY_TOKENS,
                        (unsigned long long)n, INT32_MAX / 4);
        return false;
    }
    v->n_tokens = (int32_t)n;

    const char *types = NULL; /* int32 values, read with memcpy: no alignment assumed */
    if (rgguf_find_key(g, KEY_TYPES) >= 0) {
        const void *data;
        uint64_t nt;
        if (!rgguf_get_arr_data(g, KEY_TYPES, RGGUF_INT32, &data, &nt)) return false;
        if (nt < n) {
            rcore_error_set("%s holds %llu types for %llu tokens", KEY_TYPES,
                            (unsigned long long)nt, (unsigned long long)n);
            return false;
        }
        types = data;
    }

    v->tokens = calloc((size_t)n, sizeof *v->tokens);
    v->text_mask = pow2_at_least((size_t)n * 2) - 1;
    v->text_table = malloc((v->text_mask + 1) * sizeof *v->text_table);
    if (!v->tokens || !v->text_table) {
        rcore_error_set("%s: out of memory for %llu tokens", KEY_TOKENS, (unsigned long long)n);
        return false;
    }
    for (size_t i = 0; i <= v->text_mask; i++) v->text_table[i].id = -1;

    struct rcore_buf arena = {0};
    for (int32_t id = 0; id < v->n_tokens; id++) {
        const char *s;
        size_t len;
        if (!rgguf_get_arr_str(g, KEY_TOKENS, (uint64_t)id, &s, &len)) goto fail;
        char empty[32];
        if (len == 0) {
            /* llama.cpp renames empty tokens so that every id has a distinct text */
            len = (size_t)snprintf(empty, sizeof empty, "[EMPTY_%d]", (int)id);
            s = empty;
        }
        if (len > MAX_TOKEN_LEN) {
            rcore_error_set("%s: token %d is %zu bytes long (at most %u are supported)", KEY_TOKENS,
                            (int)id, len, MAX_TOKEN_LEN);
            goto fail;
        }
        if (arena.len > UINT32_MAX - len - 1) {
            rcore_error_set("%s: token texts exceed 4 GiB", KEY_TOKENS);
            goto fail;
        }
        struct rvocab_token *t = &v->tokens[id];
        t->text_off = (uint32_t)arena.len;
        t->text_len = (uint32_t)len;
        int32_t type = RVOCAB_TYPE_NORMAL;
        if (types) memcpy(&type, types + (size_t)id * sizeof type, sizeof type);
        t->type = (uint8_t)(type >= RVOCAB_TYPE_NORMAL && type <= RVOCAB_TYPE_BYTE
                                ? type
                                : RVOCAB_TYPE_UNDEFINED);
        if (!rcore_buf_add(&arena, s, len) || !rcore_buf_add(&arena, "", 1)) goto fail;
        v->text = arena.p; /* text_slot_find reads texts back through v->text */
        uint64_t h = text_hash(s, len);
        struct text_slot *e = text_slot_find(v, s, len, h);
        if (e->id >= 0) {
            rcore_error_set("%s: token %d \"%.*s\" has the same text as token %d", KEY_TOKENS,
                            (int)id, (int)(len > 64 ? 64 : len), s, (int)e->id);
            goto fail;
        }
        e->hash = (uint32_t)h;
        e->id = id;
    }
    v->text = arena.p;
    return true;
fail:
    free(arena.p);
    v->text = NULL;
    return false;
}

static bool merge_error(int64_t i, const char *s, size_t n, const char *why) {
    rcore_error_set("%s: merge %lld \"%.*s\" %s", KEY_MERGES, (long long)i, (int)(n > 80 ? 80 : n),
                    s, why);
    return false;
}

static bool load_merges(struct rvocab *v, const struct rgguf *g) {
    enum rgguf_vtype et;
    uint64_t n;
    if (!rgguf_get_arr(g, KEY_MERGES, &et, &n)) return false;
    if (et != RGGUF_STRING) {
        rcore_error_set("%s is an array of %s, strings were expected", KEY_MERGES,
                        rgguf_vtype_name(et));
        return false;
    }
    if (n > (uint64_t)INT32_MAX / 4) {
        rcore_error_set("%s holds %llu merges, at most %d are supported", KEY_MERGES,
                        (unsigned long long)n, INT32_MAX / 4);
        return false;
    }
    v->merge_mask = pow2_at_least((size_t)n * 2) - 1;
    v->merge_table = malloc((v->merge_mask + 1) * sizeof *v->merge_table);
    if (!v->merge_table) {
        rcore_error_set("%s: out of memory for %llu merges", KEY_MERGES, (unsigned long long)n);
        return false;
    }
    for (size_t i = 0; i <= v->merge_mask; i++) v->merge_table[i].key = MERGE_EMPTY;

    struct rcore_buf joined = {0}; /* left and right glued together, to find the result */
    bool ok = false;
    for (uint64_t i = 0; i < n; i++) {
        const char *s;
        size_t len;
        if (!rgguf_get_arr_str(g, KEY_MERGES, i, &s, &len)) goto done;
        /* split at the first space after the first byte, as llama.cpp does */
        const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
        if (!sp) {
            merge_error((int64_t)i, s, len, "has no space between two tokens");
            goto done;
        }
        size_t nl = (size_t)(sp - s), nr = len - nl - 1;
        int32_t left = rvocab_text_to_token(v, s, nl);
        int32_t right = rvocab_text_to_token(v, sp + 1, nr);
        if (left < 0 || right < 0) {
            merge_error((int64_t)i, s, len, "names a token that is not in the vocabulary");
            goto done;
        }
        joined.len = 0;
        if (!rcore_buf_add(&joined, s, nl) || !rcore_buf_add(&joined, sp + 1, nr)) goto done;
        int32_t result = rvocab_text_to_token(v, joined.p, joined.len);
        if (result < 0) {
            merge_error((int64_t)i, s, len, "makes a token that is not in the vocabulary");
            goto done;
        }
        uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
        size_t j = rvocab_merge_index(key, v->merge_mask);
        while (v->merge_table[j].key != MERGE_EMPTY && v->merge_table[j].key != key)
            j = (j + 1) & v->merge_mask;
        if (v->merge_table[j].key == MERGE_EMPTY) { /* a repeated pair keeps its first rank */
            v->merge_table[j] = (struct merge_slot){key, (int32_t)i, result};
            v->n_merges++;
        }
    }
    ok = true;
done:
    free(joined.p);
    return ok;
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* What token_to_piece hands out with special = true, as llama.cpp's token_to_piece cache. */
static bool add_piece(struct rvocab *v, struct rcore_buf *out, int32_t id) {
    const struct rvocab_token *t = &v->tokens[id];
    const char *s = rvocab_tok_text(v, id);
    size_t start = out->len;
    switch (t->type) {
    case RVOCAB_TYPE_CONTROL:
    case RVOCAB_TYPE_UNKNOWN:
    case RVOCAB_TYPE_USER_DEFINED:
        return rcore_buf_add(out, s, t->text_len);
    case RVOCAB_TYPE_BYTE: {
        bool form = t->text_len == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>';
        int hi = form ? hex_digit(s[3]) : -1, lo = form ? hex_digit(s[4]) : -1;
        if (hi >= 0 && lo >= 0) {
            char c = (char)(hi << 4 | lo);
            return rcore_buf_add(out, &c, 1);
        }
        return true; /* not of the form <0xXX>: no byte to give */
    }
    case RVOCAB_TYPE_NORMAL: {
        const uint8_t *p = (const uint8_t *)s;
        size_t n = t->text_len;
        if (v->model == VM_SPM) { /* "▁" stands for a space, as llama_unescape_whitespace */
            for (size_t i = 0; i < n;) {
                bool esc = n - i >= 3 && memcmp(p + i, "\xe2\x96\x81", 3) == 0;
                if (!rcore_buf_add(out, esc ? " " : s + i, 1)) return false;
                i += esc ? 3 : 1;
            }
            return true;
        }
        for (size_t i = 0; i < n;) {
            size_t len;
            uint32_t cp = rcore_utf8_decode(p + i, n - i, &len);
            if (len == 0) cp = 0xFFFD;
            i += len ? len : 1;
            if (cp < N_ALPHABET_CP && v->cp_byte[cp] >= 0) {
                char c = (char)v->cp_byte[cp];
                if (!rcore_buf_add(out, &c, 1)) return false;
                continue;
            }
            /* llama.cpp's llama_decode_text writes a character outside the alphabet so */
            char u8[4], hex[9];
            int k = (int)rcore_utf8_encode(cp, u8);
            for (int j = 0; j < k; j++) snprintf(hex + 2 * j, 3, "%02x", (uint8_t)u8[j]);
            if (!rcore_buf_add(out, "[UNK_BYTE_0x", 12) ||
                !rcore_buf_add(out, hex, (size_t)(2 * k)) || !rcore_buf_add(out, s, n) ||
                !rcore_buf_add(out, "]", 1))
                return false;
            if (out->len - start > MAX_PIECE_LEN) {
                rcore_error_set("%s: token %d: its decoded text exceeds %u bytes", KEY_TOKENS,
                                (int)id, MAX_PIECE_LEN);
                return false;
            }
        }
        return true;
    }
    default:
        return true; /* unused and undefined tokens have no text */
    }
}

static bool build_pieces(struct rvocab *v) {
    struct rcore_buf out = {0};
    for (int32_t id = 0; id < v->n_tokens; id++) {
        size_t before = out.len;
        if (!add_piece(v, &out, id)) goto fail;
        if (out.len > UINT32_MAX) {
            rcore_error_set("%s: decoded token texts exceed 4 GiB", KEY_TOKENS);
            goto fail;
        }
        v->tokens[id].piece_off = (uint32_t)before;
        v->tokens[id].piece_len = (uint32_t)(out.len - before);
    }
    if (!out.p && !rcore_buf_add(&out, "", 1)) goto fail; /* never NULL, even if all are empty */
    v->pieces = out.p;
    return true;
fail:
    free(out.p);
    return false;
}

/* rwkv: every token's piece is its unescaped text, whatever its type (control <s> and the
 * unused [PAD<i>] tokens too), as llama.cpp's token_to_piece gives for RWKV vocabularies. */
static bool build_rwkv_pieces(struct rvocab *v) {
    struct rcore_buf out = {0};
    for (int32_t id = 0; id < v->n_tokens; id++) {
        size_t before = out.len;
        const struct rvocab_token *t = &v->tokens[id];
        if (!rvocab_rwkv_unescape(rvocab_tok_text(v, id), t->text_len, id, &out)) goto fail;
        if (out.len > UINT32_MAX) {
            rcore_error_set("%s: unescaped token texts exceed 4 GiB", KEY_TOKENS);
            goto fail;
        }
        v->tokens[id].piece_off = (uint32_t)before;
        v->tokens[id].piece_len = (uint32_t)(out.len - before);
    }
    if (!out.p && !rcore_buf_add(&out, "", 1)) goto fail;
    v->pieces = out.p;
    return true;
fail:
    free(out.p);
    return false;
}

static bool build_rwkv(struct rvocab *v) {
    if (!build_rwkv_pieces(v)) return false;
    v->trie = rvocab_trie_build(v->tokens, v->n_tokens, v->pieces);
    if (!v->trie) return false;
    int first;
    int missing = rvocab_trie_missing_bytes(v->trie, &first);
    if (missing && v->unk < 0)
        rcore_log(RCORE_LOG_WARN,
                  "rwkv vocabulary: %d of the 256 bytes (the first 0x%02x) have no single-byte "
                  "token and %s is not set: tokenizing a text fails where such a byte starts no "
                  "longer token\n",
                  missing, first, KEY_UNK);
    return true;
}

struct special_sort {
    uint32_t len;
    int32_t id;
};

static int cmp_special(const void *a, const void *b) {
    const struct special_sort *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1; /* longest first */
    return (x->id > y->id) - (x->id < y->id);              /* then by id, to be deterministic */
}

static bool build_specials(struct rvocab *v) {
    int32_t n = 0;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        uint8_t t = v->tokens[id].type;
        n += t == RVOCAB_TYPE_CONTROL || t == RVOCAB_TYPE_UNKNOWN || t == RVOCAB_TYPE_USER_DEFINED;
    }
    if (n == 0) return true;
    struct special_sort *s = malloc((size_t)n * sizeof *s);
    v->specials = malloc((size_t)n * sizeof *v->specials);
    if (!s || !v->specials) {
        free(s);
        rcore_error_set("vocabulary: out of memory for %d special tokens", (int)n);
        return false;
    }
    int32_t k = 0;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        uint8_t t = v->tokens[id].type;
        if (t == RVOCAB_TYPE_CONTROL || t == RVOCAB_TYPE_UNKNOWN || t == RVOCAB_TYPE_USER_DEFINED)
            s[k++] = (struct special_sort){v->tokens[id].text_len, id};
    }
    qsort(s, (size_t)n, sizeof *s, cmp_special);
    for (int32_t i = 0; i < n; i++) v->specials[i] = s[i].id;
    v->n_specials = n;
    free(s);
    return true;
}

struct rvocab *rvocab_load(const struct rgguf *g) {
    return rvocab_load_flags(g, 0);
}

struct rvocab *rvocab_load_flags(const struct rgguf *g, uint32_t flags) {
    if (!g) {
        rcore_error_set("rvocab_load: no GGUF file");
        return NULL;
    }
    enum vmodel model;
    const struct rvocab_pre *pre;
    if (!load_model_and_pre(g, &model, &pre)) return NULL;
    struct rvocab *v = calloc(1, sizeof *v);
    if (!v) {
        rcore_error_set("vocabulary: out of memory");
        return NULL;
    }
    v->model = model;
    v->pre = pre;
    v->bos = v->eos = v->unk = v->pad = -1;
    for (int i = 0; i < RVOCAB_FIM_COUNT; i++) v->fim[i] = -1;
    if (model == VM_SPM) {
        /* llama.cpp's defaults for "llama" vocabularies; the keys below override them */
        v->bos = 1;
        v->eos = 2;
        v->unk = 0;
        v->add_bos = true;
        v->add_space_prefix = true;
    } else if (model == VM_GPT2) {
        /* some pre-tokenizers (llama3's family: Falcon-H1, Nemotron-H) add BOS unless
         * tokenizer.ggml.add_bos_token says otherwise, as in llama.cpp */
        v->add_bos = pre->add_bos;
    }
    /* llama.cpp cleans up spaces for BPE vocabularies only, and not for every pre-tokenizer */
    v->clean_spaces =
        model == VM_GPT2 && pre->clean_spaces && (flags & RVOCAB_LOAD_NO_CLEAN_SPACES) == 0;
    if (!load_tokens(v, g)) goto fail;
    if (model == VM_GPT2 && !load_merges(v, g)) goto fail; /* the others have none */
    if (model == VM_SPM && !load_scores(v, g)) goto fail;
    if (!load_special_id(g, KEY_BOS, v->n_tokens, &v->bos) ||
        !load_special_id(g, KEY_EOS, v->n_tokens, &v->eos) ||
        !load_special_id(g, KEY_UNK, v->n_tokens, &v->unk) ||
        !load_special_id(g, KEY_PAD, v->n_tokens, &v->pad) || !load_fim_ids(g, v))
        goto fail;
    if (!load_bool(g, KEY_ADD_BOS, &v->add_bos) || !load_bool(g, KEY_ADD_EOS, &v->add_eos) ||
        !load_bool(g, KEY_ADD_PREFIX, &v->add_space_prefix))
        goto fail;
    if (model == VM_RWKV) {
        /* add_bos / add_eos are only reported: llama.cpp's RWKV tokenizer never adds them */
        if (!build_rwkv(v) || !build_specials(v)) goto fail;
        return v;
    }
    if (v->add_bos && v->bos < 0) {
        rcore_error_set("%s is true, but %s is not set", KEY_ADD_BOS, KEY_BOS);
        goto fail;
    }
    if (v->add_eos && v->eos < 0) {
        rcore_error_set("%s is true, but %s is not set", KEY_ADD_EOS, KEY_EOS);
        goto fail;
    }
    if (model == VM_SPM) {
        spm_byte_tokens(v);
        if (!build_pieces(v) || !build_specials(v)) goto fail;
        return v;
    }
    byte_alphabet(v);
    for (int b = 0; b < 256; b++) {
        char u8[4];
        size_t k = rcore_utf8_encode(v->byte_cp[b], u8);
        v->byte_token[b] = rvocab_text_to_token(v, u8, k);
    }
    if (!build_pieces(v) || !build_specials(v)) goto fail;
    if (!rvocab_pre_compile(pre, (flags & RVOCAB_LOAD_NO_JIT) == 0, v->re, &v->jit)) goto fail;
    return v;
fail:
    rvocab_free(v);
    return NULL;
}

void rvocab_free(struct rvocab *v) {
    if (!v) return;
    for (int i = 0; i < RVOCAB_PRE_MAX; i++) pcre2_code_free(v->re[i]);
    rvocab_trie_free(v->trie);
    free(v->scores);
    free(v->tokens);
    free(v->text);
    free(v->pieces);
    free(v->text_table);
    free(v->merge_table);
    free(v->specials);
    free(v);
}

/* ---- properties ------------------------------------------------------------------------------ */

const char *rvocab_model(const struct rvocab *v) {
    return v ? model_names[v->model] : NULL;
}

const char *rvocab_pre_name(const struct rvocab *v) {
    return v && v->pre ? v->pre->name : NULL;
}

int32_t rvocab_n_tokens(const struct rvocab *v) {
    return v ? v->n_tokens : 0;
}

int32_t rvocab_n_merges(const struct rvocab *v) {
    return v ? v->n_merges : 0;
}

int32_t rvocab_bos(const struct rvocab *v) {
    return v ? v->bos : -1;
}

int32_t rvocab_eos(const struct rvocab *v) {
    return v ? v->eos : -1;
}

int32_t rvocab_unk(const struct rvocab *v) {
    return v ? v->unk : -1;
}

int32_t rvocab_pad(const struct rvocab *v) {
    return v ? v->pad : -1;
}

int32_t rvocab_fim(const struct rvocab *v, enum rvocab_fim which) {
    return v && which >= 0 && which < RVOCAB_FIM_COUNT ? v->fim[which] : -1;
}

bool rvocab_add_bos(const struct rvocab *v) {
    return v && v->add_bos;
}

bool rvocab_add_eos(const struct rvocab *v) {
    return v && v->add_eos;
}

bool rvocab_clean_spaces(const struct rvocab *v) {
    return v && v->clean_spaces;
}

bool rvocab_uses_jit(const struct rvocab *v) {
    return v && v->jit;
}

enum rvocab_token_type rvocab_token_type(const struct rvocab *v, int32_t token) {
    if (!v || token < 0 || token >= v->n_tokens) return RVOCAB_TYPE_UNDEFINED;
    return (enum rvocab_token_type)v->tokens[token].type;
}

const char *rvocab_token_text(const struct rvocab *v, int32_t token, size_t *len) {
    if (!v || token < 0 || token >= v->n_tokens) return NULL;
    if (len) *len = v->tokens[token].text_len;
    return rvocab_tok_text(v, token);
}
