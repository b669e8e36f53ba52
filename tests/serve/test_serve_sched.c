/*
 * recur serve's decode loop (tools/serve/sched.c) without HTTP: one bad request must fail
 * alone, never the unrelated requests decoded in the same batch.
 *
 *  - a prompt token outside the vocabulary (past the HTTP checks, as a bug could let one
 *    through) fails its task before it joins a shared batch; the others finish;
 *  - a shared decode that fails with the memory unchanged (here: a decode that refuses any
 *    batch holding one chosen token, as recur_decode refuses an invalid batch) is retried task
 *    by task: the task holding the token fails, the others give exactly the tokens they give
 *    when run alone;
 *  - a failure that may have changed the memory fails every task of its batch (their states
 *    are not known), with the error, and the server goes on serving the next ones.
 *
 * Usage: test_serve_sched MODEL
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_LAST_ERROR recur_last_error
#include "serve.h"
#include "test.h"

static recur_token poison = -1; /* the decode below refuses batches holding it */
static int32_t fail_code = -1;  /* what it returns then */
static int shared_failures = 0;

static int32_t picky_decode(struct recur_context *ctx, struct recur_batch b) {
    for (int32_t i = 0; i < b.n_tokens; i++)
        if (b.token[i] == poison) {
            if (b.n_tokens > 1) shared_failures++;
            return fail_code; /* before touching the memory */
        }
    return recur_decode(ctx, b);
}

struct world {
    struct recur_model *model;
    struct server s;
    pthread_t sched;
};

static void world_start(struct world *w, struct recur_model *model) {
    memset(w, 0, sizeof *w);
    w->model = model;
    struct server *s = &w->s;
    s->model = model;
    s->lim = (struct serve_limits){.n_parallel = 4, .queue_max = 8, .max_prompt = 512,
                                   .max_tokens = 64, .max_body = 1 << 16, .timeout_s = 60,
                                   .n_predict = -1, .n_ctx = 0};
    struct recur_context_params cp = recur_context_default_params();
    cp.n_seq_max = 4;
    cp.n_threads = cp.n_threads_batch = 2;
    s->ctx = recur_init_from_model(model, cp);
    REQUIRE(s->ctx);
    s->active = calloc(4, sizeof *s->active);
    s->slot_used = calloc(4, sizeof *s->slot_used);
    REQUIRE(s->active && s->slot_used);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->progress, NULL);
    s->decode = picky_decode;
    REQUIRE(serve_sched_init(s));
}

static void world_stop(struct world *w) {
    struct server *s = &w->s;
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    pthread_cond_broadcast(&s->work);
    pthread_mutex_unlock(&s->mu);
    pthread_join(w->sched, NULL);
    serve_sched_free(s);
    free(s->active);
    free(s->slot_used);
    recur_free(s->ctx);
}

/* A greedy task of max_tokens over text's tokens, with extra (>= 0) appended. */
static struct task *make_task(struct recur_model *m, const char *text, recur_token extra) {
    struct task *t = calloc(1, sizeof *t);
    REQUIRE(t);
    t->prompt = malloc(sizeof(recur_token) * 64);
    REQUIRE(t->prompt);
    t->n_prompt = recur_tokenize(m, text, (int32_t)strlen(text), t->prompt, 63, true, false);
    REQUIRE(t->n_prompt > 0);
    if (extra != -1) t->prompt[t->n_prompt++] = extra;
    t->max_tokens = 8;
    t->sampling = recur_sampler_default_params();
    t->sampling.temp = 0;
    t->n = 1;
    t->ignore_eos = true;
    t->refs = 1;
    return t;
}

/* Submits tasks[0..n) together (the scheduler is started after them, so that they share its
 * first batch) and waits for them all to end. */
static void run_together(struct world *w, struct task **tasks, int n) {
    for (int i = 0; i < n; i++) REQUIRE(serve_submit(&w->s, tasks[i]));
    REQUIRE(pthread_create(&w->sched, NULL, serve_sched_main, &w->s) == 0);
    pthread_mutex_lock(&w->s.mu);
    for (int i = 0; i < n; i++)
        while (tasks[i]->state == TASK_QUEUED || tasks[i]->state == TASK_RUNNING)
            pthread_cond_wait(&w->s.progress, &w->s.mu);
    pthread_mutex_unlock(&w->s.mu);
}

static void release_all(struct world *w, struct task **tasks, int n) {
    pthread_mutex_lock(&w->s.mu);
    for (int i = 0; i < n; i++) serve_task_release(&w->s, tasks[i]);
    pthread_mutex_unlock(&w->s.mu);
}

static const char *texts[3] = {"Once upon a time", "The fortune says", "A wise man"};

/* What each text gives alone (the reference: no poison anywhere). */
static void reference(struct recur_model *m, recur_token out[3][8]) {
    for (int k = 0; k < 3; k++) {
        struct world w;
        world_start(&w, m);
        struct task *t = make_task(m, texts[k], -1);
        run_together(&w, &t, 1);
        CHECK(t->state == TASK_DONE && t->choice[0].n_out == 8);
        memcpy(out[k], t->choice[0].out, sizeof out[k]);
        release_all(&w, &t, 1);
        world_stop(&w);
    }
}

