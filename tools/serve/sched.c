/*
 * recur serve's decode loop (see serve.h): continuous batching over sequence slots.
 *
 * A step: admit queued tasks while slots are free; build one batch of the last sampled token
 * of every running choice plus prompt chunks of tasks still being read in (up to n_batch
 * tokens); decode; sample every choice that has a row; append text, finish choices on EOS, a
 * stop string, a chat template's end of turn, max_tokens or the -c budget; retire finished
 * and cancelled tasks, freeing their sequences.
 *
 * What the answers report is recorded here, where the logits are: each sampled token's
 * log-softmax under the raw logits and its top alternatives (logprobs, n_probs), the
 * sampler's post-sampling probabilities, and with echo + logprobs the prompt's (every prompt
 * position then asks for logits, and the prefix cache is not restored from).
 *
 * Prompt reuse: a task restores the longest stored prefix of its prompt from the prefix cache
 * into its first sequence, so only the rest is decoded. The state after all but the last
 * prompt token is stored (an exact repeat then decodes one token), checkpoints every 64
 * positions come from the memory's snapshots, and the state after prompt + completion is
 * stored when the task ends (a next turn of a chat extends it). n > 1 choices share the
 * prompt's state through seq_cp.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve.h"

double serve_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void task_free(struct task *t) {
    for (int i = 0; i < SERVE_MAX_N; i++) {
        struct choice *c = &t->choice[i];
        recur_sampler_free(c->smpl);
        free(c->out);
        free(c->text);
        free(c->tok_end);
        free(c->released);
        free(c->lp);
        free(c->post);
        free(c->post_n);
    }
    for (int i = 0; i < t->n_stop; i++) free(t->stop[i]);
    free(t->prompt);
    free(t->eot);
    free(t->grammar);
    free(t->grammar_trigger);
    free(t->bias);
    free(t->prompt_text);
    free(t->prompt_lp);
    free(t->embd);
    free(t->progress);
    free(t);
}

/* ---- log-probabilities ------------------------------------------------------------------ */

/* out[0] = tok's log-softmax under logits[0 .. V) (raw: no temperature, bias or penalty), then
 * out[1 .. n_top] the n_top most likely tokens (larger first, equal ones lower id first).
 * Computed in double. */
static void log_probs(const float *logits, int32_t V, recur_token tok, int32_t n_top,
                      struct tok_prob *out) {
    double max = -INFINITY, sum = 0.0;
    for (int32_t i = 0; i < V; i++)
        if (logits[i] > max) max = logits[i];
    for (int32_t i = 0; i < V; i++) sum += exp((double)logits[i] - max);
    const double lse = max + log(sum);
    out[0].id = tok;
    out[0].v = (float)((double)logits[tok] - lse);
    struct tok_prob *top = out + 1;
    int32_t got = 0;
    for (int32_t i = 0; i < V && n_top > 0; i++) {
        /* insertion into the sorted top list; most tokens fail the first compare */
        if (got == n_top && !(logits[i] > logits[top[got - 1].id])) continue;
        int32_t at = got < n_top ? got : n_top - 1;
        while (at > 0 && logits[i] > logits[top[at - 1].id]) {
            if (at < n_top) top[at] = top[at - 1];
            at--;
        }
        top[at].id = i;
        if (got < n_top) got++;
    }
    for (int32_t k = 0; k < got; k++) top[k].v = (float)((double)logits[top[k].id] - lse);
}

void serve_task_release(struct server *s, struct task *t) {
    (void)s;
    if (--t->refs == 0) task_free(t);
}

bool serve_submit(struct server *s, struct task *t) {
    return serve_submit_all(s, &t, 1);
}

/* Queues t (s->mu held; the room was checked). */
static void enqueue(struct server *s, struct task *t) {
    t->refs++; /* the scheduler's, dropped when it retires the task */
    t->state = TASK_QUEUED;
    t->t_queued = serve_now();
    t->id = ++s->next_id;
    if (s->queue_tail)
        s->queue_tail->next = t;
    else
        s->queue_head = t;
    s->queue_tail = t;
    s->n_queued++;
    s->m.requests++;
}

bool serve_submit_all(struct server *s, struct task **tasks, int n) {
    pthread_mutex_lock(&s->mu);
    /* room: free slots take tasks at the next step, beyond them queue_max may wait */
    const int32_t free_slots = s->lim.n_parallel - s->slots_in_use;
    int32_t need = 0;
    for (int i = 0; i < n; i++) need += tasks[i]->n;
    if (s->stopping || s->n_queued + need > s->lim.queue_max + free_slots) {
        snprintf(tasks[0]->error, sizeof tasks[0]->error, "%s",
                 s->stopping ? "the server is shutting down; retry later (elsewhere)"
                             : "every slot is busy and the queue is full; retry later");
        tasks[0]->err_status = 503;
        if (s->stopping)
            s->m.rejected_stopping++;
        else
            s->m.rejected_busy++;
        pthread_mutex_unlock(&s->mu);
        return false;
    }
    for (int i = 0; i < n; i++) enqueue(s, tasks[i]);
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
    return true;
}

