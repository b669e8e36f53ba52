/*
 * test_chat: the chat template API (recur.h, "chat templates").
 *   test_chat MODEL_WITH_TEMPLATE TEMPLATE_FILE MODEL_WITHOUT
 * - the formats that have no real template in tests/data/chat-templates (llama2 and its
 *   variants, mistral v1/v3/v7, zephyr, command-r, deepseek, deepseek2, phi4, gemma's merged
 *   system message) against strings written here by hand from each format's published
 *   description (Meta's Llama 2 prompt guide, Mistral's tokenization guide, the models' cards);
 *   and granite-4.0, nemotron3, nemotron-v2 by hand from llama.cpp's GRANITE_4_0 handler and
 *   the Nemotron templates;
 *   test_chat_templates.py checks the others against their real templates;
 * - names, buffer-too-small semantics, every error;
 * - the contents' spans of every format, and tokenizing with control tokens parsed outside
 *   them (recur_tokenize_except) on the shipped model's vocabulary;
 * - recur_model_chat_template on a model written with `recur mkmodel --chat-template`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recur.h"
#define TEST_LAST_ERROR recur_last_error
#include "file_util.h"
#include "test.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

static const struct recur_chat_message conv[] = {
    {"system", "Be brief."},
    {"user", "Hi"},
    {"assistant", "Hello!"},
    {"user", "Bye"},
};

/* the formatted text, malloc'd (NULL when recur refused) */
static char *apply(const char *tmpl, const struct recur_chat_message *m, size_t n, bool add) {
    int32_t len = recur_chat_apply_template(tmpl, m, n, add, NULL, 0);
    if (len < 0) return NULL;
    char *buf = malloc((size_t)len + 1);
    REQUIRE(buf);
    CHECK(recur_chat_apply_template(tmpl, m, n, add, buf, len + 1) == len);
    CHECK(strlen(buf) == (size_t)len);
    return buf;
}

static void expect(const char *tmpl, const struct recur_chat_message *m, size_t n, bool add,
                   const char *want) {
    char *got = apply(tmpl, m, n, add);
    CHECK_MSG(got && strcmp(got, want) == 0, "%s: got \"%s\"\n  want \"%s\"", tmpl,
              got ? got : recur_last_error(), want);
    free(got);
}

