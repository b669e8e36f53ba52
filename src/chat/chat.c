/*
 * chat: the table of chat formats and the one renderer that walks it (see chat.h).
 *
 * The turn strings and the markers that identify a template are llama.cpp's
 * (llm_chat_detect_template / llm_chat_apply_template), except where a model's real template
 * (tests/data/chat-templates/) renders differently, which is noted at the entry: recur renders
 * what the model was trained on.
 */
#include "chat.h"

#include <stdio.h>
#include <string.h>

#include "../core/core.h"

enum { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT, N_ROLES };
static const char *const role_names[N_ROLES] = {"system", "user", "assistant"};

/* How turns are delimited. PLAIN: each message is prefix + content + suffix. INST: llama2 and
 * mistral's [INST] blocks: `open` is written before a message when no block is open, and an
 * assistant message closes the block (system and user text share one block). INST_ALWAYS: as
 * INST, but the first block is opened before anything, even for an empty chat (llama2). */
enum turn_mode { TURN_PLAIN, TURN_INST, TURN_INST_ALWAYS };

/* How system messages are written. TURN: as a message like the others. MERGE_USER: the format
 * has no system role (gemma): system texts are trimmed, joined and written at the start of
 * the next user message, followed by a blank line. */
enum sys_mode { SYS_TURN, SYS_MERGE_USER };

struct role_fmt {
    const char *prefix, *suffix;
    bool trim; /* trim the content's leading and trailing white space */
};

#define MAX_ALTS    2
#define MAX_MARKERS 4

struct format {
    const char *name;
    /* The template text is this format when it contains every marker of one alternative
     * (NULL-terminated lists; an empty list is no alternative). The table is searched in
     * order, so a format whose markers contain another's comes first. */
    const char *markers[MAX_ALTS][MAX_MARKERS + 1];
    struct role_fmt role[N_ROLES];
    const char *gen; /* the generation prompt; NULL: the format has none (add_ass is ignored) */
    /* The table names the fields below only where they differ from their zero value. */
    enum turn_mode turns;
    const char *open_first, *open_next; /* INST: opening a block, the first and the others */
    enum sys_mode sys;
    bool gen_after_user; /* the generation prompt only follows a user message (else nothing) */
    /* written first when the chat does not open with a system message: formats whose template
     * always writes a system turn, empty when there is no system text (Nemotron) */
    const char *sys_missing;
};

#define DS_USER                                                                                    \
    "<\xef\xbd\x9c"                                                                                \
    "User\xef\xbd\x9c>" /* <｜User｜> */
#define DS_ASSISTANT                                                                               \
    "<\xef\xbd\x9c"                                                                                \
    "Assistant\xef\xbd\x9c>" /* <｜Assistant｜> */
#define DS_EOS                                                                                     \
    "<\xef\xbd\x9c"                                                                                \
    "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define DS_MARKERS DS_ASSISTANT, DS_USER, DS_EOS

#define CHATML_ROLE(r)                                                                             \
    { "<|im_start|>" r "\n", "<|im_end|>\n", false }
#define PHI3_ROLE(r)                                                                               \
    { "<|" r "|>\n", "<|end|>\n", false }
#define LLAMA3_ROLE(r)                                                                             \
    { "<|start_header_id|>" r "<|end_header_id|>\n\n", "<|eot_id|>", true }
#define GRANITE_ROLE(r)                                                                            \
    { "<|start_of_role|>" r "<|end_of_role|>", "<|end_of_text|>\n", false }

