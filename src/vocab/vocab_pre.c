/*
 * vocab_pre: the pre-tokenizers of byte-level BPE vocabularies (tokenizer.ggml.pre), as
 * llama.cpp reads the key (llama-vocab.cpp: the name -> pre-type map in load, the regex lists
 * of llm_tokenizer_bpe; unicode.cpp: unicode_regex_split).
 *
 * A pre-tokenizer is a list of patterns applied in turn: the first splits the text into
 * pieces (each match is a piece, and so is each stretch between matches), the second splits
 * each of those pieces on its own (a lookahead never sees past the end of its piece), and so
 * on; BPE then runs on each final piece. Three lists cover the names accepted here:
 *
 *  - "gpt2": the GPT-2 pattern alone. llama.cpp writes it without the final `|\s+`, but
 *    recognises that exact text and runs its hand-written GPT-2 splitter
 *    (unicode_regex_split_custom_gpt2), which has the `\s+` fallback: so the pattern here has
 *    it too;
 *  - "default", the list llama.cpp uses for a missing key or the name "default": punctuation
 *    runs, then the GPT-2 pattern (again the hand-written splitter), then runs of numbers, then
 *    groups of three ASCII digits;
 *  - "falcon": as "default" with the backtick among the punctuation and no run-of-numbers
 *    pass;
 *  - "llama3" (LLaMA 3's tiktoken-style pattern, LLAMA_VOCAB_PRE_TYPE_LLAMA3 and _DBRX in
 *    llama.cpp): contractions in any case, letters with at most one non-letter, non-digit,
 *    non-newline character before them, digits in groups of at most three, punctuation runs
 *    with an optional leading space and the newlines after them, newline runs with the white
 *    space before them, then white space as in GPT-2. llama.cpp recognises the text and runs
 *    its hand-written splitter (unicode_regex_split_custom_llama3), which implements the same
 *    pattern. Falcon-H1 ("falcon-h1") and Nemotron-H ("pixtral": its tokenizer hashes as
 *    Pixtral's in convert_hf_to_gguf.py) use it with ignore_merges and BOS by default; Granite
 *    4.0 ("dbrx": the cl100k-style vocabulary of DBRX and OLMo 2) without either.
 *
 * \s is widened to [\s\x{85}] wherever it occurs: llama.cpp counts U+0085 NEXT LINE as space
 * (Unicode's White_Space property), PCRE2's \s does not.
 *
 * The names are a table, as llama.cpp's map (llama_vocab::impl::load): every name llama.cpp
 * sends to the GPT-2 pattern (with its clean_spaces flag) but those that also switch on add_sep
 * (jina-v1-en, jina-v2-code, roberta-bpe), which recur does not implement and so refuses rather
 * than half-honours; and every name it sends to the LLaMA 3 pattern, with its ignore_merges and
 * add_bos flags.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "vocab/vocab_impl.h"

#include "core/core.h"

#include <stdio.h>
#include <string.h>

#ifndef PCRE2_MATCH_INVALID_UTF /* before PCRE2 10.34 */
#define PCRE2_MATCH_INVALID_UTF 0
#endif

#define SP "\\s\\x{85}"
#define GPT2_PATTERN                                                                               \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" SP "\\p{L}\\p{N}]+|[" SP "]+(?![^" SP       \
    "])|[" SP "]+"

