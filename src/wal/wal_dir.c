/*
 * wal_dir.c -- the WAL directory's ownership: who may touch its files.
 *
 * FILES (see wal.c for what a segment holds)
 *
 *   dir/LOCK                      empty; flock(LOCK_EX|LOCK_NB) held by the
 *                                 one owner: the daemon's log for its whole
 *                                 life, "wal salvage" while it repairs, the
 *                                 replicated log while it imports
 *   dir/NNNNNNNNNNNNNNNNNNNN.wal  segments (20 decimal digits, walscan.h);
 *                                 only the owner creates, cuts, renames or
 *                                 deletes them
 *   dir/CHECKPOINT                the checkpoint (walckpt.c)
 *   dir/RESERVE                   the space reserve, 2 x segment_bytes of
 *                                 allocated zeros that intake never uses;
 *                                 given back to a commit on a full disk,
 *                                 refilled when there is room (wal_space.c)
 *   dir/import/                   the replicated log's import in progress
 *   dir/NAME.damaged-<time>       a segment salvage replaced, kept for people
 *
 * The lock is advisory: "wal check" and "wal dump" read without it (safe:
 * they only read, and open every segment before reading any).
 *
 * SWAPPING SEGMENTS IN
 *
 * Outside the running log two things put segments into a directory: the
 * salvage (one repaired segment over a damaged one, the damaged one kept
 * aside) and the replicated log's import (a whole log from dir/import,
 * replacing everything). Both go through wal_replace_segments(), whose
 * steps are ordered so that a crash at any point leaves each name either
 * the old or the new file (rename(2) over it), and so that what was kept
 * aside exists before the name changes (link first). The directory is
 * synced last; a deletion of the old log (WAL_REPLACE_ALL) is synced before
 * any new segment appears, so a crash never leaves old and new segments
 * side by side.
 */
#define _GNU_SOURCE
#include "wal_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "walckpt.h"
#include "walscan.h"

#define LOCK_NAME "LOCK"

int wal_lock_dir_flags(const char *dir, int flags, int *lockfd, const char **op)
{
    char path[4200];
    int fd, e;

    *lockfd = -1;
    snprintf(path, sizeof(path), "%s/%s", dir, LOCK_NAME);
    fd = walfs_open(path, (flags & WAL_LOCK_NO_CREATE ? O_RDONLY : O_RDWR | O_CREAT) | O_CLOEXEC, 0644);
    if (fd < 0) {
        e = -errno;
        if ((flags & WAL_LOCK_NO_CREATE) && e == -ENOENT)
            return 0; /* no lock file: nobody holds it */
        if (op)
            *op = "open";
        if (!(flags & WAL_LOCK_QUIET))
            log_error("wal", "cannot create the lock file", "file=%s err=\"%s\"", path,
                      strerror(-e));
        return e;
    }
    if (walfs_flock(fd, LOCK_EX | LOCK_NB) < 0) {
        e = errno == EWOULDBLOCK ? WAL_ELOCKED : -errno;
        if (op)
            *op = "lock";
        if (!(flags & WAL_LOCK_QUIET))
            log_error("wal", "the log directory is locked by another process (is a daemon "
                      "already running on it?)", "file=%s", path);
        walfs_close(fd);
        return e;
    }
    *lockfd = fd;
    return 0;
}

int wal_lock_dir(const char *dir, int *lockfd)
{
    return wal_lock_dir_flags(dir, 0, lockfd, NULL);
}

/* Delete every segment and the checkpoint of dirfd, durably. 0 or -errno. */
static int drop_all(int dirfd)
{
    uint64_t *nos = NULL;
    size_t n = 0;
    int r = walscan_list(dirfd, &nos, &n, NULL, 0);

    for (size_t i = 0; r == 0 && i < n; i++) {
        char name[WALSCAN_NAME_SIZE];
        walscan_seg_name(name, nos[i]);
        if (walfs_unlinkat(dirfd, name, 0) < 0)
            r = -errno;
    }
    free(nos);
    if (r == 0 && walfs_unlinkat(dirfd, WALCKPT_NAME, 0) < 0 && errno != ENOENT)
        r = -errno;
    if (r == 0 && walfs_fsync(dirfd) < 0)
        r = -errno;
    return r;
}

int wal_replace_segments(int dirfd, const struct wal_replacement *v, size_t n, int flags,
                         const char **failed)
{
    const char *step = "delete";
    int r = 0;

    if ((flags & WAL_REPLACE_ALL) && (r = drop_all(dirfd)) < 0)
        goto out;
    for (size_t i = 0; i < n; i++) {
        const struct wal_replacement *p = &v[i];

        /* The old file stays, under another name; name never goes missing. */
        if (p->aside && walfs_linkat(dirfd, p->name, dirfd, p->aside, 0) < 0 &&
            (errno == EEXIST || walfs_renameat(dirfd, p->name, dirfd, p->aside) < 0)) {
            r = -errno;
            step = "keep aside";
            goto out;
        }
        if (walfs_renameat(p->srcfd, p->src_name, dirfd, p->name) < 0) {
            r = -errno;
            step = "rename";
            goto out;
        }
    }
    if (walfs_fsync(dirfd) < 0) {
        r = -errno;
        step = "sync the directory";
    }
out:
    if (r < 0 && failed)
        *failed = step;
    return r;
}