static const struct format formats[] = {
    /* phi4 shares chatml's <|im_start|>, and adds <|im_sep|> after the role */
    {"phi4",
     {{"<|im_start|>", "<|im_sep|>", NULL}},
     {{"<|im_start|>system<|im_sep|>", "<|im_end|>", false},
      {"<|im_start|>user<|im_sep|>", "<|im_end|>", false},
      {"<|im_start|>assistant<|im_sep|>", "<|im_end|>", false}},
     "<|im_start|>assistant<|im_sep|>",
     .turns = TURN_PLAIN},
    /* NVIDIA Nemotron 3 (nemotron_h_moe): chatml with an empty system turn when there is no
     * system message, history replies after an empty thought ("<think></think>", the reply
     * trimmed: truncate_history_thinking) and a prompt that opens a thought. llama.cpp has no
     * builtin for it: without --jinja it detects chatml, which the model was not trained on;
     * with --jinja it renders this. Not rendered here: reasoning_content, tools, and
     * enable_thinking false (a request option recur's formats do not take). */
    {"nemotron3",
     {{"<|im_start|>", "truncate_history_thinking", NULL}},
     {CHATML_ROLE("system"),
      CHATML_ROLE("user"),
      {"<|im_start|>assistant\n<think></think>", "<|im_end|>\n", true}},
     "<|im_start|>assistant\n<think>\n",
     .turns = TURN_PLAIN,
     .sys_missing = "<|im_start|>system\n<|im_end|>\n"},
    {"chatml",
     {{"<|im_start|>", NULL}},
     {CHATML_ROLE("system"), CHATML_ROLE("user"), CHATML_ROLE("assistant")},
     "<|im_start|>assistant\n",
     .turns = TURN_PLAIN},
    /* Mistral v7 ([SYSTEM_PROMPT]): llama.cpp detects every such template as v7 (spaces after
     * the tags); the real v7-tekken templates (Mistral-Small-3.x, Devstral) have none, so a
     * template without "[SYSTEM_PROMPT] " is v7-tekken here. */
    {"mistral-v7",
     {{"[INST]", "[SYSTEM_PROMPT] ", NULL}},
     {{"[SYSTEM_PROMPT] ", "[/SYSTEM_PROMPT]", false},
      {"[INST] ", "[/INST]", false},
      {" ", "</s>", false}},
     NULL,
     .turns = TURN_PLAIN},
    {"mistral-v7-tekken",
     {{"[INST]", "[SYSTEM_PROMPT]", NULL}},
     {{"[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", false},
      {"[INST]", "[/INST]", false},
      {"", "</s>", false}},
     NULL,
     .turns = TURN_PLAIN},
    {"mistral-v1",
     {{"[INST]", "' [INST] ' + system_message", NULL},
      {"[INST]", "[AVAILABLE_TOOLS]", " [INST]", NULL}},
     {{"", "\n\n", false}, {"", " [/INST]", false}, {" ", "</s>", false}},
     NULL,
     .turns = TURN_INST,
     .open_first = " [INST] ",
     .open_next = " [INST] "},
    {"mistral-v3-tekken",
     {{"[INST]", "[AVAILABLE_TOOLS]", "\"[INST]\"", NULL}},
     {{"", "\n\n", false}, {"", "[/INST]", false}, {"", "</s>", false}},
     NULL,
     .turns = TURN_INST,
     .open_first = "[INST]",
     .open_next = "[INST]"},
    {"mistral-v3",
     {{"[INST]", "[AVAILABLE_TOOLS]", NULL}},
     {{"", "\n\n", false}, {"", "[/INST]", false}, {" ", "</s>", true}},
     NULL,
     .turns = TURN_INST,
     .open_first = "[INST] ",
     .open_next = "[INST] "},
    /* llama2 and its variants: with <<SYS>> blocks, BOS text inside the history, stripped
     * contents. llama2's templates end every prompt in "[/INST]": there is no other
     * generation prompt. */
    {"llama2-sys-strip",
     {{"[INST]", "content.strip()", NULL}},
     {{"<<SYS>>\n", "\n<</SYS>>\n\n", true}, {"", " [/INST]", true}, {"", "</s>", true}},
     NULL,
     .turns = TURN_INST_ALWAYS,
     .open_first = "[INST] ",
     .open_next = "[INST] "},
    {"llama2-sys-bos",
     {{"[INST]", "bos_token + '[INST]", NULL}},
     {{"<<SYS>>\n", "\n<</SYS>>\n\n", false}, {"", " [/INST]", false}, {"", "</s>", false}},
     NULL,
     .turns = TURN_INST_ALWAYS,
     .open_first = "[INST] ",
     .open_next = "<s>[INST] "},
    {"llama2-sys",
     {{"[INST]", "<<SYS>>", NULL}},
     {{"<<SYS>>\n", "\n<</SYS>>\n\n", false}, {"", " [/INST]", false}, {"", "</s>", false}},
     NULL,
     .turns = TURN_INST_ALWAYS,
     .open_first = "[INST] ",
     .open_next = "[INST] "},
    /* without <<SYS>>, a system text goes into the first block on a line of its own */
    {"llama2",
     {{"[INST]", NULL}},
     {{"", "\n", false}, {"", " [/INST]", false}, {"", "</s>", false}},
     NULL,
     .turns = TURN_INST_ALWAYS,
     .open_first = "[INST] ",
     .open_next = "[INST] "},
    {"phi3",
     {{"<|assistant|>", "<|end|>", NULL}},
     {PHI3_ROLE("system"), PHI3_ROLE("user"), PHI3_ROLE("assistant")},
     "<|assistant|>\n",
     .turns = TURN_PLAIN},
    {"zephyr",
     {{"<|user|>", "<|endoftext|>", NULL}},
     {{"<|system|>\n", "<|endoftext|>\n", false},
      {"<|user|>\n", "<|endoftext|>\n", false},
      {"<|assistant|>\n", "<|endoftext|>\n", false}},
     "<|assistant|>\n",
     .turns = TURN_PLAIN},
    {"gemma",
     {{"<start_of_turn>", NULL}},
     {{"", "", true},
      {"<start_of_turn>user\n", "<end_of_turn>\n", true},
      {"<start_of_turn>model\n", "<end_of_turn>\n", true}},
     "<start_of_turn>model\n",
     .turns = TURN_PLAIN,
     .sys = SYS_MERGE_USER},
    /* deepseek-coder */
    {"deepseek",
     {{"### Instruction:", "<|EOT|>", NULL}},
     {{"", "", false},
      {"### Instruction:\n", "\n", false},
      {"### Response:\n", "\n<|EOT|>\n", false}},
     "### Response:\n",
     .turns = TURN_PLAIN},
    {"command-r",
     {{"<|START_OF_TURN_TOKEN|>", "<|USER_TOKEN|>", NULL}},
     {{"<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>", "<|END_OF_TURN_TOKEN|>", true},
      {"<|START_OF_TURN_TOKEN|><|USER_TOKEN|>", "<|END_OF_TURN_TOKEN|>", true},
      {"<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>", "<|END_OF_TURN_TOKEN|>", true}},
     "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>",
     .turns = TURN_PLAIN},
    {"llama3",
     {{"<|start_header_id|>", "<|end_header_id|>", NULL}},
     {LLAMA3_ROLE("system"), LLAMA3_ROLE("user"), LLAMA3_ROLE("assistant")},
     "<|start_header_id|>assistant<|end_header_id|>\n\n",
     .turns = TURN_PLAIN},
    {"deepseek2",
     {{"'Assistant: ' + message['content'] + eos_token", NULL}},
     {{"", "\n\n", false}, {"User: ", "\n\n", false}, {"Assistant: ", DS_EOS, false}},
     "Assistant:",
     .turns = TURN_PLAIN},
    /* DeepSeek V3 and its successors write the system text first with nothing after it (llama.cpp
     * adds a blank line that the real templates do not have). V3.1 opens each assistant turn
     * with an empty thought (and prompts for one only after a user message); R1 (and its
     * distills) prompts with an open thought. */
    {"deepseek-v3.1",
     {{DS_MARKERS, "<think></think>", NULL}},
     {{"", "", false}, {DS_USER, "", false}, {DS_ASSISTANT "<think></think>", DS_EOS, false}},
     DS_ASSISTANT "<think></think>",
     .turns = TURN_PLAIN,
     .gen_after_user = true},
    {"deepseek-r1",
     {{DS_MARKERS, DS_ASSISTANT "<think>\\n", NULL}},
     {{"", "", false}, {DS_USER, "", false}, {DS_ASSISTANT, DS_EOS, false}},
     DS_ASSISTANT "<think>\n",
     .turns = TURN_PLAIN},
    {"deepseek3",
     {{DS_MARKERS, NULL}},
     {{"", "", false}, {DS_USER, "", false}, {DS_ASSISTANT, DS_EOS, false}},
     DS_ASSISTANT,
     .turns = TURN_PLAIN},
    /* llama.cpp's own template for RWKV world models; the turns end in a blank line, which
     * those models end their replies with. The system text is not trimmed (the template does
     * not), and "Assistant:" is the generation prompt only when asked for. */
    {"rwkv-world",
     {{"rwkv-world", NULL}, {"{{- 'User: ' + message['content']|trim + '\\n\\n' -}}", NULL}},
     {{"System: ", "\n\n", false}, {"User: ", "\n\n", true}, {"Assistant: ", "\n\n", true}},
     "Assistant:",
     .turns = TURN_PLAIN},
    /* Granite 4.0 (granitehybrid: Granite 4.0-H) and 4.1: llama.cpp's GRANITE_4_0 writes
     * system, user and assistant turns as GRANITE_3_X does (it differs in tool calls, which
     * recur's formats do not take), and the real 4.0 and 4.1 templates render them so too.
     * Detected as llama.cpp does: a template with <|start_of_role|> and <tool_call> or <tools>
     * is 4.0 when it names g4_default_system_message, else 4.1. The real 4.0 template writes a
     * default system message when the chat has none (llama.cpp's builtin does not, nor does
     * recur). */
    {"granite-4.0",
     {{"<|start_of_role|>", "<tool_call>", "g4_default_system_message", NULL},
      {"<|start_of_role|>", "<tools>", "g4_default_system_message", NULL}},
     {GRANITE_ROLE("system"), GRANITE_ROLE("user"), GRANITE_ROLE("assistant")},
     "<|start_of_role|>assistant<|end_of_role|>",
     .turns = TURN_PLAIN},
    {"granite-4.1",
     {{"<|start_of_role|>", "<tool_call>", NULL}, {"<|start_of_role|>", "<tools>", NULL}},
     {GRANITE_ROLE("system"), GRANITE_ROLE("user"), GRANITE_ROLE("assistant")},
     "<|start_of_role|>assistant<|end_of_role|>",
     .turns = TURN_PLAIN},
    {"granite",
     {{"<|start_of_role|>", NULL}},
     {{"<|start_of_role|>system<|end_of_role|>", "<|end_of_text|>\n", false},
      {"<|start_of_role|>user<|end_of_role|>", "<|end_of_text|>\n", false},
      {"<|start_of_role|>assistant<|end_of_role|>", "<|end_of_text|>\n", false}},
     "<|start_of_role|>assistant<|end_of_role|>",
     .turns = TURN_PLAIN},
    /* NVIDIA Nemotron Nano 2 and Nemotron-H (nemotron_h): <SPECIAL_n> turns, every content
     * stripped, a system turn always (empty without a system message), a prompt that opens a
     * thought. llama.cpp has no builtin for it (without --jinja it refuses the template); this
     * is what the real template renders for a chat that ends with a user message. Not
     * rendered as the template does: a chat that ends with an assistant message (the template
     * reopens that reply with a thought), system messages after the first (the template drops
     * them), /think and /no_think in a message (the template removes them and switches the
     * thought off), tools. */
    {"nemotron-v2",
     {{"<SPECIAL_10>System", "<SPECIAL_11>Assistant", NULL}},
     {{"<SPECIAL_10>System\n", "\n\n", true},
      {"<SPECIAL_11>User\n", "\n", true},
      {"<SPECIAL_11>Assistant\n", "\n<SPECIAL_12>\n", true}},
     "<SPECIAL_11>Assistant\n<think>\n",
     .turns = TURN_PLAIN,
     .sys_missing = "<SPECIAL_10>System\n\n\n"},
};

