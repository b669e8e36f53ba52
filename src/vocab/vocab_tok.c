/*
 * vocab_tok: tokenize and detokenize over a loaded vocabulary (vocab.c loads it and explains its
 * tables), with llama.cpp's semantics (llama-vocab.cpp: tokenizer_st_partition, the BPE and
 * SPM sessions, token_to_piece, detokenize):
 *
 *  - special tokens are cut out of the text first (partition), then each text fragment goes
 *    to the vocabulary's tokenizer: byte-level BPE here ("gpt2": the pre-tokenizer's patterns,
 *    then merges by rank), SentencePiece in vocab_spm.c ("llama"), the greedy trie in
 *    vocab_rwkv.c ("rwkv");
 *  - detokenize concatenates the pieces decoded at load, with llama.cpp's leading-space and
 *    clean-up rules.
 *
 * Every call allocates its own scratch (symbols, heap, fragments, PCRE2 match data), so any
 * number of threads may share one vocabulary.
 */
#include "vocab/vocab.h"
#include "vocab/vocab_impl.h"

#include "core/core.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* ---- tokenize ------------------------------------------------------------------------------ */

struct sym {
    int32_t id; /* SYM_DEAD once merged into its left neighbour */
    int32_t prev, next;
};

#define SYM_DEAD (-2)

/* A candidate merge of the symbol at `left` with its right neighbour, valid while both still
 * carry the ids they had when it was queued. */
struct cand {
    int32_t rank;
    int32_t left;
    int32_t lid, rid;
    int32_t result;
};

struct fragment {
    size_t off, len;
    int32_t token; /* -1: text to tokenize */
};

struct tok {
    const struct rvocab *v;
    struct rvocab_out out;
    struct sym *syms;
    size_t syms_cap;
    struct cand *heap;
    size_t heap_n, heap_cap;
    pcre2_match_data *md;
    char *enc; /* ignore_merges: a piece in the GPT-2 byte alphabet, to look up whole */
    size_t enc_cap;
    struct rvocab_stats st;
};

static void emit(struct tok *t, int32_t id) {
    rvocab_out_push(&t->out, id);
}

static bool cand_before(const struct cand *a, const struct cand *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void heap_push(struct tok *t, struct cand c) {
    /* capacity is reserved per piece: at most n - 1 + (number of merges) <= 2n entries */
    size_t i = t->heap_n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!cand_before(&c, &t->heap[parent])) break;
        t->heap[i] = t->heap[parent];
        i = parent;
    }
    t->heap[i] = c;
    t->st.n_queue_pushes++;
}

static struct cand heap_pop(struct tok *t) {
    struct cand top = t->heap[0];
    struct cand last = t->heap[--t->heap_n];
    size_t i = 0, n = t->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && cand_before(&t->heap[c + 1], &t->heap[c])) c++;
        if (!cand_before(&t->heap[c], &last)) break;
        t->heap[i] = t->heap[c];
        i = c;
    }
    if (n) t->heap[i] = last;
    t->st.n_queue_pops++;
    return top;
}

static void try_pair(struct tok *t, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    int32_t lid = t->syms[left].id, rid = t->syms[right].id;
    if (lid < 0 || rid < 0) return; /* a byte whose token the vocabulary lacks */
    const struct merge_slot *m = rvocab_merge_find(t->v, lid, rid);
    if (m) heap_push(t, (struct cand){m->rank, left, lid, rid, m->result});
}

static bool reserve(struct tok *t, size_t n) {
    if (n > t->syms_cap) {
        size_t cap = n < 256 ? 256 : n;
        struct sym *s = realloc(t->syms, cap * sizeof *s);
        if (!s) goto oom;
        t->syms = s;
        t->syms_cap = cap;
    }
    if (2 * n > t->heap_cap) {
        size_t cap = 2 * n < 512 ? 512 : 2 * n;
        struct cand *h = realloc(t->heap, cap * sizeof *h);
        if (!h) goto oom;
        t->heap = h;
        t->heap_cap = cap;
    }
    return true;
oom:
    rcore_error_set("tokenize: out of memory for a piece of %zu bytes", n);
    return false;
}

