/*
 * recur serve: what the three files of OpenAI's Responses API share (responses.c the requests,
 * responses_out.c the answers, responses_store.c the finished responses kept).
 */
#ifndef RECUR_TOOLS_SERVE_RESPONSES_H
#define RECUR_TOOLS_SERVE_RESPONSES_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

/* A request's Responses settings and its stream's position (serve_request.resp). */
struct serve_responses_req {
    char id[48], msg_id[48];
    double created_at;
    cJSON *echo; /* the settings the response object repeats, in its order */
    cJSON *conv; /* the conversation so far: stored messages + the new input */
    bool store;  /* kept for previous_response_id and GET */
    /* the stream */
    int seq;      /* sequence_number of the next event */
    int phase;    /* events sent: 0 none, 1..4 the opening ones, 5 the text done, 7 calls */
    size_t bytes; /* text sent */
    int32_t tokens;
    bool done;
    /* with tools (api_tools.c): the calls' items follow the message */
    bool no_msg; /* the model only called: no message item */
    size_t call; /* the call whose events are being sent */
    int call_ev; /* its events sent (0..3) */
};

/* A copy (malloc'd) of what id's entry in tenant's partition keeps: its conversation (conv,
 * a JSON array of {role, content}) or its response object; NULL when there is none. */
char *serve_responses_lookup(struct serve_responses *st, uint64_t tenant, const char *id,
                             bool conv);
/* Keeps id's conversation and response text (both taken over, freed on failure), the least
 * recently used entries dropped to make room; one larger than the whole store is not kept.
 * st NULL: nothing is kept. */
void serve_responses_put(struct serve_responses *st, uint64_t tenant, const char *id, char *conv,
                         char *response);
/* Forgets id's entry in tenant's partition: false when there was none. */
bool serve_responses_forget(struct serve_responses *st, uint64_t tenant, const char *id);

#endif
