/*
 * recur serve's connections (see conn.h): what keeps slow, idle and departed clients
 * from costing anything but a socket.
 *
 * libmicrohttpd runs every connection on a few event-loop threads, so nothing here may block
 * for a client. Three things make that hold:
 *
 *  - Parking. A request that waits for the decode loop suspends its connection in the event
 *    loop (serve_park) and returns; the scheduler resumes it (serve_wake) when its stream has
 *    new text or its work has ended, and libmicrohttpd then calls the handler, or the stream's
 *    reader, again. Both calls are made under server.mu, so a wake can never come before the
 *    suspension it undoes (libmicrohttpd takes no lock of ours while holding its own).
 *  - A read deadline. libmicrohttpd's idle timeout restarts with every byte, so a client that
 *    sends one header line every few seconds would hold its connection forever. Every
 *    connection is recorded here (the socket context of MHD_OPTION_NOTIFY_CONNECTION) with
 *    the time its current request began: the accept, or the end of the previous answer on a
 *    kept-alive connection. One whose request has not arrived whole within --read-timeout
 *    seconds gets a 408 and its socket is shut down, which makes libmicrohttpd close it.
 *    libmicrohttpd reports a connection closed before it closes the socket, and both the
 *    report and the watcher take conns.mu, so the watcher never touches a reused descriptor.
 *  - A watcher thread, every 100 ms: the read deadline above; parked requests whose client has
 *    gone (a suspended connection is not polled by libmicrohttpd) or whose --timeout has passed
 *    are expired (their work is cancelled; its end wakes them); and, once a second, the model
 *    file: a file written in place under a mapping changes the weights being served, so the
 *    server stops with a line that says so (a rename over it is harmless and only noted).
 *    The clock is only a hint: the file's XXH64 is taken from start, MODEL_HASH_STEP bytes a
 *    tick so that the deadlines keep their pace (a time that changes before that first pass
 *    ends stops the server, as nothing can tell a touch from a write then); when its time
 *    changes later with its size kept, the file is hashed again the same way, and the server
 *    stops only if the bytes differ (a touch, or a copy of the same bytes, keeps it serving).
 *
 * Data structures: a doubly linked list of connections (insert and remove are O(1) from the
 * libmicrohttpd callbacks, the watcher walks it), and server.parked, a list of the parked.
 */
#define _GNU_SOURCE /* POLLRDHUP: the peer closed its end */
#include "conn.h"

#include <errno.h>
#include <microhttpd.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define XXH_INLINE_ALL /* header-only, as serve.c and src/io use it: no library to link */
#include <xxhash.h>

#define MODEL_HASH_STEP (256u << 20) /* bytes of the model file hashed per watcher tick */

struct conn {
    int fd;
    double t_begin; /* when the request now arriving began (accept, or the last answer's end) */
    bool reading;   /* a request is arriving: the read deadline applies */
    bool shut;      /* timed out: shut down, libmicrohttpd closes it */
    struct conn *prev, *next;
};

struct serve_conns {
    pthread_mutex_t mu; /* the list and stop */
    pthread_cond_t cv;  /* the watcher's sleep, cut short by stop */
    struct conn *head;
    int64_t n_open;
    bool stop, started;
    pthread_t watcher;
    struct server *s;
    /* the model file, as mapped at start (watch_model): its stat and, once hashed, its XXH64 */
    const char *model_path;
    bool watch_model, replaced_noted;
    struct stat model_st;
    bool hashed;
    uint64_t model_hash;
    /* a pass over the bytes under way (fd >= 0), of the file as stat'ed in check_st: the first
       one makes model_hash, the next ones (after the file's time changed) compare with it */
    int check_fd;
    struct stat check_st;
    XXH64_state_t *check;
    char answer_408[320]; /* what a late request gets, written once at start */
    size_t answer_408_len;
};

/* ---- parking -------------------------------------------------------------------------------- */

