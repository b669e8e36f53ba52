/*
 * Tests of src/io/io_file.c: reading refuses what is not a regular file without blocking
 * (a FIFO, a folder, a device), and a replacement writes through symbolic links, refuses
 * non-regular destinations, keeps the old file's mode, leaves the old file whole when the
 * writer fails, leaves no temporary file behind when the writer is killed, and replaces a file
 * whose name is as long as the file system allows (the temporary name stays short).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/core.h"
#include "io/io.h"
#include "test.h"

static char dir[64];

static void path_in(char *out, size_t n, const char *name) {
    snprintf(out, n, "%s/%s", dir, name);
}

static bool write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    const bool ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok;
}

/* The file's contents (up to 255 bytes) in buf; false when it cannot be read. */
static bool read_text(const char *path, char *buf, size_t n) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    const size_t got = fread(buf, 1, n - 1, f);
    buf[got] = '\0';
    fclose(f);
    return true;
}

/* Entries of the test folder whose name contains ".tmp-". */
static int temp_files(void) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += strstr(e->d_name, ".tmp-") != NULL;
    if (d) closedir(d);
    return n;
}

struct payload {
    const char *text;
    bool fail; /* the writer reports a failure after writing */
    bool die;  /* the writer kills its own process after writing */
};

static bool write_payload(void *arg, struct rio_writer *w) {
    const struct payload *p = arg;
    if (!rio_write(w, p->text, strlen(p->text))) return false;
    if (p->die) {
        fflush((FILE *)w->impl); /* the bytes reach the file: a real partial write */
        raise(SIGKILL);
    }
    if (p->fail) {
        rcore_error_set("the writer gave up");
        return false;
    }
    return true;
}

/* ---- reading ----------------------------------------------------------------------------- */

static void test_open_regular(void) {
    char p[128], buf[64];
    path_in(p, sizeof p, "plain");
    REQUIRE(write_text(p, "hello"));
    struct stat st;
    const int fd = rio_open_regular(p, &st);
    CHECK(fd >= 0 && st.st_size == 5);
    if (fd >= 0) {
        CHECK(read(fd, buf, sizeof buf) == 5); /* blocking again, reads as usual */
        CHECK((fcntl(fd, F_GETFL) & O_NONBLOCK) == 0);
        close(fd);
    }
    FILE *f = rio_fopen_regular(p);
    CHECK(f && fgetc(f) == 'h');
    if (f) fclose(f);

    /* a FIFO without a writer: refused at once (a plain open would block forever; the alarm
       kills the test if it does) */
    char fifo[128];
    path_in(fifo, sizeof fifo, "fifo");
    REQUIRE(mkfifo(fifo, 0600) == 0);
    alarm(10);
    rcore_error_clear();
    CHECK(rio_open_regular(fifo, NULL) < 0);
    CHECK_ERR("not a regular file (a FIFO)");
    CHECK_ERR(fifo);
    CHECK(rio_fopen_regular(fifo) == NULL);
    alarm(0);

    CHECK(rio_open_regular(dir, NULL) < 0);
    CHECK_ERR("not a regular file (a folder)");
    CHECK(rio_open_regular("/dev/null", NULL) < 0);
    CHECK_ERR("a character device");
    path_in(p, sizeof p, "missing");
    CHECK(rio_open_regular(p, NULL) < 0);
    CHECK_ERR("cannot open: No such file or directory");
    CHECK(rio_open_regular(NULL, NULL) < 0);
    unlink(fifo);
}

/* ---- replacing --------------------------------------------------------------------------- */

