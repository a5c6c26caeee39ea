/*
 * test_strbuf.c -- strbuf grows through many appends and long printf
 * output, stays NUL-terminated, keeps embedded NULs from append, and
 * detach hands out a string even when nothing was appended.
 *
 * Usage: test_strbuf [case...]   (--list names the cases)
 */
#include "delay-bridge/strbuf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static void test_append(void)
{
    struct strbuf b = STRBUF_INIT;
    CHECK(b.p == NULL && b.len == 0);
    for (int i = 0; i < 10000; i++)
        strbuf_puts(&b, "ab");
    CHECK(b.len == 20000);
    CHECK(strlen(b.p) == 20000);
    CHECK(b.cap > b.len);
    CHECK(!memcmp(b.p + 19998, "ab", 3));
    strbuf_append(&b, "x\0y", 3); /* bytes, not a string */
    CHECK(b.len == 20003 && b.p[20001] == '\0' && b.p[20002] == 'y' && b.p[20003] == '\0');
    strbuf_append(&b, NULL, 0);
    CHECK(b.len == 20003);
    strbuf_free(&b);
    CHECK(b.p == NULL && b.len == 0 && b.cap == 0);
}

static void test_printf(void)
{
    struct strbuf b = STRBUF_INIT;
    strbuf_printf(&b, "%d-%s", 42, "x");
    CHECK(!strcmp(b.p, "42-x"));
    /* longer than the spare room: formatted a second time after growing */
    char big[5000];
    memset(big, 'q', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    strbuf_printf(&b, "[%s]", big);
    CHECK(b.len == 4 + 2 + 4999);
    CHECK(b.p[4] == '[' && b.p[b.len - 1] == ']' && b.p[b.len] == '\0');
    strbuf_printf(&b, "%s", "");
    CHECK(b.len == 4 + 2 + 4999);
    strbuf_free(&b);
}

static void test_reset_detach(void)
{
    struct strbuf b = STRBUF_INIT;
    size_t len = 99;
    char *p = strbuf_detach(&b, &len); /* nothing appended: still a string */
    CHECK(p && p[0] == '\0' && len == 0);
    free(p);

    strbuf_puts(&b, "hello");
    size_t cap = b.cap;
    strbuf_reset(&b);
    CHECK(b.len == 0 && b.p && b.p[0] == '\0' && b.cap == cap);
    strbuf_puts(&b, "world");
    p = strbuf_detach(&b, &len);
    CHECK(!strcmp(p, "world") && len == 5);
    CHECK(b.p == NULL && b.len == 0 && b.cap == 0);
    free(p);
    strbuf_free(&b); /* after detach: harmless */
}

/* AMQP strings are bytes: made valid UTF-8 for JSON, well-formed text kept as it is. */
static void test_utf8(void)
{
    struct strbuf b = STRBUF_INIT;

    strbuf_append_utf8(&b, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 14);
    CHECK(b.len == 14 && memcmp(b.p, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 14) == 0);
    strbuf_reset(&b);
    strbuf_append_utf8(&b, "\xff\xfe\"\\", 4); /* the key that broke /pending */
    CHECK_STR(b.p, "\xef\xbf\xbd\xef\xbf\xbd\"\\");
    strbuf_reset(&b);
    /* overlong, surrogate, truncated, beyond U+10FFFF: each bad byte replaced */
    strbuf_append_utf8(&b, "a\xc0\xaf" "b\xed\xa0\x80" "c\xe2\x82" "d\xf4\x90\x80\x80", 16);
    CHECK(strncmp(b.p, "a\xef\xbf\xbd\xef\xbf\xbd" "b", 8) == 0, "got %s", b.p);
    CHECK(strstr(b.p, "c") && strstr(b.p, "d"));
    for (size_t i = 0; i < b.len; i++)
        CHECK((unsigned char)b.p[i] != 0xc0 && (unsigned char)b.p[i] != 0xed);
    strbuf_free(&b);
}

static const struct check_case cases[] = {
    {"utf8", test_utf8},
    { "append", test_append },
    { "printf", test_printf },
    { "reset_detach", test_reset_detach },
};

int main(int argc, char **argv)
{
    return CHECK_MAIN(argc, argv, cases);
}