/* Ends a task that never got a slot (under s->mu): cancelled while waiting, or the server is
 * stopping. */
static void drop_queued(struct server *s, struct task *t, unsigned status, const char *why) {
    if (!t->error[0]) {
        snprintf(t->error, sizeof t->error, "%s", why);
        t->err_status = status;
    }
    t->state = TASK_FAILED;
    t->t_done = serve_now();
    s->m.requests_failed++;
    if (status == 503) s->m.rejected_stopping++;
    serve_wake(s, t->park);
    pthread_cond_broadcast(&s->progress);
    serve_task_release(s, t);
}

/* Takes cancelled tasks out of the queue, and every task when the server is stopping: queued
 * requests are answered 503 then, so that their clients go elsewhere (under s->mu). */
static void sweep_queue(struct server *s) {
    struct task **at = &s->queue_head, *last = NULL;
    while (*at) {
        struct task *t = *at;
        if (t->cancelled || s->stopping) {
            *at = t->next;
            s->n_queued--;
            t->next = NULL;
            if (t->cancelled)
                drop_queued(s, t, 500, "cancelled");
            else
                drop_queued(s, t, 503, "the server is shutting down; retry later (elsewhere)");
        } else {
            last = t;
            at = &t->next;
        }
    }
    s->queue_tail = last;
}

/* Gives the head of the queue free slots when there are enough; under s->mu. */
static bool admit_one(struct server *s) {
    struct task *t = s->queue_head;
    if (!t || s->lim.n_parallel - s->slots_in_use < t->n) return false;
    s->queue_head = t->next;
    if (!s->queue_head) s->queue_tail = NULL;
    s->n_queued--;
    t->next = NULL;
    int got = 0;
    for (int32_t q = 0; q < s->lim.n_parallel && got < t->n; q++)
        if (!s->slot_used[q]) {
            s->slot_used[q] = true;
            t->choice[got++].seq = q;
            if (s->slots) { /* its former conversation is overwritten */
                s->slots[q].n_tokens = 0;
                s->slots[q].id_task = (int64_t)t->id;
                s->slots[q].tenant = t->tenant;
            }
        }
    s->slots_in_use += t->n;
    s->active[t->choice[0].seq] = t;
    t->state = TASK_RUNNING;
    return true;
}

/* A task that ended well, its text into the prefix cache: its whole prompt when it ended with
 * its first token (store_prompts did not see it), and its prompt and completion as far as the
 * state holds them (the last token is not decoded). By the scheduler, without s->mu: a
 * hybrid's entries take milliseconds a megabyte to copy, and the connections wait on s->mu. */
static void store_text(struct server *s, struct task *t) {
    recur_memory_t mem = recur_get_memory(s->ctx);
    if (t->store_prompt)
        recur_prefix_cache_store_tenant(s->ctx, t->tenant, t->choice[0].seq, t->prompt,
                                        t->n_prompt);
    t->store_prompt = false;
    if (!t->cache_prompt || t->choice[0].n_out == 0) return;
    const int32_t held = recur_memory_seq_pos_max(mem, t->choice[0].seq) + 1;
    recur_token *all = malloc(sizeof(recur_token) * (size_t)(t->n_prompt + t->choice[0].n_out));
    if (all && held > t->n_prompt && held <= t->n_prompt + t->choice[0].n_out) {
        memcpy(all, t->prompt, sizeof(recur_token) * (size_t)t->n_prompt);
        memcpy(all + t->n_prompt, t->choice[0].out,
               sizeof(recur_token) * (size_t)(held - t->n_prompt));
        recur_prefix_cache_store_tenant(s->ctx, t->tenant, t->choice[0].seq, all, held);
    }
    free(all);
}

/* Frees t's sequences and slots (a task that ended well has stored its text first:
 * store_text). Under s->mu. */
static void retire(struct server *s, struct task *t, enum task_state state) {
    recur_memory_t mem = recur_get_memory(s->ctx);
    t->store_prompt = t->ending = false;
    for (int i = 0; i < t->n; i++) {
        if (state == TASK_DONE && s->slot_keep && !t->embed)
            s->slot_keep(s, t, i); /* the slot keeps its conversation (slots.c) */
        else
            recur_memory_seq_rm(mem, t->choice[i].seq, -1, -1);
        s->slot_used[t->choice[i].seq] = false;
    }
    if (state == TASK_DONE) { /* llama.cpp's per-task timings, for /metrics */
        s->m.prompt_s += t->t_first - t->t_queued;
        s->m.predicted_s += serve_now() - t->t_first;
        for (int i = 0; i < t->n; i++)
            if (t->n_prompt + t->choice[i].n_out > s->m.n_tokens_max)
                s->m.n_tokens_max = t->n_prompt + t->choice[i].n_out;
    }
    s->active[t->choice[0].seq] = NULL;
    s->slots_in_use -= t->n;
    t->state = state;
    t->t_done = serve_now();
    if (state != TASK_DONE) s->m.requests_failed++;
    serve_wake(s, t->park);
    pthread_cond_broadcast(&s->progress);
    serve_task_release(s, t);
}

