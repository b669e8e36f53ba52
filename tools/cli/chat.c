/*
 * recur chat: an interactive chat in the terminal, as llama-cli's conversation mode.
 *
 * Each line read from stdin is a user turn (from a terminal after a "> " prompt, or from a
 * pipe); the reply streams to stdout and ends with a newline. Lines that begin with '/' are
 * commands: /save FILE, /load FILE, /exit (EOF also quits).
 *
 * The conversation is formatted with the model's chat template (tokenizer.chat_template), or
 * --chat-template NAME, or chatml when the model has none (recur.h, "chat templates"). Its
 * state lives in sequence 0 with the tokens decoded into it and the text they stand for. Each
 * turn renders the whole chat again and decodes only what follows the state's text: the
 * previous rendering plus the reply is normally a prefix of the new rendering, since a template
 * only appends. When it is not (a template that trims a reply's white space, a reply cut inside
 * the end-of-turn text, a loaded conversation of another template), the new rendering is
 * tokenised whole and the state goes back to the longest common token prefix (to the newest
 * checkpoint before it, one every 32 positions) or to nothing, and the rest is decoded; a
 * note on stderr says so. stderr gets one line per turn: "recur chat: turn N: decoded D
 * tokens (R reused)".
 *
 * A reply ends at the model's EOS token, at the format's end-of-turn text (which recur finds
 * by rendering a probe reply with the template: the text the template writes after an
 * assistant message, e.g. "<|im_end|>" for chatml), at -n tokens, or at Ctrl-C. Ctrl-C
 * (SIGINT) during a reply stops the reply; at the prompt it quits.
 *
 * /save FILE writes the state and its tokens with recur_state_seq_save_file, and FILE.chat
 * beside it: the messages and the state's text, as
 *     recur-chat 1\n
 *     template NAME\n
 *     text LEN\n<LEN bytes>\n
 *     messages N\n
 *     ROLE LEN\n<LEN bytes>\n     (N times)
 * Both are written to a temporary name and renamed. /load FILE reads them back (into sequence
 * 1 first, so that a file that cannot be used leaves the current conversation as it was).
 *
 * With --prefix-cache-store, every turn's end is stored in that second tier too, and a turn
 * that finds nothing of its rendering in the state restores the longest prefix stored there:
 * /load FILE with FILE.chat alone (no state file: it stayed on another machine) takes the
 * messages, and the next turn takes their state from the store instead of decoding them.
 */
#include <errno.h>
#include <signal.h>
#include <sys/select.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "tools.h"

/* Set by SIGINT: a signal handler can only set a flag, and this program has one main thread. */
static volatile sig_atomic_t interrupted;

static void on_sigint(int sig) {
    (void)sig;
    interrupted = interrupted + 1;
}

/* A growable byte string. */
struct str {
    char *s;
    size_t len, cap;
};

static bool str_add(struct str *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *t = realloc(b->s, cap);
        if (!t) return false;
        b->s = t;
        b->cap = cap;
    }
    if (n) memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
    return true;
}

struct chat {
    struct recur_model *model;
    struct recur_context *ctx;
    struct recur_sampler *smpl;    /* what replies are sampled with: [grammar,] base */
    struct recur_sampler *base;    /* the sampling chain; its penalties see the whole chat */
    struct recur_sampler *grammar; /* --grammar etc. (NULL: none), in smpl; every reply follows
                                      it from its start, the conversation's tokens never go in */
    const struct gen_opts *o;
    const char *tmpl;      /* a template text or a builtin name */
    const char *tmpl_name; /* the builtin name it resolves to */
    char *eot;             /* the format's end-of-turn text ("" when none is found) */
    /* the messages (role and content malloc'd) */
    struct recur_chat_message *msgs;
    size_t n_msgs, cap_msgs;
    /* what sequence 0 holds: tokens, and the text they stand for */
    recur_token *toks;
    size_t n_toks, cap_toks;
    struct str text;
    int turn;
    struct store *store; /* --prefix-cache-store: a turn's state there, restored from there */
};

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

