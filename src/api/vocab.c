/* The vocabulary functions of the public API: thin wrappers over src/vocab, which documents
 * the semantics (llama.cpp's); and the UTF-8 checks, over src/core/utf8.c. */
#include "api_impl.h"

#include "../core/utf8.h"

int32_t recur_tokenize(const struct recur_model *model, const char *text, int32_t text_len,
                       recur_token *tokens, int32_t n_tokens_max, bool add_special,
                       bool parse_special) {
    API_NEED(model, INT32_MIN);
    return rvocab_tokenize(model->vocab, text, text_len, tokens, n_tokens_max, add_special,
                           parse_special);
}

int32_t recur_tokenize_except(const struct recur_model *model, const char *text, int32_t text_len,
                              recur_token *tokens, int32_t n_tokens_max, bool add_special,
                              const struct recur_text_span *plain, int32_t n_plain) {
    /* the same two int32_t fields, passed as the module's own struct */
    _Static_assert(sizeof(struct recur_text_span) == sizeof(struct rvocab_span),
                   "span layouts differ");
    API_NEED(model, INT32_MIN);
    return rvocab_tokenize_except(model->vocab, text, text_len, tokens, n_tokens_max, add_special,
                                  (const struct rvocab_span *)(const void *)plain, n_plain);
}

int32_t recur_token_to_piece(const struct recur_model *model, recur_token token, char *buf,
                             int32_t length, int32_t lstrip, bool special) {
    API_NEED(model, 0);
    return rvocab_token_to_piece(model->vocab, token, buf, length, lstrip, special);
}

int32_t recur_detokenize(const struct recur_model *model, const recur_token *tokens,
                         int32_t n_tokens, char *text, int32_t text_len_max, bool remove_special,
                         bool unparse_special) {
    API_NEED(model, INT32_MIN);
    return rvocab_detokenize(model->vocab, tokens, n_tokens, text, text_len_max, remove_special,
                             unparse_special);
}

size_t recur_utf8_valid(const char *text, size_t len) {
    return rcore_utf8_valid(text, len);
}

size_t recur_utf8_char(const char *text, size_t len) {
    return rcore_utf8_len(text, len);
}
