/*
 * The prefix cache's second tier (see store.h).
 *
 * Keys. An entry of L tokens lives under E = hash(tokens[0..L)) (XXH3 of the token ids), in
 * the space of its model fingerprint and tenant. A lookup must find the longest stored prefix
 * of a prompt without asking for each of its lengths, so every entry is also listed in an
 * index named for its 64-token checkpoint C = 64 * floor(L / 64): I(hash(tokens[0..C))) holds
 * the (length, hash) of the entries stored under it. A lookup of up to n tokens asks for the
 * indexes of its checkpoints (one round trip, at most n / 64 + 1 of them), takes the longest
 * listed entry that fits and whose hash the prompt reproduces, and fetches that one.
 *
 *  - Redis: "recur:FP:TENANT:e:E" a string (the blob, with a TTL), "recur:FP:TENANT:i:C" a set
 *    of "L:E" (its TTL renewed with each add): the entries under that checkpoint, each with its
 *    hash, so that a lookup fetches only one whose tokens its prompt reproduces (an index
 *    also lists other conversations that share the checkpoint's tokens and go on otherwise).
 *    Size: Redis's own maxmemory with maxmemory-policy allkeys-lru (deploy/README.md). Two
 *    connections, one for the decode loop's reads (one short deadline for a whole lookup, and
 *    bounded replies: what is late or too big is a miss) and one for the writer thread (a
 *    longer timeout for each read, and a write is tried again after a lost connection); a
 *    failed one is dropped and made again at most every second, meanwhile every read is a
 *    miss (a read connection dropped for one late lookup may be made again at once).
 *  - A folder: DIR/FP/TENANT/C/L-E.entry, written to a temporary name and renamed (a reader
 *    never sees half a file). The writer deletes entries past the TTL (once a minute) and, as
 *    soon as the folder is over its budget, the least recently written first (its bytes
 *    counted by each sweep and each write since: other processes' writes are seen at the next
 *    sweep). A lookup opens an entry without blocking and refuses one that is not a regular
 *    file or is bigger than an entry of its length can be (entry_max), unread.
 *
 * The blob's contents are the library's business (cache.c checks them); here it is bytes.
 */
#define _GNU_SOURCE /* DT_DIR and d_type in readdir */
#include "store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define XXH_INLINE_ALL /* header-only: no library to link */
#include <xxhash.h>

#define CHECKPOINT 64

struct job {
    uint64_t model, tenant;
    int32_t n;
    uint64_t e, c; /* the entry's hash and its checkpoint's */
    void *blob;
    size_t len;
    struct job *next;
};

/* the length of an array in hiredis's reader functions */
#if HIREDIS_MAJOR >= 1
typedef size_t array_len;
#else
typedef int array_len;
#endif

struct rconn {
    redisContext *c;
    double next_try; /* after a failure: not before this */
    bool was_late;   /* the read connection's last lookup ran out of time */
};

struct store {
    struct store_opts o;
    bool redis;
    char host[256];
    int port, db;
    char dir[PATH_MAX - 128]; /* room left for the names under it */
    struct rconn rd, wr;
    redisReplyObjectFunctions rd_fn; /* rd's reader functions: hiredis's, but createArray ... */
    void *(*rd_array)(const redisReadTask *, array_len); /* ... which checks, then calls this */

    pthread_mutex_t mu; /* the queue, the stats, stop */
    pthread_cond_t cv;  /* the writer: work or stop; flush: the queue emptied */
    struct job *head, *tail;
    bool stop, busy;
    pthread_t writer;
    struct store_stats s;
    double next_sweep;  /* the folder's TTL and budget sweep: once a minute, and ... */
    uint64_t dir_bytes; /* ... as soon as the folder's bytes (as of the last sweep, plus what
                           this process wrote since) pass its budget */
    bool dir_over;      /* the last sweep left it over budget: wait for the minute */
};

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

struct store_opts store_default_opts(void) {
    return (struct store_opts){.timeout_s = 0.1,
                               .write_timeout_s = 2.0,
                               .ttl_s = 86400,
                               .max_bytes = (uint64_t)4 << 30,
                               .queue_bytes = (uint64_t)256 << 20};
}

