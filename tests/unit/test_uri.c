/*
 * test_uri.c -- AMQP URIs as RabbitMQ's URI spec reads them, and errors that
 * never echo a password.
 */
#include "check.h"
#include "delay-bridge/uri.h"

static void test_full(void)
{
    struct uri u;
    char err[200];

    CHECK(uri_parse("amqp://bridge:s3cret@broker.example:5673/orders", &u, err, sizeof err) == 0);
    CHECK(!u.tls && u.port == 5673);
    CHECK_STR(u.user, "bridge");
    CHECK_STR(u.password, "s3cret");
    CHECK_STR(u.host, "broker.example");
    CHECK_STR(u.vhost, "orders");
}

static void test_defaults(void)
{
    struct uri u;
    char err[200];

    CHECK(uri_parse("amqp://localhost", &u, err, sizeof err) == 0);
    CHECK_STR(u.user, "guest");
    CHECK_STR(u.password, "guest");
    CHECK(u.port == 5672);
    CHECK_STR(u.vhost, "/");
    CHECK(uri_parse("amqps://h/", &u, err, sizeof err) == 0);
    CHECK(u.tls && u.port == 5671);
    CHECK_STR(u.vhost, "");
    CHECK(uri_parse("amqp://onlyuser@h", &u, err, sizeof err) == 0);
    CHECK_STR(u.user, "onlyuser");
    CHECK_STR(u.password, "");
}

static void test_escapes_and_ipv6(void)
{
    struct uri u;
    char err[200];

    CHECK(uri_parse("amqp://u%40x:p%3Aw%2Fd@[::1]:5681/%2f", &u, err, sizeof err) == 0);
    CHECK_STR(u.user, "u@x");
    CHECK_STR(u.password, "p:w/d");
    CHECK_STR(u.host, "::1");
    CHECK(u.port == 5681);
    CHECK_STR(u.vhost, "/");
    /* an '@' in the password written raw: the last '@' ends the userinfo */
    CHECK(uri_parse("amqp://u:p@ss@h/v", &u, err, sizeof err) == 0);
    CHECK_STR(u.password, "p@ss");
    CHECK_STR(u.host, "h");
}

static void test_errors(void)
{
    static const char *const bad[] = {
        "http://h/",           "amqp://",          "amqp://:5672/",       "amqp://h:0/",
        "amqp://h:65536/",     "amqp://h:x/",      "amqp://h:/",          "amqp://[::1/",
        "amqp://[::1]x/",      "amqp://h/a/b",     "amqp://h/%zz",        "amqp://u:%2@h/",
        "amqp://h/v?x=1",      "amqp://h/%00",
    };
    struct uri u;
    char err[200];
    size_t i;

    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        CHECK(uri_parse(bad[i], &u, err, sizeof err) == -1, "accepted %s", bad[i]);
        CHECK(err[0] != '\0', "no reason for %s", bad[i]);
    }
    CHECK(uri_parse("amqp://u:TopSecret%zz@h/", &u, err, sizeof err) == -1);
    CHECK(strstr(err, "TopSecret") == NULL, "password in the error: %s", err);
}

static const struct check_case cases[] = {
    {"full", test_full},
    {"defaults", test_defaults},
    {"escapes_and_ipv6", test_escapes_and_ipv6},
    {"errors", test_errors},
};

int main(int argc, char **argv)
{
    return CHECK_MAIN(argc, argv, cases);
}