void serve_park(struct server *s, struct serve_park *p) {
    if (p->parked) return;
    MHD_suspend_connection(p->conn);
    p->parked = true;
    p->prev = NULL;
    p->next = s->parked;
    if (s->parked) s->parked->prev = p;
    s->parked = p;
}

void serve_wake(struct server *s, struct serve_park *p) {
    if (!p || !p->parked) return;
    p->parked = false;
    if (p->prev)
        p->prev->next = p->next;
    else
        s->parked = p->next;
    if (p->next) p->next->prev = p->prev;
    p->prev = p->next = NULL;
    MHD_resume_connection(p->conn);
}

void serve_wake_all(struct server *s) {
    while (s->parked) serve_wake(s, s->parked);
}

/* ---- connections ---------------------------------------------------------------------------- */

static struct conn *conn_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

void serve_conn_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                       enum MHD_ConnectionNotificationCode code) {
    struct server *s = cls;
    struct serve_conns *cs = s->conns;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        struct conn *k = calloc(1, sizeof *k);
        /* without memory for the record the connection still works, with the idle timeout
           alone; there is nothing to refuse it with from here */
        if (!k || !ci) {
            free(k);
            *socket_context = NULL;
            return;
        }
        k->fd = ci->connect_fd;
        k->t_begin = serve_now();
        k->reading = true;
        pthread_mutex_lock(&cs->mu);
        k->next = cs->head;
        if (cs->head) cs->head->prev = k;
        cs->head = k;
        cs->n_open++;
        pthread_mutex_unlock(&cs->mu);
        *socket_context = k;
        return;
    }
    struct conn *k = *socket_context; /* MHD_CONNECTION_NOTIFY_CLOSED: the socket still open */
    if (!k) return;
    pthread_mutex_lock(&cs->mu);
    if (k->prev)
        k->prev->next = k->next;
    else
        cs->head = k->next;
    if (k->next) k->next->prev = k->prev;
    cs->n_open--;
    pthread_mutex_unlock(&cs->mu);
    free(k);
    *socket_context = NULL;
}

int64_t serve_conns_open(struct server *s) {
    if (!s->conns) return 0;
    pthread_mutex_lock(&s->conns->mu);
    const int64_t n = s->conns->n_open;
    pthread_mutex_unlock(&s->conns->mu);
    return n;
}

void serve_conn_request_read(struct server *s, struct MHD_Connection *c) {
    struct conn *k = conn_of(c);
    if (!k) return;
    pthread_mutex_lock(&s->conns->mu);
    k->reading = false;
    pthread_mutex_unlock(&s->conns->mu);
}

void serve_conn_request_done(struct server *s, struct MHD_Connection *c) {
    struct conn *k = conn_of(c);
    if (!k) return;
    pthread_mutex_lock(&s->conns->mu);
    k->reading = true;
    k->t_begin = serve_now();
    pthread_mutex_unlock(&s->conns->mu);
}

/* ---- the watcher ---------------------------------------------------------------------------- */

/* Connections whose request is late: a 408 (best effort: the socket is non-blocking and
 * nothing else is being written to it, the request not being whole), then shut down. */
