/*
 * vocab: the tokenizers of GGUF files with tokenizer.ggml.model = "gpt2" (byte-level BPE:
 * GPT-2, GPT-NeoX-20B as Mamba uses it, Falcon, ..., split first by the pre-tokenizer that
 * tokenizer.ggml.pre names: vocab_pre.c), "llama" (SentencePiece: LLaMA, Mistral,
 * Mamba-Codestral; vocab_spm.c) and "rwkv" (the RWKV world vocabulary of RWKV-6 and RWKV-7:
 * greedy longest match over escaped byte strings), with llama.cpp's semantics for tokenize,
 * token_to_piece and detokenize.
 *
 * A vocabulary is loaded once from an open GGUF file and then only read: every function taking
 * a const struct rvocab * may run in any number of threads at once (each call allocates its own
 * scratch memory). The vocabulary copies what it needs, so the GGUF file may be closed after
 * rvocab_load.
 *
 * Token ids are int32_t, 0 .. rvocab_n_tokens() - 1; -1 stands for "no such token".
 * Errors: functions that fail set the thread's last error (core.h) with a message naming the
 * key, token or argument at fault.
 */
#ifndef RECUR_VOCAB_H
#define RECUR_VOCAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct rgguf;
struct rvocab;

/* Token types, as tokenizer.ggml.token_type stores them (llama.cpp's llama_token_type). A value
 * outside 1..6 in the file reads as RVOCAB_TYPE_UNDEFINED, as in llama.cpp. */
enum rvocab_token_type {
    RVOCAB_TYPE_UNDEFINED = 0,
    RVOCAB_TYPE_NORMAL = 1,
    RVOCAB_TYPE_UNKNOWN = 2,
    RVOCAB_TYPE_CONTROL = 3,
    RVOCAB_TYPE_USER_DEFINED = 4,
    RVOCAB_TYPE_UNUSED = 5,
    RVOCAB_TYPE_BYTE = 6,
};

/* Flags for rvocab_load_flags. */
enum {
    /* Do not JIT-compile the pre-tokenizer pattern: match with PCRE2's interpreter (tests use
     * it to check that both paths give the same pieces). */
    RVOCAB_LOAD_NO_JIT = 1u << 0,
    /* Make rvocab_detokenize a plain concatenation of pieces, without llama.cpp's clean-up of
     * spaces before punctuation and contractions, so that detokenize(tokenize(s)) == s. */
    RVOCAB_LOAD_NO_CLEAN_SPACES = 1u << 1,
};

/* ---- loading ------------------------------------------------------------------------------ */

/* Loads the tokenizer key-values of g:
 *  - tokenizer.ggml.model must be "gpt2", "llama" or "rwkv". For "gpt2", tokenizer.ggml.pre
 *    names the pre-tokenizer as llama.cpp reads it: a missing key is llama.cpp's 'default'
 *    (four patterns, with a warning, as llama.cpp warns), "falcon" Falcon's patterns,
 *    every name llama.cpp maps to the GPT-2 pattern ("gpt-2", "mpt", "phi-2", "olmo", ...:
 *    the table in vocab_pre.c) that pattern, and every name it maps to LLaMA 3's ("llama3",
 *    "falcon-h1", "pixtral", ..., with ignore_merges and BOS by default; "dbrx", "smaug-bpe"
 *    without) that one; any other name is refused, the error listing the supported ones
 *    (llama.cpp refuses an unknown name too). "llama" and "rwkv" ignore the key, as llama.cpp
 *    does;
 *  - tokenizer.ggml.tokens (strings; must be unique, as llama.cpp asserts; an empty one is
 *    renamed "[EMPTY_<id>]" as llama.cpp does), tokenizer.ggml.token_type (int32, optional:
 *    all normal when absent);
 *  - "gpt2": tokenizer.ggml.merges (strings "left right", rank = index; both halves and their
 *    concatenation must be tokens; a repeated pair keeps its first rank);
 *  - "rwkv": each text is unescaped into the token's bytes as llama.cpp does: \t \n \r, \xNN
 *    (two lowercase hex digits, as Python's repr writes them), and a backslash before any other
 *    character stands for that character. A malformed escape (\x not followed by two lowercase
 *    hex digits, a text ending in a lone backslash) is refused, naming the token: llama.cpp
 *    would silently decode it to a wrong byte or drop it. Texts may unescape to the same bytes
 *    (the later id is the one tokenize finds, as in llama.cpp). No merges are read;
 *  - "llama": tokenizer.ggml.scores (float32, one per token; all 0 when absent);
 *  - optional: tokenizer.ggml.{bos,eos,unknown,padding}_token_id and the fill-in-the-middle
 *    ids (rvocab_fim) (-1 when absent, but 1, 2
 *    and 0 for the first three of "llama", llama.cpp's defaults; an id out of range is ignored
 *    with a warning, as llama.cpp does), tokenizer.ggml.add_bos_token and add_eos_token
 *    (default false, but add_bos true for "llama" and for the pre-tokenizers that llama.cpp
 *    gives BOS by default; for "gpt2" and "llama" true without the
 *    matching id is an error), tokenizer.ggml.add_space_prefix (default false, true for
 *    "llama"; "llama" tokenize prefixes the first fragment, and each one after a special
 *    token, with a space; detokenize drops one leading space unless a BOS was removed).
 * Returns NULL with the last error set ("tokenizer.ggml.merges: merge 17 \"a b\" names a token
 * that is not in the vocabulary"). The result is freed with rvocab_free; it does not refer to g.
 * An "rwkv" vocabulary lacking single-byte tokens without an unknown token loads with a
 * warning (see rvocab_tokenize). */
