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

static const struct check_case cases[] = {
    { "append", test_append },
    { "printf", test_printf },
    { "reset_detach", test_reset_detach },
};

int main(int argc, char **argv)
{
    return CHECK_MAIN(argc, argv, cases);
}