static void test_hand_written_formats(void) {
    /* Llama 2: one [INST] block per exchange, the system text in <<SYS>> inside the first;
     * the prompt always ends in [/INST], so add_ass changes nothing */
    const char *l2 =
        "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST]Hello!</s>[INST] Bye [/INST]";
    expect("llama2-sys", conv, N(conv), true, l2);
    expect("llama2-sys", conv, N(conv), false, l2);
    expect("llama2-sys-bos", conv, N(conv), true,
           "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST]Hello!</s><s>[INST] Bye [/INST]");
    expect("llama2", conv, N(conv), true,
           "[INST] Be brief.\nHi [/INST]Hello!</s>[INST] Bye [/INST]");
    const struct recur_chat_message spaced[] = {{"system", " S "}, {"user", " u "}};
    expect("llama2-sys-strip", spaced, 2, true, "[INST] <<SYS>>\nS\n<</SYS>>\n\nu [/INST]");
    expect("llama2", NULL, 0, true, "[INST] ");
    /* Mistral v1 / v3 / v3-tekken: system text in the first block; v3 trims the replies */
    expect("mistral-v1", conv, N(conv), true,
           " [INST] Be brief.\n\nHi [/INST] Hello!</s> [INST] Bye [/INST]");
    const struct recur_chat_message pad[] = {{"user", "Hi"}, {"assistant", " Hello! "}};
    expect("mistral-v3", pad, 2, false, "[INST] Hi[/INST] Hello!</s>");
    expect("mistral-v3-tekken", conv, N(conv), true,
           "[INST]Be brief.\n\nHi[/INST]Hello!</s>[INST]Bye[/INST]");
    /* Mistral v7: a system prompt block of its own */
    expect("mistral-v7", conv, N(conv), true,
           "[SYSTEM_PROMPT] Be brief.[/SYSTEM_PROMPT][INST] Hi[/INST] Hello!</s>[INST] Bye[/INST]");
    /* Zephyr */
    expect("zephyr", conv, N(conv), true,
           "<|system|>\nBe brief.<|endoftext|>\n<|user|>\nHi<|endoftext|>\n<|assistant|>\nHello!"
           "<|endoftext|>\n<|user|>\nBye<|endoftext|>\n<|assistant|>\n");
    /* Command-R: every turn trimmed, CHATBOT for the assistant */
    expect("command-r", conv, N(conv), true,
           "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>Be brief.<|END_OF_TURN_TOKEN|>"
           "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hi<|END_OF_TURN_TOKEN|>"
           "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>Hello!<|END_OF_TURN_TOKEN|>"
           "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Bye<|END_OF_TURN_TOKEN|>"
           "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>");
    expect("command-r", conv + 1, 1, false,
           "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hi<|END_OF_TURN_TOKEN|>");
    /* deepseek-coder and DeepSeek-V2 */
    expect("deepseek", conv, N(conv), true,
           "Be brief.### Instruction:\nHi\n### Response:\nHello!\n<|EOT|>\n### Instruction:\nBye\n"
           "### Response:\n");
    expect("deepseek2", conv, N(conv), true,
           "Be brief.\n\nUser: Hi\n\nAssistant: Hello!<\xef\xbd\x9c"
           "end\xe2\x96\x81of\xe2\x96\x81"
           "sentence\xef\xbd\x9c>User: Bye\n\nAssistant:");
    /* DeepSeek-V3: as R1 without the open thought */
    expect("deepseek3", conv + 1, 1, true,
           "<\xef\xbd\x9cUser\xef\xbd\x9c>Hi<\xef\xbd\x9c"
           "Assistant\xef\xbd\x9c>");
    /* Phi-4: chatml with <|im_sep|> and no newlines */
    expect("phi4", conv + 1, 2, true,
           "<|im_start|>user<|im_sep|>Hi<|im_end|><|im_start|>assistant<|im_sep|>Hello!<|im_end|>"
           "<|im_start|>assistant<|im_sep|>");
    /* Gemma has no system role: its text starts the first user turn */
    expect("gemma", conv, N(conv), true,
           "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello!"
           "<end_of_turn>\n<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
    /* Granite 4.0 (Granite 4.0-H): llama.cpp's GRANITE_4_0 handler (llama-chat.cpp) writes
     * each message as <|start_of_role|>ROLE<|end_of_role|>CONTENT<|end_of_text|> and a newline,
     * and prompts with the assistant's role header */
    const char *g4 = "<|start_of_role|>system<|end_of_role|>Be brief.<|end_of_text|>\n"
                     "<|start_of_role|>user<|end_of_role|>Hi<|end_of_text|>\n"
                     "<|start_of_role|>assistant<|end_of_role|>Hello!<|end_of_text|>\n"
                     "<|start_of_role|>user<|end_of_role|>Bye<|end_of_text|>\n"
                     "<|start_of_role|>assistant<|end_of_role|>";
    expect("granite-4.0", conv, N(conv), true, g4);
    expect("granite-4.1", conv, N(conv), true, g4);
    /* Nemotron 3 (read off its template: llama.cpp has no builtin): an empty system turn
     * without a system message, history replies after an empty thought, a prompt that opens
     * one */
    expect("nemotron3", conv, N(conv), true,
           "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
           "<|im_start|>assistant\n<think></think>Hello!<|im_end|>\n<|im_start|>user\nBye"
           "<|im_end|>\n<|im_start|>assistant\n<think>\n");
    expect("nemotron3", conv + 1, 3, false,
           "<|im_start|>system\n<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
           "<|im_start|>assistant\n<think></think>Hello!<|im_end|>\n<|im_start|>user\nBye"
           "<|im_end|>\n");
    /* Nemotron Nano 2 / Nemotron-H (read off its template: llama.cpp has no builtin) */
    expect("nemotron-v2", conv, N(conv), true,
           "<SPECIAL_10>System\nBe brief.\n\n<SPECIAL_11>User\nHi\n<SPECIAL_11>Assistant\n"
           "Hello!\n<SPECIAL_12>\n<SPECIAL_11>User\nBye\n<SPECIAL_11>Assistant\n<think>\n");
    expect("nemotron-v2", conv + 1, 1, true,
           "<SPECIAL_10>System\n\n\n<SPECIAL_11>User\nHi\n<SPECIAL_11>Assistant\n<think>\n");
    /* ChatML, the default, with no messages: only the generation prompt */
    expect(RECUR_CHAT_TEMPLATE_DEFAULT, NULL, 0, true, "<|im_start|>assistant\n");
    expect("chatml", NULL, 0, false, "");
}

static void test_names(void) {
    const char *names[64];
    int32_t n = recur_chat_builtin_templates(names, N(names));
    CHECK(n >= 20 && n <= (int32_t)N(names));
    CHECK(recur_chat_builtin_templates(NULL, 0) == n);
    const char *two[2] = {NULL, NULL};
    CHECK(recur_chat_builtin_templates(two, 1) == n && two[0] && !two[1]);
    static const char *const want[] = {"chatml",
                                       "llama2",
                                       "llama2-sys",
                                       "llama2-sys-bos",
                                       "llama2-sys-strip",
                                       "llama3",
                                       "mistral-v1",
                                       "mistral-v3",
                                       "mistral-v3-tekken",
                                       "mistral-v7",
                                       "mistral-v7-tekken",
                                       "phi3",
                                       "phi4",
                                       "gemma",
                                       "zephyr",
                                       "deepseek",
                                       "deepseek2",
                                       "deepseek3",
                                       "deepseek-r1",
                                       "deepseek-v3.1",
                                       "granite",
                                       "granite-4.0",
                                       "granite-4.1",
                                       "nemotron3",
                                       "nemotron-v2",
                                       "command-r",
                                       "rwkv-world"};
    for (size_t i = 0; i < N(want); i++) {
        bool found = false;
        for (int32_t k = 0; k < n; k++) found |= strcmp(names[k], want[i]) == 0;
        CHECK_MSG(found, "%s is not a builtin name", want[i]);
        const char *r = recur_chat_template_name(want[i]);
        CHECK_MSG(r && strcmp(r, want[i]) == 0, "%s resolves to %s", want[i], r ? r : "NULL");
    }
    /* texts: recognised by their markers */
    CHECK(strcmp(recur_chat_template_name("{{ '<|im_start|>' + m }}"), "chatml") == 0);
    CHECK(strcmp(recur_chat_template_name("<|im_start|>{{r}}<|im_sep|>"), "phi4") == 0);
    CHECK(strcmp(recur_chat_template_name("{{ '[INST] ' + '<<SYS>>' }}"), "llama2-sys") == 0);
    CHECK(strcmp(recur_chat_template_name("x <|start_header_id|> y <|end_header_id|>"), "llama3") ==
          0);
    /* Granite: 4.0 names its default system message, 4.1 has tools and does not, 3.x neither */
    CHECK(strcmp(recur_chat_template_name("<|start_of_role|> <tools> g4_default_system_message"),
                 "granite-4.0") == 0);
    CHECK(strcmp(recur_chat_template_name("<|start_of_role|> <tool_call>"), "granite-4.1") == 0);
    CHECK(strcmp(recur_chat_template_name("<|start_of_role|>{{ role }}"), "granite") == 0);
    CHECK(strcmp(recur_chat_template_name("<|im_start|> truncate_history_thinking"), "nemotron3") ==
          0);
    CHECK(strcmp(recur_chat_template_name("'<SPECIAL_10>System' '<SPECIAL_11>Assistant'"),
                 "nemotron-v2") == 0);
}

static void test_buffer(void) {
    const int32_t len = recur_chat_apply_template("chatml", conv, N(conv), true, NULL, 0);
    char *full = apply("chatml", conv, N(conv), true);
    REQUIRE(len > 10 && full);
    char *buf = malloc((size_t)len + 2);
    REQUIRE(buf);
    /* exactly the text, no room for the NUL: all bytes, no NUL (the byte after is untouched) */
    memset(buf, 'X', (size_t)len + 2);
    CHECK(recur_chat_apply_template("chatml", conv, N(conv), true, buf, len) == len);
    CHECK(memcmp(buf, full, (size_t)len) == 0 && buf[len] == 'X');
    /* too small: the first bytes, the rest untouched, the whole length returned */
    memset(buf, 'X', (size_t)len + 2);
    CHECK(recur_chat_apply_template("chatml", conv, N(conv), true, buf, 5) == len);
    CHECK(memcmp(buf, full, 5) == 0 && buf[5] == 'X');
    /* room for the NUL */
    memset(buf, 'X', (size_t)len + 2);
    CHECK(recur_chat_apply_template("chatml", conv, N(conv), true, buf, len + 2) == len);
    CHECK(strcmp(buf, full) == 0 && buf[len + 1] == 'X');
    free(buf);
    free(full);
}

static void test_errors(void) {
    char buf[64];
    CHECK(recur_chat_apply_template("no-such-format", conv, N(conv), true, buf, sizeof buf) < 0);
    CHECK_ERR("not supported");
    CHECK_ERR("supported: ");
    CHECK_ERR("chatml");
    CHECK_ERR("llama3");
    CHECK(recur_chat_template_name("{{ messages }}") == NULL);
    CHECK_ERR("{{ messages }}");
    CHECK(recur_chat_template_name(NULL) == NULL);
    CHECK_ERR("NULL");
    CHECK(recur_chat_apply_template(NULL, conv, N(conv), true, buf, sizeof buf) < 0);
    CHECK_ERR("NULL");
    CHECK(recur_chat_apply_template("chatml", NULL, 2, true, buf, sizeof buf) < 0);
    CHECK_ERR("chat is NULL");
    CHECK(recur_chat_apply_template("chatml", conv, N(conv), true, NULL, 10) < 0);
    CHECK_ERR("NULL buffer");
    CHECK(recur_chat_apply_template("chatml", conv, N(conv), true, buf, -1) < 0);
    CHECK_ERR("negative");
    const struct recur_chat_message tool[] = {{"user", "x"}, {"tool", "{}"}};
    CHECK(recur_chat_apply_template("llama3", tool, 2, true, buf, sizeof buf) < 0);
    CHECK_ERR("message 1 has the role \"tool\"");
    const struct recur_chat_message null_content[] = {{"user", NULL}};
    CHECK(recur_chat_apply_template("llama3", null_content, 1, true, buf, sizeof buf) < 0);
    CHECK_ERR("message 0 has a NULL content");
    const struct recur_chat_message null_role[] = {{NULL, "x"}};
    CHECK(recur_chat_apply_template("gemma", null_role, 1, true, buf, sizeof buf) < 0);
    CHECK_ERR("NULL role");
}

/* Spans: every builtin format puts each message's content, trimmed where the format trims,
 * at its span, in order, and the text is the one without spans; a buffer too small still
 * gives every span. */
static void test_spans(void) {
    const char *names[64];
    const int32_t n_names = recur_chat_builtin_templates(names, N(names));
    REQUIRE(n_names > 0 && n_names <= (int32_t)N(names));
    const struct recur_chat_message spaced[] = {{"system", " Be brief. "},
                                                {"user", "\tHi <|im_end|>\n"},
                                                {"assistant", "Hello!"},
                                                {"user", "Bye"}};
    for (int32_t f = 0; f < n_names; f++) {
        struct recur_text_span sp[8];
        int32_t n_sp = -1;
        const int32_t len = recur_chat_apply_template_spans(names[f], spaced, N(spaced), true, NULL,
                                                            0, sp, 8, &n_sp);
        char *want = apply(names[f], spaced, N(spaced), true);
        REQUIRE(want && len == (int32_t)strlen(want));
        char *got = malloc((size_t)len + 1);
        REQUIRE(got);
        CHECK(recur_chat_apply_template_spans(names[f], spaced, N(spaced), true, got, len + 1, sp,
                                              8, &n_sp) == len);
        CHECK_MSG(strcmp(got, want) == 0, "%s: the text differs with spans", names[f]);
        CHECK_MSG(n_sp == (int32_t)N(spaced), "%s: %d spans", names[f], (int)n_sp);
        for (int32_t i = 0, prev_end = 0; i < n_sp && i < 8; i++) {
            /* contents in message order (gemma moves the system text into the user turn,
               still before it) */
            const char *c = spaced[i].content;
            size_t cl = strlen(c), lead = 0;
            const bool whole = (size_t)sp[i].len == cl;
            while (!whole && lead < cl && strchr(" \t\n", c[lead])) lead++;
            while (!whole && cl > lead && strchr(" \t\n", c[cl - 1])) cl--;
            CHECK_MSG(sp[i].off >= prev_end && sp[i].off + sp[i].len <= len &&
                          (size_t)sp[i].len == cl - lead &&
                          memcmp(got + sp[i].off, c + lead, cl - lead) == 0,
                      "%s: span %d [%d, +%d) is not message %d's content", names[f], (int)i,
                      (int)sp[i].off, (int)sp[i].len, (int)i);
            prev_end = sp[i].off + sp[i].len;
        }
        /* too small a buffer, and too few spans: the counts are whole */
        int32_t n2 = -1;
        CHECK(recur_chat_apply_template_spans(names[f], spaced, N(spaced), true, got, 3, sp, 1,
                                              &n2) == len &&
              n2 == n_sp);
        free(got);
        free(want);
    }
    char buf[8];
    int32_t n_sp;
    CHECK(recur_chat_apply_template_spans("chatml", conv, N(conv), true, buf, 8, NULL, 2, &n_sp) <
          0);
    CHECK_ERR("spans is NULL");
    CHECK(recur_chat_apply_template_spans("chatml", conv, N(conv), true, buf, 8, NULL, 0, NULL) <
          0);
    CHECK_ERR("n_spans is NULL");
}

/* A text's tokens with control tokens parsed outside the spans: the model's vocabulary
 * (GPT-NeoX's) has <|endoftext|> as its control token, an ordinary string to type. */
static void test_tokenize_except(const struct recur_model *m) {
    const char *mark = "<|endoftext|>";
    recur_token eot[4], want[64], got[64];
    REQUIRE(recur_tokenize(m, mark, (int32_t)strlen(mark), eot, 4, false, true) == 1);
    /* "<|endoftext|>A<|endoftext|>B": the second marker inside the plain span */
    const char *text = "<|endoftext|>A<|endoftext|>B";
    const int32_t len = (int32_t)strlen(text);
    const struct recur_text_span plain[] = {{13, 14}};
    const int32_t n = recur_tokenize_except(m, text, len, got, 64, false, plain, 1);
    int32_t nw = recur_tokenize(m, text + 13, len - 13, want + 1, 63, false, false);
    want[0] = eot[0];
    nw++;
    CHECK(n == nw && memcmp(got, want, sizeof *got * (size_t)n) == 0);
    CHECK(n > 2 && got[0] == eot[0]);
    for (int32_t i = 1; i < n; i++) CHECK(got[i] != eot[0]);
    /* no spans: as parse_special; a span that only touches the marker's last byte */
    const int32_t n_all = recur_tokenize(m, text, len, want, 64, false, true);
    CHECK(recur_tokenize_except(m, text, len, got, 64, false, NULL, 0) == n_all &&
          memcmp(got, want, sizeof *got * (size_t)n_all) == 0);
    const struct recur_text_span last_byte[] = {{26, 1}};
    CHECK(recur_tokenize_except(m, text, len, got, 64, false, last_byte, 1) == n);
    const struct recur_text_span after[] = {{27, 1}};
    CHECK(recur_tokenize_except(m, text, len, got, 64, false, after, 1) == n_all);
    /* bad spans */
    const struct recur_text_span unsorted[] = {{14, 2}, {2, 2}}, outside[] = {{20, 9}},
                                 negative[] = {{-1, 2}};
    CHECK(recur_tokenize_except(m, text, len, got, 64, false, unsorted, 2) == INT32_MIN);
    CHECK_ERR("plain span 1");
    CHECK(recur_tokenize_except(m, text, len, got, 64, false, outside, 1) == INT32_MIN);
    CHECK_ERR("outside the text");
    CHECK(recur_tokenize_except(m, text, len, got, 64, false, negative, 1) == INT32_MIN);
    CHECK(recur_tokenize_except(m, text, len, got, 64, false, NULL, 1) == INT32_MIN);
    CHECK_ERR("NULL");
    CHECK(recur_tokenize_except(NULL, text, len, got, 64, false, NULL, 0) == INT32_MIN);
    CHECK_ERR("model is NULL");
}

static const char *g_model, *g_template, *g_plain;

static void test_model_template(void) {
    struct recur_model *m = recur_model_load_from_file(g_model, recur_model_default_params());
    REQUIRE(m);
    char *want = file_read(g_template, NULL);
    REQUIRE(want);
    const char *t = recur_model_chat_template(m, NULL);
    CHECK_MSG(t && strcmp(t, want) == 0, "the model's template differs from %s", g_template);
    CHECK(t && recur_chat_template_name(t) && strcmp(recur_chat_template_name(t), "gemma") == 0);
    CHECK(recur_model_chat_template(m, "tool_use") == NULL);
    CHECK_ERR("tokenizer.chat_template.tool_use");
    /* the model's template formats as its format's name does */
    char *a = apply(t, conv + 1, 1, true), *b = apply("gemma", conv + 1, 1, true);
    CHECK(a && b && strcmp(a, b) == 0);
    free(a);
    free(b);
    free(want);
    recur_model_free(m);

    struct recur_model *p = recur_model_load_from_file(g_plain, recur_model_default_params());
    REQUIRE(p);
    CHECK(recur_model_chat_template(p, NULL) == NULL);
    CHECK_ERR("no chat template");
    test_tokenize_except(p);
    recur_model_free(p);
    CHECK(recur_model_chat_template(NULL, NULL) == NULL);
    CHECK_ERR("NULL");
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: test_chat MODEL_WITH_TEMPLATE TEMPLATE_FILE MODEL_WITHOUT\n");
        return 2;
    }
    g_model = argv[1];
    g_template = argv[2];
    g_plain = argv[3];
    RUN(test_hand_written_formats);
    RUN(test_names);
    RUN(test_buffer);
    RUN(test_errors);
    RUN(test_spans);
    RUN(test_model_template);
    return test_finish("test_chat");
}
