/*
 * wlog.c -- what the log interface (wlog.h) has beyond its inline calls
 * through the ops table: the text of its codes.
 *
 * Every log (the segment files of wal*.c, the replicated log of wrepl.c)
 * reports WLOG_E* or -errno, and the engine passes them through
 * unchanged, so one table under one name serves them all: no other module
 * has codes or a string function of its own for the log's failures.
 */
#include "delay-bridge/wlog.h"

#include <string.h>

const char *wlog_strerror(int err)
{
    switch (err) {
    case 0:
        return "success";
    case WLOG_ECORRUPT:
        return "corrupt log record";
    case WLOG_ELOCKED:
        return "log directory locked by another process";
    case WLOG_EFORMAT:
        return "bad segment file (name, header or version)";
    case WLOG_ETOOBIG:
        return "record too large";
    case WLOG_EBUSY:
        return "a commit is still in progress";
    case WLOG_EREPLICA:
        return "the WAL replica (stream) is lost, incomplete or refused the records";
    default:
        return err < 0 && err > -4096 ? strerror(-err) : "unknown error";
    }
}