static uint64_t hash_tokens(const recur_token *t, int32_t n) {
    return XXH3_64bits(t, sizeof(recur_token) * (size_t)n);
}

/* The most bytes an entry of n tokens can have: the model's state, the tokens (with a hybrid
 * model's attention rows: token_bytes more each), and the library's fixed fields (magic,
 * fingerprint, tenant, counts, checksum, the attention stream's headers of 24 bytes a layer:
 * well under ENTRY_HEAD). A bigger one is refused before it is read. */
#define ENTRY_HEAD          65536
#define STATE_BYTES_UNKNOWN ((uint64_t)256 << 20) /* when the caller did not say */
static size_t entry_max(const struct store *st, int32_t n) {
    return ENTRY_HEAD + (sizeof(recur_token) + (size_t)st->o.token_bytes) * (size_t)n +
           (size_t)st->o.state_bytes;
}

static void count(struct store *st, uint64_t *field) {
    pthread_mutex_lock(&st->mu);
    (*field)++;
    pthread_mutex_unlock(&st->mu);
}

/* ---- Redis ---------------------------------------------------------------------------------- */

/* The writer's connection, made (again) when there is none and the last failure is a second
 * old; its connect and each read wait up to timeout_s. */
static redisContext *rconn_get(struct store *st, struct rconn *rc, double timeout_s) {
    if (rc->c) return rc->c;
    if (now_s() < rc->next_try) return NULL;
    const struct timeval tv = {(time_t)timeout_s,
                               (suseconds_t)((timeout_s - (double)(time_t)timeout_s) * 1e6)};
    redisContext *c = redisConnectWithTimeout(st->host, st->port, tv);
    if (!c || c->err || redisSetTimeout(c, tv) != REDIS_OK) {
        if (c) redisFree(c);
        rc->next_try = now_s() + 1.0;
        return NULL;
    }
    if (st->db) {
        redisReply *r = redisCommand(c, "SELECT %d", st->db);
        const bool ok = r && r->type == REDIS_REPLY_STATUS;
        if (r) freeReplyObject(r);
        if (!ok) {
            redisFree(c);
            rc->next_try = now_s() + 1.0;
            return NULL;
        }
    }
    rc->c = c;
    return c;
}

static void rconn_fail(struct store *st, struct rconn *rc) {
    if (rc->c) redisFree(rc->c);
    rc->c = NULL;
    rc->next_try = now_s() + 1.0;
    count(st, &st->s.errors);
}

static void redis_key(char *out, size_t n, uint64_t model, uint64_t tenant, char kind, uint64_t h) {
    snprintf(out, n, "recur:%016" PRIx64 ":%016" PRIx64 ":%c:%016" PRIx64, model, tenant, kind, h);
}

static bool redis_put(struct store *st, const struct job *j) {
    redisContext *c = rconn_get(st, &st->wr, st->o.write_timeout_s);
    if (!c) return false;
    char ek[96], ik[96], len[40], ttl[24];
    redis_key(ek, sizeof ek, j->model, j->tenant, 'e', j->e);
    redis_key(ik, sizeof ik, j->model, j->tenant, 'i', j->c);
    snprintf(len, sizeof len, "%d:%016" PRIx64, j->n, j->e);
    snprintf(ttl, sizeof ttl, "%" PRId64, st->o.ttl_s);
    const char *set[] = {"SET", ek, j->blob, "EX", ttl};
    const size_t set_len[] = {3, strlen(ek), j->len, 2, strlen(ttl)};
    const char *sadd[] = {"SADD", ik, len}, *exp[] = {"EXPIRE", ik, ttl};
    const size_t sadd_len[] = {4, strlen(ik), strlen(len)},
                 exp_len[] = {6, strlen(ik), strlen(ttl)};
    redisAppendCommandArgv(c, 5, set, set_len);
    redisAppendCommandArgv(c, 3, sadd, sadd_len);
    redisAppendCommandArgv(c, 3, exp, exp_len);
    bool ok = true;
    for (int i = 0; i < 3; i++) {
        redisReply *r = NULL;
        if (redisGetReply(c, (void **)&r) != REDIS_OK || !r) {
            rconn_fail(st, &st->wr);
            return false;
        }
        ok &= r->type != REDIS_REPLY_ERROR;
        freeReplyObject(r);
    }
    return ok;
}