#define N_FORMATS ((int)(sizeof(formats) / sizeof(formats[0])))

int32_t rchat_names(const char **out, size_t n) {
    for (size_t i = 0; out && i < n && i < (size_t)N_FORMATS; i++) out[i] = formats[i].name;
    return N_FORMATS;
}

const char *rchat_name(int i) {
    return i >= 0 && i < N_FORMATS ? formats[i].name : NULL;
}

static bool matches(const struct format *f, const char *text) {
    for (int a = 0; a < MAX_ALTS; a++) {
        if (!f->markers[a][0]) continue;
        bool all = true;
        for (int k = 0; all && f->markers[a][k]; k++) all = strstr(text, f->markers[a][k]) != NULL;
        if (all) return true;
    }
    return false;
}

int rchat_find(const char *tmpl) {
    if (!tmpl) {
        rcore_error_set("chat template: NULL template");
        return -1;
    }
    for (int i = 0; i < N_FORMATS; i++)
        if (strcmp(tmpl, formats[i].name) == 0) return i;
    for (int i = 0; i < N_FORMATS; i++)
        if (matches(&formats[i], tmpl)) return i;
    char names[512];
    size_t len = 0;
    names[0] = '\0';
    for (int i = 0; i < N_FORMATS && len < sizeof names; i++)
        len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", i ? ", " : "",
                                formats[i].name);
    char start[41];
    size_t n = strcspn(tmpl, "\n");
    n = n < 40 ? n : 40;
    memcpy(start, tmpl, n);
    start[n] = '\0';
    rcore_error_set("chat template \"%s%s\" is not supported: neither a builtin name nor a "
                    "template with the markers of one (supported: %s)",
                    start, strlen(tmpl) > n ? "..." : "", names);
    return -1;
}

