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
 *
 * The hash, and where its secret lives
 * ------------------------------------
 * Keys come from publishers. Until issue 39 the hash was FNV-1a 64 with a
 * fixed finaliser: anyone could compute it offline and pick keys whose
 * fingerprints share a home slot (brute force over a counter: one key in
 * 2^10 lands in the first 2^(b-10) slots of any table of 2^b slots), so
 * 100,000 such keys made one run of 100,000 slots and every keyed publish,
 * replace and cancel walked it on the event loop: O(n) each, O(n^2) in all
 * (tests/bench/README.md, bench_keyflood: the figures). Now the hash is
 * SipHash-2-4 (src/base/siphash.c), a PRF under a 128-bit secret: without
 * the secret a chosen key lands anywhere, and the runs stay what random
 * keys make (test_keymap's "flood" case: the same keys, max probe < 64).
 *
 * Where the secret comes from is decided by what is on disk. The log's
 * records hold keys, never hashes, and the replicated log (src/repl)
 * carries records only, so a replay or a standby's import hashes afresh
 * under any secret. But the checkpoint (engine_ckpt.c, its KEYS chunks)
 * keeps each keyed message's 32-bit fingerprint, so that a restart does
 * not read every keyed record back to re-hash its key. So the secret is
 * kept with the checkpoint, in its META chunk, which the same process
 * wrote beside the messages themselves (whoever can read it can read every
 * payload): a process that starts from a checkpoint takes that secret; one
 * that replays the whole log (no checkpoint, or one it cannot use) draws a
 * fresh one from the kernel (keymap_secret_new). A checkpoint from before
 * the secret (META version 1, unkeyed FNV fingerprints) is not used: the
 * whole log is replayed once, under a fresh secret. (Going back to such a
 * binary: it refuses a version 2 META as corrupt and stops; delete
 * CHECKPOINT and it replays the whole log.) A secret read out of a data
 * directory stays good until that directory restarts without a usable
 * checkpoint; it tells nothing the directory's payloads do not. The simulator
 * (tests/sim) draws it from its seeded clock_rand64(), so a seed replays;
 * tests pick a hash of their own through eng_opts.key_hash.
 */
#include "keymap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/siphash.h"
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

size_t keymap_max_probe(const struct keymap *m)
{
    size_t i, d, max = 0;

    for (i = 0; i < m->cap; i++)
        if (m->handle[i]) {
            d = ((i - home(m, m->fp[i])) & (m->cap - 1)) + 1;
            if (d > max)
                max = d;
        }
    return max;
}

int keymap_secret_new(uint8_t secret[KEYMAP_SECRET_LEN])
{
#ifdef DB_SIM
    uint64_t a = clock_rand64(), b = clock_rand64();
    memcpy(secret, &a, 8);
    memcpy(secret + 8, &b, 8);
    return 0;
#else
    ssize_t n;
    int fd, err;

    do
        n = getrandom(secret, KEYMAP_SECRET_LEN, 0);
    while (n < 0 && errno == EINTR);
    if (n == KEYMAP_SECRET_LEN)
        return 0;
    err = n < 0 ? errno : EIO;
    if (err != ENOSYS)
        return -err;
    /* A kernel before getrandom (3.17): its urandom device. */
    if ((fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC)) < 0)
        return -errno;
    do
        n = read(fd, secret, KEYMAP_SECRET_LEN);
    while (n < 0 && errno == EINTR);
    err = n < 0 ? errno : EIO;
    close(fd);
    return n == KEYMAP_SECRET_LEN ? 0 : -err;
#endif
}

uint64_t keymap_hash(const uint8_t secret[KEYMAP_SECRET_LEN], uint16_t route, const char *key,
                     size_t len)
{
    uint8_t r[2] = {(uint8_t)route, (uint8_t)(route >> 8)};
    struct siphash s;

    siphash_init(&s, secret);
    siphash_update(&s, r, 2);
    siphash_update(&s, key, len);
    return siphash_final(&s);
}
