/*
 * io_file: opening files to read, and replacing files crash-safely (io.h, "files").
 *
 * Reading. A path is opened O_NONBLOCK and checked with fstat before a byte is read, so a FIFO
 * or a device named by mistake is refused at once instead of blocking the caller forever (an
 * open of a FIFO without a writer blocks; a read of one without data blocks too).
 *
 * Replacing. A new file is written beside the one it replaces, made durable, and renamed over
 * it, so a crash or a kill leaves the old file or the new one, never a torn one:
 *  - the destination is the final target of a symbolic link (the link keeps pointing at the
 *    new contents, in the target's folder, where the rename is atomic);
 *  - an existing destination that is not a regular file (a device such as /dev/full, a FIFO,
 *    a folder) is refused: replacing it would destroy what it is;
 *  - the new file takes the existing file's permission bits (a new file gets 0666 less the
 *    umask, as fopen would give it);
 *  - it is written as an O_TMPFILE, which has no name until it is complete, so a killed writer
 *    leaves nothing behind; then it gets a temporary name and is renamed into place (link
 *    cannot replace a name). Where the file system has no O_TMPFILE, it is created under the
 *    temporary name at once. That name, ".recur.tmp-PID-XXXXXX", is short whatever the
 *    destination's name (a name of NAME_MAX bytes plus a suffix would not fit) and carries the
 *    writer's process id, so the next writer in that folder removes the leftovers of writers
 *    that are no longer alive.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* O_TMPFILE, linkat's AT_SYMLINK_FOLLOW */
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/core.h"
#include "io.h"

/* What kind of file mode is, for messages. */
static const char *kind_name(mode_t mode) {
    static const struct {
        mode_t type;
        const char *name;
    } kinds[] = {
        {S_IFDIR, "a folder"},       {S_IFCHR, "a character device"}, {S_IFBLK, "a block device"},
        {S_IFIFO, "a FIFO"},         {S_IFSOCK, "a socket"},          {S_IFLNK, "a symbolic link"},
        {S_IFREG, "a regular file"},
    };
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if ((mode & S_IFMT) == kinds[i].type) return kinds[i].name;
    return "not a regular file";
}

/* ---- reading ----------------------------------------------------------------------------- */

int rio_open_regular(const char *path, struct stat *st_out) {
    if (!path) {
        rcore_error_set("no path");
        return -1;
    }
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        rcore_error_set("%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        rcore_error_set("%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        rcore_error_set("%s: not a regular file (%s)", path, kind_name(st.st_mode));
        close(fd);
        return -1;
    }
    /* a regular file never blocks, but a caller's reads should not see EAGAIN semantics */
    const int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        rcore_error_set("%s: fcntl: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (st_out) *st_out = st;
    return fd;
}

FILE *rio_fopen_regular(const char *path) {
    const int fd = rio_open_regular(path, NULL);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        rcore_error_set("%s: %s", path, strerror(errno));
        close(fd);
    }
    return f;
}

/* ---- replacing: where ------------------------------------------------------------------- */

/* The folder part of path ("." when it has none), malloc'd. */
static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return strdup(".");
    if (slash == path) return strdup("/");
    char *d = malloc((size_t)(slash - path) + 1);
    if (d) {
        memcpy(d, path, (size_t)(slash - path));
        d[slash - path] = '\0';
    }
    return d;
}

char *rio_replace_target(const char *path, struct stat *st_out, bool *exists) {
    if (!path || !*path) {
        rcore_error_set("no path");
        return NULL;
    }
    char *cur = strdup(path);
    if (!cur) {
        rcore_error_set("%s: out of memory", path);
        return NULL;
    }
    for (int hops = 0;; hops++) {
        struct stat st;
        if (lstat(cur, &st) != 0) {
            if (errno == ENOENT) { /* a new file (or a dangling link's target) */
                *exists = false;
                return cur;
            }
            rcore_error_set("%s: cannot stat %s: %s", path, cur, strerror(errno));
            free(cur);
            return NULL;
        }
        if (!S_ISLNK(st.st_mode)) {
            if (!S_ISREG(st.st_mode)) {
                rcore_error_set("%s: %s is %s, not a regular file; refusing to replace it", path,
                                cur, kind_name(st.st_mode));
                free(cur);
                return NULL;
            }
            if (st_out) *st_out = st;
            *exists = true;
            return cur;
        }
        if (hops == 40) {
            rcore_error_set("%s: too many levels of symbolic links", path);
            free(cur);
            return NULL;
        }
        char link[PATH_MAX];
        const ssize_t n = readlink(cur, link, sizeof link - 1);
        if (n < 0) {
            rcore_error_set("%s: cannot read the link %s: %s", path, cur, strerror(errno));
            free(cur);
            return NULL;
        }
        link[n] = '\0';
        char *next;
        if (link[0] == '/') {
            next = strdup(link);
        } else { /* relative to the folder that holds the link */
            char *d = dir_of(cur);
            const size_t len = (d ? strlen(d) : 0) + strlen(link) + 2;
            next = d ? malloc(len) : NULL;
            if (next) snprintf(next, len, "%s/%s", d, link);
            free(d);
        }
        free(cur);
        if (!next) {
            rcore_error_set("%s: out of memory", path);
            return NULL;
        }
        cur = next;
    }
}

bool rio_check_replaceable(const char *path) {
    bool exists = false;
    char *target = rio_replace_target(path, NULL, &exists);
    if (!target) return false;
    char *dir = dir_of(target);
    bool ok = dir != NULL;
    if (!dir)
        rcore_error_set("%s: out of memory", path);
    else if (access(dir, W_OK | X_OK) != 0) {
        rcore_error_set("%s: cannot create a file in %s: %s", path, dir, strerror(errno));
        ok = false;
    }
    free(dir);
    free(target);
    return ok;
}