/* The output: bytes that fit are copied, all are counted; so are the contents' spans. */
struct out {
    char *buf;
    size_t cap, len;
    bool overflow;
    struct rchat_span *spans;
    size_t spans_cap, n_spans;
};

static void put(struct out *o, const char *s, size_t n) {
    if (o->len < o->cap) {
        size_t k = o->cap - o->len < n ? o->cap - o->len : n;
        memcpy(o->buf + o->len, s, k);
    }
    if (n > SIZE_MAX - o->len)
        o->overflow = true;
    else
        o->len += n;
}

static void puts_(struct out *o, const char *s) {
    if (s) put(o, s, strlen(s));
}

static bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* content, its white space trimmed when asked */
static void put_content(struct out *o, const char *s, bool trim) {
    size_t n = strlen(s);
    if (trim) {
        while (n > 0 && is_space(s[n - 1])) n--;
        while (n > 0 && is_space(*s)) s++, n--;
    }
    if (o->n_spans < o->spans_cap) o->spans[o->n_spans] = (struct rchat_span){o->len, n};
    o->n_spans++;
    put(o, s, n);
}

const char rchat_raw_role[] = "raw";

static int role_index(const char *role) {
    int r = 0;
    while (r < N_ROLES && strcmp(role, role_names[r]) != 0) r++;
    return r;
}