static void fail_task(struct server *s, struct task *t, const char *why) {
    if (!t->error[0] && why != t->error) /* the first reason stays */
        snprintf(t->error, sizeof t->error, "%s", why);
    retire(s, t, TASK_FAILED);
}

/* Every prompt token is one of the vocabulary's, before the task joins a shared batch: a bad
 * one fails its own task here rather than every task decoded with it. False with t->error. */
static bool tokens_valid(const struct server *s, struct task *t) {
    const int32_t V = recur_model_n_vocab(s->model);
    for (int32_t i = 0; i < t->n_prompt; i++)
        if (t->prompt[i] < 0 || t->prompt[i] >= V) {
            snprintf(t->error, sizeof t->error,
                     "prompt token %d (at position %d) is not in the vocabulary (0..%d)",
                     t->prompt[i], i, V - 1);
            t->err_status = 400;
            return false;
        }
    return true;
}

/* Bytes at the end of text that must not be sent yet: an incomplete UTF-8 character, or the
 * start of a stop string (or of the end-of-turn text). */
static size_t held_back(const struct task *t, const struct choice *c) {
    size_t held = 0;
    for (int i = 0; i <= t->n_stop; i++) {
        const char *str = i < t->n_stop ? t->stop[i] : t->eot;
        if (!str) continue;
        const size_t ls = strlen(str);
        for (size_t k = ls - 1; k > held && k > 0; k--)
            if (k <= c->len && memcmp(c->text + c->len - k, str, k) == 0) {
                held = k;
                break;
            }
    }
    /* a UTF-8 lead byte whose continuation bytes have not all arrived */
    for (size_t back = 1; back <= 3 && back <= c->len; back++) {
        const unsigned char b = (unsigned char)c->text[c->len - back];
        if ((b & 0xc0) == 0x80) continue; /* a continuation byte: look further back */
        const size_t need = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1;
        if (need > back && back > held) held = back;
        break;
    }
    return held;
}

/* Appends token tok to choice c of t; finishes it on EOS, a stop string or max_tokens. Under
 * s->mu. */
static void append_token(struct server *s, struct task *t, struct choice *c, recur_token tok) {
    if ((tok == recur_token_eos(s->model) && !t->ignore_eos) ||
        (t->eot && t->eot_token > 0 && tok == t->eot_token)) {
        c->finished = true;
        c->finish_reason = "stop";
        c->stop_kind = STOP_EOS;
        c->held = 0;
        return;
    }
    c->out[c->n_out++] = tok;
    s->m.generated_tokens++;
    char piece[256];
    int32_t n = recur_token_to_piece(s->model, tok, piece, sizeof piece, 0, false);
    if (n < 0) n = 0;
    if (c->len + (size_t)n + 1 > c->cap) {
        size_t cap = (c->cap ? 2 * c->cap : 256) + (size_t)n;
        char *grown = realloc(c->text, cap);
        if (!grown) {
            c->finished = true;
            c->finish_reason = "length";
            return;
        }
        c->text = grown;
        c->cap = cap;
    }
    memcpy(c->text + c->len, piece, (size_t)n);
    c->len += (size_t)n;
    c->text[c->len] = '\0';
    c->tok_end[c->n_out - 1] = c->len;
    /* the stop strings, then the template's end of turn (index n_stop): the earliest hit in
       the text wins, so that two strings ending in one token cut where the text first stops */
    const char *first = NULL;
    int which = -1;
    for (int i = 0; i <= t->n_stop; i++) {
        const char *str = i < t->n_stop ? t->stop[i] : t->eot;
        if (!str) continue;
        /* only the new piece (and what a stop string could straddle) needs searching */
        const size_t ls = strlen(str);
        const size_t from = c->len > (size_t)n + ls ? c->len - (size_t)n - ls : 0;
        const char *hit = strstr(c->text + from, str);
        if (hit && (!first || hit < first)) {
            first = hit;
            which = i;
        }
    }
    if (first) {
        c->len = (size_t)(first - c->text);
        c->text[c->len] = '\0';
        c->finished = true;
        c->finish_reason = "stop";
        /* the end of turn is the model saying it is done, as EOS is */
        c->stop_kind = which < t->n_stop ? STOP_WORD : STOP_EOS;
        c->stop_word = which;
        c->held = 0;
        return;
    }
    if (c->n_out >= t->max_tokens) {
        c->finished = true;
        c->finish_reason = "length";
        c->stop_kind = STOP_LIMIT;
        c->held = 0;
        return;
    }
    if (s->lim.n_ctx > 0 && t->n_prompt + c->n_out >= s->lim.n_ctx) {
        c->finished = true;
        c->finish_reason = "length";
        c->stop_kind = STOP_LIMIT;
        c->truncated = true;
        c->held = 0;
        return;
    }
    c->held = held_back(t, c);
}