/* ---- Redis: the decode loop's reads ------------------------------------------------------- */

/* The read connection is not read by hiredis's blocking calls, whose timeout holds for each
 * read of the socket, so that a server dripping its reply could hold a lookup for as long as it
 * likes: its socket is non-blocking, every wait is a poll() against the lookup's deadline (one
 * for the whole lookup: connect, commands and replies), and its replies are fed to hiredis's
 * reader. What a lookup may receive is bounded before it is allocated: its bytes in all (the
 * indexes' INDEX_REPLY_BYTES and the longest entry it may fetch), and an array longer than an index
 * can be (MAX_MEMBERS) is refused from its header by the reader's createArray (hiredis would
 * allocate it whole first). A lookup that fails or runs out of time drops the connection, whose
 * next reply may be half read. */

/* the members an index's reply may have, and their bytes ("L:E" with its framing) */
#define MAX_MEMBERS       65536
#define INDEX_REPLY_BYTES ((size_t)4 << 20)

static void *guarded_array(const redisReadTask *task, array_len elements) {
    const struct store *st = task->privdata;
    if ((size_t)elements > MAX_MEMBERS) return NULL; /* the reader fails (a negative int too) */
    return st->rd_array(task, elements);
}

static double left_ms(double deadline) {
    return (deadline - now_s()) * 1e3;
}

/* Waits until c's socket is ready for events; false at the deadline or on an error. */
static bool rd_wait(redisContext *c, short events, double deadline) {
    for (;;) {
        const double ms = left_ms(deadline);
        if (ms <= 0) return false;
        struct pollfd p = {.fd = c->fd, .events = events};
        const int n = poll(&p, 1, (int)ms + 1);
        if (n > 0) return true;
        if (n < 0 && errno != EINTR) return false;
    }
}

/* Sends the command argv; false at the deadline or on an error. */
static bool rd_send(redisContext *c, int argc, const char **argv, const size_t *argl,
                    double deadline) {
    char *cmd = NULL;
    const int len = redisFormatCommandArgv(&cmd, argc, argv, argl);
    if (len < 0 || !cmd) return false;
    bool ok = true;
    for (size_t done = 0; ok && done < (size_t)len;) {
        const ssize_t n = send(c->fd, cmd + done, (size_t)len - done, MSG_NOSIGNAL);
        if (n > 0)
            done += (size_t)n;
        else if (n < 0 && errno == EINTR)
            continue;
        else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            ok = rd_wait(c, POLLOUT, deadline);
        else
            ok = false;
    }
    redisFreeCommand(cmd);
    return ok;
}

/* The next reply; NULL at the deadline, on an error, on a refused reply, or once more than
 * *budget bytes would have come (*budget is what is left). */
