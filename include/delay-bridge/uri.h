/*
 * uri.h -- AMQP URIs: amqp[s]://[user[:password]@]host[:port][/vhost].
 *
 * Pure. The config loader validates broker.uri with it, the connection code
 * connects with what it returns: one parser, so a URI --check-config
 * accepts is a URI the daemon can use. The rules are RabbitMQ's URI spec,
 * as rabbitmq-c's amqp_parse_url applies them:
 *   - user, password, host and vhost are %-decoded ("%2f" is "/");
 *   - defaults: user and password "guest", port 5672 (amqps: 5671);
 *   - no path: vhost "/"; a path "/" followed by nothing: vhost "";
 *   - an IPv6 host is written in brackets, "amqp://[::1]:5672".
 */
#ifndef DB_URI_H
#define DB_URI_H

#include <stddef.h>
#include <stdint.h>

#define URI_PART_MAX 256

struct uri {
    int tls;                     /* amqps:// */
    char user[URI_PART_MAX];
    char password[URI_PART_MAX];
    char host[URI_PART_MAX];     /* without brackets */
    uint16_t port;
    char vhost[URI_PART_MAX];
};

/* 0, or -1 with the reason (never the password) in err. */
int uri_parse(const char *s, struct uri *u, char *err, size_t errlen);

#endif
