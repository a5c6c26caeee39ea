/*
 * test_log.c -- the log line format, escaping, one write per line,
 * rate limiting and URI masking.
 *
 * stderr is pointed at a temporary file around each log_at() call and the
 * bytes written are read back.
 */
#include "base/clock.h"
#include "base/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

static char tmpl[] = "/tmp/test_log.XXXXXX";
static int cap_fd = -1, saved_stderr = -1;

/* Send stderr to a fresh temporary file. */
static void capture_begin(void)
{
    char path[sizeof tmpl];
    memcpy(path, tmpl, sizeof tmpl);
    cap_fd = mkstemp(path);
    if (cap_fd < 0) {
        perror("mkstemp");
        exit(2);
    }
    unlink(path);
    fflush(stderr);
    saved_stderr = dup(STDERR_FILENO);
    dup2(cap_fd, STDERR_FILENO);
}

/* Restore stderr; return what was written (static buffer). */
static const char *capture_end(size_t *len)
{
    static char buf[1 << 20];
    dup2(saved_stderr, STDERR_FILENO);
    close(saved_stderr);
    off_t n = lseek(cap_fd, 0, SEEK_END);
    if (n < 0 || (size_t)n >= sizeof buf)
        n = sizeof buf - 1;
    ssize_t r = pread(cap_fd, buf, (size_t)n, 0);
    close(cap_fd);
    buf[r > 0 ? r : 0] = '\0';
    if (len)
        *len = r > 0 ? (size_t)r : 0;
    return buf;
}

/* "YYYY-MM-DDTHH:MM:SS.mmmZ " at p? Fills the ms since the epoch. */
static int parse_time(const char *p, uint64_t *ms)
{
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    int msec = -1;
    char z = 0, sp = 0;
    if (strlen(p) < 25 || p[4] != '-' || p[7] != '-' || p[10] != 'T' || p[13] != ':' ||
        p[16] != ':' || p[19] != '.')
        return -1;
    if (sscanf(p, "%4d-%2d-%2dT%2d:%2d:%2d.%3d%c%c", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
               &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &msec, &z, &sp) != 9)
        return -1;
    if (z != 'Z' || sp != ' ' || msec < 0 || msec > 999)
        return -1;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    *ms = (uint64_t)timegm(&tm) * 1000u + (uint64_t)msec;
    return 0;
}

static void test_levels(void)
{
    enum log_level l = LOG_LEVEL_ERROR;
    CHECK(log_parse_level("debug", &l) == 0 && l == LOG_LEVEL_DEBUG);
    CHECK(log_parse_level("info", &l) == 0 && l == LOG_LEVEL_INFO);
    CHECK(log_parse_level("warn", &l) == 0 && l == LOG_LEVEL_WARN);
    CHECK(log_parse_level("error", &l) == 0 && l == LOG_LEVEL_ERROR);
    l = LOG_LEVEL_WARN;
    CHECK(log_parse_level("INFO", &l) == -1 && l == LOG_LEVEL_WARN);
    CHECK(log_parse_level("warning", &l) == -1);
    CHECK(log_parse_level("", &l) == -1);
    CHECK(log_parse_level(NULL, &l) == -1);

    CHECK(log_get_level() == LOG_LEVEL_INFO); /* the default */
    log_set_level(LOG_LEVEL_ERROR);
    CHECK(log_get_level() == LOG_LEVEL_ERROR);
    log_set_level((enum log_level)42); /* ignored */
    CHECK(log_get_level() == LOG_LEVEL_ERROR);

    /* below the level: nothing written */
    capture_begin();
    log_info("t", "hidden", "%s", "x");
    log_warn("t", "hidden", NULL);
    log_debug("t", "hidden", NULL);
    log_error("t", "shown", NULL);
    size_t n;
    const char *out = capture_end(&n);
    CHECK(strstr(out, "hidden") == NULL);
    CHECK(strstr(out, "level=error mod=t msg=\"shown\"\n") != NULL);

    log_set_level(LOG_LEVEL_DEBUG);
    capture_begin();
    log_debug("t", "dbg", NULL);
    out = capture_end(&n);
    CHECK(strstr(out, " level=debug mod=t msg=\"dbg\"\n") != NULL);
    log_set_level(LOG_LEVEL_INFO);
}