static redisReply *rd_reply(redisContext *c, double deadline, size_t *budget) {
    for (;;) {
        void *reply = NULL;
        if (redisReaderGetReply(c->reader, &reply) != REDIS_OK) return NULL;
        if (reply) return reply;
        if (!rd_wait(c, POLLIN, deadline)) return NULL;
        char buf[16384];
        const ssize_t n = recv(c->fd, buf, sizeof buf, 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
        if (n <= 0 || (size_t)n > *budget) return NULL; /* closed, failed, or too much */
        *budget -= (size_t)n;
        if (redisReaderFeed(c->reader, buf, (size_t)n) != REDIS_OK) return NULL;
    }
}

/* The read connection, made (again) when there is none and the last failure is a second old,
 * within the deadline; NULL otherwise. */
static redisContext *rd_conn(struct store *st, double deadline) {
    struct rconn *rc = &st->rd;
    if (rc->c) return rc->c;
    if (now_s() < rc->next_try) return NULL;
    const double left = deadline - now_s();
    redisContext *c = NULL;
    bool ok = left > 0;
    if (ok) {
        const struct timeval tv = {(time_t)left,
                                   (suseconds_t)((left - (double)(time_t)left) * 1e6)};
        c = redisConnectWithTimeout(st->host, st->port, tv);
        const int fl = c && !c->err ? fcntl(c->fd, F_GETFL) : -1;
        ok = fl >= 0 && fcntl(c->fd, F_SETFL, fl | O_NONBLOCK) == 0;
    }
    if (ok) {
        st->rd_fn = *c->reader->fn;
        st->rd_array = st->rd_fn.createArray;
        st->rd_fn.createArray = guarded_array;
        c->reader->fn = &st->rd_fn;
        c->reader->privdata = st;
    }
    if (ok && st->db) {
        char db[16];
        snprintf(db, sizeof db, "%d", st->db);
        const char *argv[] = {"SELECT", db};
        const size_t argl[] = {6, strlen(db)};
        size_t budget = 1024;
        redisReply *r = rd_send(c, 2, argv, argl, deadline) ? rd_reply(c, deadline, &budget) : NULL;
        ok = r && r->type == REDIS_REPLY_STATUS;
        if (r) freeReplyObject(r);
    }
    if (!ok) {
        if (c) redisFree(c);
        rc->next_try = now_s() + 1.0;
        return NULL;
    }
    rc->c = c;
    return c;
}

/* The longest listed length in [min_len, max_len] whose prefix the prompt reproduces, and its
 * blob; 0 for none, and for all that does not come by the deadline. */
static int32_t redis_get(struct store *st, uint64_t model, uint64_t tenant,
                         const recur_token *tokens, int32_t min_len, int32_t max_len, void **blob,
                         size_t *len, double deadline) {
    redisContext *c = rd_conn(st, deadline);
    if (!c) {
        count(st, &st->s.errors);
        return 0;
    }
    const int32_t c_hi = max_len / CHECKPOINT * CHECKPOINT,
                  c_lo = min_len / CHECKPOINT * CHECKPOINT;
    const int32_t n_idx = (c_hi - c_lo) / CHECKPOINT + 1;
    size_t budget = INDEX_REPLY_BYTES + entry_max(st, max_len) + 64;
    char key[96];
    bool failed = false;
    for (int32_t k = 0; k < n_idx && !failed; k++) {
        const int32_t cp = c_hi - k * CHECKPOINT;
        redis_key(key, sizeof key, model, tenant, 'i', hash_tokens(tokens, cp));
        const char *argv[] = {"SMEMBERS", key};
        const size_t argl[] = {8, strlen(key)};
        failed = !rd_send(c, 2, argv, argl, deadline);
    }
    int32_t best = 0;
    for (int32_t k = 0; k < n_idx && !failed; k++) { /* every reply, even once one has won */
        redisReply *r = rd_reply(c, deadline, &budget);
        if (!r) {
            failed = true;
            break;
        }
        /* the highest checkpoint's index with an entry of this prompt wins: lower ones hold
           only shorter entries */
        if (r->type == REDIS_REPLY_ARRAY && !best)
            for (size_t i = 0; i < r->elements; i++) {
                int n = 0;
                uint64_t h = 0;
                if (!r->element[i]->str ||
                    sscanf(r->element[i]->str, "%d:%16" SCNx64, &n, &h) != 2 || n < min_len ||
                    n > max_len || n <= best)
                    continue;
                if (hash_tokens(tokens, n) == h) best = n;
            }
        freeReplyObject(r);
    }
    redisReply *r = NULL;
    if (!failed && best) {
        redis_key(key, sizeof key, model, tenant, 'e', hash_tokens(tokens, best));
        const char *argv[] = {"GET", key};
        const size_t argl[] = {3, strlen(key)};
        failed = !rd_send(c, 2, argv, argl, deadline) || !(r = rd_reply(c, deadline, &budget));
    }
    if (failed) {
        /* Out of time is not broken: a loaded machine may not have run Redis or this thread
           for a while. The connection goes (its next reply may be half read), but the next
           lookup may make one at once, so that a slow moment costs one miss and not a second
           of them; a server late twice running waits the second, as after an error. */
        const bool late = left_ms(deadline) <= 0;
        rconn_fail(st, &st->rd);
        if (late && !st->rd.was_late) st->rd.next_try = 0;
        st->rd.was_late = late;
        return 0;
    }
    st->rd.was_late = false;
    int32_t got = 0;
    if (r && r->type == REDIS_REPLY_STRING && r->len <= entry_max(st, best) &&
        (*blob = malloc(r->len))) {
        memcpy(*blob, r->str, r->len);
        *len = r->len;
        got = best;
    }
    if (r) freeReplyObject(r);
    return got;
}

/* ---- a folder ------------------------------------------------------------------------------- */

static void dir_of(const struct store *st, char *out, size_t n, uint64_t model, uint64_t tenant,
                   uint64_t c) {
    snprintf(out, n, "%s/%016" PRIx64 "/%016" PRIx64 "/%016" PRIx64, st->dir, model, tenant, c);
}

static bool mkdirs(char *path) { /* mkdir -p; path is restored */
    for (char *p = path + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            const bool ok = mkdir(path, 0700) == 0 || errno == EEXIST;
            *p = '/';
            if (!ok) return false;
        }
    return mkdir(path, 0700) == 0 || errno == EEXIST;
}

static bool dir_put(struct store *st, const struct job *j) {
    char d[PATH_MAX], path[PATH_MAX + 64], tmp[PATH_MAX + 96];
    dir_of(st, d, sizeof d, j->model, j->tenant, j->c);
    if (!mkdirs(d)) return false;
    snprintf(path, sizeof path, "%s/%d-%016" PRIx64 ".entry", d, j->n, j->e);
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) return false;
    bool ok = fwrite(j->blob, 1, j->len, f) == j->len;
    ok = fflush(f) == 0 && ok;
    ok = fclose(f) == 0 && ok;
    if (ok) ok = rename(tmp, path) == 0;
    if (!ok) unlink(tmp);
    return ok;
}