static void msgs_free(struct recur_chat_message *m, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free((char *)m[i].role);
        free((char *)m[i].content);
    }
    free(m);
}

static bool add_msg(struct chat *c, const char *role, const char *content, size_t len) {
    if (c->n_msgs == c->cap_msgs) {
        size_t cap = c->cap_msgs ? c->cap_msgs * 2 : 16;
        struct recur_chat_message *m = realloc(c->msgs, cap * sizeof *m);
        if (!m) return false;
        c->msgs = m;
        c->cap_msgs = cap;
    }
    char *r = dup_n(role, strlen(role)), *t = dup_n(content, len);
    if (!r || !t) {
        free(r);
        free(t);
        return false;
    }
    c->msgs[c->n_msgs++] = (struct recur_chat_message){r, t};
    return true;
}

static void drop_last_msg(struct chat *c) {
    c->n_msgs--;
    free((char *)c->msgs[c->n_msgs].role);
    free((char *)c->msgs[c->n_msgs].content);
}

static bool add_tokens(struct chat *c, const recur_token *t, size_t n) {
    if (c->n_toks + n > c->cap_toks) {
        size_t cap = c->cap_toks ? c->cap_toks : 256;
        while (cap < c->n_toks + n) cap *= 2;
        recur_token *p = realloc(c->toks, cap * sizeof *p);
        if (!p) return false;
        c->toks = p;
        c->cap_toks = cap;
    }
    memcpy(c->toks + c->n_toks, t, n * sizeof *t);
    c->n_toks += n;
    return true;
}

/* The chat rendered with the template, malloc'd; NULL with a message. */
static char *render(const char *tmpl, const struct recur_chat_message *m, size_t n, bool add_ass,
                    size_t *len) {
    int32_t k = recur_chat_apply_template(tmpl, m, n, add_ass, NULL, 0);
    char *buf = k >= 0 ? malloc((size_t)k + 1) : NULL;
    if (k < 0 || !buf || recur_chat_apply_template(tmpl, m, n, add_ass, buf, k + 1) != k) {
        fprintf(stderr, "recur chat: %s\n", k < 0 ? recur_last_error() : "out of memory");
        free(buf);
        return NULL;
    }
    *len = (size_t)k;
    return buf;
}

/* The end-of-turn text: what the template writes after an assistant message, found by
 * rendering a probe reply; its trailing white space is dropped (chatml's "<|im_end|>\n" ends a
 * reply at "<|im_end|>") unless it is all white space (rwkv-world's "\n\n"). */
static char *find_eot(const char *tmpl) {
    static const char probe[] = "\x01probe\x02";
    const struct recur_chat_message m[2] = {{"user", "hi"}, {"assistant", probe}};
    size_t len;
    char *full = render(tmpl, m, 2, false, &len);
    if (!full) return NULL;
    const char *at = strstr(full, probe);
    const char *end = at ? at + strlen(probe) : full + len;
    size_t n = strlen(end);
    while (n > 0 && strchr(" \t\r\n", end[n - 1])) n--;
    char *eot = dup_n(end, n > 0 ? n : strlen(end));
    free(full);
    if (!eot) fprintf(stderr, "recur chat: out of memory\n");
    return eot;
}

/* Tokens of text[0..len) (BOS first when bos and the model asks for it), control tokens
 * parsed, malloc'd; NULL with a message. */
static recur_token *tokenize(const struct chat *c, const char *text, size_t len, bool bos,
                             int32_t *n) {
    if (len > INT32_MAX / 4) {
        fprintf(stderr, "recur chat: the conversation is too long (%zu bytes)\n", len);
        return NULL;
    }
    int32_t cap = RECUR_TOKENS_MAX((int32_t)len);
    recur_token *t = malloc(sizeof *t * (size_t)cap);
    if (!t) {
        fprintf(stderr, "recur chat: out of memory\n");
        return NULL;
    }
    int32_t k = recur_tokenize(c->model, text, (int32_t)len, t, cap, bos, true);
    if (k == INT32_MIN || k < 0) {
        fprintf(stderr, "recur chat: tokenising failed: %s\n",
                k == INT32_MIN ? recur_last_error() : "more tokens than RECUR_TOKENS_MAX");
        free(t);
        return NULL;
    }
    *n = k;
    return t;
}

