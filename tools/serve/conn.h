/*
 * recur serve's connections (conn.c): parking a request while the decode loop works
 * for it (serve_park / serve_wake, declared in serve.h for the scheduler), the read deadline
 * of every connection, and the watcher thread that enforces deadlines, notices clients that
 * leave while parked, and watches the mapped model file.
 */
#ifndef RECUR_TOOLS_SERVE_CONN_H
#define RECUR_TOOLS_SERVE_CONN_H

#include <microhttpd.h>
#include <stdbool.h>

#include "serve.h"

/* Starts the watcher (s->lim.read_s and s->parked must be set up; s->conns is set). With
 * mapped, the model file at model_path is watched for being written in place. False without
 * memory or a thread. */
bool serve_conns_start(struct server *s, const char *model_path, bool mapped);
/* Stops the watcher and frees s->conns; the daemons must be stopped first. NULL-safe. */
void serve_conns_stop(struct server *s);

/* MHD_OPTION_NOTIFY_CONNECTION (cls: the server): records and forgets connections. */
void serve_conn_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                       enum MHD_ConnectionNotificationCode code);
/* Connections open now. */
int64_t serve_conns_open(struct server *s);
/* The request on c has arrived whole: the read deadline no longer applies to it. */
void serve_conn_request_read(struct server *s, struct MHD_Connection *c);
/* The answer on c is done: the next request of a kept-alive connection starts its clock. */
void serve_conn_request_done(struct server *s, struct MHD_Connection *c);
/* Resumes every parked connection (s->mu held): before the daemons stop, which libmicrohttpd
 * allows only without suspended connections. */
void serve_wake_all(struct server *s);

#endif /* RECUR_TOOLS_SERVE_CONN_H */