/* ---- replacing: how --------------------------------------------------------------------- */

/* The temporary files' names: TMP_PREFIX, the writer's pid, '-', six characters. */
#define TMP_PREFIX ".recur.tmp-"

/* Removes TMP_PREFIX "PID-XXXXXX" files in dir whose PID is not a live process: what a writer
 * killed between naming and renaming its file left. Best effort. */
static void remove_stale(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    const size_t plen = strlen(TMP_PREFIX);
    for (struct dirent *e; (e = readdir(d));) {
        const char *n = e->d_name;
        if (strncmp(n, TMP_PREFIX, plen) != 0) continue;
        char *end;
        const long pid = strtol(n + plen, &end, 10);
        if (end == n + plen || *end != '-' || strlen(end + 1) != 6 || pid <= 0) continue;
        if (pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        unlinkat(dirfd(d), n, 0);
    }
    closedir(d);
}

/* fsync of a folder, so that a rename in it survives a crash (best effort: some file systems
 * refuse to open a folder for this). */
static void sync_dir(const char *dir) {
    const int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

/* The temporary file's path, dir/.recur.tmp-PID-XXXXXX, malloc'd (XXXXXX to fill in). */
static char *tmp_name(const char *dir) {
    const size_t len = strlen(dir) + sizeof TMP_PREFIX + 32;
    char *t = malloc(len);
    if (t) snprintf(t, len, "%s/" TMP_PREFIX "%ld-XXXXXX", dir, (long)getpid());
    return t;
}

/* Gives the O_TMPFILE fd the name tmp (XXXXXX filled in), retrying on a clash. */
static bool link_tmpfile(int fd, char *tmp) {
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    static const char chars[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    const size_t len = strlen(tmp);
    for (unsigned attempt = 0; attempt < 100; attempt++) {
        unsigned v = (unsigned)getpid() * 2654435761u ^ (unsigned)fd * 40503u ^ attempt * 97u;
        for (size_t i = len - 6; i < len; i++, v /= 36) tmp[i] = chars[v % 36];
        if (linkat(AT_FDCWD, proc, AT_FDCWD, tmp, AT_SYMLINK_FOLLOW) == 0) return true;
        if (errno != EEXIST) return false;
    }
    errno = EEXIST;
    return false;
}

bool rio_replace_ex(const char *path, bool (*write)(void *arg, struct rio_writer *w), void *arg,
                    size_t *n_written, bool use_tmpfile) {
    if (n_written) *n_written = 0;
    struct stat old;
    bool exists = false;
    char *target = rio_replace_target(path, &old, &exists);
    if (!target) return false;
    char *dir = dir_of(target), *tmp = dir ? tmp_name(dir) : NULL;
    bool ok = false, named = false;
    int fd = -1;
    FILE *f = NULL;
    if (!dir || !tmp) {
        rcore_error_set("%s: out of memory", path);
        goto done;
    }
    remove_stale(dir);
    const mode_t mode = exists ? (old.st_mode & 07777) : 0666;
    if (use_tmpfile) fd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, mode);
    if (fd < 0) { /* no O_TMPFILE here: a named file from the start */
        fd = mkstemp(tmp);
        if (fd < 0) {
            rcore_error_set("%s: cannot create a file in %s: %s", path, dir, strerror(errno));
            goto done;
        }
        named = true;
        if (!exists) { /* mkstemp made it 0600: what a new file would get instead */
            const mode_t mask = umask(0);
            umask(mask);
            fchmod(fd, 0666 & ~mask);
        }
    }
    if (exists && fchmod(fd, mode) != 0) {
        rcore_error_set("%s: cannot set the mode %o: %s", path, (unsigned)mode, strerror(errno));
        goto done;
    }
    if (!(f = fdopen(fd, "wb"))) {
        rcore_error_set("%s: %s", path, strerror(errno));
        goto done;
    }
    fd = -1; /* f owns it */
    struct rio_writer w;
    rio_writer_file(&w, f);
    if (!write(arg, &w)) {
        rcore_error_prefix("%s", path);
        goto done;
    }
    /* the bytes on disk before a name points at them */
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) {
        rcore_error_set("%s: writing failed: %s", path, strerror(errno));
        goto done;
    }
    if (!named) {
        if (!link_tmpfile(fileno(f), tmp)) {
            rcore_error_set("%s: cannot name the new file in %s: %s", path, dir, strerror(errno));
            goto done;
        }
        named = true;
    }
    const int err = fclose(f) != 0 ? errno : 0;
    f = NULL;
    if (err) {
        rcore_error_set("%s: closing failed: %s", path, strerror(err));
        goto done;
    }
    if (rename(tmp, target) != 0) {
        rcore_error_set("%s: cannot rename %s over %s: %s", path, tmp, target, strerror(errno));
        goto done;
    }
    named = false; /* it is the target now */
    sync_dir(dir); /* and the rename itself */
    if (n_written) *n_written = w.n_done;
    ok = true;
done:
    if (f) fclose(f);
    if (fd >= 0) close(fd);
    if (named) unlink(tmp);
    free(dir);
    free(tmp);
    free(target);
    return ok;
}

bool rio_replace(const char *path, bool (*write)(void *arg, struct rio_writer *w), void *arg,
                 size_t *n_written) {
    return rio_replace_ex(path, write, arg, n_written, true);
}