/* Puts a grammar sampler of t's grammar in front of c's chain; false with t->error set. */
static bool add_grammar(struct server *s, struct task *t, struct choice *c) {
    const char *const trig[] = {t->grammar_trigger};
    const char *root = t->grammar_root ? t->grammar_root : "root";
    struct recur_sampler *g =
        t->grammar_trigger ? recur_sampler_init_grammar_lazy(s->model, t->grammar, root, trig, 1)
                           : recur_sampler_init_grammar(s->model, t->grammar, root);
    struct recur_sampler *outer = g ? recur_sampler_chain_init() : NULL;
    if (!outer || !recur_sampler_chain_add(outer, g)) {
        snprintf(t->error, sizeof t->error, "grammar: %s", recur_last_error());
        if (!outer) recur_sampler_free(g);
        recur_sampler_free(outer);
        return false;
    }
    if (!recur_sampler_chain_add(outer, c->smpl)) { /* the chain owns c->smpl even failing */
        c->smpl = NULL;
        recur_sampler_free(outer);
        snprintf(t->error, sizeof t->error, "out of memory for a grammar");
        return false;
    }
    c->smpl = outer;
    return true;
}

/* Sets up a newly admitted task: samplers, the prefix cache. Outside s->mu (the scheduler
 * owns the context). False with t->error set. */
static bool start_task(struct server *s, struct task *t) {
    t->t_started = serve_now();
    if (!tokens_valid(s, t)) return false;
    if (t->embed) { /* no sampling: the prompt, whole in one batch, on an empty sequence */
        if (t->n_prompt > (int32_t)recur_n_batch(s->ctx)) { /* embed.c refuses it first */
            snprintf(t->error, sizeof t->error, "input has %d tokens, the batch size is %u",
                     t->n_prompt, recur_n_batch(s->ctx));
            t->err_status = 400;
            return false;
        }
        t->choice[0].row = -1;
        recur_memory_seq_rm(recur_get_memory(s->ctx), t->choice[0].seq, -1, -1);
        t->n_cached = t->prefilled = 0;
        return true;
    }
    const size_t room = (size_t)t->max_tokens + 1;
    for (int i = 0; i < t->n; i++) {
        struct recur_sampler_params sp = t->sampling;
        struct choice *c = &t->choice[i];
        sp.seed += (uint64_t)i;
        sp.n_logit_bias = t->n_bias;
        sp.logit_bias = t->bias;
        c->smpl = recur_sampler_chain_default(s->model, sp);
        if (!c->smpl) {
            snprintf(t->error, sizeof t->error, "sampler: %s", recur_last_error());
            return false;
        }
        c->out = malloc(sizeof(recur_token) * room);
        c->tok_end = malloc(sizeof(size_t) * room);
        c->released = malloc(sizeof(size_t) * room);
        bool ok = c->out && c->tok_end && c->released;
        if (ok && t->logprobs)
            ok = (c->lp = malloc(sizeof(struct tok_prob) * room * (size_t)(1 + t->n_top)));
        if (ok && t->n_post > 0)
            ok = (c->post = malloc(sizeof(struct tok_prob) * room * (size_t)(1 + t->n_post))) &&
                 (c->post_n = malloc(sizeof(int32_t) * room));
        if (!ok) {
            snprintf(t->error, sizeof t->error, "out of memory for a choice");
            return false;
        }
        for (int32_t j = 0; j < t->n_prompt; j++)
            recur_sampler_accept(t->choice[i].smpl, t->prompt[j]);
        /* the grammar goes in front once the prompt went to the penalties: it follows the
           output only (the request's grammar was checked when it was parsed) */
        if (t->grammar && !add_grammar(s, t, c)) return false;
        t->choice[i].row = -1;
    }
    /* a slot keeps its last conversation between tasks: every sequence starts empty */
    for (int i = 0; i < t->n; i++)
        recur_memory_seq_rm(recur_get_memory(s->ctx), t->choice[i].seq, -1, -1);
    t->n_cached = 0;
    if (t->prompt_logprobs) {
        t->prompt_lp =
            calloc((size_t)t->n_prompt * (size_t)(1 + t->n_top), sizeof(struct tok_prob));
        if (!t->prompt_lp) {
            snprintf(t->error, sizeof t->error, "out of memory for the prompt's logprobs");
            return false;
        }
    }
    /* the prompt's logprobs need every position's logits: nothing may be skipped */
    if (t->cache_prompt && !t->prompt_logprobs) {
        const int32_t got = recur_prefix_cache_restore_tenant(s->ctx, t->tenant, t->choice[0].seq,
                                                              t->prompt, t->n_prompt);
        if (got > 0) t->n_cached = got;
    }
    t->prefilled = t->n_cached;
    return true;
}

