/*
 * cli.h -- operator subcommands of the delay-bridge executable.
 *
 *   delay-bridge wal check DIR          verify a WAL directory, print a summary
 *   delay-bridge wal dump DIR [...]     list the pending messages in due order
 *   delay-bridge publish --uri ... BODY publish one delayed message, confirmed
 *   delay-bridge cancel --route R KEY   cancel a pending message of a running
 *                                       daemon, over its HTTP endpoint
 *   delay-bridge drain                  hand a running daemon's held messages
 *                                       back to their ingress, wait for its exit
 *   delay-bridge routes list|get|put|delete  a running daemon's routes, over
 *                                       its HTTP route API (/routes)
 *   delay-bridge migrate-plugin [...]   move what the delayed-message plugin
 *                                       holds on a RabbitMQ node into the bridge
 *                                       (runs delay-bridge-migrate-plugin:
 *                                       cli_migrate.c says why)
 *
 * main() hands over argv from the subcommand's name on (argv[0] is "wal" or
 * "publish"). Each function parses its own options, prints its results on
 * stdout and its errors on stderr (one line, broker passwords masked), and
 * returns the process exit code:
 *
 *   wal:     0 ok (a torn tail of the newest segment included), 1 directory
 *            unreadable or I/O error, 2 usage, 4 WAL corrupt (the daemon's
 *            own exit code for a corrupt WAL).
 *   publish: 0 confirmed (basic.ack), 1 nack, unroutable or connection
 *            error, 2 usage.
 *   cancel:  0 cancelled, 1 no such key pending (unknown, already published
 *            or in flight), 2 usage, 3 the daemon could not be asked
 *            (unreachable, 401, unknown route, error).
 *   drain:   0 drained (the daemon reported it done, then exited), 1 still
 *            draining at the timeout, 2 usage, 3 the daemon could not be
 *            asked, or exited before it reported the drain done.
 *   routes:  0 done, 1 no such route, 2 usage, 3 the daemon could not be
 *            asked (unreachable, 401, busy, error), 4 refused (400 a bad
 *            route, 409 a route of the -c file or a change that waits for
 *            a restart).
 *
 * The wal commands are read-only: they open files O_RDONLY, take no lock and
 * write nothing, so they are safe on the directory of a running daemon.
 */
#ifndef DB_CLI_H
#define DB_CLI_H

int cli_wal_main(int argc, char **argv);
int cli_publish_main(int argc, char **argv);
int cli_cancel_main(int argc, char **argv);
int cli_drain_main(int argc, char **argv);
int cli_routes_main(int argc, char **argv);
int cli_migrate_main(int argc, char **argv);

#endif
