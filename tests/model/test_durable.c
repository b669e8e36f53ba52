/*
 * State files survive a crash of the writer: a child process saves two different states over
 * one path, again and again, and is killed (SIGKILL) at random moments; after every kill the
 * file must be, byte for byte, one of the two complete files, and load.
 *   test_durable MODEL [SEED]
 * The kill moments come from SEED (else $RECUR_TEST_SEED, else the clock), printed first so
 * that a failing run's moments can be asked for again (the kills still land where the
 * scheduler has the child then, so a replay is near, not exact).
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

    int seen_a = 0, seen_b = 0, torn = 0, unloadable = 0;
    const int kills = 60;
    for (int k = 0; k < kills; k++) {
        const pid_t child = fork();
        REQUIRE(child >= 0);
        if (child == 0) {
            for (;;) {
                recur_state_save_file(b, path, ta, 12);
                recur_state_save_file(a, path, ta, 6);
            }
        }
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        struct timespec ts = {0, (long)(200000 + (seed >> 33) % 20000000)}; /* 0.2-20 ms */
        nanosleep(&ts, NULL);
        kill(child, SIGKILL);
        int st;
        waitpid(child, &st, 0);
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
