/*
 * walfs.h -- the file system calls of the segment log, behind one seam.
 *
 * Every system call the log layer makes on its directory (wal*.c,
 * walckpt.c, walscan.c, ingress_off.c) is spelled walfs_NAME here, and so
 * is every one other layers need there: they call wal_dir.c's functions
 * (wal.h), which are written with these names. In every build of the
 * daemon, its tools and its tests walfs_NAME is a macro for the system
 * call NAME itself: the preprocessor replaces the one word with the other,
 * so the object code is the same as before the seam existed (there is no
 * wrapper, not even an inline one, to optimise away).
 *
 * Built with -DDB_SIM (tests/sim/ only), the same names go to the
 * deterministic simulator's file layer (tests/sim/simfs.c): an in-memory
 * directory whose files keep synced bytes and unsynced writes apart, so
 * that the simulator can crash at any call, tear and reorder what was not
 * synced, fail an fsync, fill the disk and flip bits in synced data, all
 * from one seed. The simulator's functions take and return what the
 * system calls do (-1 and errno).
 *
 * Threads go through here too: the checkpoint's install runs on a thread
 * (walckpt.c) in the daemon; in the simulator walfs_thread_create runs the
 * function at once, on the caller's thread, so that every run of a seed
 * does the same thing in the same order. The log's own sync thread
 * (wal_log.c, opts.sync_thread) is not used by the simulator at all: it
 * drives the log with synchronous commits.
 *
 * Only the log layer includes this header; nothing else changes when
 * DB_SIM is set. (The simulator links the log, not src/repl/ nor
 * ingress_off.c: their calls go through the seam for the one policy and
 * the seam-cost check, not to be simulated.)
 */
#ifndef DELAY_BRIDGE_WALFS_H
#define DELAY_BRIDGE_WALFS_H

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#ifndef DB_SIM

#define walfs_open open
#define walfs_openat openat
#define walfs_close close
#define walfs_pwrite pwrite
#define walfs_pread pread
#define walfs_writev writev
#define walfs_fdatasync fdatasync
#define walfs_fsync fsync
#define walfs_ftruncate ftruncate
#define walfs_unlinkat unlinkat
#define walfs_renameat renameat
#define walfs_linkat linkat
#define walfs_mkdir mkdir
#define walfs_mkdirat mkdirat
#define walfs_fstat fstat
#define walfs_fchmod fchmod
#define walfs_fchown fchown
#define walfs_fstatat fstatat
#define walfs_fstatvfs fstatvfs
#define walfs_fallocate fallocate
#define walfs_flock flock
#define walfs_posix_fadvise posix_fadvise
#define walfs_fdopendir fdopendir
#define walfs_readdir readdir
#define walfs_closedir closedir
#define walfs_dir DIR
#define walfs_thread_create pthread_create
#define walfs_thread_join pthread_join

#else /* DB_SIM: tests/sim/simfs.c */

typedef struct simfs_dir simfs_dir;
int simfs_open(const char *path, int flags, ...);
int simfs_openat(int dirfd, const char *name, int flags, ...);
int simfs_close(int fd);
ssize_t simfs_pwrite(int fd, const void *p, size_t n, off_t off);
ssize_t simfs_pread(int fd, void *p, size_t n, off_t off);
ssize_t simfs_writev(int fd, const struct iovec *v, int n);
int simfs_fdatasync(int fd);
int simfs_fsync(int fd);
int simfs_ftruncate(int fd, off_t len);
int simfs_unlinkat(int dirfd, const char *name, int flags);
int simfs_renameat(int olddirfd, const char *oldname, int newdirfd, const char *newname);
int simfs_linkat(int olddirfd, const char *oldname, int newdirfd, const char *newname, int flags);
int simfs_mkdir(const char *path, mode_t mode);
int simfs_mkdirat(int dirfd, const char *name, mode_t mode);
int simfs_fstat(int fd, struct stat *st);
int simfs_fchmod(int fd, mode_t mode);
int simfs_fchown(int fd, uid_t uid, gid_t gid);
int simfs_fstatat(int dirfd, const char *name, struct stat *st, int flags);
int simfs_fstatvfs(int fd, struct statvfs *st);
int simfs_fallocate(int fd, int mode, off_t off, off_t len);
int simfs_flock(int fd, int op);
int simfs_posix_fadvise(int fd, off_t off, off_t len, int advice);
simfs_dir *simfs_fdopendir(int fd);
struct dirent *simfs_readdir(simfs_dir *d);
int simfs_closedir(simfs_dir *d);
int simfs_thread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg);
int simfs_thread_join(pthread_t t, void **ret);

#define walfs_open simfs_open
#define walfs_openat simfs_openat
#define walfs_close simfs_close
#define walfs_pwrite simfs_pwrite
#define walfs_pread simfs_pread
#define walfs_writev simfs_writev
#define walfs_fdatasync simfs_fdatasync
#define walfs_fsync simfs_fsync
#define walfs_ftruncate simfs_ftruncate
#define walfs_unlinkat simfs_unlinkat
#define walfs_renameat simfs_renameat
#define walfs_linkat simfs_linkat
#define walfs_mkdir simfs_mkdir
#define walfs_mkdirat simfs_mkdirat
#define walfs_fstat simfs_fstat
#define walfs_fchmod simfs_fchmod
#define walfs_fchown simfs_fchown
#define walfs_fstatat simfs_fstatat
#define walfs_fstatvfs simfs_fstatvfs
#define walfs_fallocate simfs_fallocate
#define walfs_flock simfs_flock
#define walfs_posix_fadvise simfs_posix_fadvise
#define walfs_fdopendir simfs_fdopendir
#define walfs_readdir simfs_readdir
#define walfs_closedir simfs_closedir
#define walfs_dir simfs_dir
#define walfs_thread_create simfs_thread_create
#define walfs_thread_join simfs_thread_join

#endif
#endif
