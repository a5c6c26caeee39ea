/*
 * simfs.h -- the simulator's file layer and clock: what the driver (sim.c)
 * controls. The log layer reaches the same file layer through src/wal/walfs.h
 * (built with -DDB_SIM); tests/sim/simfs.c has the essay on the fault model.
 */
#ifndef DB_SIM_SIMFS_H
#define DB_SIM_SIMFS_H

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>

/* The one directory the log lives in (every other path is refused). */
#define SIMFS_DIR "/sim/wal"

/* The seeded generator every random choice of a run comes from. */
struct simrng {
    uint64_t s;
};
uint64_t sim_rand(struct simrng *r);
/* Uniform in [0, n) (n > 0). */
uint64_t sim_below(struct simrng *r, uint64_t n);
/* 1 with probability num/den. */
int sim_chance(struct simrng *r, uint64_t num, uint64_t den);

/* Faults the file layer injects by itself, per call (probabilities in 1/1,000,000). */
struct simfs_faults {
    uint32_t fsync_fail_ppm;  /* fsync/fdatasync returns EIO (and drops its dirty data) */
    uint32_t enospc_ppm;      /* a write or a create starts a full-disk episode */
    uint32_t enospc_calls;    /* a full-disk episode lasts this many mutating calls */
    int reorder;              /* at a crash, keep any subset of unsynced writes, not a prefix */
};

/* Reset everything: an empty directory, the clock at now_ms, the generator at seed. */
void simfs_reset(uint64_t seed, uint64_t now_ms, const struct simfs_faults *f);
/* The disk is lost: every name gone, every descriptor closed. */
void simfs_wipe(void);
/* Change the faults from now on (and end a full-disk episode). */
void simfs_reset_faults(const struct simfs_faults *f);
/* The generator the file layer draws from (also the clock's clock_rand64()). */
struct simrng *simfs_rng(void);

/* The simulated wall clock (clock_now_ms(); clock_mono_ns() follows it). */
void sim_clock_set(uint64_t now_ms);
uint64_t sim_clock_get(void);

/*
 * Crash: arm one at the n-th mutating call from now (0: disarmed). When it
 * comes, the call is done not at all, partly or wholly (chosen from the
 * seed), the process "dies": simfs_crash_state() decides what the disk kept
 * and longjmps to *jb.
 */
void simfs_arm_crash(uint64_t n, jmp_buf *jb);
/* The disk after power loss: synced data stays, unsynced writes torn, reordered or lost. */
void simfs_crash_state(void);
/* Mutating calls so far, and every call. */
uint64_t simfs_mutations(void);
uint64_t simfs_calls(void);
/* Did the last crash keep a later unsynced write without an earlier one (a hole)? */
int simfs_last_crash_reordered(void);

/* A bit flipped in synced data: file name and offset chosen from the seed; 0 or -1 (nothing to flip). */
int simfs_flip_bit(char *name, size_t namesz, uint64_t *off);

/* The planted bug --plant fsync-lie: fsync/fdatasync of a file succeed and sync nothing. */
void simfs_set_plant_nosync(int on);
/* The planted bug --plant reserve-stuck: truncating the file RESERVE gives no space back. */
void simfs_set_plant_reserve_stuck(int on);

/*
 * The volume's size (simfs.c, CAPACITY): 0, the default, is no limit.
 * Growing past it fails with ENOSPC (a short write first); truncate and
 * unlink give space back. Set after simfs_reset(), which clears it.
 */
void simfs_set_capacity(uint64_t bytes);
/* The allocation unit files are rounded up to, and fstatvfs's f_frsize (4096 unless set). */
void simfs_set_block(uint32_t block);
/* 0: fallocate fails with EOPNOTSUPP (a file system without it); 1, the default: it works. */
void simfs_set_fallocate(int on);
/* Bytes the files hold now, the capacity (0: none), and calls refused for capacity so far. */
uint64_t simfs_used(void);
uint64_t simfs_capacity(void);
uint64_t simfs_refusals(void);
/* Bytes used that no name holds: files deleted but still open (or blocks lost). */
uint64_t simfs_unnamed(void);
/* The current size of the file name, or -1 if there is none. */
int64_t simfs_file_size(const char *name);

/* Open descriptors of the simulated layer (for leak checks after a clean close). */
int simfs_open_fds(void);

/* Every file's name and current size, for a failing seed's report. */
void simfs_dump(void (*fn)(const char *name, uint64_t size, uint64_t durable, int pending));

#endif