static void test_replace_plain(void) {
    char p[128], buf[64];
    path_in(p, sizeof p, "state");
    unlink(p);
    struct payload one = {"first", false, false}, two = {"second!", false, false};
    size_t n = 99;
    CHECK(rio_replace(p, write_payload, &one, &n));
    CHECK(n == 5);
    CHECK(read_text(p, buf, sizeof buf) && strcmp(buf, "first") == 0);
    /* a new file has 0666 less the umask, as fopen gives (the test sets umask 022) */
    struct stat st;
    CHECK(stat(p, &st) == 0 && (st.st_mode & 07777) == 0644);

    /* an existing file keeps its mode, whatever it is */
    const mode_t modes[] = {0600, 0640, 0604, 0755};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        REQUIRE(chmod(p, modes[i]) == 0);
        CHECK(rio_replace(p, write_payload, &two, NULL));
        CHECK_MSG(stat(p, &st) == 0 && (st.st_mode & 07777) == modes[i], "mode %o became %o",
                  (unsigned)modes[i], (unsigned)(st.st_mode & 07777));
        CHECK(read_text(p, buf, sizeof buf) && strcmp(buf, "second!") == 0);
    }
    CHECK(temp_files() == 0);

    /* a writer that fails: the old file stays whole, the error names the path, no leftovers */
    struct payload bad = {"partial", true, false};
    rcore_error_clear();
    CHECK(!rio_replace(p, write_payload, &bad, &n));
    CHECK(n == 0);
    CHECK_ERR("the writer gave up");
    CHECK_ERR(p);
    CHECK(read_text(p, buf, sizeof buf) && strcmp(buf, "second!") == 0);
    CHECK(temp_files() == 0);
    /* the same through the named temporary file */
    CHECK(!rio_replace_ex(p, write_payload, &bad, NULL, false));
    CHECK(read_text(p, buf, sizeof buf) && strcmp(buf, "second!") == 0);
    CHECK(temp_files() == 0);
    CHECK(rio_replace_ex(p, write_payload, &one, NULL, false));
    CHECK(read_text(p, buf, sizeof buf) && strcmp(buf, "first") == 0);
    CHECK(stat(p, &st) == 0 && (st.st_mode & 07777) == 0755);
    CHECK(temp_files() == 0);
    unlink(p);
    CHECK(rio_replace_ex(p, write_payload, &one, NULL, false)); /* new, named: 0644 too */
    CHECK(stat(p, &st) == 0 && (st.st_mode & 07777) == 0644);
    unlink(p);
}

static void test_replace_through_links(void) {
    char target[128], link1[128], link2[128], buf[64];
    path_in(target, sizeof target, "real");
    path_in(link1, sizeof link1, "link1");
    path_in(link2, sizeof link2, "link2");
    REQUIRE(write_text(target, "old"));
    REQUIRE(chmod(target, 0640) == 0);
    REQUIRE(symlink("real", link1) == 0); /* relative, */
    REQUIRE(symlink(link1, link2) == 0);  /* and absolute, in a chain */
    struct payload pl = {"new contents", false, false};
    CHECK(rio_replace(link2, write_payload, &pl, NULL));
    struct stat st;
    CHECK(lstat(link2, &st) == 0 && S_ISLNK(st.st_mode)); /* links stay links */
    CHECK(lstat(link1, &st) == 0 && S_ISLNK(st.st_mode));
    CHECK(read_text(target, buf, sizeof buf) && strcmp(buf, "new contents") == 0);
    CHECK(stat(target, &st) == 0 && (st.st_mode & 07777) == 0640);

    bool exists = true;
    char *t = rio_replace_target(link2, NULL, &exists);
    CHECK(t && exists && strcmp(t, target) == 0); /* link2 -> link1 -> real */
    free(t);

    /* a dangling link: its target is created */
    char dangling[128], made[128];
    path_in(dangling, sizeof dangling, "dangling");
    path_in(made, sizeof made, "made-by-link");
    REQUIRE(symlink("made-by-link", dangling) == 0);
    t = rio_replace_target(dangling, NULL, &exists);
    CHECK(t && !exists);
    free(t);
    CHECK(rio_replace(dangling, write_payload, &pl, NULL));
    CHECK(lstat(dangling, &st) == 0 && S_ISLNK(st.st_mode));
    CHECK(read_text(made, buf, sizeof buf) && strcmp(buf, "new contents") == 0);

    /* a loop */
    char loop_a[128], loop_b[128];
    path_in(loop_a, sizeof loop_a, "loop-a");
    path_in(loop_b, sizeof loop_b, "loop-b");
    REQUIRE(symlink("loop-b", loop_a) == 0 && symlink("loop-a", loop_b) == 0);
    rcore_error_clear();
    CHECK(!rio_replace(loop_a, write_payload, &pl, NULL));
    CHECK_ERR("too many levels of symbolic links");
    CHECK(temp_files() == 0);
    unlink(loop_a), unlink(loop_b), unlink(dangling), unlink(made);
    unlink(link2), unlink(link1), unlink(target);
}

static void test_replace_refuses_non_regular(void) {
    struct payload pl = {"x", false, false};
    char fifo[128], sub[128], link[128];
    path_in(fifo, sizeof fifo, "dest-fifo");
    path_in(sub, sizeof sub, "dest-dir");
    path_in(link, sizeof link, "link-to-null");
    REQUIRE(mkfifo(fifo, 0600) == 0);
    REQUIRE(mkdir(sub, 0700) == 0);
    REQUIRE(symlink("/dev/null", link) == 0);
    struct stat st;
    rcore_error_clear();
    CHECK(!rio_replace(fifo, write_payload, &pl, NULL));
    CHECK_ERR("is a FIFO, not a regular file; refusing to replace it");
    CHECK(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode));
    CHECK(!rio_replace(sub, write_payload, &pl, NULL));
    CHECK_ERR("is a folder");
    CHECK(lstat(sub, &st) == 0 && S_ISDIR(st.st_mode));
    /* a device, directly and through a link: never replaced by a regular file (as root, a
       rename over /dev/null would succeed and break the machine's /dev/null) */
    CHECK(!rio_replace("/dev/null", write_payload, &pl, NULL));
    CHECK_ERR("/dev/null is a character device");
    CHECK(!rio_replace(link, write_payload, &pl, NULL));
    CHECK_ERR("a character device");
    CHECK(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode));
    CHECK(!rio_check_replaceable(fifo));
    CHECK(!rio_check_replaceable("/dev/full"));
    CHECK_ERR("/dev/full is a character device");
    CHECK(temp_files() == 0);
    unlink(fifo), rmdir(sub), unlink(link);
}