struct rvocab *rvocab_load(const struct rgguf *g);
/* The same with RVOCAB_LOAD_* flags. */
struct rvocab *rvocab_load_flags(const struct rgguf *g, uint32_t flags);
void rvocab_free(struct rvocab *v); /* NULL is fine */

/* ---- properties --------------------------------------------------------------------------- */

/* tokenizer.ggml.model: "gpt2", "llama" or "rwkv" (static text; NULL for a NULL vocabulary). */
const char *rvocab_model(const struct rvocab *v);
/* The pre-tokenizer a "gpt2" vocabulary uses: its tokenizer.ggml.pre, or "default" when the key
 * is missing (static text). NULL for "llama", "rwkv" and a NULL vocabulary. */
const char *rvocab_pre_name(const struct rvocab *v);
int32_t rvocab_n_tokens(const struct rvocab *v);
int32_t rvocab_n_merges(const struct rvocab *v); /* distinct pairs kept; 0 for "rwkv" */
/* Special ids; -1 when the file does not name one. */
int32_t rvocab_bos(const struct rvocab *v);
int32_t rvocab_eos(const struct rvocab *v);
int32_t rvocab_unk(const struct rvocab *v);
int32_t rvocab_pad(const struct rvocab *v);
/* The fill-in-the-middle tokens (code infilling, llama-server's /infill), read as llama.cpp
 * reads them: tokenizer.ggml.fim_{pre,suf,mid,pad,rep,sep}_token_id, and for the first three
 * also the older tokenizer.ggml.{prefix,suffix,middle}_token_id, which llama.cpp reads after
 * the new keys, so that an old key present wins. -1 when the file names none (an id out of
 * range is ignored with a warning, as for the other special ids). */
enum rvocab_fim {
    RVOCAB_FIM_PRE,
    RVOCAB_FIM_SUF,
    RVOCAB_FIM_MID,
    RVOCAB_FIM_PAD,
    RVOCAB_FIM_REP,
    RVOCAB_FIM_SEP,
    RVOCAB_FIM_COUNT
};
int32_t rvocab_fim(const struct rvocab *v, enum rvocab_fim which);
/* tokenizer.ggml.add_bos_token / add_eos_token (false when absent), as llama_vocab_get_add_bos
 * reports them. For "gpt2", whether tokenize with add_special adds BOS at the start / EOS at
 * the end; "rwkv" tokenize never adds them, as llama.cpp's RWKV tokenizer does not. */
bool rvocab_add_bos(const struct rvocab *v);
bool rvocab_add_eos(const struct rvocab *v);
/* Whether detokenize cleans up spaces as llama.cpp does for these vocabularies (true for
 * "gpt2" unless loaded with RVOCAB_LOAD_NO_CLEAN_SPACES; false for "rwkv", as llama.cpp). */