/* Brings sequence 0 to hold the rendering r[0..len): decodes what follows the state's text,
 * or (when the state's text is not a prefix of r) goes back to the longest common token
 * prefix. Returns the tokens decoded, -1 on failure (message printed). */
static int32_t sync_to(struct chat *c, const char *r, size_t len, int32_t *reused) {
    recur_memory_t mem = recur_get_memory(c->ctx);
    int32_t n = 0;
    recur_token *t = NULL;
    if (c->n_toks > 0 && c->text.len < len && memcmp(c->text.s, r, c->text.len) == 0) {
        t = tokenize(c, r + c->text.len, len - c->text.len, false, &n);
        if (!t) return -1;
        *reused = (int32_t)c->n_toks;
    } else {
        t = tokenize(c, r, len, true, &n);
        if (!t) return -1;
        size_t common = 0;
        while (common < c->n_toks && common < (size_t)n && c->toks[common] == t[common]) common++;
        /* at least one token is decoded, for the logits the reply starts from */
        size_t keep = common < (size_t)n ? common : (size_t)n - 1;
        int32_t held = 0;
        if (keep > 0 && recur_memory_seq_rm(mem, 0, (recur_pos)keep, -1))
            held = recur_memory_seq_pos_max(mem, 0) + 1;
        if (held == 0) recur_memory_seq_rm(mem, 0, -1, -1);
        if (c->n_toks > 0)
            fprintf(stderr,
                    "recur chat: note: the new rendering does not extend the conversation's "
                    "text (%zu of its tokens agree); decoding from token %d\n",
                    common, held);
        c->n_toks = (size_t)held;
        /* the second tier may hold more of it: this conversation on another machine, or
           before a restart */
        if (c->store && held == 0 && n > 1) {
            const int32_t got = recur_prefix_cache_restore(c->ctx, 0, t, n);
            if (got > 0) {
                if (!add_tokens(c, t, (size_t)got)) {
                    free(t);
                    return -1;
                }
                held = got;
            }
        }
        memmove(t, t + held, sizeof *t * (size_t)(n - held));
        n -= held;
        *reused = held;
        /* the text of the kept tokens is the rendering's start up to them: re-derived below */
        c->text.len = 0;
        if (c->text.s) c->text.s[0] = '\0';
    }
    bool ok = n == 0 || gen_decode_prompt(c->ctx, 0, t, n);
    ok = ok && add_tokens(c, t, (size_t)n);
    free(t);
    c->text.len = 0;
    ok = ok && str_add(&c->text, r, len);
    if (!ok) {
        fprintf(stderr, "recur chat: the turn could not be decoded\n");
        return -1;
    }
    for (int32_t i = 0; i < n; i++)
        recur_sampler_accept(c->base, c->toks[c->n_toks - (size_t)n + (size_t)i]);
    return n;
}

/* Bytes at the end of s[0..len) that begin eot (they may become it): held back from printing. */
static size_t eot_partial(const char *s, size_t len, const char *eot) {
    size_t e = strlen(eot);
    for (size_t k = e > 0 ? e - 1 : 0; k > 0; k--)
        if (k <= len && memcmp(s + len - k, eot, k) == 0) return k;
    return 0;
}

static const char *find_bytes(const char *s, size_t len, const char *needle) {
    size_t n = strlen(needle);
    if (n == 0 || n > len) return NULL;
    for (size_t i = 0; i + n <= len; i++)
        if (memcmp(s + i, needle, n) == 0) return s + i;
    return NULL;
}

