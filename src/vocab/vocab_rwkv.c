/*
 * vocab_rwkv: the RWKV "world" tokenizer (tokenizer.ggml.model = "rwkv") with llama.cpp's
 * semantics (llama-vocab.cpp: llama_unescape_rwkv_token, llm_tokenizer_rwkv): token texts are
 * Python byte-string escapes of the token's bytes, and tokenizing is a greedy longest match of
 * the raw bytes against every token. docs/rwkv6.md section 6 has the facts.
 *
 * The trie, and why this shape:
 *
 *  - Nodes live in flat arrays (value, first child, child count, edge byte), one entry per
 *    distinct non-empty prefix of a token, so a 65k-token vocabulary is a few allocations of a
 *    few MB, not one malloc per node as llama.cpp's std::map-based naive_trie.
 *
 *  - The children of a node are contiguous and sorted by byte, and their edge bytes sit in
 *    their own array, so finding a child is a binary search over a few contiguous bytes (the
 *    node after a space has hundreds of children in the world vocabulary; most have one or
 *    two). The first byte, where every walk starts and which has all 256 children, is a
 *    direct 256-entry table.
 *
 *  - Built without insertion: the tokens are sorted by their bytes (then by id), and the nodes
 *    are laid out breadth-first, each node owning the run of sorted tokens that share its
 *    prefix; splitting a run by the next byte gives its children in order, already
 *    contiguous. Load is one sort plus a pass over the bytes; duplicates (equal bytes) are
 *    adjacent in id order, so the later id is the one that stays, as in llama.cpp, where each
 *    insert overwrites.
 *
 * Tokenizing walks from each position as far as the trie goes, remembering the last node that
 * ends a token, and emits that token; its cost is the walked length per emitted token, at most
 * the longest token. Where nothing matches (no token starts with the byte, or the walk passes
 * no complete token: the latter sends llama.cpp back to position 0 forever), the unknown token
 * is emitted and the walk moves one byte on; with no unknown token the call fails, because
 * llama.cpp would emit the id -1 there, which is not a token (see vocab.h).
 */
#include "vocab/vocab_impl.h"

#include "core/core.h"

#include <stdlib.h>
#include <string.h>

#define KEY_TOKENS "tokenizer.ggml.tokens"

/* ---- unescape ------------------------------------------------------------------------------ */

static int lower_hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

static bool escape_error(const char *text, size_t len, int32_t id, size_t at, const char *why) {
    rcore_error_set("%s: token %d \"%.*s\" has a malformed escape at byte %zu: %s", KEY_TOKENS,
                    (int)id, (int)(len > 64 ? 64 : len), text, at, why);
    return false;
}

/* The converter stores repr(bytes)[2:-1]: printable ASCII as is, \\ \t \n \r, \xNN (lowercase)
 * for every other byte, and \' when Python quotes that way. llama.cpp reads \t \n \r \xNN, and
 * a backslash before any other character gives that character; so does this. Where llama.cpp
 * reads malformed input silently (\x followed by something other than two lowercase hex
 * digits decodes to an arbitrary byte; a trailing \ or \x, \xN is dropped) this refuses the
 * file: the converter cannot have written it, and guessing would tokenize differently from
 * llama.cpp or from what was meant. */
bool rvocab_rwkv_unescape(const char *text, size_t len, int32_t id, struct rcore_buf *out) {
    size_t i = 0;
    while (i < len) {
        /* copy the run up to the next backslash in one go */
        const char *bs = memchr(text + i, '\\', len - i);
        size_t run = bs ? (size_t)(bs - (text + i)) : len - i;
        if (!rcore_buf_add(out, text + i, run)) return false;
        i += run;
        if (i == len) break;
        if (i + 1 == len) return escape_error(text, len, id, i, "it ends in a lone backslash");
        char c = text[i + 1];
        switch (c) {
        case 't':
            c = '\t';
            break;
        case 'n':
            c = '\n';
            break;
        case 'r':
            c = '\r';
            break;
        case 'x': {
            int hi = i + 2 < len ? lower_hex(text[i + 2]) : -1;
            int lo = i + 3 < len ? lower_hex(text[i + 3]) : -1;
            if (hi < 0 || lo < 0)
                return escape_error(text, len, id, i,
                                    "\\x must be followed by two lowercase hex digits");
            char b = (char)(hi << 4 | lo);
            if (!rcore_buf_add(out, &b, 1)) return false;
            i += 4;
            continue;
        }
        default:
            break; /* \\ \' and any other character stand for themselves */
        }
        if (!rcore_buf_add(out, &c, 1)) return false;
        i += 2;
    }
    return true;
}

/* ---- the trie ------------------------------------------------------------------------------ */

struct rvocab_trie {
    int32_t root[256]; /* node reached by each first byte, -1: no token starts with it */
    int32_t n_nodes;
    int32_t *value;    /* token ending at the node, -1: none */
    uint32_t *first;   /* its children: first .. first + n_child - 1, sorted by label */
    uint16_t *n_child; /* at most 256 */
    uint8_t *label;    /* the byte on the edge into the node */
};

struct key {
    const uint8_t *p;
    uint32_t len;
    int32_t id;
};

static int cmp_key(const void *a, const void *b) {
    const struct key *x = a, *y = b;
    uint32_t n = x->len < y->len ? x->len : y->len;
    int c = n ? memcmp(x->p, y->p, n) : 0;
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1; /* a prefix sorts first */
    return (x->id > y->id) - (x->id < y->id);              /* equal bytes: id order */
}

void rvocab_trie_free(struct rvocab_trie *t) {
    if (!t) return;
    free(t->value);
    free(t->first);
    free(t->n_child);
    free(t->label);
    free(t);
}