static void emit_symbol(struct tok *t, int32_t id) {
    if (id >= 0) {
        emit(t, id);
    } else if (t->v->unk >= 0) {
        emit(t, t->v->unk); /* only when the vocabulary lacks a byte's token */
    }
}

/* With ignore_merges (llama.cpp's llama3 family): the token whose text is the whole piece
 * p[0..n) written in the GPT-2 byte alphabet, or -1. Such a token need not be what the merges
 * reach (a vocabulary may hold words its merge list never builds), which is why llama.cpp
 * looks it up first. False when out of memory. */
static bool whole_piece(struct tok *t, const uint8_t *p, size_t n, int32_t *id) {
    const struct rvocab *v = t->v;
    if (2 * n > t->enc_cap) { /* the alphabet's code points are below 0x800: 2 bytes each */
        size_t cap = 2 * n < 256 ? 256 : 2 * n;
        char *e = realloc(t->enc, cap);
        if (!e) {
            rcore_error_set("tokenize: out of memory for a piece of %zu bytes", n);
            return false;
        }
        t->enc = e;
        t->enc_cap = cap;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += rcore_utf8_encode(v->byte_cp[p[i]], t->enc + k);
    *id = rvocab_text_to_token(v, t->enc, k);
    return true;
}

/* BPE-merges one pre-token and emits its tokens. */
static bool bpe_piece(struct tok *t, const uint8_t *p, size_t n) {
    const struct rvocab *v = t->v;
    t->st.n_pieces++;
    if (n == 1) {
        emit_symbol(t, v->byte_token[p[0]]);
        return true;
    }
    if (v->pre->ignore_merges) {
        int32_t id;
        if (!whole_piece(t, p, n, &id)) return false;
        if (id >= 0) {
            emit(t, id);
            return true;
        }
    }
    if (!reserve(t, n)) return false;
    struct sym *s = t->syms;
    for (size_t i = 0; i < n; i++) {
        s[i].id = v->byte_token[p[i]];
        s[i].prev = (int32_t)i - 1;
        s[i].next = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    t->heap_n = 0;
    for (size_t i = 1; i < n; i++) try_pair(t, (int32_t)i - 1, (int32_t)i);
    while (t->heap_n) {
        struct cand c = heap_pop(t);
        struct sym *l = &s[c.left];
        if (l->id != c.lid || l->next < 0 || s[l->next].id != c.rid) continue; /* stale */
        struct sym *r = &s[l->next];
        l->id = c.result;
        l->next = r->next;
        if (r->next >= 0) s[r->next].prev = c.left;
        r->id = SYM_DEAD;
        t->st.n_merges++;
        try_pair(t, l->prev, c.left);
        try_pair(t, c.left, l->next);
    }
    for (int32_t i = 0; i >= 0; i = s[i].next) emit_symbol(t, s[i].id);
    return true;
}

/* Splits s[0..n) (valid UTF-8) with pattern `level` of the pre-tokenizer and passes each
 * match, and each stretch between matches, to the next pattern as a subject of its own (so a
 * lookahead stops at the piece's end, as in llama.cpp, whose splitters see one piece at a
 * time); after the last pattern, BPE-merges the piece. Depth is at most RVOCAB_PRE_MAX. */
static bool split_run(struct tok *t, int level, const uint8_t *s, size_t n) {
    /* n_patterns <= RVOCAB_PRE_MAX; the second test tells the compiler so (its inlining of the
       recursion warned of re[4] and re[5] otherwise) */
    if (level == t->v->pre->n_patterns || level >= RVOCAB_PRE_MAX) return bpe_piece(t, s, n);
    const pcre2_code *re = t->v->re[level];
    size_t off = 0;
    while (off < n) {
        int rc = pcre2_match(re, s, n, off, PCRE2_NO_UTF_CHECK, t->md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            rcore_error_set("tokenize: PCRE2 matching failed at byte %zu: %s", off,
                            (const char *)msg);
            return false;
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(t->md);
        size_t start = ov[0], end = ov[1]; /* read before the recursion reuses the match data */
        if (start > off && !split_run(t, level + 1, s + off, start - off)) return false;
        if (end <=
            start) { /* none of the patterns matches empty; this only keeps the loop finite */
            if (start >= n) {
                off = n;
                break;
            }
            end = start + rcore_utf8_len(s + start, n - start);
        }
        if (!split_run(t, level + 1, s + start, end - start)) return false;
        off = end;
    }
    return off >= n || split_run(t, level + 1, s + off, n - off);
}

/* A fragment of text: runs of valid UTF-8 split and merged; each byte outside them a piece of
 * its own, so that any input round-trips byte for byte. A vocabulary may lack the token of
 * such a byte (GPT-NeoX's has none for the bytes UTF-8 never uses: 0xC0, 0xC1, 0xF5-0xFF):
 * the byte is then read as U+FFFD, as llama.cpp reads every invalid byte, and never becomes
 * the unknown token, which in such vocabularies is the end of text. */
static bool tokenize_text(struct tok *t, const uint8_t *s, size_t n) {
    static const uint8_t fffd[3] = {0xEF, 0xBF, 0xBD};
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        for (size_t k; j < n && (k = rcore_utf8_len(s + j, n - j)) > 0;) j += k;
        if (j > i && !split_run(t, 0, s + i, j - i)) return false;
        if (j < n && !(t->v->byte_token[s[j]] >= 0 ? bpe_piece(t, s + j, 1)
                                                   : split_run(t, 0, fffd, sizeof fffd)))
            return false;
        i = j + (j < n);
    }
    return true;
}

static const char *find_bytes(const char *hay, size_t n, const char *needle, size_t m) {
    if (m == 0 || m > n) return NULL;
    const char *last = hay + (n - m);
    for (const char *p = hay; p <= last; p++) {
        p = memchr(p, needle[0], (size_t)(last - p) + 1);
        if (!p) return NULL;
        if (memcmp(p, needle, m) == 0) return p;
    }
    return NULL;
}

struct frags {
    struct fragment *a;
    size_t n, cap;
};

static bool frag_add(struct frags *f, size_t off, size_t len, int32_t token) {
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 16;
        struct fragment *a = realloc(f->a, cap * sizeof *a);
        if (!a) {
            rcore_error_set("tokenize: out of memory");
            return false;
        }
        f->a = a;
        f->cap = cap;
    }
    f->a[f->n++] = (struct fragment){off, len, token};
    return true;
}

/* Spans of the text where control tokens are not recognised (rvocab_tokenize_except). */
struct plain {
    const struct rvocab_span *a;
    int32_t n;
};

/* Bytes [at, at + len) overlap a span of p (sorted, disjoint: a binary search). */
static bool overlaps_plain(const struct plain *p, size_t at, size_t len) {
    int32_t lo = 0, hi = p->n; /* the first span that ends after at */
    while (lo < hi) {
        const int32_t mid = lo + (hi - lo) / 2;
        if ((size_t)p->a[mid].off + (size_t)p->a[mid].len <= at)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < p->n && (size_t)p->a[lo].off < at + len && p->a[lo].len > 0;
}

/* llama.cpp's tokenizer_st_partition: for each special token, longest first, cut every text
 * fragment at each of its (non-overlapping, left to right) occurrences; a control token's
 * occurrence that overlaps a plain span is left as text. */
static bool partition(const struct rvocab *v, const char *text, size_t n, bool parse_special,
                      const struct plain *plain, struct frags *cur) {
    struct frags next = {0};
    if (n && !frag_add(cur, 0, n, -1)) return false;
    for (int32_t k = 0; k < v->n_specials && cur->n; k++) {
        int32_t id = v->specials[k];
        uint8_t type = v->tokens[id].type;
        if (!parse_special && (type == RVOCAB_TYPE_CONTROL || type == RVOCAB_TYPE_UNKNOWN))
            continue; /* user-defined tokens are matched always, as in llama.cpp */
        const char *st = rvocab_tok_text(v, id);
        size_t sl = v->tokens[id].text_len;
        const bool guarded = plain->n > 0 && type != RVOCAB_TYPE_USER_DEFINED;
        bool found = false;
        next.n = 0;
        for (size_t i = 0; i < cur->n; i++) {
            struct fragment f = cur->a[i];
            if (f.token >= 0) {
                if (!frag_add(&next, f.off, f.len, f.token)) goto oom;
                continue;
            }
            size_t base = f.off, from = f.off, end = f.off + f.len;
            const char *m;
            while (from < end && (m = find_bytes(text + from, end - from, st, sl)) != NULL) {
                size_t at = (size_t)(m - text);
                if (guarded && overlaps_plain(plain, at, sl)) {
                    from = at + 1; /* text here: look further on */
                    continue;
                }
                if (at > base && !frag_add(&next, base, at - base, -1)) goto oom;
                if (!frag_add(&next, at, sl, id)) goto oom;
                base = from = at + sl;
                found = true;
            }
            if (base < end && !frag_add(&next, base, end - base, -1)) goto oom;
        }
        if (found) { /* swap, so that the next special scans the new list */
            struct frags tmp = *cur;
            *cur = next;
            next = tmp;
        }
    }
    free(next.a);
    return true;
oom:
    free(next.a);
    return false;
}

int32_t rvocab_tokenize(const struct rvocab *v, const char *text, int32_t text_len, int32_t *tokens,
                        int32_t n_tokens_max, bool add_special, bool parse_special) {
    return rvocab_tokenize_stats(v, text, text_len, tokens, n_tokens_max, add_special,
                                 parse_special, NULL);
}

static int32_t tokenize(const struct rvocab *v, const char *text, int32_t text_len, int32_t *tokens,
                        int32_t n_tokens_max, bool add_special, bool parse_special,
                        const struct plain *plain, struct rvocab_stats *stats);

int32_t rvocab_tokenize_stats(const struct rvocab *v, const char *text, int32_t text_len,
                              int32_t *tokens, int32_t n_tokens_max, bool add_special,
                              bool parse_special, struct rvocab_stats *stats) {
    const struct plain none = {NULL, 0};
    return tokenize(v, text, text_len, tokens, n_tokens_max, add_special, parse_special, &none,
                    stats);
}

int32_t rvocab_tokenize_except(const struct rvocab *v, const char *text, int32_t text_len,
                               int32_t *tokens, int32_t n_tokens_max, bool add_special,
                               const struct rvocab_span *plain, int32_t n_plain) {
    if (n_plain < 0 || (!plain && n_plain > 0)) {
        rcore_error_set("tokenize: invalid plain spans (%d%s)", (int)n_plain,
                        plain ? "" : ", NULL pointer");
        return INT32_MIN;
    }
    for (int32_t i = 0; i < n_plain; i++) {
        const struct rvocab_span *p = &plain[i];
        const int64_t prev_end = i ? (int64_t)plain[i - 1].off + plain[i - 1].len : 0;
        if (p->off < 0 || p->len < 0 || (int64_t)p->off + p->len > text_len || p->off < prev_end) {
            rcore_error_set(
                "tokenize: plain span %d [%d, +%d) is %s", (int)i, (int)p->off, (int)p->len,
                p->off < prev_end ? "before the end of the previous one" : "outside the text");
            return INT32_MIN;
        }
    }
    const struct plain spans = {plain, n_plain};
    return tokenize(v, text, text_len, tokens, n_tokens_max, add_special, true, &spans, NULL);
}

static int32_t tokenize(const struct rvocab *v, const char *text, int32_t text_len, int32_t *tokens,
                        int32_t n_tokens_max, bool add_special, bool parse_special,
                        const struct plain *plain, struct rvocab_stats *stats) {
    if (stats) *stats = (struct rvocab_stats){0};
    if (!v) {
        rcore_error_set("tokenize: no vocabulary");
        return INT32_MIN;
    }
    if (text_len < 0 || (!text && text_len > 0)) {
        rcore_error_set("tokenize: invalid text (length %d%s)", (int)text_len,
                        text ? "" : ", NULL pointer");
        return INT32_MIN;
    }
    if (n_tokens_max < 0 || (!tokens && n_tokens_max > 0)) {
        rcore_error_set("tokenize: invalid token buffer (room for %d%s)", (int)n_tokens_max,
                        tokens ? "" : ", NULL pointer");
        return INT32_MIN;
    }
    struct tok t = {.v = v, .out = {tokens, 0, n_tokens_max}};
    struct frags frags = {0};
    bool ok = false;
    if (v->model == VM_GPT2 && !(t.md = pcre2_match_data_create(1, NULL))) {
        rcore_error_set("tokenize: out of memory");
        goto done;
    }
    /* llama.cpp's RWKV tokenizer adds no BOS / EOS, whatever add_bos_token says */
    const bool add_bos = add_special && v->add_bos && v->model != VM_RWKV;
    const bool add_eos = add_special && v->add_eos && v->model != VM_RWKV;
    const struct rvocab_spm spm = {v, v->scores, v->byte_token, v->unk};
    bool prev_special = true; /* llama: the first fragment, and one after a special token, get
                               * the space prefix */
    if (add_bos) emit(&t, v->bos);
    if (!partition(v, text, (size_t)text_len, parse_special, plain, &frags)) goto done;
    for (size_t i = 0; i < frags.n; i++) {
        const struct fragment *f = &frags.a[i];
        const uint8_t *s = (const uint8_t *)text + f->off;
        bool ok_frag = true;
        if (f->token >= 0) {
            emit(&t, f->token);
        } else if (v->model == VM_RWKV) {
            ok_frag = rvocab_trie_tokenize(v->trie, s, f->len, f->off, v->unk, &t.out);
        } else if (v->model == VM_SPM) {
            ok_frag =
                rvocab_spm_tokenize(&spm, s, f->len, v->add_space_prefix && prev_special, &t.out);
        } else {
            ok_frag = tokenize_text(&t, s, f->len);
        }
        if (!ok_frag) goto done;
        prev_special = f->token >= 0;
    }
    if (add_eos) emit(&t, v->eos);
    if (t.out.n > INT32_MAX) {
        rcore_error_set("tokenize: %lld tokens do not fit in an int32_t", (long long)t.out.n);
        goto done;
    }
    ok = true;
done:
    pcre2_match_data_free(t.md);
    free(t.enc);
    free(t.syms);
    free(t.heap);
    free(frags.a);
    if (stats) *stats = t.st;
    if (!ok) return INT32_MIN;
    return t.out.n <= n_tokens_max ? (int32_t)t.out.n : -(int32_t)t.out.n;
}

/* ---- detokenize ---------------------------------------------------------------------------- */

int32_t rvocab_token_to_piece(const struct rvocab *v, int32_t token, char *buf, int32_t length,
                              int32_t lstrip, bool special) {
    if (!v) {
        rcore_error_set("token_to_piece: no vocabulary");
        return 0;
    }
    if (token < 0 || token >= v->n_tokens) {
        rcore_error_set("token_to_piece: token %d is out of range (%d tokens)", (int)token,
                        (int)v->n_tokens);
        return 0;
    }
    const struct rvocab_token *t = &v->tokens[token];
    if (!special && (t->type == RVOCAB_TYPE_CONTROL || t->type == RVOCAB_TYPE_UNKNOWN)) return 0;
    const char *p = v->pieces + t->piece_off;
    int32_t size = (int32_t)t->piece_len;
    for (int32_t i = 0; i < lstrip && size && *p == ' '; i++) {
        p++;
        size--;
    }
    if (length < size) return -size;
    if (size) memcpy(buf, p, (size_t)size);
    return size;
}

/* llama.cpp's clean-up of tokenization spaces, three passes in place over text[0..total). */
static int32_t clean_spaces(char *text, int32_t total) {
    /* " ?", " !", " .", " ," lose the space */
    int32_t total1 = total;
    total = total ? 1 : 0;
    for (int32_t i = 1; i < total1; ++i) {
        const char x = text[i];
        if (text[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) total--;
        text[total++] = x;
    }
    /* " ' " loses both spaces */
    int32_t total2 = total;
    total = total ? 1 : 0;
    for (int32_t i = 1; i < total2; ++i) {
        const char x = text[i];
        if (x == '\'' && i + 1 < total2 && text[i - 1] == ' ' && text[i + 1] == ' ') {
            total--;
            text[++i] = '\0';
        }
        text[total++] = x;
    }
    /* " 's", " 'm", " 're", " 've" lose the space (" 't", " 'd", " 'll" keep it) */
    int32_t total3 = total;
    total = total ? 1 : 0;
    for (int32_t i = 1; i < total3; ++i) {
        const char x = text[i];
        if (text[i - 1] == ' ' && x == '\'' && i + 1 < total3) {
            const char x1 = text[i + 1];
            if (x1 == 't' || x1 == 'd') {
                /* kept */
            } else if (x1 == 's' || x1 == 'm') {
                total--;
            } else if (i + 2 < total3) {
                const char x2 = text[i + 2];
                if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) total--;
            }
        }
        text[total++] = x;
    }
    return total;
}

int32_t rvocab_detokenize(const struct rvocab *v, const int32_t *tokens, int32_t n_tokens,
                          char *text, int32_t text_len_max, bool remove_special,
                          bool unparse_special) {
    if (!v) {
        rcore_error_set("detokenize: no vocabulary");
        return INT32_MIN;
    }
    if (n_tokens < 0 || (!tokens && n_tokens > 0) || text_len_max < 0 ||
        (!text && text_len_max > 0)) {
        rcore_error_set("detokenize: invalid arguments (%d tokens, room for %d bytes)",
                        (int)n_tokens, (int)text_len_max);
        return INT32_MIN;
    }
    for (int32_t i = 0; i < n_tokens; i++) {
        if (tokens[i] < 0 || tokens[i] >= v->n_tokens) {
            rcore_error_set("detokenize: token %d (at %d) is out of range (%d tokens)",
                            (int)tokens[i], (int)i, (int)v->n_tokens);
            return INT32_MIN;
        }
    }
    bool remove_space = v->add_space_prefix;
    if (remove_special && v->add_bos && n_tokens > 0 && tokens[0] == v->bos) {
        remove_space = false;
        n_tokens--;
        tokens++;
    }
    if (remove_special && v->add_eos && n_tokens > 0 && tokens[n_tokens - 1] == v->eos) {
        n_tokens--;
    }
    int64_t avail = text_len_max, total = 0;
    char *out = text;
    for (int32_t i = 0; i < n_tokens; i++) {
        int32_t n =
            rvocab_token_to_piece(v, tokens[i], out, (int32_t)avail, remove_space, unparse_special);
        remove_space = false;
        if (n < 0) {
            avail = 0; /* sizing from here on: nothing more is written */
            total -= n;
        } else if (n > 0) {
            avail -= n;
            out += n;
            total += n;
        }
        if (total > INT32_MAX) {
            rcore_error_set("detokenize: the text exceeds %d bytes", INT32_MAX);
            return INT32_MIN;
        }
    }
    if (total > text_len_max) return -(int32_t)total;
    if (v->clean_spaces) total = clean_spaces(text, (int32_t)total);
    return (int32_t)total;
}
