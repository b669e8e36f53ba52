/*
 * recur serve: what the three files of OpenAI's Responses API share (responses.c the requests,
 * responses_out.c the answers, responses_store.c the finished responses kept).
 */
#ifndef RECUR_TOOLS_SERVE_RESPONSES_H
#define RECUR_TOOLS_SERVE_RESPONSES_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "reasoning.h"

/* A request's Responses settings and its stream's position (serve_request.resp). */
struct serve_responses_req {
    char id[48], msg_id[48], rs_id[48]; /* the response's, its message's, its reasoning's */
    double created_at;
    cJSON *echo; /* the settings the response object repeats, in its order */
    cJSON *conv; /* the conversation so far: stored messages + the new input */
    bool store;  /* kept for previous_response_id and GET */
    /* the stream */
    int seq;      /* sequence_number of the next event */
    int phase;    /* events sent: 0 none, 1 created, 2 in_progress (then the items), 3 the items
                     done */
    size_t bytes; /* raw text fed to the splitter */
    int32_t tokens;
    bool done;
    /* the output items as streamed: the text split into reasoning and answer (reasoning.h); the
       reasoning item (output_index 0) is opened by the first reasoning text, the message (after
       it) by the first answer text or the end; with tools, by the first text that cannot begin a
       call, and left out when the model only called (its calls' items follow) */
    struct serve_think_stream think;
    bool rs_open, rs_done, msg_open;
    size_t sent; /* the answer's bytes sent (with tools, short of where a call may begin) */
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