/* The log-probabilities (and post-sampling probabilities) of the token just sampled for c,
 * stored at index n_out (append_token then counts it; an EOS is recorded but not counted). */
static void record_probs(struct server *s, struct task *t, struct choice *c, recur_token tok) {
    const int32_t k = c->n_out;
    if (k > t->max_tokens) return;
    if (c->lp) {
        const float *logits = recur_get_logits_ith(s->ctx, c->row);
        if (logits)
            log_probs(logits, recur_model_n_vocab(s->model), tok, t->n_top,
                      c->lp + (size_t)k * (size_t)(1 + t->n_top));
    }
    if (c->post) {
        struct tok_prob *at = c->post + (size_t)k * (size_t)(1 + t->n_post);
        recur_token ids[SERVE_MAX_PROBS];
        float probs[SERVE_MAX_PROBS];
        int32_t got = recur_sampler_get_probs(c->smpl, ids, probs, t->n_post);
        if (got < 0) got = 0;
        at[0] = (struct tok_prob){tok, recur_sampler_get_prob(c->smpl, tok)};
        for (int32_t i = 0; i < got; i++) at[1 + i] = (struct tok_prob){ids[i], probs[i]};
        c->post_n[k] = got;
    }
}

/* The prompt's log-probabilities from this step's rows: the row of position p gives the
 * distribution of the token at p + 1. */
static void record_prompt_logprobs(struct server *s, struct task *t) {
    const int32_t V = recur_model_n_vocab(s->model);
    for (int32_t i = 0; i < t->chunk_n; i++) {
        const int32_t p = t->chunk_pos + i;
        if (p + 1 >= t->n_prompt) break;
        const float *logits = recur_get_logits_ith(s->ctx, t->chunk_row + i);
        if (logits)
            log_probs(logits, V, t->prompt[p + 1], t->n_top,
                      t->prompt_lp + (size_t)(p + 1) * (size_t)(1 + t->n_top));
    }
}

/* After the prompt's last token was decoded: the other choices share its state. */
static void prompt_done(struct server *s, struct task *t) {
    recur_memory_t mem = recur_get_memory(s->ctx);
    for (int i = 1; i < t->n; i++)
        recur_memory_seq_cp(mem, t->choice[0].seq, t->choice[i].seq, -1, -1);
}

bool serve_sched_init(struct server *s) {
    struct serve_sched *w = calloc(1, sizeof *w);
    if (!w) return false;
    w->batch = recur_batch_init((int32_t)recur_n_batch(s->ctx), 0, 1);
    w->tasks = calloc((size_t)s->lim.n_parallel, sizeof *w->tasks);
    w->base = calloc((size_t)s->lim.n_parallel, sizeof *w->base);
    w->len = calloc((size_t)s->lim.n_parallel, sizeof *w->len);
    w->prompt_row = calloc((size_t)s->lim.n_parallel, sizeof *w->prompt_row);
    w->store = calloc((size_t)s->lim.n_parallel, sizeof *w->store);
    w->ending = calloc((size_t)s->lim.n_parallel, sizeof *w->ending);
    w->tok = calloc((size_t)s->lim.n_parallel, sizeof *w->tok);
    s->sched = w;
    if (!w->batch.pos || !w->tasks || !w->base || !w->len || !w->prompt_row || !w->store ||
        !w->ending || !w->tok) {
        serve_sched_free(s);
        return false;
    }
    if (!s->decode) s->decode = recur_decode;
    return true;
}

void serve_sched_free(struct server *s) {
    struct serve_sched *w = s->sched;
    if (!w) return;
    recur_batch_free(w->batch);
    free(w->tasks);
    free(w->base);
    free(w->len);
    free(w->prompt_row);
    free(w->store);
    free(w->ending);
    free(w->tok);
    free(w);
    s->sched = NULL;
}

/* An embedding task's rows of the last decode (this step's chunk, its whole prompt) into
 * t->embd; t->error set when they are not there. */
static void embed_rows(struct server *s, struct task *t) {
    const size_t E = (size_t)recur_model_n_embd(s->model);
    const bool none = recur_pooling_type(s->ctx) == RECUR_POOLING_TYPE_NONE;
    for (int32_t i = 0; i < (none ? t->chunk_n : 1); i++) {
        const float *e = none ? recur_get_embeddings_ith(s->ctx, t->chunk_row + i)
                              : recur_get_embeddings_seq(s->ctx, t->choice[0].seq);
        if (!e) {
            snprintf(t->error, sizeof t->error, "embeddings: %s", recur_last_error());
            return;
        }
        memcpy(t->embd + (size_t)i * E, e, sizeof(float) * E);
    }
}