static void expire_reads(struct serve_conns *cs, double now) {
    uint64_t n = 0;
    pthread_mutex_lock(&cs->mu);
    for (struct conn *k = cs->head; k; k = k->next) {
        if (!k->reading || k->shut || now - k->t_begin <= cs->s->lim.read_s) continue;
        k->shut = true;
        n++;
        if (send(k->fd, cs->answer_408, cs->answer_408_len, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
            /* the client may be gone already: shutting down is all that matters */
        }
        shutdown(k->fd, SHUT_RDWR);
    }
    pthread_mutex_unlock(&cs->mu);
    if (n) {
        pthread_mutex_lock(&cs->s->mu);
        cs->s->m.read_timeouts += n;
        pthread_mutex_unlock(&cs->s->mu);
    }
}

/* True when the peer of fd has closed its end (a read would return 0) or the socket failed. */
static bool peer_gone(int fd) {
    struct pollfd pfd = {fd, POLLIN | POLLRDHUP, 0};
    if (poll(&pfd, 1, 0) <= 0) return false;
    if (pfd.revents & (POLLHUP | POLLERR | POLLRDHUP | POLLNVAL)) return true;
    char c;
    return (pfd.revents & POLLIN) && recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* Parked requests whose client left or whose deadline passed (s->mu taken here). */
static void expire_parked(struct server *s, double now) {
    pthread_mutex_lock(&s->mu);
    for (struct serve_park *p = s->parked, *next; p; p = next) {
        next = p->next; /* expire may wake p, taking it off the list */
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(p->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!p->gone && ci && peer_gone(ci->connect_fd)) {
            p->gone = true;
            s->m.clients_gone++;
            if (p->expire) p->expire(s, p, "the client went away");
        } else if (p->deadline > 0 && now > p->deadline) {
            if (p->expire) p->expire(s, p, "timed out");
            p->deadline = 0; /* once */
        }
    }
    pthread_mutex_unlock(&s->mu);
}

/* Hashes up to `budget` more bytes of fd into h: 1 at the end of the file, 0 when there is
 * more, -1 on a read error. */
static int hash_some(int fd, XXH64_state_t *h, size_t budget) {
    char buf[1 << 16];
    while (budget > 0) {
        const ssize_t n = read(fd, buf, sizeof buf < budget ? sizeof buf : budget);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -1;
        if (n == 0) return 1;
        XXH64_update(h, buf, (size_t)n);
        budget -= (size_t)n;
    }
    return 0;
}

static void model_changed(const struct serve_conns *cs) {
    fprintf(stderr,
            "recur serve: %s was written in place while mapped: the weights being served "
            "changed under the server, which stops now. Replace a model by renaming a new "
            "file over it (mv), or run with --no-mmap\n",
            cs->model_path);
    fflush(stderr);
    _exit(1);
}

static void check_end(struct serve_conns *cs) {
    if (cs->check_fd >= 0) close(cs->check_fd);
    cs->check_fd = -1;
}

/* The model file, once a second: written in place under the mapping (same file, another size,
 * or another time and other bytes), the weights being served are no longer the ones loaded. */
static void check_model(struct serve_conns *cs) {
    struct stat st;
    if (stat(cs->model_path, &st) != 0 || st.st_ino != cs->model_st.st_ino ||
        st.st_dev != cs->model_st.st_dev) {
        if (!cs->replaced_noted) /* renamed or removed: the mapping keeps the old file */
            fprintf(stderr,
                    "recur serve: %s was replaced or removed; still serving the model loaded at "
                    "start (restart to load the new file)\n",
                    cs->model_path);
        cs->replaced_noted = true;
        check_end(cs);
        return;
    }
    if (st.st_size != cs->model_st.st_size) model_changed(cs);
    if (st.st_mtim.tv_sec == cs->model_st.st_mtim.tv_sec &&
        st.st_mtim.tv_nsec == cs->model_st.st_mtim.tv_nsec)
        return;
    if (!cs->hashed) model_changed(cs); /* during the first pass: nothing to compare with */
    if (cs->check_fd >= 0 && (st.st_mtim.tv_sec != cs->check_st.st_mtim.tv_sec ||
                              st.st_mtim.tv_nsec != cs->check_st.st_mtim.tv_nsec))
        check_end(cs); /* written again meanwhile: start over */
    if (cs->check_fd < 0) {
        cs->check_fd = open(cs->model_path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        if (cs->check_fd < 0 || XXH64_reset(cs->check, 0) != XXH_OK) {
            check_end(cs); /* unreadable now: try again at the next check */
            return;
        }
        cs->check_st = st;
    }
}

/* A tick of the check of the bytes, when one is under way. */
static void check_model_bytes(struct serve_conns *cs) {
    if (cs->check_fd < 0) return;
    const int r = hash_some(cs->check_fd, cs->check, MODEL_HASH_STEP);
    if (r == 0) return;
    check_end(cs);
    if (r < 0) return; /* unreadable: the next check starts over */
    if (!cs->hashed) { /* the first pass: the bytes loaded */
        cs->model_hash = XXH64_digest(cs->check);
        cs->hashed = true;
        return;
    }
    if (XXH64_digest(cs->check) != cs->model_hash) model_changed(cs);
    fprintf(stderr,
            "recur serve: %s was touched, but its bytes are the ones loaded: still serving\n",
            cs->model_path);
    cs->model_st = cs->check_st;
}

static void *watch(void *arg) {
    struct serve_conns *cs = arg;
    int tick = 0;
    pthread_mutex_lock(&cs->mu);
    while (!cs->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&cs->cv, &cs->mu, &ts);
        if (cs->stop) break;
        pthread_mutex_unlock(&cs->mu);
        const double now = serve_now();
        expire_reads(cs, now);
        expire_parked(cs->s, now);
        if (cs->watch_model && ++tick % 10 == 0) check_model(cs);
        if (cs->watch_model) check_model_bytes(cs);
        pthread_mutex_lock(&cs->mu);
    }
    pthread_mutex_unlock(&cs->mu);
    return NULL;
}

bool serve_conns_start(struct server *s, const char *model_path, bool mapped) {
    struct serve_conns *cs = calloc(1, sizeof *cs);
    if (!cs) return false;
    cs->s = s;
    cs->model_path = model_path;
    cs->check_fd = -1;
    /* the stat before the bytes: a write between the two changes the time, and stops the
       server. The first pass starts here with one step (a small model is hashed before the
       first request), and goes on a step a tick on the watcher thread. */
    cs->watch_model = mapped && stat(model_path, &cs->model_st) == 0 &&
                      (cs->check = XXH64_createState()) != NULL &&
                      XXH64_reset(cs->check, 0) == XXH_OK &&
                      (cs->check_fd = open(model_path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)) >= 0;
    cs->check_st = cs->model_st;
    if (cs->watch_model) check_model_bytes(cs);
    char body[160];
    snprintf(body, sizeof body,
             "{\"error\":{\"code\":408,\"message\":\"the request was not sent within %g "
             "seconds (--read-timeout)\",\"type\":\"timeout_error\"}}",
             s->lim.read_s);
    cs->answer_408_len =
        (size_t)snprintf(cs->answer_408, sizeof cs->answer_408,
                         "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Type: "
                         "application/json\r\nContent-Length: %zu\r\n\r\n%s",
                         strlen(body), body);
    if (pthread_mutex_init(&cs->mu, NULL) != 0) {
        XXH64_freeState(cs->check);
        free(cs);
        return false;
    }
    if (pthread_cond_init(&cs->cv, NULL) != 0) {
        pthread_mutex_destroy(&cs->mu);
        XXH64_freeState(cs->check);
        free(cs);
        return false;
    }
    s->conns = cs;
    if (pthread_create(&cs->watcher, NULL, watch, cs) != 0) {
        serve_conns_stop(s);
        return false;
    }
    cs->started = true;
    return true;
}

void serve_conns_stop(struct server *s) {
    struct serve_conns *cs = s->conns;
    if (!cs) return;
    if (cs->started) {
        pthread_mutex_lock(&cs->mu);
        cs->stop = true;
        pthread_cond_signal(&cs->cv);
        pthread_mutex_unlock(&cs->mu);
        pthread_join(cs->watcher, NULL);
    }
    /* the daemons are stopped first, and they report every connection closed */
    check_end(cs);
    XXH64_freeState(cs->check);
    pthread_cond_destroy(&cs->cv);
    pthread_mutex_destroy(&cs->mu);
    free(cs);
    s->conns = NULL;
}
