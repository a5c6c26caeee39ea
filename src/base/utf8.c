/*
 * utf8.c -- utf8.h's check, by the table of RFC 3629, section 4: the
 * lead byte says the length and the range of the second byte (which is
 * where overlong forms, surrogates and code points past U+10FFFF are
 * excluded); every later byte is 80..BF.
 *
 *   lead     length  second byte
 *   00..7F   1       -
 *   C2..DF   2       80..BF
 *   E0       3       A0..BF      (no overlong)
 *   E1..EC   3       80..BF
 *   ED       3       80..9F      (no surrogate)
 *   EE..EF   3       80..BF
 *   F0       4       90..BF      (no overlong)
 *   F1..F3   4       80..BF
 *   F4       4       80..8F      (<= U+10FFFF)
 *   else     invalid
 */
#include "utf8.h"

int utf8_char(const unsigned char *s, size_t n)
{
    unsigned c = s[0], lo = 0x80, hi = 0xbf;
    int len;

    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2;
    else if (c >= 0xe0 && c <= 0xef)
        len = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
    else if (c >= 0xf0 && c <= 0xf4)
        len = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
    else
        return 0;
    if (n < (size_t)len || s[1] < lo || s[1] > hi)
        return 0;
    for (int i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xbf)
            return 0;
    return len;
}

int utf8_valid(const void *s, size_t n)
{
    const unsigned char *p = s;
    int k;

    for (size_t i = 0; i < n; i += (size_t)k)
        if ((k = utf8_char(p + i, n - i)) == 0)
            return 0;
    return 1;
}