/* After task k's rows were decoded (the last decode's rows, as recorded in c->row,
 * prompt_row[k] and chunk_row): prompt logprobs, the prompt's prefix cache entries, the
 * choices' shared prompt state, and each choice's next token sampled into tok[k][i] (-1: none;
 * -2: the sampler failed). The scheduler owns all of it, so s->mu is not held. */
static void after_decode(struct server *s, struct serve_sched *w, int32_t k) {
    struct task *t = w->tasks[k];
    if (t->embed) {
        embed_rows(s, t);
        return;
    }
    if (t->prompt_logprobs) record_prompt_logprobs(s, t);
    /* the prompt's states in the prefix cache, off the way to the first token where they can
       be: the prompt minus its last token now (its state is gone after the next decode), alone
       (its snapshots wait); the whole prompt, with the snapshots, once the first token is out
       (store_prompts) */
    if (t->cache_prompt && t->n_prompt > 1 && t->prefilled == t->n_prompt - 1 &&
        w->prompt_row[k] < 0)
        recur_prefix_cache_store_flags(s->ctx, t->tenant, t->choice[0].seq, t->prompt,
                                       t->n_prompt - 1, RECUR_PREFIX_STORE_NO_SNAPSHOTS);
    if (w->prompt_row[k] >= 0) { /* the prompt is in: every choice samples its row */
        prompt_done(s, t);
        t->store_prompt = t->cache_prompt;
        for (int i = 0; i < t->n; i++) t->choice[i].row = w->prompt_row[k];
    }
    for (int i = 0; i < t->n; i++) {
        struct choice *c = &t->choice[i];
        w->tok[k][i] = -1;
        if (c->finished || c->row < 0 || t->max_tokens == 0) continue;
        const recur_token tok = recur_sampler_sample(c->smpl, s->ctx, c->row);
        w->tok[k][i] = tok < 0 ? -2 : tok;
        if (tok < 0 && !t->error[0]) /* the first failure names the task's error */
            snprintf(t->error, sizeof t->error, "sampling failed: %s", recur_last_error());
        /* probabilities are written at index n_out, past what any answer reads yet */
        if (tok >= 0) record_probs(s, t, c, tok);
    }
}

/* The sampled tokens of task k into its choices (s->mu held): text, the ends, retire. A
 * choice whose sampling failed (no token the grammar or the logit bias allows, a grammar past
 * its limits) fails the whole task with the reason, as a failed decode does: it is no end of
 * text. */
static void take_tokens(struct server *s, struct serve_sched *w, int32_t k) {
    struct task *t = w->tasks[k];
    if (t->embed) { /* its embedding is in: it ends */
        if (t->error[0]) {
            fail_task(s, t, t->error);
            return;
        }
        s->m.prompt_tokens += (uint64_t)t->n_prompt;
        t->processed = t->prefilled;
        t->t_first = serve_now();
        retire(s, t, TASK_DONE);
        return;
    }
    for (int i = 0; i < t->n; i++)
        if (!t->choice[i].finished && w->tok[k][i] == -2) {
            fail_task(s, t, t->error);
            return;
        }
    if (t->processed < t->prefilled) {
        t->processed = t->prefilled;
        t->processed_ms = (serve_now() - t->t_started) * 1e3;
        struct serve_progress *g =
            realloc(t->progress, sizeof *g * (size_t)(t->n_progress + 1)); /* a step each */
        if (g) {
            g[t->n_progress++] = (struct serve_progress){t->processed, t->processed_ms};
            t->progress = g;
        }
    }
    if (w->prompt_row[k] >= 0) {
        s->m.prompt_tokens += (uint64_t)t->n_prompt;
        s->m.prompt_tokens_cached += (uint64_t)t->n_cached;
        t->t_first = serve_now();
    }
    bool all_done = true;
    for (int i = 0; i < t->n; i++) {
        struct choice *c = &t->choice[i];
        if (!c->finished && c->row >= 0 && t->max_tokens == 0) { /* the prompt only */
            c->finished = true;
            c->finish_reason = "length";
        } else if (!c->finished && w->tok[k][i] >= 0) {
            const int32_t had = c->n_out;
            append_token(s, t, c, w->tok[k][i]);
            if (c->n_out > had) c->released[had] = c->finished ? c->len : c->len - c->held;
        }
        all_done &= c->finished;
    }
    if (all_done)
        t->ending = true; /* end_task stores its text, then retires it */
    else if (t->park && t->park->on_progress)
        serve_wake(s, t->park); /* a stream: there is new text */
}

/* The whole prompts whose first tokens this step sampled, with their snapshots, into the prefix
 * cache: after the tokens are out (the first token does not wait for the copies) and outside
 * s->mu (the copies take milliseconds a megabyte); the tasks run on, their sequences as the
 * prompt left them until the next decode (only this thread retires a task). One that ended in
 * this step is end_task's. n_store tasks, w->store their indices. */