/* The bytes of the entry file path, of at most max bytes, malloc'd; NULL for none. The open
 * does not block and the file is checked before any read, as a slot file is (a FIFO there
 * would hold the decode loop until something wrote to it; a device could be endless): one that
 * is not a regular file, is empty or bigger than max, or does not read whole is refused (*bad
 * set), and nothing is allocated for it before its size is known. */
static void *dir_read(const char *path, size_t max, size_t *len, bool *bad) {
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        *bad = errno != ENOENT; /* gone: a sweep took it since the listing */
        return NULL;
    }
    struct stat sb;
    void *buf = NULL;
    size_t got = 0;
    *bad = true;
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 0 &&
        (uint64_t)sb.st_size <= max && (buf = malloc((size_t)sb.st_size))) {
        while (got < (size_t)sb.st_size) {
            const ssize_t n = read(fd, (char *)buf + got, (size_t)sb.st_size - got);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break; /* failed, or shorter than it was */
            got += (size_t)n;
        }
        *bad = got != (size_t)sb.st_size;
    }
    close(fd);
    if (*bad) {
        free(buf);
        return NULL;
    }
    *len = got;
    return buf;
}

static int32_t dir_get(struct store *st, uint64_t model, uint64_t tenant, const recur_token *tokens,
                       int32_t min_len, int32_t max_len, void **blob, size_t *len,
                       double deadline) {
    const int32_t c_lo = min_len / CHECKPOINT * CHECKPOINT;
    for (int32_t cp = max_len / CHECKPOINT * CHECKPOINT; cp >= c_lo; cp -= CHECKPOINT) {
        if (now_s() > deadline) { /* a slow disk: what is left is a miss */
            count(st, &st->s.errors);
            return 0;
        }
        char d[PATH_MAX];
        dir_of(st, d, sizeof d, model, tenant, hash_tokens(tokens, cp));
        DIR *dh = opendir(d);
        if (!dh) continue;
        int32_t best = 0;
        for (struct dirent *de; (de = readdir(dh));) {
            int n = 0;
            uint64_t h = 0;
            char tail[8] = "";
            if (sscanf(de->d_name, "%d-%16" SCNx64 "%7s", &n, &h, tail) != 3 ||
                strcmp(tail, ".entry") != 0 || n < min_len || n > max_len || n <= best)
                continue;
            if (hash_tokens(tokens, n) == h) best = n;
        }
        closedir(dh);
        if (!best) continue;
        char path[PATH_MAX + 64];
        snprintf(path, sizeof path, "%s/%d-%016" PRIx64 ".entry", d, best,
                 hash_tokens(tokens, best));
        bool bad = false;
        if ((*blob = dir_read(path, entry_max(st, best), len, &bad))) return best;
        if (bad) count(st, &st->s.errors);
    }
    return 0;
}

