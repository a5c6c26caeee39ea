/*
 * test_ingress_off.c -- a stream ingress's place file (include/delay-bridge/ingress_off.h).
 *
 * The 32 bytes laid out as the header says; every flipped bit and every
 * other size is refused, and so is an upto below next; a new (empty) file
 * means "from the first"; begin writes (next, upto) and store (next, next),
 * each only when it moved; both survive a close and reopen; a corrupt file
 * is an error that names the file and says what to do, and is left as it
 * was.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "delay-bridge/ingress_off.h"
#include "base/crc32c.h"

#include "check.h"

static char dir[] = "/tmp/test_ingress_off.XXXXXX";

static void layout(void)
{
    uint8_t b[INGRESS_OFF_SIZE];
    uint64_t v = 0, u = 0;

    ingress_off_encode(b, 0x0102030405060708ull, 0x0102030405060709ull);
    CHECK(memcmp(b, "DBSTROFF", 8) == 0);
    CHECK(b[8] == 1 && b[9] == 0 && b[10] == 0 && b[11] == 0, "version 1, little-endian");
    CHECK(b[12] == 0x08 && b[19] == 0x01, "next, little-endian");
    CHECK(b[20] == 0x09 && b[27] == 0x01, "upto, little-endian");
    uint32_t crc = crc32c(0, b, 28);
    CHECK(b[28] == (uint8_t)crc && b[31] == (uint8_t)(crc >> 24));
    CHECK(ingress_off_decode(b, &v, &u) == 0 && v == 0x0102030405060708ull &&
          u == 0x0102030405060709ull);
    ingress_off_encode(b, 0, 0);
    CHECK(ingress_off_decode(b, &v, &u) == 0 && v == 0 && u == 0);
}

static void bitflips(void)
{
    uint8_t b[INGRESS_OFF_SIZE];
    uint64_t v, u;

    ingress_off_encode(b, 123456789, 123457789);
    for (int i = 0; i < INGRESS_OFF_SIZE * 8; i++) {
        b[i / 8] ^= (uint8_t)(1u << (i % 8));
        CHECK(ingress_off_decode(b, &v, &u) < 0, "bit %d flipped was accepted", i);
        b[i / 8] ^= (uint8_t)(1u << (i % 8));
    }
    /* a place past INT64_MAX cannot be a stream offset; upto is never below next */
    ingress_off_encode(b, (uint64_t)INT64_MAX + 1, (uint64_t)INT64_MAX + 1);
    CHECK(ingress_off_decode(b, &v, &u) < 0);
    ingress_off_encode(b, 10, 9);
    CHECK(ingress_off_decode(b, &v, &u) < 0);
}

static void write_file(const char *path, const void *p, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK(write(fd, p, n) == (ssize_t)n);
    close(fd);
}

static void files(void)
{
    struct ingress_off o;
    char err[8192], path[4400];
    int64_t next = 42, upto = 42;
    struct stat st;
    uint8_t raw[INGRESS_OFF_SIZE];
    uint64_t v, u;

    /* missing: created empty, from the first */
    CHECK(ingress_off_open(&o, dir, "orders", &next, &upto, err, sizeof(err)) == 0, "%s", err);
    CHECK(next == INGRESS_OFF_NONE && upto == INGRESS_OFF_NONE);
    snprintf(path, sizeof(path), "%s/ingress-orders.offset", dir);
    CHECK(strcmp(o.path, path) == 0);
    CHECK(stat(path, &st) == 0 && st.st_size == 0);
    /* a first commit begins: nothing stored yet, so next is 0 (a stream's first) */
    CHECK(ingress_off_begin(&o, 500) == 0);
    CHECK(pread(o.fd, raw, sizeof(raw), 0) == INGRESS_OFF_SIZE);
    CHECK(ingress_off_decode(raw, &v, &u) == 0 && v == 0 && u == 500, "%" PRIu64 " %" PRIu64, v, u);
    CHECK(ingress_off_store(&o, 0) == 0);
    CHECK(stat(path, &st) == 0 && st.st_size == INGRESS_OFF_SIZE);
    CHECK(ingress_off_store(&o, 1000) == 0);
    CHECK(o.dirty == 1);
    CHECK(ingress_off_sync(&o) == 0 && o.dirty == 0);
    CHECK(ingress_off_store(&o, 1000) == 0 && o.dirty == 0, "unchanged: not written again");
    CHECK(ingress_off_store(&o, -1) == 0 && o.stored == 1000, "no place is never written");
    CHECK(ingress_off_begin(&o, 1700) == 0 && o.dirty == 1);
    ingress_off_close(&o);
    CHECK(o.fd == -1);

    /* reopened after a commit that began and never ended: (next, upto) */
    CHECK(ingress_off_open(&o, dir, "orders", &next, &upto, err, sizeof(err)) == 0, "%s", err);
    CHECK(next == 1000 && upto == 1700 && o.stored == 1000);
    CHECK(ingress_off_sync(&o) == 0);
    CHECK(ingress_off_begin(&o, 1700) == 0 && o.dirty == 0, "unchanged: not written again");
    CHECK(ingress_off_store(&o, 1700) == 0 && o.dirty == 1);
    ingress_off_close(&o);
    CHECK(ingress_off_open(&o, dir, "orders", &next, &upto, err, sizeof(err)) == 0, "%s", err);
    CHECK(next == 1700 && upto == 1700);
    ingress_off_close(&o);

    /* empty (created, never written): from the first */
    write_file(path, "", 0);
    CHECK(ingress_off_open(&o, dir, "orders", &next, &upto, err, sizeof(err)) == 0);
    CHECK(next == INGRESS_OFF_NONE && upto == INGRESS_OFF_NONE);
    ingress_off_close(&o);

    /* corrupt: refused, named, and left as it was */
    static const char junk[] = "this is not a place in a stream";
    write_file(path, junk, 31);
    err[0] = '\0';
    CHECK(ingress_off_open(&o, dir, "orders", &next, &upto, err, sizeof(err)) == -EBADMSG);
    CHECK(strstr(err, path) && strstr(err, "corrupt") && strstr(err, "delete it"), "%s", err);
    CHECK(o.fd == -1);
    CHECK(stat(path, &st) == 0 && st.st_size == 31);
    uint8_t b[INGRESS_OFF_SIZE + 1];
    ingress_off_encode(b, 7, 7);
    b[INGRESS_OFF_SIZE] = 0;
    write_file(path, b, sizeof(b)); /* a good record and one byte more */
    CHECK(ingress_off_open(&o, dir, "orders", &next, &upto, err, sizeof(err)) == -EBADMSG);
    b[3] ^= 1;
    write_file(path, b, INGRESS_OFF_SIZE);
    CHECK(ingress_off_open(&o, dir, "orders", &next, &upto, err, sizeof(err)) == -EBADMSG);
    unlink(path);

    /* a directory that is not there: the OS error */
    CHECK(ingress_off_open(&o, "/nonexistent/dir", "orders", &next, &upto, err, sizeof(err)) == -ENOENT);
    CHECK(strstr(err, "/nonexistent/dir/ingress-orders.offset") != NULL, "%s", err);
}

static const struct check_case cases[] = {
    {"layout", layout},
    {"bitflips", bitflips},
    {"files", files},
};

int main(int argc, char **argv)
{
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    int rc = CHECK_MAIN(argc, argv, cases);
    rmdir(dir);
    return rc;
}