static void store_prompts(struct server *s, struct serve_sched *w, int32_t n_store) {
    for (int32_t i = 0; i < n_store; i++) {
        struct task *t = w->tasks[w->store[i]];
        t->store_prompt = false;
        recur_prefix_cache_store_tenant(s->ctx, t->tenant, t->choice[0].seq, t->prompt,
                                        t->n_prompt);
    }
    pthread_mutex_lock(&s->mu);
    recur_prefix_cache_get_stats(s->ctx, &s->m.cache);
    pthread_mutex_unlock(&s->mu);
}

/* A task whose choices all ended (t->ending, set under s->mu by take_tokens): its text stored
 * outside s->mu, then retired under it. Only this thread retires a task, so t stays. */
static void end_task(struct server *s, struct task *t) {
    store_text(s, t);
    pthread_mutex_lock(&s->mu);
    retire(s, t, TASK_DONE);
    pthread_mutex_unlock(&s->mu);
}

/* Task k's rows of the batch, decoded alone (their rows renumbered from 0); false with the
 * task's error set when this decode fails too. */
static bool decode_alone(struct server *s, struct serve_sched *w, int32_t k) {
    struct task *t = w->tasks[k];
    const struct recur_batch *b = &w->batch;
    const int32_t at = w->base[k];
    struct recur_batch one = *b;
    one.n_tokens = w->len[k];
    one.token = b->token + at;
    one.pos = b->pos + at;
    one.n_seq_id = b->n_seq_id + at;
    one.seq_id = b->seq_id + at;
    one.logits = b->logits + at;
    if (s->decode(s->ctx, one) != 0) {
        snprintf(t->error, sizeof t->error, "decode: %s", recur_last_error());
        return false;
    }
    for (int i = 0; i < t->n; i++)
        if (t->choice[i].row >= 0) t->choice[i].row -= at;
    if (w->prompt_row[k] >= 0) w->prompt_row[k] -= at;
    t->chunk_row -= at;
    return true;
}