int32_t rchat_apply(int i, const struct rchat_msg *msgs, size_t n, bool add_ass, char *buf,
                    size_t cap) {
    size_t n_spans;
    return rchat_apply_spans(i, msgs, n, add_ass, buf, cap, NULL, 0, &n_spans);
}

int32_t rchat_apply_spans(int i, const struct rchat_msg *msgs, size_t n, bool add_ass, char *buf,
                          size_t cap, struct rchat_span *spans, size_t n_max, size_t *n_spans) {
    *n_spans = 0;
    if (!spans && n_max > 0) {
        rcore_error_set("chat template: NULL spans with room for %zu", n_max);
        return -1;
    }
    if (i < 0 || i >= N_FORMATS) {
        rcore_error_set("chat template: format %d does not exist", i);
        return -1;
    }
    if (!buf && cap > 0) {
        rcore_error_set("chat template: NULL buffer of %zu bytes", cap);
        return -1;
    }
    if (!msgs && n > 0) {
        rcore_error_set("chat template: NULL messages (%zu of them)", n);
        return -1;
    }
    const struct format *f = &formats[i];
    /* check every message first, so that an error leaves nothing half-done to explain */
    for (size_t m = 0; m < n; m++) {
        if (!msgs[m].role || !msgs[m].content) {
            rcore_error_set("chat template: message %zu has a NULL %s", m,
                            msgs[m].role ? "content" : "role");
            return -1;
        }
        if (msgs[m].role != rchat_raw_role && role_index(msgs[m].role) == N_ROLES) {
            rcore_error_set("chat template %s: message %zu has the role \"%s\"; the format "
                            "knows system, user and assistant",
                            f->name, m, msgs[m].role);
            return -1;
        }
    }
    struct out o = {buf, cap, 0, false, spans, n_max, 0};
    if (f->sys_missing && n > 0 && role_index(msgs[0].role) != ROLE_SYSTEM)
        puts_(&o, f->sys_missing);
    bool open = false, opened_once = false;
    if (f->turns == TURN_INST_ALWAYS) {
        puts_(&o, f->open_first);
        open = opened_once = true;
    }
    /* SYS_MERGE_USER: the system messages since sys_from wait for the next user message */
    size_t sys_from = 0;
    bool sys_pending = false;
    for (size_t m = 0; m < n; m++) {
        if (msgs[m].role == rchat_raw_role) {
            put_content(&o, msgs[m].content, false);
            continue;
        }
        const int r = role_index(msgs[m].role);
        const struct role_fmt *rf = &f->role[r];
        if (f->sys == SYS_MERGE_USER && r == ROLE_SYSTEM) {
            if (!sys_pending) sys_from = m;
            sys_pending = true;
            continue;
        }
        if (f->turns != TURN_PLAIN && !open) {
            puts_(&o, opened_once ? f->open_next : f->open_first);
            open = opened_once = true;
        }
        puts_(&o, rf->prefix);
        if (sys_pending && r == ROLE_USER) {
            /* the system texts since sys_from, trimmed and joined, then a blank line */
            size_t before = o.len;
            for (size_t k = sys_from; k < m; k++)
                if (role_index(msgs[k].role) == ROLE_SYSTEM)
                    put_content(&o, msgs[k].content, f->role[ROLE_SYSTEM].trim);
            if (o.len > before) puts_(&o, "\n\n");
            sys_pending = false;
        }
        put_content(&o, msgs[m].content, rf->trim);
        puts_(&o, rf->suffix);
        if (r == ROLE_ASSISTANT) open = false;
    }
    if (add_ass && (!f->gen_after_user || (n > 0 && role_index(msgs[n - 1].role) == ROLE_USER)))
        puts_(&o, f->gen);
    if (o.overflow || o.len > INT32_MAX) {
        rcore_error_set("chat template %s: the formatted chat is longer than 2 GiB", f->name);
        return -1;
    }
    if (o.len < cap) buf[o.len] = '\0';
    *n_spans = o.n_spans;
    return (int32_t)o.len;
}