static void test_format(void)
{
    uint64_t before = clock_now_ms();
    capture_begin();
    log_info("wal", "segment rolled", "seg=%u bytes=%llu", 12u, 67108864ull);
    size_t n;
    const char *out = capture_end(&n);
    uint64_t after = clock_now_ms();

    uint64_t t = 0;
    CHECK(parse_time(out, &t) == 0);
    CHECK(t >= before && t <= after);
    CHECK_STR(out + 24, " level=info mod=wal msg=\"segment rolled\" seg=12 bytes=67108864\n");
    CHECK(n == strlen(out));

    /* fmt NULL: no trailing space */
    capture_begin();
    log_warn("amqp", "connection lost", NULL);
    log_warn("amqp", "connection lost", NULL);
    out = capture_end(&n);
    CHECK(strlen(out) == 2 * (24 + strlen(" level=warn mod=amqp msg=\"connection lost\"\n")));
    CHECK(strstr(out, " level=warn mod=amqp msg=\"connection lost\"\n2") != NULL);

    /* escaping in msg: quote, backslash, control characters; UTF-8 kept */
    capture_begin();
    log_error("cfg", "bad \"x\" \\ \n\r\t\x01\x7f \xc3\xa9", "k=%d", 1);
    out = capture_end(&n);
    CHECK_STR(out + 24, " level=error mod=cfg msg=\"bad \\\"x\\\" \\\\ \\n\\r\\t\\x01\\x7f "
                        "\xc3\xa9\" k=1\n");

    /* control bytes from the key=value part cannot split the line */
    capture_begin();
    log_info("r", "m", "queue=%s", "a\nb");
    out = capture_end(&n);
    CHECK_STR(out + 24, " level=info mod=r msg=\"m\" queue=a\\nb\n");

    /* NULL msg and mod do not crash */
    capture_begin();
    log_at(LOG_LEVEL_INFO, NULL, NULL, NULL);
    out = capture_end(&n);
    CHECK_STR(out + 24, " level=info mod=- msg=\"\"\n");

    /* errno survives logging */
    errno = ENOSPC;
    capture_begin();
    log_info("t", "keep errno", NULL);
    capture_end(NULL);
    CHECK(errno == ENOSPC);
}

