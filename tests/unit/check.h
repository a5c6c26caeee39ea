/*
 * check.h -- the unit tests' one assertion macro and case runner.
 *
 * Every tests/unit/test_*.c is a plain executable that ctest runs. It lists
 * its cases in a table and hands them to check_main():
 *
 *   static const struct check_case cases[] = {
 *       {"boundaries", test_boundaries},
 *       {"random", test_random},
 *   };
 *   int main(int argc, char **argv) { return CHECK_MAIN(argc, argv, cases); }
 *
 *   build/test_wheel              run every case
 *   build/test_wheel random       run one case (several names: those cases)
 *   build/test_wheel --list       print the case names
 *
 * CHECK(cond) and CHECK(cond, "fmt", ...) report file:line, the condition
 * and an optional message, count the failure and carry on; a case that
 * cannot go on after a failure returns itself. After 50 failures the test
 * stops: the first ones are the ones that explain. Exit status 0 when
 * every check passed, 1 otherwise, 2 for an unknown case name.
 */
#ifndef DB_TEST_CHECK_H
#define DB_TEST_CHECK_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_failures;

static inline void check_failed(const char *file, int line, const char *cond, const char *fmt,
                                ...) __attribute__((format(printf, 4, 5)));

#include <stdarg.h>
static inline void check_failed(const char *file, int line, const char *cond, const char *fmt,
                                ...)
{
    fprintf(stderr, "%s:%d: CHECK(%s) failed", file, line, cond);
    if (fmt && fmt[0] == ' ')
        fmt++; /* CHECK() puts one space before the caller's format */
    if (fmt && *fmt) {
        va_list ap;
        fputs(": ", stderr);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
    }
    fputc('\n', stderr);
    if (++check_failures >= 50) {
        fprintf(stderr, "too many failures, stopping\n");
        exit(1);
    }
}

#define CHECK(cond, ...)                                                                     \
    do {                                                                                     \
        if (!(cond))                                                                         \
            check_failed(__FILE__, __LINE__, #cond, " " __VA_ARGS__);                         \
    } while (0)

/* Compare two unsigned 64-bit values and print both on failure. */
#define CHECK_U64(got, want)                                                                 \
    do {                                                                                     \
        uint64_t got_ = (uint64_t)(got), want_ = (uint64_t)(want);                           \
        if (got_ != want_)                                                                   \
            check_failed(__FILE__, __LINE__, #got " == " #want, "got %" PRIu64 ", want %" PRIu64, \
                         got_, want_);                                                       \
    } while (0)

#define CHECK_STR(got, want)                                                                 \
    do {                                                                                     \
        const char *got_ = (got), *want_ = (want);                                           \
        if (!got_ || strcmp(got_, want_) != 0)                                               \
            check_failed(__FILE__, __LINE__, #got " == " #want, "got \"%s\", want \"%s\"",   \
                         got_ ? got_ : "(null)", want_);                                     \
    } while (0)

struct check_case {
    const char *name;
    void (*fn)(void);
};

static inline int check_main(int argc, char **argv, const char *suite,
                             const struct check_case *cases, size_t n)
{
    const char *slash = strrchr(suite, '/');
    size_t i;
    int a, ran = 0;

    char name[64];

    if (slash)
        suite = slash + 1;
    snprintf(name, sizeof(name), "%s", suite);
    if (strlen(name) > 2 && strcmp(name + strlen(name) - 2, ".c") == 0)
        name[strlen(name) - 2] = '\0';
    suite = name;
    if (argc > 1 && strcmp(argv[1], "--list") == 0) {
        for (i = 0; i < n; i++)
            printf("%s\n", cases[i].name);
        return 0;
    }
    for (a = 1; a < argc; a++) {
        for (i = 0; i < n && strcmp(cases[i].name, argv[a]) != 0; i++)
            ;
        if (i == n) {
            fprintf(stderr, "%s: no case named \"%s\" (--list shows them)\n", suite, argv[a]);
            return 2;
        }
    }
    for (i = 0; i < n; i++) {
        int want = argc <= 1;
        for (a = 1; a < argc && !want; a++)
            want = strcmp(cases[i].name, argv[a]) == 0;
        if (!want)
            continue;
        int before = check_failures;
        cases[i].fn();
        ran++;
        printf("%s: %-24s %s\n", suite, cases[i].name, check_failures == before ? "ok" : "FAILED");
        fflush(stdout);
    }
    if (check_failures) {
        fprintf(stderr, "%s: %d check(s) failed\n", suite, check_failures);
        return 1;
    }
    printf("%s: %d case(s) ok\n", suite, ran);
    return 0;
}

#define CHECK_MAIN(argc, argv, cases)                                                        \
    check_main(argc, argv, __FILE__, cases, sizeof(cases) / sizeof((cases)[0]))

#endif