/* Every entry file under path: its bytes and time, for the sweep. */
struct file_rec {
    char *path;
    off_t size;
    time_t mtime;
};

static void walk(const char *path, struct file_rec **v, size_t *n, size_t *cap, int depth) {
    DIR *dh = opendir(path);
    if (!dh) return;
    for (struct dirent *de; (de = readdir(dh));) {
        if (de->d_name[0] == '.') continue;
        char p[PATH_MAX];
        if ((size_t)snprintf(p, sizeof p, "%s/%s", path, de->d_name) >= sizeof p) continue;
        struct stat sb;
        if (lstat(p, &sb) != 0) continue;
        if (S_ISDIR(sb.st_mode) && depth < 3) {
            walk(p, v, n, cap, depth + 1);
        } else if (S_ISREG(sb.st_mode) && strstr(de->d_name, ".entry")) {
            if (*n == *cap) {
                const size_t nc = *cap ? 2 * *cap : 256;
                struct file_rec *g = realloc(*v, nc * sizeof *g);
                if (!g) break;
                *v = g;
                *cap = nc;
            }
            if (!((*v)[*n].path = strdup(p))) break;
            (*v)[*n].size = sb.st_size;
            (*v)[*n].mtime = sb.st_mtime;
            (*n)++;
        }
    }
    closedir(dh);
}

static int by_mtime(const void *a, const void *b) {
    const struct file_rec *x = a, *y = b;
    return x->mtime < y->mtime ? -1 : x->mtime > y->mtime;
}

/* Entries past the TTL go, then the oldest while the folder is over its budget; the bytes
 * left are noted. */
static void dir_sweep(struct store *st) {
    struct file_rec *v = NULL;
    size_t n = 0, cap = 0;
    walk(st->dir, &v, &n, &cap, 0);
    qsort(v, n, sizeof *v, by_mtime);
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) total += (uint64_t)v[i].size;
    const time_t now = time(NULL);
    for (size_t i = 0; i < n; i++) {
        const bool old = now - v[i].mtime > st->o.ttl_s;
        if ((old || total > st->o.max_bytes) && unlink(v[i].path) == 0)
            total -= (uint64_t)v[i].size;
        free(v[i].path);
    }
    free(v);
    st->dir_bytes = total;
    st->dir_over = total > st->o.max_bytes;
    st->next_sweep = now_s() + 60;
}

/* ---- the writer ----------------------------------------------------------------------------- */

/* A write to Redis, tried again after a lost connection (the writer is nobody's critical path,
 * so it waits out the reconnect pause rather than lose the entry): at most WRITE_TRIES tries,
 * none once the store is stopping. */
#define WRITE_TRIES 3
static bool stopping(struct store *st) {
    pthread_mutex_lock(&st->mu);
    const bool stop = st->stop;
    pthread_mutex_unlock(&st->mu);
    return stop;
}