/* One user turn: format, decode the new part, stream the reply. False on a failure that ends
 * the program. */
static bool turn(struct chat *c, const char *line, size_t line_len) {
    if (!add_msg(c, "user", line, line_len)) {
        fprintf(stderr, "recur chat: out of memory\n");
        return false;
    }
    size_t rlen;
    char *r = render(c->tmpl, c->msgs, c->n_msgs, true, &rlen);
    if (!r) {
        drop_last_msg(c);
        return false;
    }
    int32_t reused = 0;
    int32_t decoded = sync_to(c, r, rlen, &reused);
    free(r);
    if (decoded < 0) return false;
    c->turn++;
    fprintf(stderr, "recur chat: turn %d: decoded %d tokens (%d reused)\n", c->turn, decoded,
            reused);

    /* the reply: its text (control tokens rendered, so that an end-of-turn token is seen) */
    if (c->grammar) recur_sampler_reset(c->grammar); /* each reply is one text of the grammar */
    struct str reply = {0};
    size_t printed = 0, content_len = SIZE_MAX;
    const recur_token eos = recur_token_eos(c->model);
    bool ok = true, pending = false; /* pending: the last token is not decoded yet */
    for (int32_t i = 0; i < c->o->n_predict && ok; i++) {
        if (interrupted) break;
        if (pending) {
            if (recur_decode(c->ctx, recur_batch_get_one(&c->toks[c->n_toks - 1], 1)) != 0) {
                fprintf(stderr, "\nrecur chat: decode failed: %s\n", recur_last_error());
                ok = false;
                break;
            }
            pending = false;
        }
        recur_token t = recur_sampler_sample(c->smpl, c->ctx, -1);
        if (t < 0) {
            fprintf(stderr, "\nrecur chat: sampling failed: %s\n", recur_last_error());
            ok = false;
            break;
        }
        if (t == eos) break;
        char piece[256];
        int32_t n = recur_token_to_piece(c->model, t, piece, sizeof piece, 0, true);
        if (n < 0 || !add_tokens(c, &t, 1) || !str_add(&reply, piece, (size_t)n) ||
            !str_add(&c->text, piece, (size_t)n)) {
            fprintf(stderr, "\nrecur chat: out of memory\n");
            ok = false;
            break;
        }
        pending = true;
        const char *at = find_bytes(reply.s, reply.len, c->eot);
        if (at) {
            content_len = (size_t)(at - reply.s);
            break;
        }
        size_t safe = reply.len - eot_partial(reply.s, reply.len, c->eot);
        if (safe > printed) {
            fwrite(reply.s + printed, 1, safe - printed, stdout);
            fflush(stdout);
            printed = safe;
        }
    }
    if (interrupted) fprintf(stderr, "\nrecur chat: reply interrupted\n");
    if (content_len == SIZE_MAX) content_len = reply.len;
    if (content_len > printed) fwrite(reply.s + printed, 1, content_len - printed, stdout);
    fputc('\n', stdout);
    fflush(stdout);
    /* the state holds every token of the reply (the next turn decodes only what follows) */
    if (ok && pending &&
        recur_decode(c->ctx, recur_batch_get_one(&c->toks[c->n_toks - 1], 1)) != 0) {
        fprintf(stderr, "recur chat: decode failed: %s\n", recur_last_error());
        ok = false;
    }
    if (ok && !add_msg(c, "assistant", reply.s ? reply.s : "", content_len)) {
        fprintf(stderr, "recur chat: out of memory\n");
        ok = false;
    }
    /* the conversation so far, for a next run or another machine (--prefix-cache-store) */
    if (ok && c->store && recur_prefix_cache_store(c->ctx, 0, c->toks, (int32_t)c->n_toks) < 0)
        fprintf(stderr, "recur chat: note: the turn was not stored: %s\n", recur_last_error());
    free(reply.s);
    return ok;
}

/* ---- /save and /load ---------------------------------------------------------------------- */