static const char *const gpt2_patterns[] = {GPT2_PATTERN};
static const char *const default_patterns[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|]+",
    GPT2_PATTERN,
    "\\p{N}+",
    "[0-9][0-9][0-9]",
};
static const char *const falcon_patterns[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|`]+",
    GPT2_PATTERN,
    "[0-9][0-9][0-9]",
};
/* The contractions are spelt out in both cases, as llama.cpp writes them (the tokenizer.json
 * original has (?i:...), which llama.cpp's std::regex fallback cannot take). */
static const char *const llama3_patterns[] = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^" SP "\\p{L}\\p{N}]+[\\r\\n]*|[" SP "]*[\\r\\n]+|[" SP "]+(?![^" SP "])|[" SP
    "]+",
};

#define LIST(a) a, (int)(sizeof(a) / sizeof((a)[0]))

/* {name, patterns, clean_spaces, ignore_merges, add_bos}: llama.cpp's flags for the name */
#define GPT2(name, clean)                                                                          \
    { name, LIST(gpt2_patterns), clean, false, false }
#define LLAMA3(name)                                                                               \
    { name, LIST(llama3_patterns), true, true, true }
#define LLAMA3_PLAIN(name)                                                                         \
    { name, LIST(llama3_patterns), true, false, false }

static const struct rvocab_pre pre_table[] = {
    {"default", LIST(default_patterns), true, false, false},
    {"falcon", LIST(falcon_patterns), true, false, false},
    GPT2("gpt-2", true),
    GPT2("phi-2", true),
    GPT2("mpt", true),
    GPT2("olmo", true),
    GPT2("jais", true),
    GPT2("jina-es", true),
    GPT2("jina-de", true),
    GPT2("jina-v2-es", true),
    GPT2("jina-v2-de", true),
    GPT2("gigachat", true),
    GPT2("a.x-4.0", true),
    GPT2("mellum", true),
    GPT2("modern-bert", true),
    GPT2("exaone4", true),
    GPT2("trillion", false),
    GPT2("granite-docling", false),
    /* LLAMA_VOCAB_PRE_TYPE_LLAMA3: Falcon-H1 is "falcon-h1", Nemotron-H "pixtral" */
    LLAMA3("llama3"),
    LLAMA3("llama-v3"),
    LLAMA3("llama-bpe"),
    LLAMA3("falcon3"),
    LLAMA3("falcon-h1"),
    LLAMA3("pixtral"),
    LLAMA3("midm-2.0"),
    LLAMA3("lfm2"),
    LLAMA3("jina-v5-nano"),
    /* LLAMA_VOCAB_PRE_TYPE_DBRX and _SMAUG: the same pattern, merges always run, no BOS
     * default; Granite 4.0 (granitehybrid) is "dbrx" */
    LLAMA3_PLAIN("dbrx"),
    LLAMA3_PLAIN("smaug-bpe"),
};

#define N_PRE (sizeof pre_table / sizeof pre_table[0])

const struct rvocab_pre *rvocab_pre_default(void) {
    return &pre_table[0];
}

const struct rvocab_pre *rvocab_pre_find(const char *name, size_t len) {
    for (size_t i = 0; i < N_PRE; i++)
        if (strlen(pre_table[i].name) == len && memcmp(pre_table[i].name, name, len) == 0)
            return &pre_table[i];
    /* the error lists every name accepted, from the table */
    char names[1024];
    size_t k = 0;
    for (size_t i = 0; i < N_PRE && k < sizeof names; i++)
        k += (size_t)snprintf(names + k, sizeof names - k, "%s\"%s\"", i ? ", " : "",
                              pre_table[i].name);
    rcore_error_set("tokenizer.ggml.pre is \"%.*s\", a pre-tokenizer recur does not implement: "
                    "supported are %s, and a missing key (\"default\", as llama.cpp)",
                    (int)(len > 64 ? 64 : len), name, names);
    return NULL;
}

static pcre2_code *compile(const char *pattern, uint32_t options) {
    int err;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | options, &err, &off, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        rcore_error_set("pre-tokenizer pattern /%s/: PCRE2 cannot compile it at offset %zu: %s",
                        pattern, (size_t)off, (const char *)msg);
    }
    return re;
}

/* One pattern: JIT-compiled when possible (with MATCH_INVALID_UTF as a second guard: the
 * callers only match runs they validated), else for the interpreter without it, so that the
 * interpreter honours PCRE2_NO_UTF_CHECK (with it, PCRE2 10.42 re-validates the rest of the
 * subject on every call, which makes splitting a long text quadratic). */
static pcre2_code *compile_one(const char *pattern, bool want_jit, bool *jit) {
    *jit = false;
    if (want_jit) {
        pcre2_code *re = compile(pattern, PCRE2_MATCH_INVALID_UTF);
        if (!re) return NULL;
        int rc = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
        if (rc == 0) {
            *jit = true;
            return re;
        }
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        rcore_log(RCORE_LOG_DEBUG, "vocab: PCRE2 JIT unavailable (%s), using the interpreter\n",
                  (const char *)msg);
        pcre2_code_free(re);
    }
    return compile(pattern, 0);
}

bool rvocab_pre_compile(const struct rvocab_pre *pre, bool want_jit, pcre2_code **re, bool *jit) {
    bool all_jit = true;
    for (int i = 0; i < pre->n_patterns; i++) {
        bool j;
        re[i] = compile_one(pre->patterns[i], want_jit, &j);
        if (!re[i]) {
            for (int k = 0; k < i; k++) pcre2_code_free(re[k]);
            return false;
        }
        all_jit = all_jit && j;
    }
    *jit = all_jit;
    return true;
}