bool rvocab_clean_spaces(const struct rvocab *v);
/* Whether the pre-tokenizer pattern runs JIT-compiled (false: PCRE2's interpreter, because JIT
 * is unavailable on this machine or RVOCAB_LOAD_NO_JIT was given; always false for "rwkv",
 * which has no pattern). */
bool rvocab_uses_jit(const struct rvocab *v);

/* A token's type; RVOCAB_TYPE_UNDEFINED for an id out of range. */
enum rvocab_token_type rvocab_token_type(const struct rvocab *v, int32_t token);
/* A token's text as stored in the file: for "gpt2" in the GPT-2 byte alphabet (e.g. "Ġthe"),
 * for "rwkv" escaped (e.g. \xe4\xbd\xa0 for the three bytes of 你, which token_to_piece
 * gives). NUL-terminated, *len (may be NULL) gets its length. Lives as long as v. NULL for an
 * id out of range. */
const char *rvocab_token_text(const struct rvocab *v, int32_t token, size_t *len);
/* The id of the token whose stored text is exactly text[0..len), or -1. */
int32_t rvocab_text_to_token(const struct rvocab *v, const char *text, size_t len);

/* GPT-2's bytes_to_unicode: the code point that byte-level BPE writes for each byte. Printable
 * bytes (33..126, 161..172, 174..255) keep their own, the 68 others get U+0100, U+0101, ... in
 * byte order, so that every byte is a visible, non-space character. Fills cp[0..256). */
void rvocab_gpt2_byte_cp(uint16_t cp[256]);

/* ---- tokenize ----------------------------------------------------------------------------- */

/* Work counters of one rvocab_tokenize_stats call, to check that tokenizing is linear in the
 * text: every queue operation is O(log n), and their number is O(n) per piece. BPE work
 * only: all zero for "rwkv". */
struct rvocab_stats {
    uint64_t n_pieces;       /* pre-tokens the BPE ran on */
    uint64_t n_merges;       /* merges applied */
    uint64_t n_queue_pushes; /* candidate merges queued */
    uint64_t n_queue_pops;   /* candidates taken from the queue, stale ones included */
};

/* Tokenizes text[0..text_len) (bytes; need not be NUL-terminated nor valid UTF-8) into
 * tokens[0..n_tokens_max), as llama_tokenize does:
 *  - parse_special: texts of control and unknown-type tokens found in the text become their
 *    ids instead of being tokenized as text. User-defined tokens are always matched, as in
 *    llama.cpp and Hugging Face tokenizers (GPT-NeoX's runs of spaces are such tokens). Longer
 *    special texts are found first, anywhere in the text, then shorter ones in what is left;
 *  - "gpt2": the text between is split by the pre-tokenizer's patterns in turn (PCRE2) and
 *    each piece is BPE-merged by merge rank (lowest first, leftmost on ties). Bytes that are
 *    not valid UTF-8 are pieces of their own, so any input round-trips byte for byte where the
 *    vocabulary has every byte's token; one it lacks is read as U+FFFD (as llama.cpp reads
 *    it), never the unknown token;
 *  - "llama": SentencePiece as llama.cpp's llm_tokenizer_spm (vocab_spm.c): spaces become
 *    "▁", characters merge by token score (highest first, leftmost on ties), and a character
 *    no token spells falls back to its byte tokens <0xXX> (or the unknown token; without one
 *    the call fails naming the byte, where llama.cpp would abort);
 *  - "rwkv": the text between is matched greedily against the bytes of every token (longest
 *    first, from left to right), whatever its type: so "<s>" in the text is the control token
 *    <s> even without parse_special, and "[PAD65535]" that unused token, as in llama.cpp.
 *    Where no token starts with the next byte (or none is complete along the way), the
 *    unknown token is emitted and one byte consumed, as llama.cpp does; when the vocabulary
 *    names no unknown token (tokenizer.ggml.unknown_token_id), llama.cpp would emit the
 *    invalid id -1, and this call fails instead (INT32_MIN, the error names the byte and its
 *    offset). The world vocabulary has all 256 single bytes, so real files never fail;
 *  - add_special: BOS first / EOS last only when the vocabulary asks for them
 *    (rvocab_add_bos / rvocab_add_eos), as in llama.cpp; never for "rwkv", as in llama.cpp.
 * Returns the number of tokens; when it is more than n_tokens_max, returns minus that number
 * and the contents of tokens are unspecified (tokens may be NULL when n_tokens_max is 0).
 * INT32_MIN with the last error set on a bad argument (NULL vocabulary, negative length or
 * n_tokens_max, NULL text with a length), out of memory, a PCRE2 matching failure or ("rwkv")
 * a byte no token covers in a vocabulary without an unknown token ("rwkv", "llama"). */