static void test_check_replaceable(void) {
    char p[128];
    path_in(p, sizeof p, "fresh");
    CHECK(rio_check_replaceable(p));
    CHECK(access(p, F_OK) != 0); /* the check creates nothing */
    path_in(p, sizeof p, "no-such-folder/x");
    rcore_error_clear();
    CHECK(!rio_check_replaceable(p));
    CHECK_ERR("cannot create a file in");
    CHECK_ERR("No such file or directory");
    CHECK(!rio_check_replaceable(""));
    CHECK(!rio_check_replaceable(NULL));
}

/* Forks a writer that kills itself after writing part of the file; returns once it died. */
static void killed_writer(const char *path, bool use_tmpfile) {
    const pid_t pid = fork();
    if (pid == 0) {
        struct payload pl = {"torn", false, true};
        rio_replace_ex(path, write_payload, &pl, NULL, use_tmpfile);
        _exit(0); /* not reached: the writer kills itself */
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

static void test_killed_writers(void) {
    char p[128], buf[64];
    path_in(p, sizeof p, "killed");
    REQUIRE(write_text(p, "intact"));
    /* O_TMPFILE: the dead writer's file never had a name */
    for (int i = 0; i < 5; i++) killed_writer(p, true);
    CHECK(temp_files() == 0);
    CHECK(read_text(p, buf, sizeof buf) && strcmp(buf, "intact") == 0);

    /* a named temporary file is left by a dead writer, and the next writer removes it: after
       three, only the last one's is there */
    killed_writer(p, false);
    CHECK(temp_files() == 1);
    for (int i = 0; i < 2; i++) killed_writer(p, false);
    CHECK(temp_files() == 1);
    CHECK(read_text(p, buf, sizeof buf) && strcmp(buf, "intact") == 0);
    /* a live writer's file (this process's pid is alive: the name says so) is left alone */
    char live[160];
    snprintf(live, sizeof live, "%s/.recur.tmp-%ld-abcdef", dir, (long)getppid());
    REQUIRE(write_text(live, "busy"));
    struct payload pl = {"replaced", false, false};
    CHECK(rio_replace(p, write_payload, &pl, NULL));
    CHECK(temp_files() == 1); /* only the live one */
    CHECK(access(live, F_OK) == 0);
    CHECK(read_text(p, buf, sizeof buf) && strcmp(buf, "replaced") == 0);
    /* names that only look alike are not touched */
    char other[160];
    snprintf(other, sizeof other, "%s/.recur.tmp-notapid", dir);
    REQUIRE(write_text(other, "keep"));
    CHECK(rio_replace(p, write_payload, &pl, NULL));
    CHECK(access(other, F_OK) == 0);
    unlink(other), unlink(live), unlink(p);
}

/* A name of NAME_MAX (255) bytes: the temporary file beside it must not be named after it, or
 * its name would be too long for the folder. Both ways, O_TMPFILE and named from the start. */
static void test_replace_longest_name(void) {
    char name[256], p[512], buf[64];
    memset(name, 'n', 255);
    name[255] = '\0';
    snprintf(p, sizeof p, "%s/%s", dir, name);
    for (int named = 0; named < 2; named++) {
        struct payload pl = {named ? "named" : "tmpfile", false, false};
        rcore_error_clear();
        CHECK_MSG(rio_replace_ex(p, write_payload, &pl, NULL, !named), "%s", rcore_error_get());
        CHECK(read_text(p, buf, sizeof buf) && strcmp(buf, pl.text) == 0);
        CHECK(temp_files() == 0);
    }
    unlink(p);
}

int main(void) {
    umask(022);
    snprintf(dir, sizeof dir, "/tmp/test_io_file-XXXXXX");
    REQUIRE(mkdtemp(dir) != NULL);
    RUN(test_open_regular);
    RUN(test_replace_plain);
    RUN(test_replace_through_links);
    RUN(test_replace_refuses_non_regular);
    RUN(test_check_replaceable);
    RUN(test_killed_writers);
    RUN(test_replace_longest_name);
    rmdir(dir);
    return test_finish("test_io_file");
}
