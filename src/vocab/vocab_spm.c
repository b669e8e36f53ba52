/*
 * vocab_spm: SentencePiece vocabularies (tokenizer.ggml.model = "llama": LLaMA, Mistral,
 * Mamba-Codestral), tokenized as llama.cpp's llm_tokenizer_spm does (llama-vocab.cpp):
 *
 *  - the text of a fragment (the pieces between special tokens) gets a leading space when the
 *    vocabulary asks for one (tokenizer.ggml.add_space_prefix, true by default for this model)
 *    and the fragment is the first or follows a special token; then every space becomes
 *    U+2581 "▁";
 *  - the result is cut into characters by the lead byte alone (0x00-0xBF one byte, 0xC0-0xDF
 *    two, 0xE0-0xEF three, 0xF0-0xFF four, cut short at the end), not validated: so invalid
 *    UTF-8 is carried through byte for byte;
 *  - every adjacent pair whose concatenated text is a token (of any type) is a candidate,
 *    scored by that token's tokenizer.ggml.scores entry; the best score is merged first, the
 *    leftmost on ties, and the merged symbol's new pairs become candidates. A candidate whose
 *    symbols changed since it was queued is skipped: as llama.cpp, that is detected by the sum
 *    of the two symbols' current lengths differing from the candidate's (symbols only grow or
 *    die, so the sum is unchanged only if neither changed);
 *  - each final symbol is its token when its text is one; otherwise (a character no token
 *    spells) each of its bytes is the byte token "<0xXX>" (upper-case hex), or, lacking that,
 *    the token whose text is the single byte. llama.cpp aborts where neither exists; this
 *    emits the unknown token, or fails naming the byte when there is none.
 *
 * (llama.cpp also keeps a map from merged text back to its halves to "resegment" a symbol that
 * is not a token; every merged symbol is a token by construction, so that path never runs and
 * is not reproduced.)
 *
 * The queue is a binary heap of (score, left, right, size); as in the BPE, a merge queues at
 * most two candidates, so a fragment of n characters costs O(n log n).
 */
#include "vocab/vocab.h"
#include "vocab/vocab_impl.h"

#include "core/core.h"

#include <stdlib.h>
#include <string.h>

struct sym {
    uint32_t off, n; /* bytes in the escaped text; n == 0 once merged into the left one */
    int32_t prev, next;
};

struct cand {
    float score;
    int32_t left, right;
    uint32_t size;
};

struct spm {
    const struct rvocab_spm *ctx;
    const char *text; /* escaped */
    struct sym *syms;
    struct cand *heap;
    size_t heap_n;
};

/* llama.cpp's llm_bigram_spm comparator (l ranks below r) */
static bool cand_below(const struct cand *l, const struct cand *r) {
    return l->score < r->score || (l->score == r->score && l->left > r->left);
}

static void heap_push(struct spm *s, struct cand c) {
    size_t i = s->heap_n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!cand_below(&s->heap[parent], &c)) break;
        s->heap[i] = s->heap[parent];
        i = parent;
    }
    s->heap[i] = c;
}

static struct cand heap_pop(struct spm *s) {
    struct cand top = s->heap[0];
    struct cand last = s->heap[--s->heap_n];
    size_t i = 0, n = s->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && cand_below(&s->heap[c], &s->heap[c + 1])) c++;
        if (!cand_below(&last, &s->heap[c])) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n) s->heap[i] = last;
    return top;
}

static void try_pair(struct spm *s, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const struct sym *l = &s->syms[left], *r = &s->syms[right];
    uint32_t size = l->n + r->n; /* the two are adjacent in the text */
    int32_t id = rvocab_text_to_token(s->ctx->v, s->text + l->off, size);
    if (id < 0) return;
    heap_push(s, (struct cand){s->ctx->scores[id], left, right, size});
}

static bool emit_bytes(const struct rvocab_spm *c, const uint8_t *p, uint32_t n, size_t at,
                       struct rvocab_out *out) {
    for (uint32_t j = 0; j < n; j++) {
        int32_t id = c->byte_token[p[j]];
        if (id < 0) id = c->unk;
        if (id < 0) {
            rcore_error_set("tokenize: byte 0x%02x (escaped text offset %zu) has no token "
                            "(<0x%02X>) in this SentencePiece vocabulary, and it names no unknown "
                            "token",
                            p[j], at + j, p[j]);
            return false;
        }
        rvocab_out_push(out, id);
    }
    return true;
}

bool rvocab_spm_tokenize(const struct rvocab_spm *c, const uint8_t *text, size_t len,
                         bool space_prefix, struct rvocab_out *out) {
    /* escape: an optional leading space, and every space as U+2581 (3 bytes) */
    size_t n_spaces = space_prefix;
    for (size_t i = 0; i < len; i++) n_spaces += text[i] == ' ';
    size_t n = len + 2 * n_spaces + space_prefix;
    if (n == 0) return true;
    if (len > INT32_MAX || n > INT32_MAX / 4) {
        rcore_error_set("tokenize: a text fragment of %zu bytes is too long", len);
        return false;
    }
    struct spm s = {.ctx = c};
    char *buf = malloc(n);
    s.syms = malloc(n * sizeof *s.syms);
    s.heap = malloc(3 * n * sizeof *s.heap); /* n - 1 seeds, at most 2 per merge */
    bool ok = false;
    if (!buf || !s.syms || !s.heap) {
        rcore_error_set("tokenize: out of memory for a fragment of %zu bytes", len);
        goto done;
    }
    size_t k = 0;
    if (space_prefix) {
        memcpy(buf, "\xe2\x96\x81", 3);
        k = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(buf + k, "\xe2\x96\x81", 3);
            k += 3;
        } else {
            buf[k++] = (char)text[i];
        }
    }
    s.text = buf;

    static const uint8_t lead_len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    int32_t ns = 0;
    for (size_t off = 0; off < n;) {
        size_t cl = lead_len[(uint8_t)buf[off] >> 4];
        if (cl > n - off) cl = n - off;
        s.syms[ns] = (struct sym){(uint32_t)off, (uint32_t)cl, ns - 1, -1};
        if (ns > 0) s.syms[ns - 1].next = ns;
        ns++;
        off += cl;
    }
    for (int32_t i = 1; i < ns; i++) try_pair(&s, i - 1, i);
    while (s.heap_n) {
        struct cand b = heap_pop(&s);
        struct sym *l = &s.syms[b.left], *r = &s.syms[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) s.syms[r->next].prev = b.left;
        try_pair(&s, l->prev, b.left);
        try_pair(&s, b.left, l->next);
    }
    for (int32_t i = 0; i >= 0; i = s.syms[i].next) {
        const struct sym *y = &s.syms[i];
        int32_t id = rvocab_text_to_token(c->v, buf + y->off, y->n);
        if (id >= 0) {
            rvocab_out_push(out, id);
        } else if (!emit_bytes(c, (const uint8_t *)buf + y->off, y->n, y->off, out)) {
            goto done;
        }
    }
    ok = true;
done:
    free(buf);
    free(s.syms);
    free(s.heap);
    return ok;
}