static char *sidecar_path(const char *path) {
    size_t n = strlen(path);
    char *p = malloc(n + 6);
    if (p) {
        memcpy(p, path, n);
        memcpy(p + n, ".chat", 6);
    }
    return p;
}

static bool write_sidecar(const struct chat *c, const char *path) {
    char *tmp = malloc(strlen(path) + 8);
    if (!tmp) return false;
    sprintf(tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        fprintf(stderr, "recur chat: %s: %s\n", tmp, strerror(errno));
        free(tmp);
        return false;
    }
    fprintf(f, "recur-chat 1\ntemplate %s\ntext %zu\n", c->tmpl_name, c->text.len);
    fwrite(c->text.s ? c->text.s : "", 1, c->text.len, f);
    fprintf(f, "\nmessages %zu\n", c->n_msgs);
    for (size_t i = 0; i < c->n_msgs; i++) {
        size_t n = strlen(c->msgs[i].content);
        fprintf(f, "%s %zu\n", c->msgs[i].role, n);
        fwrite(c->msgs[i].content, 1, n, f);
        fputc('\n', f);
    }
    bool ok = !ferror(f);
    ok = (fclose(f) == 0) && ok;
    if (ok && rename(tmp, path) != 0) ok = false;
    if (!ok) {
        fprintf(stderr, "recur chat: cannot write %s: %s\n", path, strerror(errno));
        remove(tmp);
    }
    free(tmp);
    return ok;
}

static void cmd_save(struct chat *c, const char *path) {
    char *side = sidecar_path(path);
    if (!side) {
        fprintf(stderr, "recur chat: out of memory\n");
        return;
    }
    if (!recur_state_seq_save_file(c->ctx, path, 0, c->toks, c->n_toks)) {
        fprintf(stderr, "recur chat: /save: %s\n", recur_last_error());
    } else if (!write_sidecar(c, side)) {
        remove(path); /* a state without its messages would be half a conversation */
    } else {
        fprintf(stderr, "recur chat: saved %zu messages and %zu tokens to %s (and %s)\n", c->n_msgs,
                c->n_toks, path, side);
    }
    free(side);
}

/* Reads a "WORD N\n" header line (word: 64 bytes); false when the line is not that. */
static bool read_header(FILE *f, char *word, size_t *n) {
    char line[256], tail;
    if (!fgets(line, sizeof line, f)) return false;
    return sscanf(line, "%63s %zu", word, n) == 2 && strchr(line, '\n') &&
           sscanf(line, "%*s %*s %c", &tail) != 1;
}

static char *read_blob(FILE *f, size_t n) {
    if (n > (size_t)1 << 30) return NULL;
    char *s = malloc(n + 1);
    if (!s) return NULL;
    if (fread(s, 1, n, f) != n || fgetc(f) != '\n') {
        free(s);
        return NULL;
    }
    s[n] = '\0';
    return s;
}