static bool redis_put_tries(struct store *st, const struct job *j) {
    for (int k = 1;; k++) {
        if (redis_put(st, j)) return true;
        if (k == WRITE_TRIES || stopping(st)) return false;
        while (!st->wr.c && now_s() < st->wr.next_try) { /* the pause, in steps that see stop */
            if (stopping(st)) return false;
            const struct timespec ms20 = {0, 20 * 1000 * 1000};
            nanosleep(&ms20, NULL);
        }
    }
}

static void *writer(void *arg) {
    struct store *st = arg;
    pthread_mutex_lock(&st->mu);
    for (;;) {
        while (!st->head && !st->stop) pthread_cond_wait(&st->cv, &st->mu);
        if (!st->head) break; /* stopping, and nothing left */
        struct job *j = st->head;
        st->head = j->next;
        if (!st->head) st->tail = NULL;
        st->busy = true;
        pthread_mutex_unlock(&st->mu);
        const bool ok = st->redis ? redis_put_tries(st, j) : dir_put(st, j);
        if (!st->redis) {
            if (ok) st->dir_bytes += j->len; /* an entry written over counts twice: a sweep early */
            if (now_s() > st->next_sweep || (st->dir_bytes > st->o.max_bytes && !st->dir_over))
                dir_sweep(st);
        }
        pthread_mutex_lock(&st->mu);
        st->busy = false;
        st->s.queued_bytes -= j->len;
        st->s.queued--;
        if (ok)
            st->s.puts++;
        else
            st->s.put_errors++;
        free(j->blob);
        free(j);
        if (!st->head) pthread_cond_broadcast(&st->cv); /* flush waits for this */
    }
    pthread_mutex_unlock(&st->mu);
    return NULL;
}

/* ---- the hooks ------------------------------------------------------------------------------ */

static void hook_put(void *user, uint64_t model, uint64_t tenant, const recur_token *tokens,
                     int32_t n, const void *blob, size_t len) {
    struct store *st = user;
    struct job *j = malloc(sizeof *j);
    void *copy = j ? malloc(len) : NULL;
    pthread_mutex_lock(&st->mu);
    if (!copy || st->s.queued_bytes + len > st->o.queue_bytes || st->stop) {
        st->s.dropped++;
        pthread_mutex_unlock(&st->mu);
        free(copy);
        free(j);
        return;
    }
    memcpy(copy, blob, len);
    *j = (struct job){model,
                      tenant,
                      n,
                      hash_tokens(tokens, n),
                      hash_tokens(tokens, n / CHECKPOINT * CHECKPOINT),
                      copy,
                      len,
                      NULL};
    if (st->tail)
        st->tail->next = j;
    else
        st->head = j;
    st->tail = j;
    st->s.queued_bytes += len;
    st->s.queued++;
    pthread_cond_signal(&st->cv);
    pthread_mutex_unlock(&st->mu);
}

static int32_t hook_get(void *user, uint64_t model, uint64_t tenant, const recur_token *tokens,
                        int32_t n, int32_t min_len, int32_t max_len, void **blob, size_t *len) {
    struct store *st = user;
    if (max_len > n) max_len = n;
    if (min_len < 1) min_len = 1;
    if (max_len < min_len) return 0;
    const double deadline = now_s() + st->o.timeout_s; /* for the whole lookup */
    const int32_t got =
        st->redis ? redis_get(st, model, tenant, tokens, min_len, max_len, blob, len, deadline)
                  : dir_get(st, model, tenant, tokens, min_len, max_len, blob, len, deadline);
    pthread_mutex_lock(&st->mu);
    st->s.gets++;
    if (got > 0)
        st->s.hits++;
    else
        st->s.misses++;
    pthread_mutex_unlock(&st->mu);
    return got;
}

struct recur_prefix_store store_hooks(struct store *st) {
    return (struct recur_prefix_store){st, hook_put, hook_get};
}

void store_get_stats(struct store *st, struct store_stats *out) {
    pthread_mutex_lock(&st->mu);
    *out = st->s;
    pthread_mutex_unlock(&st->mu);
}

