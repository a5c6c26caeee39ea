/*
 * crc32c.c -- CRC-32C (Castagnoli polynomial 0x1EDC6F41, reflected 0x82F63B78).
 *
 * Every WAL record and segment header is checked with this CRC, so replay
 * speed depends on it: 3 GB of log must be checked in well under a second.
 *
 * Two implementations:
 *
 *  - x86_64 with SSE4.2: the `crc32` instruction, 8 bytes per instruction
 *    (about 8 bytes per 3 cycles, one dependent chain). The function is
 *    compiled with __attribute__((target("sse4.2"))) so the rest of the
 *    program needs no -msse4.2, and is chosen at run time with
 *    __builtin_cpu_supports("sse4.2").
 *
 *  - everywhere else: slicing-by-8 (Intel's method, also in zlib and
 *    RocksDB): eight 256-entry tables, table[k][b] being the CRC of byte b
 *    followed by k zero bytes, so eight input bytes are folded with eight
 *    lookups. Input words are assembled byte by byte (little-endian order),
 *    so the code is correct on big-endian machines too; on x86 the compiler
 *    turns the assembly into a single load.
 *
 * Both use the usual pre- and post-inversion, so crc32c(0, "123456789", 9)
 * is 0xE3069283 and results chain like zlib's crc32().
 *
 * The tables and the CPU check are set up by a constructor, before main(),
 * so crc32c() is safe to call from any thread without locking (a call from
 * another constructor that runs earlier sets them up itself).
 */
#include "crc32c.h"

#include <stdint.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CRC32C_HAVE_HW 1
#include <nmmintrin.h>
#else
#define CRC32C_HAVE_HW 0
#endif

#define POLY 0x82F63B78u

static uint32_t table[8][256];
static int hw_ok;
static volatile int ready;

__attribute__((constructor)) static void crc32c_init(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ POLY : c >> 1;
        table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = table[0][n];
        for (int k = 1; k < 8; k++) {
            c = table[0][c & 0xff] ^ (c >> 8);
            table[k][n] = c;
        }
    }
#if CRC32C_HAVE_HW
    __builtin_cpu_init();
    hw_ok = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#endif
    ready = 1;
}

static inline uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint32_t crc32c_sw(uint32_t crc, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    uint32_t c = ~crc;

    if (!ready) /* called from another constructor that ran before ours */
        crc32c_init();

    while (len && ((uintptr_t)p & 7)) {
        c = table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
        len--;
    }
    while (len >= 8) {
        uint32_t lo = le32(p) ^ c;
        uint32_t hi = le32(p + 4);
        c = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^ table[5][(lo >> 16) & 0xff] ^
            table[4][lo >> 24] ^ table[3][hi & 0xff] ^ table[2][(hi >> 8) & 0xff] ^
            table[1][(hi >> 16) & 0xff] ^ table[0][hi >> 24];
        p += 8;
        len -= 8;
    }
    while (len--)
        c = table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return ~c;
}

#if CRC32C_HAVE_HW
__attribute__((target("sse4.2"))) uint32_t crc32c_hw(uint32_t crc, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    uint64_t c = ~crc;

    while (len && ((uintptr_t)p & 7)) {
        c = _mm_crc32_u8((uint32_t)c, *p++);
        len--;
    }
    while (len >= 8) {
        uint64_t v;
        __builtin_memcpy(&v, p, 8); /* aligned here; memcpy keeps it strict-aliasing clean */
        c = _mm_crc32_u64(c, v);
        p += 8;
        len -= 8;
    }
    while (len--)
        c = _mm_crc32_u8((uint32_t)c, *p++);
    return ~(uint32_t)c;
}
#else
uint32_t crc32c_hw(uint32_t crc, const void *buf, size_t len)
{
    return crc32c_sw(crc, buf, len);
}
#endif

int crc32c_hw_available(void)
{
    if (!ready)
        crc32c_init();
    return hw_ok;
}

uint32_t crc32c(uint32_t crc, const void *buf, size_t len)
{
    if (!ready)
        crc32c_init();
    if (hw_ok)
        return crc32c_hw(crc, buf, len);
    return crc32c_sw(crc, buf, len);
}