/* Parses FILE.chat; false with a message naming what is wrong. */
static bool read_sidecar(const char *path, struct str *text, struct recur_chat_message **msgs,
                         size_t *n_msgs, char *tmpl_name /* 64 bytes */) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "recur chat: /load: %s: %s\n", path, strerror(errno));
        return false;
    }
    char word[64];
    size_t version = 0, n = 0, count = 0;
    const char *bad = NULL;
    *msgs = NULL;
    *n_msgs = 0;
    char line[256];
    if (!read_header(f, word, &version) || strcmp(word, "recur-chat") != 0 || version != 1)
        bad = "not a recur chat file (version 1)";
    else if (!fgets(line, sizeof line, f) || sscanf(line, "template %63s", tmpl_name) != 1)
        bad = "no template line";
    else if (!read_header(f, word, &n) || strcmp(word, "text") != 0)
        bad = "no text header";
    char *s = bad ? NULL : read_blob(f, n);
    if (!bad && !s) bad = "the text is cut short";
    if (s) {
        text->len = 0;
        if (!str_add(text, s, n)) bad = "out of memory";
        free(s);
    }
    if (!bad &&
        (!read_header(f, word, &count) || strcmp(word, "messages") != 0 || count > (size_t)1 << 24))
        bad = "no messages header";
    if (!bad && !(*msgs = calloc(count + 1, sizeof **msgs))) bad = "out of memory";
    for (size_t i = 0; !bad && i < count; i++) {
        if (!read_header(f, word, &n) ||
            (strcmp(word, "system") != 0 && strcmp(word, "user") != 0 &&
             strcmp(word, "assistant") != 0)) {
            bad = "a message header is not \"ROLE LENGTH\" (system, user or assistant)";
            break;
        }
        char *content = read_blob(f, n);
        char *role = dup_n(word, strlen(word));
        if (!content || !role) {
            free(content);
            free(role);
            bad = "a message is cut short";
            break;
        }
        (*msgs)[(*n_msgs)++] = (struct recur_chat_message){role, content};
    }
    if (!bad && fgetc(f) != EOF) bad = "bytes after the last message";
    fclose(f);
    if (bad) {
        fprintf(stderr, "recur chat: /load: %s: %s\n", path, bad);
        msgs_free(*msgs, *n_msgs);
        *msgs = NULL;
        *n_msgs = 0;
        return false;
    }
    return true;
}

/* The conversation's messages become *msgs (taken over), and the sampler starts afresh. */
static void take_messages(struct chat *c, struct recur_chat_message **msgs, size_t *n_msgs) {
    msgs_free(c->msgs, c->n_msgs);
    c->msgs = *msgs;
    c->n_msgs = c->cap_msgs = *n_msgs;
    *msgs = NULL;
    *n_msgs = 0;
    recur_sampler_reset(c->smpl);
}

static void cmd_load(struct chat *c, const char *path) {
    char *side = sidecar_path(path);
    struct str text = {0};
    struct recur_chat_message *msgs = NULL;
    size_t n_msgs = 0;
    char name[64];
    recur_token *toks = NULL;
    if (!side) goto oom;
    if (access(path, R_OK) != 0 && !(errno == ENOENT && c->store && access(side, R_OK) == 0)) {
        fprintf(stderr, "recur chat: /load: %s: %s\n", path, strerror(errno));
        goto done;
    }
    if (!read_sidecar(side, &text, &msgs, &n_msgs, name)) goto done;
    if (access(path, F_OK) != 0) {
        /* the messages alone (the small FILE.chat carried to another machine): the next turn
           restores their state from the second tier instead of decoding them */
        recur_memory_seq_rm(recur_get_memory(c->ctx), 0, -1, -1);
        c->n_toks = 0;
        c->text.len = 0;
        take_messages(c, &msgs, &n_msgs);
        fprintf(stderr,
                "recur chat: loaded %zu messages from %s (no state file: the next turn takes the "
                "state from --prefix-cache-store)\n",
                c->n_msgs, side);
        goto done;
    }
    size_t cap = 1u << 20, n_toks = 0;
    if (!(toks = malloc(sizeof *toks * cap))) goto oom;
    /* into sequence 1, so that a refused file leaves sequence 0 (the conversation) alone */
    recur_memory_t mem = recur_get_memory(c->ctx);
    if (!recur_state_seq_load_file(c->ctx, path, 1, toks, cap, &n_toks)) {
        fprintf(stderr, "recur chat: /load: %s\n", recur_last_error());
        goto done;
    }
    if ((size_t)(recur_memory_seq_pos_max(mem, 1) + 1) != n_toks) {
        fprintf(stderr, "recur chat: /load: %s: its state holds %d tokens, its list %zu\n", path,
                recur_memory_seq_pos_max(mem, 1) + 1, n_toks);
        recur_memory_seq_rm(mem, 1, -1, -1);
        goto done;
    }
    recur_memory_seq_rm(mem, 0, -1, -1);
    recur_memory_seq_cp(mem, 1, 0, -1, -1);
    recur_memory_seq_rm(mem, 1, -1, -1);
    c->n_toks = 0;
    if (!add_tokens(c, toks, n_toks)) goto oom;
    free(c->text.s);
    c->text = text;
    text = (struct str){0};
    take_messages(c, &msgs, &n_msgs);
    for (size_t i = 0; i < c->n_toks; i++) recur_sampler_accept(c->base, c->toks[i]);
    if (strcmp(name, c->tmpl_name) != 0)
        fprintf(stderr,
                "recur chat: note: %s was saved with the %s template, this chat uses %s (the "
                "next turn decodes again what differs)\n",
                path, name, c->tmpl_name);
    fprintf(stderr, "recur chat: loaded %zu messages and %zu tokens from %s\n", c->n_msgs,
            c->n_toks, path);
    goto done;
oom:
    fprintf(stderr, "recur chat: out of memory\n");
done:
    free(toks);
    free(text.s);
    msgs_free(msgs, n_msgs);
    free(side);
}

