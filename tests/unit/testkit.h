/*
 * testkit.h -- what the unit tests, the simulator and the benchmarks share
 * besides check.h: the one random generator, numbers (the seed first) from
 * the environment, and removing a scratch directory.
 *
 * The generator is splitmix64 (Steele, Lea and Flood, "Fast splittable
 * pseudorandom number generators", 2014): one 64-bit state, any seed (0
 * included) gives a full-period sequence of well-mixed values, and the
 * state is a plain uint64_t the caller owns, so a test restarts it from
 * its seed at each case and a failing case reruns alone. It is for test
 * inputs only; the daemon's randomness comes from clock_rand64().
 *
 *   uint64_t st = tk_seed("test_idmap", 20240601);   TEST_SEED or the default, printed once
 *   uint64_t x = tk_rand(&st);                        the next value
 *   tk_fill(buf, n, &st);                             n random bytes
 *
 * Numbers from the environment (TEST_SEED, TEST_OPS, ...) are decimal or
 * 0x hex; anything else stops the test with exit 2 and the variable named,
 * so a typo never runs the default seed unnoticed.
 *
 * tk_rm_rf(path) removes a directory tree the test made (no symlink is
 * followed), and does nothing when it is absent.
 *
 * Header-only (static inline): each test is one executable, and the
 * simulator and the benchmarks include it from beside them
 * ("../unit/testkit.h").
 */
#ifndef DB_TEST_TESTKIT_H
#define DB_TEST_TESTKIT_H

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* splitmix64: advance *st and return the next value. */
static inline uint64_t tk_rand(uint64_t *st)
{
    uint64_t z = (*st += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* splitmix64's output function alone: a bijective scramble of z (no state). */
static inline uint64_t tk_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* n random bytes into buf from *st. */
static inline void tk_fill(uint8_t *buf, size_t n, uint64_t *st)
{
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = tk_rand(st);
        memcpy(buf + i, &v, n - i < 8 ? n - i : 8);
    }
}

/* $name as an unsigned number (decimal or 0x hex), def when unset or empty; exit 2 when not a number. */
static inline uint64_t tk_env_u64(const char *suite, const char *name, uint64_t def)
{
    const char *s = getenv(name);
    char *end;
    if (!s || !*s)
        return def;
    errno = 0;
    uint64_t v = strtoull(s, &end, 0);
    if (errno || *end || *s == '-') {
        fprintf(stderr, "%s: %s=\"%s\" is not a number\n", suite, name, s);
        exit(2);
    }
    return v;
}

/* $TEST_SEED or def, printed ("suite: TEST_SEED=n") at the first call, so a failure can be rerun. */
static inline uint64_t tk_seed(const char *suite, uint64_t def)
{
    static int printed;
    uint64_t seed = tk_env_u64(suite, "TEST_SEED", def);
    if (!printed) {
        printf("%s: TEST_SEED=%" PRIu64 "\n", suite, seed);
        fflush(stdout);
        printed = 1;
    }
    return seed;
}

/* Remove the tree at path, depth first, following no symlink; nothing when it is absent. */
static inline void tk_rm_rf(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        struct dirent *de;
        while (d && (de = readdir(d)) != NULL) {
            char sub[PATH_MAX];
            if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                continue;
            if (snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name) < (int)sizeof(sub))
                tk_rm_rf(sub);
        }
        if (d)
            closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

#endif
