/*
 * test_utf8.c -- base/utf8.c against RFC 3629's table: every boundary of
 * every row, overlong forms, surrogates, past U+10FFFF, truncated tails.
 */
#include "base/utf8.h"

#include <string.h>

#include "check.h"

#define OK(s) CHECK(utf8_valid(s, sizeof(s) - 1), "valid: %s", #s)
#define BAD(s) CHECK(!utf8_valid(s, sizeof(s) - 1), "invalid: %s", #s)

static void test_table(void)
{
    OK("");
    OK("orders.email");
    OK("\x7f");
    OK("\xc2\x80");         /* U+0080 */
    OK("\xdf\xbf");         /* U+07FF */
    OK("\xe0\xa0\x80");     /* U+0800 */
    OK("\xed\x9f\xbf");     /* U+D7FF */
    OK("\xee\x80\x80");     /* U+E000 */
    OK("\xef\xbf\xbd");     /* U+FFFD */
    OK("\xf0\x90\x80\x80"); /* U+10000 */
    OK("\xf4\x8f\xbf\xbf"); /* U+10FFFF */
    BAD("\x80");            /* a continuation alone */
    BAD("\xc0\xaf");        /* overlong '/' */
    BAD("\xc1\xbf");
    BAD("\xe0\x9f\xbf");    /* overlong */
    BAD("\xed\xa0\x80");    /* U+D800, a surrogate */
    BAD("\xf0\x8f\xbf\xbf"); /* overlong */
    BAD("\xf4\x90\x80\x80"); /* U+110000 */
    BAD("\xf5\x80\x80\x80");
    BAD("\xff");
    BAD("ab\xe2\x82");      /* truncated */
    BAD("\xe2\x28\xa1");    /* second byte not a continuation */
    CHECK(utf8_char((const unsigned char *)"\xe2\x82\xac", 3) == 3);
    CHECK(utf8_char((const unsigned char *)"\xe2\x82\xac", 2) == 0, "the caller's n bounds it");
    CHECK(utf8_valid("a\0b", 3), "NUL is valid UTF-8 (callers that cannot take one check)");
}

static const struct check_case cases[] = {
    {"table", test_table},
};

int main(int argc, char **argv)
{
    return CHECK_MAIN(argc, argv, cases);
}
