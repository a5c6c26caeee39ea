/*
 * keymap.c -- x-delay-key -> held message: open addressing, linear probing.
 *
 * The table never stores keys: a hit is a candidate that the engine
 * confirms against the key in the message's WAL record. The 64-bit hash is
 * folded to a 32-bit fingerprint, and the home slot is the top bits of the
 * fingerprint times a large odd constant (Fibonacci hashing), so a rehash
 * can place an entry from what the table stores. Probing runs from the home
 * slot to the first empty slot; deletion shifts later entries of
 * the same run back into the hole (Knuth's algorithm R), so lookups stay
 * short and no tombstones pile up under put/del churn. The table doubles at
 * load 0.75 and halves below 0.125 (not below 1024 slots).
 */
#include "keymap.h"

#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"

#define MIN_CAP 1024

static uint32_t fingerprint(uint64_t hash)
{
    return keymap_fingerprint(hash);
}

static size_t home(const struct keymap *m, uint32_t fp)
{
    unsigned bits = (unsigned)__builtin_ctzll((unsigned long long)m->cap);
    return bits ? (size_t)((uint32_t)(fp * 2654435769u) >> (32 - bits)) : 0;
}

static void put_fp(struct keymap *m, uint32_t fp, uint32_t handle);

static void rehash(struct keymap *m, size_t cap)
{
    uint32_t *ofp = m->fp, *ohd = m->handle;
    size_t ocap = m->cap, i;

    m->fp = xcalloc(cap, sizeof(*m->fp));
    m->handle = xcalloc(cap, sizeof(*m->handle));
    m->cap = cap;
    m->count = 0;
    for (i = 0; i < ocap; i++)
        if (ohd[i])
            put_fp(m, ofp[i], ohd[i]);
    free(ofp);
    free(ohd);
}

void keymap_init(struct keymap *m)
{
    memset(m, 0, sizeof(*m));
}

void keymap_destroy(struct keymap *m)
{
    free(m->fp);
    free(m->handle);
    memset(m, 0, sizeof(*m));
}

static void put_fp(struct keymap *m, uint32_t fp, uint32_t handle)
{
    size_t i;

    if (m->cap == 0 || (m->count + 1) * 4 > m->cap * 3)
        rehash(m, m->cap ? m->cap * 2 : MIN_CAP);
    for (i = home(m, fp); m->handle[i]; i = (i + 1) & (m->cap - 1))
        ;
    m->fp[i] = fp;
    m->handle[i] = handle;
    m->count++;
}

void keymap_put(struct keymap *m, uint64_t hash, uint32_t handle)
{
    put_fp(m, fingerprint(hash), handle);
}

size_t keymap_find(const struct keymap *m, uint64_t hash, uint32_t *out, size_t max)
{
    uint32_t fp = fingerprint(hash);
    size_t i, n = 0;

    if (m->cap == 0)
        return 0;
    for (i = home(m, fp); m->handle[i]; i = (i + 1) & (m->cap - 1))
        if (m->fp[i] == fp) {
            if (n < max)
                out[n] = m->handle[i];
            n++;
        }
    return n;
}

int keymap_del(struct keymap *m, uint64_t hash, uint32_t handle)
{
    uint32_t fp = fingerprint(hash);
    size_t i, j, k, mask = m->cap - 1;

    if (m->cap == 0)
        return 0;
    for (i = home(m, fp); m->handle[i]; i = (i + 1) & mask)
        if (m->fp[i] == fp && m->handle[i] == handle)
            break;
    if (!m->handle[i])
        return 0;
    /* Backward shift: move later entries of the run into the hole when allowed. */
    for (j = i;;) {
        m->handle[i] = 0;
        for (;;) {
            j = (j + 1) & mask;
            if (!m->handle[j])
                goto done;
            k = home(m, m->fp[j]);
            /* j's entry may move to i only if its home is not in (i, j] cyclically */
            if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
                continue;
            break;
        }
        m->fp[i] = m->fp[j];
        m->handle[i] = m->handle[j];
        i = j;
    }
done:
    m->count--;
    if (m->cap > MIN_CAP && m->count * 8 < m->cap)
        rehash(m, m->cap / 2);
    return 1;
}

size_t keymap_memory(const struct keymap *m)
{
    return m->cap * (sizeof(*m->fp) + sizeof(*m->handle));
}

uint64_t keymap_hash(uint16_t route, const char *key, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull;
    size_t i;

    h = (h ^ (uint8_t)route) * 0x100000001b3ull;
    h = (h ^ (uint8_t)(route >> 8)) * 0x100000001b3ull;
    for (i = 0; i < len; i++)
        h = (h ^ (uint8_t)key[i]) * 0x100000001b3ull;
    /* finalizer: spread FNV's output over the top bits the table uses */
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}