static void test_long_line(void)
{
    static char big[10000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';

    capture_begin();
    log_info("t", big, NULL);
    size_t n;
    const char *out = capture_end(&n);
    CHECK(n <= 4096);
    CHECK(n > 4000);
    CHECK(n >= 4 && memcmp(out + n - 4, "...\n", 4) == 0);
    CHECK(memchr(out, '\n', n) == out + n - 1);

    capture_begin();
    log_info("t", "short", "v=%s", big);
    out = capture_end(&n);
    CHECK(n <= 4096);
    CHECK(n >= 4 && memcmp(out + n - 4, "...\n", 4) == 0);
    CHECK(strstr(out, "msg=\"short\" v=aaaa") != NULL);

    /* a cut never splits an escape: only whole "\\\"" pairs before "..." */
    static char quotes[5000];
    memset(quotes, '"', sizeof quotes - 1);
    quotes[sizeof quotes - 1] = '\0';
    capture_begin();
    log_info("t", quotes, NULL);
    out = capture_end(&n);
    const char *m = strstr(out, "msg=\"") + 5;
    size_t body = (size_t)(out + n - 4 - m);
    CHECK(body % 2 == 0);
    for (size_t i = 0; i < body; i += 2)
        if (m[i] != '\\' || m[i + 1] != '"') {
            CHECK(!"escape split");
            break;
        }
}

/* Several processes log at once into one O_APPEND file: every line whole. */
static void test_no_interleave(void)
{
    char path[sizeof tmpl];
    memcpy(path, tmpl, sizeof tmpl);
    int fd = mkstemp(path);
    if (fd < 0) {
        perror("mkstemp");
        exit(2);
    }
    close(fd);
    fd = open(path, O_RDWR | O_APPEND);
    unlink(path);

    enum { PROCS = 4, LINES = 300 };
    static char payload[1500];
    memset(payload, 'x', sizeof payload - 1);
    payload[sizeof payload - 1] = '\0';
    fflush(stdout);
    fflush(stderr);
    for (int p = 0; p < PROCS; p++) {
        pid_t pid = fork();
        if (pid == 0) {
            dup2(fd, STDERR_FILENO);
            for (int i = 0; i < LINES; i++)
                log_info("child", "line", "p=%d i=%d pad=%.*s end=1", p, i,
                         (int)(i * 5 % 1400), payload);
            _exit(0);
        }
    }
    for (int p = 0; p < PROCS; p++)
        wait(NULL);

    off_t size = lseek(fd, 0, SEEK_END);
    char *buf = malloc((size_t)size + 1);
    ssize_t r = pread(fd, buf, (size_t)size, 0);
    close(fd);
    buf[r > 0 ? r : 0] = '\0';

    int lines = 0, bad = 0;
    for (char *s = buf, *nl; (nl = strchr(s, '\n')); s = nl + 1) {
        *nl = '\0';
        uint64_t t;
        int pp, ii;
        const char *k = strstr(s, " p=");
        if (parse_time(s, &t) != 0 || strncmp(s + 24, " level=info mod=child msg=\"line\" p=", 35) ||
            !k || sscanf(k, " p=%d i=%d", &pp, &ii) != 2 || strcmp(nl - 6, " end=1") != 0)
            bad++;
        lines++;
    }
    CHECK(lines == PROCS * LINES);
    CHECK(bad == 0);
    free(buf);
}

static void test_ratelimit(void)
{
    struct log_ratelimit r = { 0, 0 };
    CHECK(log_ratelimit(&r, 100000, 1000) == 1); /* first event: allowed */
    CHECK(log_ratelimit(&r, 100001, 1000) == 0);
    CHECK(log_ratelimit(&r, 100500, 1000) == 0);
    CHECK(log_ratelimit(&r, 100999, 1000) == 0);
    CHECK(log_ratelimit(&r, 101000, 1000) == 4); /* 3 suppressed + this one */
    CHECK(log_ratelimit(&r, 101001, 1000) == 0);
    CHECK(log_ratelimit(&r, 500000, 1000) == 2);
    CHECK(log_ratelimit(&r, 600000, 1000) == 1); /* nothing suppressed between */
    CHECK(log_ratelimit(&r, 500000, 1000) == 1); /* clock stepped back: allowed */
    CHECK(log_ratelimit(&r, 500000, 0) == 1);    /* interval 0: always */
    CHECK(log_ratelimit(&r, 500000, 0) == 1);

    struct log_ratelimit z = { 0, 0 };
    CHECK(log_ratelimit(&z, 5, 1000) == 1); /* zeroed state: first is allowed */
}

/* log_mask_uri(in) into a roomy buffer gives want. */
#define mask(in, want) mask_at(__LINE__, in, want)
static void mask_at(int line, const char *in, const char *want)
{
    char out[256];
    memset(out, 'Z', sizeof out);
    log_mask_uri(in, out, sizeof out);
    if (strcmp(out, want) != 0)
        check_failed(__FILE__, line, "log_mask_uri(in) == want",
                     "log_mask_uri(\"%s\") = \"%s\", want \"%s\"", in ? in : "(null)", out,
                     want);
}

static void test_mask(void)
{
    mask("amqp://user:secret@host:5672/vh", "amqp://user:***@host:5672/vh");
    mask("amqps://user:secret@host:5671/vh", "amqps://user:***@host:5671/vh");
    mask("amqp://guest:guest@127.0.0.1:5672/%2f", "amqp://guest:***@127.0.0.1:5672/%2f");
    mask("amqp://user@host:5672/vh", "amqp://user@host:5672/vh");
    mask("amqp://host:5672/vh", "amqp://host:5672/vh");
    mask("amqp://host", "amqp://host");
    mask("amqp://", "amqp://");
    mask("amqp://user:@host/", "amqp://user:***@host/");
    mask("amqp://:pw@host/", "amqp://:***@host/");
    mask("amqp://u:p@ss@host/v", "amqp://u:***@host/v");   /* raw '@' in the password */
    mask("amqp://u:p/ss@host/v", "amqp://u:***@host/v");   /* raw '/' in the password */
    mask("amqp://u:p@[::1]:5672/v", "amqp://u:***@[::1]:5672/v");
    mask("user:pw@host", "user:***@host");
    mask("", "");
    mask(NULL, "");
    mask("@", "@");
    mask(":", ":");
    mask("://", "://");
    mask(":@", ":***@");
    mask("amqp://@", "amqp://@");
    mask("not a uri at all", "not a uri at all");

    /* truncation: always terminated, never past outlen */
    char small[12];
    memset(small, 'Z', sizeof small);
    log_mask_uri("amqp://user:secret@host:5672/vh", small, 10);
    CHECK_STR(small, "amqp://us");
    CHECK(small[10] == 'Z' && small[11] == 'Z');
    memset(small, 'Z', sizeof small);
    log_mask_uri("amqp://u:secret@h", small, sizeof small);
    CHECK_STR(small, "amqp://u:**"); /* secret never shows, even cut */
    log_mask_uri("amqp://u:p@h", small, 1);
    CHECK_STR(small, "");
    small[0] = 'Q';
    log_mask_uri("amqp://u:p@h", small, 0); /* nothing written */
    CHECK(small[0] == 'Q');
    log_mask_uri("amqp://u:p@h", NULL, 10); /* no crash */
}

static void test_now(void)
{
    uint64_t a = clock_now_ms();
    uint64_t t = (uint64_t)time(NULL) * 1000u;
    CHECK(a + 2000 >= t && a <= t + 2000);
    CHECK(a > 1600000000000ull); /* after 2020 */
}

/*
 * A value a publisher chose (a queue name in x-death) cannot fake a
 * key=value pair, a new line, or a line that is not UTF-8: log_quote()
 * keeps it one quoted field, and the line has exactly the keys the caller
 * wrote.
 */
static void test_quote(void)
{
    char qb[LOG_QUOTE_BUF];
    size_t n;
    const char *out;
    const char *evil = "payments\" key=forged\nlevel=error mod=x msg=\"y\\";

    capture_begin();
    log_warn("retry", "message parked", "route=r queue=%s reason=rejected",
             log_quote(qb, sizeof qb, evil, strlen(evil)));
    out = capture_end(&n);
    CHECK(memchr(out, '\n', n) == out + n - 1, "one line: %s", out);
    CHECK_STR(out + 24, " level=warn mod=retry msg=\"message parked\" route=r queue=\"payments\\\" "
                        "key=forged\\nlevel=error mod=x msg=\\\"y\\\\\" reason=rejected\n");
    /* read as logfmt: outside quotes, only the caller's keys start a field */
    {
        int inq = 0, fields = 0;
        for (const char *p = out + 24; *p && *p != '\n'; p++) {
            if (inq && *p == '\\') {
                p++;
                continue;
            }
            if (*p == '"')
                inq = !inq;
            else if (!inq && *p == ' ')
                fields++;
        }
        CHECK(!inq, "quotes balance: %s", out);
        CHECK(fields == 6, "level mod msg route queue reason: %d fields in %s", fields, out);
    }

    /* an ordinary name reads as before: queue="orders.email" */
    CHECK_STR(log_quote(qb, sizeof qb, "orders.email", 12), "\"orders.email\"");
    CHECK_STR(log_quote(qb, sizeof qb, NULL, 5), "\"\"");
    CHECK_STR(LOG_QUOTE_STR("a\"b"), "\"a\\\"b\"");
    CHECK_STR(LOG_QUOTE_STR(NULL), "\"\"");
    CHECK_STR(LOG_QUOTE("abc", 2), "\"ab\"");
    /* len, not the NUL: a short string may hold bytes after it */
    CHECK_STR(log_quote(qb, sizeof qb, "ab\0cd", 5), "\"ab\\x00cd\"");

    /* invalid UTF-8 as \xHH, valid kept, C1 controls and DEL escaped */
    const char *bad = "\xc3\xa9|\xff|\xc3|\xc0\xaf|\xed\xa0\x80|\xf4\x90\x80\x80|\xc2\x9b|\x7f|\xf0\x9f\x98\x80";
    CHECK_STR(log_quote(qb, sizeof qb, bad, strlen(bad)),
              "\"\xc3\xa9|\\xff|\\xc3|\\xc0\\xaf|\\xed\\xa0\\x80|\\xf4\\x90\\x80\\x80|\\xc2\\x9b|\\x7f|"
              "\xf0\x9f\x98\x80\"");
    /* the same rules for the whole key=value part and msg: the line is valid UTF-8 */
    capture_begin();
    log_info("r", "m\xff", "q=%s", "\xe2\x82");
    out = capture_end(&n);
    CHECK_STR(out + 24, " level=info mod=r msg=\"m\\xff\" q=\\xe2\\x82\n");

    /* too long: cut, never inside an escape, still quoted */
    char small[12];
    CHECK_STR(log_quote(small, sizeof small, "abcdefghijklmnop", 16), "\"abcdef...\"");
    CHECK_STR(log_quote(small, sizeof small, "abcdefghi", 9), "\"abcdefghi\"");
    CHECK_STR(log_quote(small, sizeof small, "\"\"\"\"\"\"", 6), "\"\\\"\\\"\\\"...\"");
    CHECK_STR(log_quote(small, sizeof small, "a\x01\x01\x01", 4), "\"a\\x01...\"");
    static char big[300];
    memset(big, '"', sizeof big);
    char full[LOG_QUOTE_BUF];
    CHECK(strlen(log_quote(full, sizeof full, big, 255)) == 2 + 2 * 255, "255 quotes fit");
    memset(big, 0x01, sizeof big);
    CHECK(strlen(log_quote(full, sizeof full, big, 255)) == 2 + 4 * 255, "255 controls fit");
    CHECK(log_quote(small, 5, "abc", 3)[0] == '\0', "too small a buffer: empty");
}

static const struct check_case cases[] = {
    {"levels", test_levels},
    {"format", test_format},
    {"long_line", test_long_line},
    {"no_interleave", test_no_interleave},
    {"ratelimit", test_ratelimit},
    {"mask", test_mask},
    {"quote", test_quote},
    {"now", test_now},
};

int main(int argc, char **argv)
{
    return CHECK_MAIN(argc, argv, cases);
}