bool store_flush(struct store *st, double timeout_s) {
    const double end = now_s() + timeout_s;
    pthread_mutex_lock(&st->mu);
    while ((st->head || st->busy) && now_s() < end) {
        pthread_mutex_unlock(&st->mu);
        const struct timespec ms5 = {0, 5 * 1000 * 1000};
        nanosleep(&ms5, NULL);
        pthread_mutex_lock(&st->mu);
    }
    const bool empty = !st->head && !st->busy;
    pthread_mutex_unlock(&st->mu);
    return empty;
}

/* ---- open and close ------------------------------------------------------------------------- */

static bool parse_redis(struct store *st, const char *url, char *err, size_t err_len) {
    const char *p = url + strlen("redis://");
    const char *colon = strrchr(p, ':'), *slash = strchr(p, '/');
    if (slash && colon && colon > slash) colon = NULL;
    const size_t hl = colon ? (size_t)(colon - p) : slash ? (size_t)(slash - p) : strlen(p);
    if (hl == 0 || hl >= sizeof st->host) {
        snprintf(err, err_len, "%s: no host (redis://HOST:PORT[/DB])", url);
        return false;
    }
    memcpy(st->host, p, hl);
    st->host[hl] = '\0';
    st->port = 6379;
    char *end = NULL;
    if (colon) {
        const long port = strtol(colon + 1, &end, 10);
        if (end == colon + 1 || port < 1 || port > 65535 || (*end && *end != '/')) {
            snprintf(err, err_len, "%s: the port must be 1 to 65535", url);
            return false;
        }
        st->port = (int)port;
    }
    if (slash) {
        const long db = strtol(slash + 1, &end, 10);
        if (end == slash + 1 || *end || db < 0 || db > 1000000) {
            snprintf(err, err_len, "%s: the database must be a number", url);
            return false;
        }
        st->db = (int)db;
    }
    return true;
}

struct store *store_open(const char *url, const struct store_opts *o, char *err, size_t err_len) {
    struct store *st = calloc(1, sizeof *st);
    if (!st) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    st->o = o ? *o : store_default_opts();
    if (!st->o.state_bytes) st->o.state_bytes = STATE_BYTES_UNKNOWN;
    if (strncmp(url, "redis://", 8) == 0) {
        st->redis = true;
        if (!parse_redis(st, url, err, err_len)) {
            free(st);
            return NULL;
        }
    } else if (strstr(url, "://")) {
        snprintf(err, err_len, "%s: a store is redis://HOST:PORT[/DB] or a folder", url);
        free(st);
        return NULL;
    } else {
        if (strlen(url) >= sizeof st->dir) {
            snprintf(err, err_len, "%s: the path is too long", url);
            free(st);
            return NULL;
        }
        snprintf(st->dir, sizeof st->dir, "%s", url);
        struct stat sb;
        if (!mkdirs(st->dir) || stat(st->dir, &sb) != 0 || !S_ISDIR(sb.st_mode) ||
            access(st->dir, W_OK) != 0) {
            snprintf(err, err_len, "%s: not a folder that can be written (%s)", url,
                     strerror(errno));
            free(st);
            return NULL;
        }
    }
    if (pthread_mutex_init(&st->mu, NULL) != 0 || pthread_cond_init(&st->cv, NULL) != 0 ||
        pthread_create(&st->writer, NULL, writer, st) != 0) {
        snprintf(err, err_len, "cannot start the store's writer thread");
        free(st);
        return NULL;
    }
    return st;
}

void store_close(struct store *st) {
    if (!st) return;
    store_flush(st, 5.0);
    pthread_mutex_lock(&st->mu);
    st->stop = true;
    for (struct job *j = st->head, *next; j; j = next) { /* what five seconds did not write */
        next = j->next;
        free(j->blob);
        free(j);
    }
    st->head = st->tail = NULL;
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->mu);
    pthread_join(st->writer, NULL);
    if (st->rd.c) redisFree(st->rd.c);
    if (st->wr.c) redisFree(st->wr.c);
    pthread_cond_destroy(&st->cv);
    pthread_mutex_destroy(&st->mu);
    free(st);
}