struct rvocab_trie *rvocab_trie_build(const struct rvocab_token *tokens, int32_t n_tokens,
                                      const char *pieces) {
    struct rvocab_trie *t = calloc(1, sizeof *t);
    struct key *keys = malloc((size_t)(n_tokens > 0 ? n_tokens : 1) * sizeof *keys);
    uint32_t *lo = NULL, *hi = NULL, *depth = NULL;
    if (!t || !keys) goto oom;
    size_t m = 0;
    for (int32_t id = 0; id < n_tokens; id++) {
        if (tokens[id].piece_len == 0) continue; /* cannot match anything */
        keys[m++] =
            (struct key){(const uint8_t *)pieces + tokens[id].piece_off, tokens[id].piece_len, id};
    }
    qsort(keys, m, sizeof *keys, cmp_key);

    /* nodes = distinct non-empty prefixes: each key adds those past its common prefix with
     * the key before it */
    uint64_t n_nodes = 0;
    for (size_t k = 0; k < m; k++) {
        uint32_t common = 0;
        if (k > 0) {
            uint32_t lim = keys[k].len < keys[k - 1].len ? keys[k].len : keys[k - 1].len;
            while (common < lim && keys[k].p[common] == keys[k - 1].p[common]) common++;
        }
        n_nodes += keys[k].len - common;
    }
    if (n_nodes > INT32_MAX) {
        rcore_error_set("%s: the rwkv byte trie would need %llu nodes, at most %d are supported",
                        KEY_TOKENS, (unsigned long long)n_nodes, INT32_MAX);
        goto fail;
    }
    size_t nn = n_nodes ? (size_t)n_nodes : 1;
    t->value = malloc(nn * sizeof *t->value);
    t->first = malloc(nn * sizeof *t->first);
    t->n_child = malloc(nn * sizeof *t->n_child);
    t->label = malloc(nn);
    lo = malloc(nn * sizeof *lo); /* build only: the node's run of keys, and its depth */
    hi = malloc(nn * sizeof *hi);
    depth = malloc(nn * sizeof *depth);
    if (!t->value || !t->first || !t->n_child || !t->label || !lo || !hi || !depth) goto oom;

    /* Breadth-first: node i's keys are keys[lo[i] .. hi[i]), all sharing its prefix of
     * length depth[i]; the keys that end there come first (a prefix sorts first), then runs
     * by the next byte, each a child. The root (depth 0) is handled like a node whose
     * children go into root[]. */
    int32_t count = 0;
    for (int b = 0; b < 256; b++) t->root[b] = -1;
    for (int32_t i = -1; i < count; i++) {
        uint32_t a = i < 0 ? 0 : lo[i], z = i < 0 ? (uint32_t)m : hi[i];
        uint32_t d = i < 0 ? 0 : depth[i];
        if (i >= 0) {
            t->value[i] = -1;
            for (; a < z && keys[a].len == d; a++) t->value[i] = keys[a].id; /* last id wins */
            t->first[i] = (uint32_t)count;
        }
        while (a < z) {
            uint8_t b = keys[a].p[d];
            uint32_t e = a + 1;
            while (e < z && keys[e].p[d] == b) e++;
            t->label[count] = b;
            lo[count] = a;
            hi[count] = e;
            depth[count] = d + 1;
            if (i < 0) t->root[b] = count;
            count++;
            a = e;
        }
        if (i >= 0) t->n_child[i] = (uint16_t)((uint32_t)count - t->first[i]);
    }
    t->n_nodes = count;
    free(keys);
    free(lo);
    free(hi);
    free(depth);
    return t;
oom:
    rcore_error_set("%s: out of memory for the rwkv byte trie of %d tokens", KEY_TOKENS,
                    (int)n_tokens);
fail:
    free(keys);
    free(lo);
    free(hi);
    free(depth);
    rvocab_trie_free(t);
    return NULL;
}

int rvocab_trie_missing_bytes(const struct rvocab_trie *t, int *first) {
    int n = 0;
    *first = -1;
    for (int b = 255; b >= 0; b--) {
        if (t->root[b] < 0 || t->value[t->root[b]] < 0) {
            n++;
            *first = b;
        }
    }
    return n;
}

static int32_t child(const struct rvocab_trie *t, int32_t node, uint8_t b) {
    uint32_t a = t->first[node], z = a + t->n_child[node];
    while (a < z) {
        uint32_t mid = a + (z - a) / 2;
        if (t->label[mid] < b) {
            a = mid + 1;
        } else {
            z = mid;
        }
    }
    return a < t->first[node] + t->n_child[node] && t->label[a] == b ? (int32_t)a : -1;
}

bool rvocab_trie_tokenize(const struct rvocab_trie *t, const uint8_t *s, size_t n, size_t off,
                          int32_t unk, struct rvocab_out *out) {
    size_t pos = 0;
    while (pos < n) {
        int32_t node = t->root[s[pos]], best = -1;
        size_t end = pos, best_end = pos;
        while (node >= 0) {
            end++;
            if (t->value[node] >= 0) {
                best = t->value[node];
                best_end = end;
            }
            if (end == n) break;
            node = child(t, node, s[end]);
        }
        if (best >= 0) {
            rvocab_out_push(out, best);
            pos = best_end;
            continue;
        }
        if (unk < 0) {
            rcore_error_set("tokenize: byte 0x%02x at offset %zu starts no token of this rwkv "
                            "vocabulary, which has no unknown token "
                            "(tokenizer.ggml.unknown_token_id)",
                            s[pos], off + pos);
            return false;
        }
        rvocab_out_push(out, unk);
        pos++;
    }
    return true;
}
