/*
 * crc32c.h -- CRC-32C (Castagnoli), as used by iSCSI, ext4 and RocksDB.
 *
 * crc32c(0, buf, len) is the standard CRC-32C of buf ("123456789" ->
 * 0xE3069283). Chaining works like zlib's crc32(): crc32c(crc32c(0, a, n), b, m)
 * equals the CRC of a followed by b. Uses the SSE4.2 instruction when the
 * CPU has it, a slicing-by-8 table otherwise.
 */
#ifndef DB_CRC32C_H
#define DB_CRC32C_H

#include <stddef.h>
#include <stdint.h>

uint32_t crc32c(uint32_t crc, const void *buf, size_t len);

/* The two implementations behind crc32c(), for tests and benchmarks.
 * crc32c_hw() may only be called when crc32c_hw_available() is non-zero. */
uint32_t crc32c_sw(uint32_t crc, const void *buf, size_t len);
uint32_t crc32c_hw(uint32_t crc, const void *buf, size_t len);
int crc32c_hw_available(void);

#endif