/* ---- the loop ----------------------------------------------------------------------------- */

/* Waits until the terminal has a line to read; false when Ctrl-C comes first. SIGINT is
 * blocked while the flag is checked and unblocked only inside pselect, so a Ctrl-C that comes
 * just after the prompt is printed cannot be lost between the check and the wait. stdin is
 * unbuffered on a terminal, so no line waits unseen in stdio's buffer (a terminal hands over
 * a line at a time anyway). */
static bool wait_line(void) {
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigprocmask(SIG_BLOCK, &block, &old);
    bool ready = false;
    while (!interrupted) {
        fd_set fds;
        FD_ZERO(&fds);
        FD_SET(STDIN_FILENO, &fds);
        int k = pselect(STDIN_FILENO + 1, &fds, NULL, NULL, NULL, &old);
        if (k > 0) {
            ready = true;
            break;
        }
        if (k < 0 && errno != EINTR) {
            ready = true; /* getline reports the error */
            break;
        }
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    return ready;
}

/* A line that starts with '/': a command. False: quit. */
static bool command(struct chat *c, char *line) {
    char *arg = line + strcspn(line, " \t");
    if (*arg) *arg++ = '\0';
    arg += strspn(arg, " \t");
    if (strcmp(line, "/exit") == 0 || strcmp(line, "/quit") == 0) return false;
    if (strcmp(line, "/save") == 0 || strcmp(line, "/load") == 0) {
        if (!*arg) {
            fprintf(stderr, "recur chat: %s needs a file name (%s FILE)\n", line, line);
            return true;
        }
        (line[1] == 's' ? cmd_save : cmd_load)(c, arg);
        return true;
    }
    fprintf(stderr, "recur chat: unknown command '%s' (commands: /save FILE, /load FILE, /exit)\n",
            line);
    return true;
}

int cmd_chat(int argc, char **argv) {
    struct gen_opts o;
    int st = gen_parse(argc, argv, GEN_CHAT,
                       "Chats with a model in the terminal: each line is a user turn (also from a "
                       "pipe).\nCommands at the prompt: /save FILE, /load FILE, /exit (or EOF). "
                       "Ctrl-C stops a reply;\nat the prompt it quits.",
                       &o, NULL);
    if (st >= 0) return st;
    if (o.chat_template && !recur_chat_template_name(o.chat_template)) {
        fprintf(stderr, "recur chat: --chat-template: %s\n", recur_last_error());
        return TOOL_USAGE;
    }
    char *grammar = NULL; /* --grammar, --grammar-file or --json-schema as GBNF */
    if ((st = gen_grammar_text(&o, &grammar)) != TOOL_OK) return st;
    struct chat c = {0};
    c.o = &o;
    /* two sequences: the conversation, and a place to load a saved one into before it
       replaces the conversation; a checkpoint every 32 positions for going back (see top) */
    struct recur_context_params cp = gen_context_params(&o, 2);
    cp.checkpoint_every = 32;
    /* the context's worker threads inherit a mask that blocks SIGINT, so that Ctrl-C always
       reaches this thread (wait_line's pselect, the reply loop) */
    sigset_t sigint, old_mask;
    sigemptyset(&sigint);
    sigaddset(&sigint, SIGINT);
    sigprocmask(SIG_BLOCK, &sigint, &old_mask);
    const bool loaded = gen_load_params(&o, cp, &c.model, &c.ctx);
    sigprocmask(SIG_SETMASK, &old_mask, NULL);
    if (!loaded) {
        free(grammar);
        return TOOL_FAIL;
    }
    int ret = TOOL_FAIL;
    char *line = NULL;
    if (!gen_store_attach(&o, c.ctx, &c.store)) goto done;
    c.tmpl = o.chat_template ? o.chat_template : recur_model_chat_template(c.model, NULL);
    if (!c.tmpl) c.tmpl = RECUR_CHAT_TEMPLATE_DEFAULT;
    if (!(c.tmpl_name = recur_chat_template_name(c.tmpl))) {
        fprintf(stderr, "recur chat: the model's chat template: %s (use --chat-template NAME)\n",
                recur_last_error());
        goto done;
    }
    if (!(c.eot = find_eot(c.tmpl))) goto done;
    if (!(c.smpl = c.base = recur_sampler_chain_default(c.model, o.sampling))) {
        fprintf(stderr, "recur chat: %s\n", recur_last_error());
        goto done;
    }
    if (grammar) { /* in front of the chain, for the replies only */
        /* on failure c.smpl is the chain as it was, or NULL when it was freed */
        if ((st = gen_add_grammar(c.model, grammar, &c.grammar, &c.smpl)) != TOOL_OK) {
            ret = st;
            goto done;
        }
    }
    if (o.system_prompt && !add_msg(&c, "system", o.system_prompt, strlen(o.system_prompt))) {
        fprintf(stderr, "recur chat: out of memory\n");
        goto done;
    }
    fprintf(stderr, "recur chat: template %s%s\n", c.tmpl_name,
            o.chat_template                            ? " (--chat-template)"
            : recur_model_chat_template(c.model, NULL) ? " (the model's)"
                                                       : " (the default: the model has none)");

    /* no SA_RESTART: Ctrl-C at the prompt interrupts the read, which then quits */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);

    const bool tty = isatty(STDIN_FILENO);
    size_t cap = 0;
    ret = TOOL_OK;
    if (tty) setvbuf(stdin, NULL, _IONBF, 0); /* see wait_line */
    for (;;) {
        if (interrupted >= 2) break; /* Ctrl-C twice during a reply */
        interrupted = 0;
        if (tty) {
            fputs("> ", stdout);
            fflush(stdout);
            if (!wait_line()) {
                fputc('\n', stdout);
                break;
            }
        }
        errno = 0;
        ssize_t n = getline(&line, &cap, stdin);
        if (n < 0) {
            if (tty) fputc('\n', stdout);
            if (errno != 0 && errno != EINTR) {
                fprintf(stderr, "recur chat: reading stdin: %s\n", strerror(errno));
                ret = TOOL_FAIL;
            }
            break;
        }
        if (interrupted) break; /* Ctrl-C while typing */
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = '\0';
        if (n == 0) continue;
        if (line[0] == '/') {
            if (!command(&c, line)) break;
            continue;
        }
        if (!turn(&c, line, (size_t)n)) {
            ret = TOOL_FAIL;
            break;
        }
    }
done:
    gen_store_detach(c.ctx, c.store);
    free(line);
    free(grammar);
    free(c.eot);
    msgs_free(c.msgs, c.n_msgs);
    free(c.toks);
    free(c.text.s);
    recur_sampler_free(c.smpl);
    recur_free(c.ctx);
    recur_model_free(c.model);
    return ret;
}