int32_t rvocab_tokenize(const struct rvocab *v, const char *text, int32_t text_len, int32_t *tokens,
                        int32_t n_tokens_max, bool add_special, bool parse_special);
/* The same; stats (may be NULL) receives the counts of this call. */
int32_t rvocab_tokenize_stats(const struct rvocab *v, const char *text, int32_t text_len,
                              int32_t *tokens, int32_t n_tokens_max, bool add_special,
                              bool parse_special, struct rvocab_stats *stats);

/* A run of bytes of a text: text[off .. off + len). */
struct rvocab_span {
    int32_t off, len;
};
/* As rvocab_tokenize with parse_special, except that a control or unknown-type token's text
 * that overlaps one of plain[0 .. n_plain) is not that token there: those bytes are tokenized
 * as text, as without parse_special (user-defined tokens match everywhere, as always). For a
 * text put together from parts of different trust: a chat template's markers are special
 * tokens, the messages' contents are not, so that a user who types "<|im_end|>" cannot end
 * their own turn. The spans must be sorted by off, not overlap and lie within the text
 * (INT32_MIN with the error set naming the span otherwise). */
int32_t rvocab_tokenize_except(const struct rvocab *v, const char *text, int32_t text_len,
                               int32_t *tokens, int32_t n_tokens_max, bool add_special,
                               const struct rvocab_span *plain, int32_t n_plain);

/* ---- detokenize --------------------------------------------------------------------------- */

/* Writes the bytes of one token into buf[0..length), as llama_token_to_piece does: control
 * and unknown-type tokens give "" unless special. Otherwise, "llama": a normal token's text with
 * each "▁" a space, byte tokens their byte, control, unknown and user-defined tokens their
 * text. "gpt2": a normal token's text
 * decoded from the byte alphabet (a character outside the alphabet comes out as llama.cpp
 * writes it, "[UNK_BYTE_0x<hex><text>]"); control, unknown-type and user-defined tokens give
 * their text as is; byte tokens ("<0xXX>") the byte; unused and undefined tokens "". "rwkv":
 * every token (unused ones too) gives its unescaped bytes, which may be part of a UTF-8
 * character. Up to lstrip leading spaces are dropped. No NUL is written.
 * Returns the number of bytes written; minus the number needed when length is too small
 * (nothing written). An id out of range returns 0 with the last error set (llama.cpp would
 * abort): callers that must tell it from an empty piece check the id first or clear the error
 * before the call. */
int32_t rvocab_token_to_piece(const struct rvocab *v, int32_t token, char *buf, int32_t length,
                              int32_t lstrip, bool special);

/* Writes the text of tokens[0..n_tokens) into text[0..text_len_max), as llama_detokenize does:
 * remove_special drops a leading BOS / trailing EOS when the vocabulary adds them;
 * unparse_special renders control tokens (as token_to_piece's special); then, for "gpt2"
 * unless loaded with RVOCAB_LOAD_NO_CLEAN_SPACES, llama.cpp's clean-up of spaces (" ?" " !"
 * " ." " ," lose the space, " ' " loses both, " 's" " 'm" " 're" " 've" lose it). "rwkv"
 * concatenates the pieces: detokenize(tokenize(s)) == s with unparse_special (without it, a
 * control token matched in the text, such as "<s>", gives ""). No NUL is written.
 * Returns the number of bytes written; minus the number needed when text_len_max is too small
 * (the bytes before clean-up, which is enough; text's contents are then unspecified).
 * INT32_MIN with the last error set for an id out of range, a negative count or size, NULL
 * pointers with non-zero sizes, or a text longer than INT32_MAX. */
int32_t rvocab_detokenize(const struct rvocab *v, const int32_t *tokens, int32_t n_tokens,
                          char *text, int32_t text_len_max, bool remove_special,
                          bool unparse_special);

#endif /* RECUR_VOCAB_H */