static void test_bad_token(struct recur_model *m, recur_token ref[3][8]) {
    struct world w;
    world_start(&w, m);
    struct task *t[3] = {make_task(m, texts[0], -1),
                         make_task(m, texts[1], recur_model_n_vocab(m)), /* one past the end */
                         make_task(m, texts[2], -1)};
    shared_failures = 0;
    run_together(&w, t, 3);
    CHECK(t[1]->state == TASK_FAILED);
    CHECK_MSG(strstr(t[1]->error, "not in the vocabulary") != NULL, "%s", t[1]->error);
    CHECK(t[1]->err_status == 400);
    for (int k = 0; k < 3; k += 2) {
        CHECK(t[k]->state == TASK_DONE);
        CHECK(memcmp(t[k]->choice[0].out, ref[k], sizeof ref[k]) == 0);
    }
    CHECK(shared_failures == 0 && w.s.m.decode_retries == 0); /* it never reached a decode */
    release_all(&w, t, 3);
    world_stop(&w);
}

/* A task that fails to start after its client is gone (its last reference the scheduler's):
 * it is freed when it fails, and the step must not touch it afterwards (ASan would see it). */
static void test_gone_before_start(struct recur_model *m, recur_token ref[3][8]) {
    struct world w;
    world_start(&w, m);
    struct task *bad = make_task(m, texts[1], recur_model_n_vocab(m));
    struct task *good = make_task(m, texts[0], -1);
    REQUIRE(serve_submit(&w.s, bad));
    REQUIRE(serve_submit(&w.s, good));
    pthread_mutex_lock(&w.s.mu);
    serve_task_release(&w.s, bad); /* the client left: only the scheduler holds it */
    pthread_mutex_unlock(&w.s.mu);
    struct task *one[1] = {good};
    REQUIRE(pthread_create(&w.sched, NULL, serve_sched_main, &w.s) == 0);
    pthread_mutex_lock(&w.s.mu);
    while (good->state == TASK_QUEUED || good->state == TASK_RUNNING)
        pthread_cond_wait(&w.s.progress, &w.s.mu);
    pthread_mutex_unlock(&w.s.mu);
    CHECK(good->state == TASK_DONE && memcmp(good->choice[0].out, ref[0], sizeof ref[0]) == 0);
    CHECK(w.s.m.requests_failed == 1);
    release_all(&w, one, 1);
    world_stop(&w);
}

static void test_retry(struct recur_model *m, recur_token ref[3][8]) {
    struct world w;
    world_start(&w, m);
    poison = recur_model_n_vocab(m) - 1; /* a token the outputs do not come to */
    fail_code = -1; /* an invalid batch: memory unchanged */
    struct task *t[3] = {make_task(m, texts[0], -1), make_task(m, texts[1], poison),
                         make_task(m, texts[2], -1)};
    shared_failures = 0;
    run_together(&w, t, 3);
    CHECK(t[1]->state == TASK_FAILED);
    CHECK_MSG(strstr(t[1]->error, "decode") != NULL, "%s", t[1]->error);
    for (int k = 0; k < 3; k += 2) {
        CHECK_MSG(t[k]->state == TASK_DONE, "task %d: %s", k, t[k]->error);
        CHECK(t[k]->choice[0].n_out == 8);
        CHECK(memcmp(t[k]->choice[0].out, ref[k], sizeof ref[k]) == 0); /* as alone */
    }
    CHECK(shared_failures >= 1 && w.s.m.decode_retries >= 1);
    release_all(&w, t, 3);

    /* the server goes on: a next task is served */
    struct task *next = make_task(m, texts[2], -1);
    REQUIRE(serve_submit(&w.s, next));
    pthread_mutex_lock(&w.s.mu);
    while (next->state == TASK_QUEUED || next->state == TASK_RUNNING)
        pthread_cond_wait(&w.s.progress, &w.s.mu);
    pthread_mutex_unlock(&w.s.mu);
    CHECK(next->state == TASK_DONE && memcmp(next->choice[0].out, ref[2], sizeof ref[2]) == 0);
    release_all(&w, &next, 1);
    world_stop(&w);
}

static void test_unknown_state(struct recur_model *m) {
    struct world w;
    world_start(&w, m);
    fail_code = -3; /* a failure inside the forward pass: the states may have moved */
    struct task *t[3] = {make_task(m, texts[0], -1), make_task(m, texts[1], poison),
                         make_task(m, texts[2], -1)};
    run_together(&w, t, 3);
    for (int k = 0; k < 3; k++) {
        CHECK(t[k]->state == TASK_FAILED);
        CHECK_MSG(strstr(t[k]->error, "decode") != NULL, "%s", t[k]->error);
    }
    CHECK(w.s.m.decode_retries == 0);
    release_all(&w, t, 3);
    world_stop(&w);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_serve_sched MODEL\n");
        return 2;
    }
    struct recur_model *m = recur_model_load_from_file(argv[1], recur_model_default_params());
    REQUIRE(m);
    recur_token ref[3][8];
    reference(m, ref);
    test_bad_token(m, ref);
    test_gone_before_start(m, ref);
    test_retry(m, ref);
    test_unknown_state(m);
    recur_model_free(m);
    return test_finish("test_serve_sched");
}
