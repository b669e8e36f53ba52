/*
 * State files survive a crash of the writer: a child process saves two different states over
 * one path, again and again, and is killed (SIGKILL) at random moments; after every kill the
 * file must be, byte for byte, one of the two complete files, and load.
 *   test_durable MODEL [SEED]
 * The kill moments come from SEED (else $RECUR_TEST_SEED, else the clock), printed first so
 * that a failing run's moments can be asked for again (the kills still land where the
 * scheduler has the child then, so a replay is near, not exact).
 * A kill is placed by the child's progress, not by the clock alone: the child reports each
 * save it finishes through a pipe, and the parent waits for a random number of them (so the
 * file last written is sometimes the old one, sometimes the new), then sleeps a random part
 * of a save's measured time (so the kill lands inside a write, or just after one). A slow
 * disk or a sanitizer's slowdown stretches the save and the window with it.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "recur.h"
#define TEST_LAST_ERROR recur_last_error
#include "file_util.h"
#include "test.h"

int main(int argc, char **argv) {
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: test_durable MODEL [SEED]\n");
        return 2;
    }
    const char *seed_text = argc == 3 ? argv[2] : getenv("RECUR_TEST_SEED");
    unsigned long long seed = (unsigned long long)time(NULL);
    if (seed_text) {
        char *end;
        errno = 0;
        seed = strtoull(seed_text, &end, 10);
        if (errno || *seed_text < '0' || *seed_text > '9' || *end) {
            fprintf(stderr, "test_durable: the seed '%s' is not a whole number\n", seed_text);
            return 2;
        }
    }
    printf("test_durable: seed %llu (replay: test_durable MODEL %llu, or RECUR_TEST_SEED=%llu)\n",
           seed, seed, seed);
    fflush(stdout);
    const unsigned long long seed0 = seed;
    struct recur_model *model = recur_model_load_from_file(argv[1], recur_model_default_params());
    REQUIRE(model);
    struct recur_context_params p = recur_context_default_params();
    p.n_threads = p.n_threads_batch = 1; /* no worker threads: the child is a fork */
    struct recur_context *a = recur_init_from_model(model, p), *b = recur_init_from_model(model, p);
    struct recur_context *reader = recur_init_from_model(model, p); /* loads, leaving a, b be */
    REQUIRE(a && b && reader);
    recur_token ta[12] = {5, 9, 14, 3, 77, 2, 8, 100, 41, 6, 7, 12};
    REQUIRE(recur_decode(a, recur_batch_get_one(ta, 6)) == 0);
    REQUIRE(recur_decode(b, recur_batch_get_one(ta, 12)) == 0);

    char dir[] = "/tmp/recur-durable-XXXXXX";
    REQUIRE(mkdtemp(dir));
    char path[256], pa[256], pb[256];
    snprintf(path, sizeof path, "%s/state.bin", dir);
    snprintf(pa, sizeof pa, "%s/a.bin", dir);
    snprintf(pb, sizeof pb, "%s/b.bin", dir);
    REQUIRE(recur_state_save_file(a, pa, ta, 6) && recur_state_save_file(b, pb, ta, 12));
    size_t na, nb;
    char *fa = file_read(pa, &na), *fb = file_read(pb, &nb);
    REQUIRE(fa && fb && (na != nb || memcmp(fa, fb, na) != 0));
    REQUIRE(recur_state_save_file(a, path, ta, 6));

    /* one save's time on this disk and build, the scale of the kill window */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < 4; i++) REQUIRE(recur_state_save_file(b, pb, ta, 12));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const long long save_ns =
        ((t1.tv_sec - t0.tv_sec) * 1000000000ll + (t1.tv_nsec - t0.tv_nsec)) / 4 + 1;

    int seen_a = 0, seen_b = 0, torn = 0, unloadable = 0;
    const int kills = 60;
    for (int k = 0; k < kills; k++) {
        int done[2];
        REQUIRE(pipe(done) == 0);
        const pid_t child = fork();
        REQUIRE(child >= 0);
        if (child == 0) {
            close(done[0]);
            for (;;) {
                recur_state_save_file(b, path, ta, 12);
                if (write(done[1], "b", 1) != 1) _exit(1);
                recur_state_save_file(a, path, ta, 6);
                if (write(done[1], "a", 1) != 1) _exit(1);
            }
        }
        close(done[1]);
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        const int wait_saves = (int)((seed >> 33) % 4); /* 0-3 finished saves */
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        const long long sleep_ns = (long long)((seed >> 33) % 1000) * save_ns / 1000;
        for (int i = 0; i < wait_saves; i++) {
            char c;
            REQUIRE(read(done[0], &c, 1) == 1);
        }
        struct timespec ts = {(time_t)(sleep_ns / 1000000000), (long)(sleep_ns % 1000000000)};
        nanosleep(&ts, NULL);
        kill(child, SIGKILL);
        int st;
        waitpid(child, &st, 0);
        close(done[0]);
        size_t n;
        char *got = file_read(path, &n);
        const bool is_a = got && n == na && memcmp(got, fa, na) == 0;
        const bool is_b = got && n == nb && memcmp(got, fb, nb) == 0;
        seen_a += is_a;
        seen_b += is_b;
        torn += !is_a && !is_b;
        free(got);
        recur_token back[16];
        size_t n_back = 0;
        unloadable += !recur_state_load_file(reader, path, back, 16, &n_back) ||
                      (n_back != 6 && n_back != 12);
    }
    CHECK_MSG(torn == 0 && unloadable == 0, "%d torn, %d unloadable of %d kills (seed %llu)", torn,
              unloadable, kills, seed0);
    CHECK_MSG(seen_a > 0 && seen_b > 0,
              "kills found the old file %d times, the new %d times (seed %llu)", seen_a, seen_b,
              seed0);
    fprintf(stderr, "test_durable: %d kills: old file %d times, new file %d times\n", kills, seen_a,
            seen_b);
    /* clean up, leftover temporary files of killed writers included */
    DIR *d = opendir(dir);
    int leftovers = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char f[512];
        snprintf(f, sizeof f, "%s/%s", dir, e->d_name);
        leftovers += strstr(e->d_name, ".tmp-") != NULL;
        unlink(f);
    }
    if (d) closedir(d);
    rmdir(dir);
    fprintf(stderr, "test_durable: %d temporary files left by killed writers\n", leftovers);
    free(fa);
    free(fb);
    recur_free(a);
    recur_free(b);
    recur_free(reader);
    recur_model_free(model);
    return test_finish("test_durable");
}