void *serve_sched_main(void *arg) {
    struct server *s = arg;
    struct serve_sched *w = s->sched;
    const int32_t n_batch = (int32_t)recur_n_batch(s->ctx);
    struct recur_batch b = w->batch;
    for (;;) {
        if (s->run_actions) s->run_actions(s); /* POST /slots/{id} (slots.c) */
        pthread_mutex_lock(&s->mu);
        sweep_queue(s);
        /* cancelled tasks go first: their sequences are free for this step */
        for (int32_t q = 0; q < s->lim.n_parallel; q++)
            if (s->active[q] && s->active[q]->cancelled) fail_task(s, s->active[q], "cancelled");
        int32_t n_new = 0;
        struct task *fresh[SERVE_MAX_N * 4];
        while (n_new < (int32_t)(sizeof fresh / sizeof fresh[0])) {
            struct task *head = s->queue_head;
            if (!head || !admit_one(s)) break;
            fresh[n_new++] = head;
        }
        if (s->slots_in_use == 0 && n_new == 0) {
            if (s->stopping && !s->queue_head && !s->actions) {
                pthread_mutex_unlock(&s->mu);
                break;
            }
            if (!s->actions) pthread_cond_wait(&s->work, &s->mu);
            pthread_mutex_unlock(&s->mu);
            continue;
        }
        pthread_mutex_unlock(&s->mu);

        for (int32_t i = 0; i < n_new; i++)
            if (!start_task(s, fresh[i])) {
                pthread_mutex_lock(&s->mu);
                fail_task(s, fresh[i], fresh[i]->error);
                pthread_mutex_unlock(&s->mu);
            }
        /* this step's tasks, after the starts: a task that failed to start is retired, and may
           be freed already (its client gone), so it must not be among them */
        pthread_mutex_lock(&s->mu);
        int32_t n_tasks = 0;
        for (int32_t q = 0; q < s->lim.n_parallel; q++)
            if (s->active[q]) w->tasks[n_tasks++] = s->active[q];
        pthread_mutex_unlock(&s->mu);
        /* the batch: one token per running choice, then prompt chunks in the room left; each
           task's rows are one run, [base, base + len) */
        const double t0 = serve_now();
        b.n_tokens = 0;
        for (int32_t k = 0; k < n_tasks; k++) {
            struct task *t = w->tasks[k];
            w->prompt_row[k] = -1;
            w->base[k] = b.n_tokens;
            w->len[k] = 0;
            t->chunk_n = 0;
            if (t->state != TASK_RUNNING || t->prefilled < t->n_prompt) continue;
            for (int i = 0; i < t->n; i++) {
                struct choice *c = &t->choice[i];
                c->row = -1;
                if (c->finished || c->n_out == 0) continue;
                /* at most n_parallel of these, within n_batch (serve.c): the add cannot fail */
                c->row = b.n_tokens;
                recur_batch_add(&b, c->out[c->n_out - 1], t->n_prompt + c->n_out - 1, &c->seq, 1,
                                true);
            }
            w->len[k] = b.n_tokens - w->base[k];
        }
        for (int32_t k = 0; k < n_tasks && b.n_tokens < n_batch; k++) {
            struct task *t = w->tasks[k];
            if (t->state != TASK_RUNNING || t->prefilled >= t->n_prompt) continue;
            /* an input to embed is pooled over one decode: whole in this batch, or in a later
               one (it fits an empty batch: start_task checked) */
            if (t->embed && t->n_prompt > n_batch - b.n_tokens) continue;
            /* stop before the last prompt token once, so that the state of all but it can be
               stored: an exact repeat of the prompt then restores it */
            int32_t end = t->n_prompt;
            if (t->cache_prompt && t->prefilled < t->n_prompt - 1) end = t->n_prompt - 1;
            if (end - t->prefilled > n_batch - b.n_tokens)
                end = t->prefilled + n_batch - b.n_tokens;
            w->base[k] = b.n_tokens;
            t->chunk_pos = t->prefilled;
            t->chunk_row = b.n_tokens;
            t->chunk_n = end - t->prefilled;
            for (int32_t p = t->prefilled; p < end; p++) {
                if (p == t->n_prompt - 1) w->prompt_row[k] = b.n_tokens;
                /* within n_batch (end is), so the add cannot fail */
                recur_batch_add(&b, t->prompt[p], p, &t->choice[0].seq, 1,
                                p == t->n_prompt - 1 || t->prompt_logprobs || t->embed);
            }
            w->len[k] = b.n_tokens - w->base[k];
            t->prefilled = end;
        }
        if (b.n_tokens == 0) continue;
        w->batch = b;
        const int32_t rc = s->decode(s->ctx, b);
        /* A failed shared decode that left the memory as it was (an invalid batch, no room) is
           retried task by task, so that only the task at fault fails; after another failure
           the states of the batch's sequences are not known, and all of them fail. */
        const bool retry = rc == 1 || rc == -1;
        char why[256];
        snprintf(why, sizeof why, "decode: %s", rc ? recur_last_error() : "");
        int32_t n_rows = 0;
        for (int32_t k = 0; k < n_tasks; k++) n_rows += w->len[k] > 0;
        if (rc != 0 && retry && n_rows > 1) {
            pthread_mutex_lock(&s->mu);
            s->m.decode_retries++;
            pthread_mutex_unlock(&s->mu);
        }
        for (int32_t k = 0; k < n_tasks; k++) {
            struct task *t = w->tasks[k];
            if (t->state != TASK_RUNNING || w->len[k] == 0) continue;
            if (rc != 0) {
                if (!retry || n_rows == 1 || !decode_alone(s, w, k)) {
                    if (!t->error[0]) snprintf(t->error, sizeof t->error, "%s", why);
                    pthread_mutex_lock(&s->mu);
                    fail_task(s, t, t->error);
                    pthread_mutex_unlock(&s->mu);
                    w->tasks[k] = NULL; /* retired: its connection may free it now */
                    continue;
                }
            }
            after_decode(s, w, k);
            if (rc != 0) { /* alone: its tokens now, before the next decode_alone */
                pthread_mutex_lock(&s->mu);
                take_tokens(s, w, k);
                const bool ending = t->state == TASK_RUNNING && t->ending;
                if (t->state != TASK_RUNNING) w->tasks[k] = NULL; /* failed: retired */
                pthread_mutex_unlock(&s->mu);
                if (ending) {
                    end_task(s, t);
                    w->tasks[k] = NULL;
                }
            }
        }
        pthread_mutex_lock(&s->mu);
        s->m.steps++;
        s->m.busy_slots += (uint64_t)s->slots_in_use;
        for (int32_t k = 0; k < n_tasks && rc == 0; k++)
            if (w->tasks[k] && w->tasks[k]->state == TASK_RUNNING && w->len[k] > 0)
                take_tokens(s, w, k);
        s->m.busy_s += serve_now() - t0;
        recur_prefix_cache_get_stats(s->ctx, &s->m.cache);
        /* the prompts to store and the tasks to end once the lock is let go: of tasks still
           running (one that retired here may be freed by its connection from then on) */
        int32_t n_store = 0, n_end = 0;
        for (int32_t k = 0; k < n_tasks; k++) {
            const struct task *t = w->tasks[k]; /* NULL: retired in the loop above */
            if (!t || t->state != TASK_RUNNING) continue;
            if (t->ending)
                w->ending[n_end++] = k;
            else if (t->store_prompt)
                w->store[n_store++] = k;
        }
        pthread_cond_broadcast(&s->progress);
        pthread_mutex_unlock(&s->mu);
        if (n_store) store_prompts(s, w, n_store);
        for (int32_t i = 0; i < n_end; i++) end_task(s, w->tasks[w->ending[i]]);
    }
    return NULL;
}
