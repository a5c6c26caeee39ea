/*
 * guard.h -- input that ends exactly at an unreadable page, for decoder tests.
 *
 * at_guard(src, n) copies n bytes so that the last one sits right before a
 * PROT_NONE page: a decoder that reads past buf + len crashes the test (and
 * ASan builds see it too). Up to 16 pages of input; one buffer, reused by
 * every call.
 */
#ifndef DB_TEST_GUARD_H
#define DB_TEST_GUARD_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static uint8_t *guard_base;
static size_t guard_room; /* bytes usable before the PROT_NONE page */

static void guard_init(void)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);

    guard_room = 16 * pg;
    guard_base = mmap(NULL, guard_room + pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                      -1, 0);
    if (guard_base == MAP_FAILED || mprotect(guard_base + guard_room, pg, PROT_NONE) != 0) {
        perror("guard page");
        exit(1);
    }
}

/* Copy n bytes of src so that they end exactly at the guard page. */
static inline const uint8_t *at_guard(const uint8_t *src, size_t n)
{
    if (guard_base == NULL)
        guard_init();
    if (n > guard_room) {
        fprintf(stderr, "input too big for guard area\n");
        exit(1);
    }
    uint8_t *p = guard_base + guard_room - n;
    memcpy(p, src, n);
    return p;
}

#endif
