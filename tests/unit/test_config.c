/*
 * test_config.c -- config_parse()/config_load(): a full config, defaults,
 * the environment override, and one test per kind of mistake, each
 * checking that the message names the file and the key path.
 */
#include "delay-bridge/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"

#include "check.h"
#include "config_test.h"

static void test_full(void)
{
    const char *json =
        "{\n"
        "  \"broker\": {\n"
        "    \"uri\": [\"amqp://bridge:s3cret@rabbit-1:5672/prod\", \"amqps://rabbit-2/prod\"],\n"
        "    \"heartbeat_s\": 0, \"connect_timeout_ms\": 2500,\n"
        "    \"reconnect_min_ms\": 100, \"reconnect_max_ms\": 100,\n"
        "    \"publish_retry_min_ms\": 2000, \"publish_retry_max_ms\": 120000\n"
        "  },\n"
        "  \"wal\": { \"dir\": \"/data/wal\", \"segment_mb\": 16, \"fsync\": false,\n"
        "           \"max_message_bytes\": 1048576 },\n"
        "  \"http\": { \"listen\": \"[::1]:9000\" },\n"
        "  \"log\": { \"level\": \"debug\" },\n"
        "  \"shutdown_timeout_ms\": 0,\n"
        "  \"routes\": [\n"
        "    { \"name\": \"orders\", \"ingress_exchange\": \"orders.delayed\",\n"
        "      \"ingress_queue\": \"orders.delayed.q\", \"target_exchange\": \"orders\",\n"
        "      \"queue_type\": \"quorum\", \"declare_target\": true, \"target_type\": \"topic\",\n"
        "      \"single_active_consumer\": true,\n"
        "      \"prefetch\": 65535, \"max_inflight\": 1000000,\n"
        "      \"max_delay_ms\": 9223372036854775807, \"invalid_delay\": \"dead-letter\",\n"
        "      \"dead_letter_exchange\": \"orders.dlx\", \"delay_from\": \"broker\" },\n"
        "    { \"name\": \"Mail_2.x-y\", \"ingress_exchange\": \"mail.delayed\",\n"
        "      \"ingress_queue\": \"mail.delayed.q\", \"target_exchange\": \"\",\n"
        "      \"target_type\": \"headers\", \"prefetch\": 1, \"max_inflight\": 1,\n"
        "      \"max_delay_ms\": 1, \"invalid_delay\": \"publish\", \"dead_letter_exchange\": \"\" }\n"
        "  ]\n"
        "}\n";
    struct config c;
    if (OK(json, &c) != 0)
        return;
    CHECK(c.nuris == 2);
    CHECK(strcmp(c.uris[0], "amqp://bridge:s3cret@rabbit-1:5672/prod") == 0);
    CHECK(strcmp(c.uris[1], "amqps://rabbit-2/prod") == 0);
    CHECK(c.uris[2] == NULL);
    CHECK(c.uri_from_env == 0);
    CHECK(c.heartbeat_s == 0);
    CHECK(c.connect_timeout_ms == 2500);
    CHECK(c.reconnect_min_ms == 100 && c.reconnect_max_ms == 100);
    CHECK(c.publish_retry_min_ms == 2000 && c.publish_retry_max_ms == 120000);
    CHECK(strcmp(c.wal_dir, "/data/wal") == 0);
    CHECK(c.segment_bytes == 16ull << 20);
    CHECK(c.fsync == 0);
    CHECK(c.max_message_bytes == 1048576);
    CHECK(strcmp(c.http_listen, "[::1]:9000") == 0);
    CHECK(c.log_level == LOG_LEVEL_DEBUG);
    CHECK(c.shutdown_timeout_ms == 0);
    CHECK(c.nroutes == 2);
    const struct config_route *r = &c.routes[0];
    CHECK(strcmp(r->name, "orders") == 0);
    CHECK(strcmp(r->ingress_exchange, "orders.delayed") == 0);
    CHECK(strcmp(r->ingress_queue, "orders.delayed.q") == 0);
    CHECK(strcmp(r->target_exchange, "orders") == 0);
    CHECK(r->queue_type == QUEUE_QUORUM);
    CHECK(r->single_active_consumer == 1);
    CHECK(r->declare_target == 1);
    CHECK(strcmp(r->target_type, "topic") == 0);
    CHECK(r->prefetch == 65535);
    CHECK(r->max_inflight == 1000000);
    CHECK(r->max_delay_ms == 9223372036854775807ull);
    CHECK(r->invalid_delay == INVALID_DELAY_DEAD_LETTER);
    CHECK(strcmp(r->dead_letter_exchange, "orders.dlx") == 0);
    CHECK(r->delay_from == DELAY_FROM_BROKER);
    r = &c.routes[1];
    CHECK(strcmp(r->name, "Mail_2.x-y") == 0);
    CHECK(strcmp(r->target_exchange, "") == 0);
    CHECK(r->queue_type == QUEUE_CLASSIC);
    CHECK(r->declare_target == 0);
    CHECK(strcmp(r->target_type, "headers") == 0);
    CHECK(r->prefetch == 1 && r->max_inflight == 1 && r->max_delay_ms == 1);
    CHECK(r->invalid_delay == INVALID_DELAY_PUBLISH);
    CHECK(r->delay_from == DELAY_FROM_BRIDGE);
    config_free(&c);
    CHECK(is_zero(&c));
    config_free(&c); /* twice is harmless */
}

static void test_defaults(void)
{
    struct config c;
    if (OK(CFG(ROUTE("")), &c) != 0)
        return;
    CHECK(c.nuris == 1 && strcmp(c.uris[0], URI) == 0);
    CHECK(c.uri_from_env == 0);
    CHECK(c.heartbeat_s == 30);
    CHECK(c.connect_timeout_ms == 5000);
    CHECK(c.reconnect_min_ms == 500);
    CHECK(c.reconnect_max_ms == 30000);
    CHECK(c.publish_retry_min_ms == 1000);
    CHECK(c.publish_retry_max_ms == 60000);
    CHECK(strcmp(c.wal_dir, "/var/lib/delay-bridge") == 0);
    CHECK(c.segment_bytes == 64ull << 20);
    CHECK(c.fsync == 1);
    CHECK(c.max_message_bytes == 134217728);
    CHECK(c.http_listen[0] == '\0'); /* off unless configured */
    CHECK(c.log_level == LOG_LEVEL_INFO);
    CHECK(c.shutdown_timeout_ms == 10000);
    CHECK(c.checkpoint_interval_s == 60 && c.checkpoint_min_mb == 64);
    CHECK(c.commit_interval_ms == 10);
    CHECK(c.nroutes == 1);
    const struct config_route *r = &c.routes[0];
    CHECK(r->queue_type == QUEUE_CLASSIC);
    CHECK(r->single_active_consumer == 0);
    CHECK(r->declare_target == 0);
    CHECK(strcmp(r->target_type, "direct") == 0);
    CHECK(r->prefetch == 1000);
    CHECK(r->max_inflight == 1000);
    CHECK(r->max_delay_ms == 4294967295ull);
    CHECK(r->invalid_delay == INVALID_DELAY_PUBLISH);
    CHECK(r->dead_letter_exchange[0] == '\0');
    config_free(&c);

    /* empty sections are fine */
    if (OK("{" BROKER "," WAL ",\"http\":{},\"log\":{},\"routes\":[" ROUTE("") "]}", &c) == 0) {
        CHECK(c.http_listen[0] == '\0' && c.log_level == LOG_LEVEL_INFO);
        config_free(&c);
    }
    /* http disabled explicitly, and enabled */
    if (OK(CFGX(",\"http\":{\"listen\":\"\"}", ROUTE("")), &c) == 0) {
        CHECK(c.http_listen[0] == '\0');
        config_free(&c);
    }
    if (OK(CFGX(",\"http\":{\"listen\":\"127.0.0.1:9187\"}", ROUTE("")), &c) == 0) {
        CHECK(strcmp(c.http_listen, "127.0.0.1:9187") == 0);
        config_free(&c);
    }
    /* a UTF-8 byte order mark before the object is accepted */
    if (OK("\xef\xbb\xbf" CFG(ROUTE("")), &c) == 0)
        config_free(&c);
}

static void test_syntax(void)
{
    ERR3("{\n  \"broker\": {\n    \"uri\": \"x\",\n  }\n}", "test.json:4:3:", "invalid JSON",
         NULL);
    ERR2("{\"broker\":{", "test.json:1:12:", "unexpected end of file");
    ERR2("{\n\"a\":\n@}", "test.json:3:1:", "invalid JSON");
    ERR("", "empty");
    ERR(" \n\t ", "empty");
    ERR2(CFG(ROUTE("")) " x", "test.json:1:", "invalid JSON");
    ERR2(CFG(ROUTE("")) "\n{}", "test.json:2:1:", "invalid JSON");
    ERR2("/* comment */" CFG(ROUTE("")), "test.json:1:1:", "invalid JSON");
    ERR2("{\"wal\":{\"dir\":\"/x\",},\"routes\":[]}", "test.json:1:20:", "invalid JSON");
    ERR2("{\"a\":01}", "test.json:1:", "invalid JSON");
    ERR("[]", "expected a JSON object at the top level");
    ERR("\"str\"", "top level");
    ERR("42", "top level");
}

static void test_unknown_keys(void)
{
    ERR3("{" BROKER "," WAL ",\"rotues\":[],\"routes\":[" ROUTE("") "]}", "test.json: rotues:",
         "unknown key \"rotues\"", "routes");
    ERR3("{\"broker\":{\"uri\":\"" URI "\",\"url\":\"x\"}," WAL ",\"routes\":[" ROUTE("") "]}",
         "test.json: broker.url:", "unknown key", "heartbeat_s");
    ERR2("{" BROKER ",\"wal\":{\"dir\":\"/x\",\"directory\":\"/y\"},\"routes\":[" ROUTE("") "]}",
         "wal.directory:", "unknown key");
    ERR2(CFGX(",\"http\":{\"port\":9187}", ROUTE("")), "http.port:", "unknown key");
    ERR2(CFGX(",\"log\":{\"lvl\":\"info\"}", ROUTE("")), "log.lvl:", "unknown key");
    ERR3(CFG(ROUTE("") "," ROUTE2(",\"prefech\":10")), "routes[1].prefech:", "unknown key",
         "prefetch");
    /* an odd key is shown escaped, on one line */
    ERR2(CFGX(",\"x\\ny\\\"\":1", ROUTE("")), "unknown key \"x\\u000ay\\\"\"", NULL);
}

static void test_broker(void)
{
    ERR2("{" WAL ",\"routes\":[" ROUTE("") "]}", "test.json: broker.uri: missing",
         "DELAY_BRIDGE_BROKER_URI");
    ERR2("{\"broker\":{}," WAL ",\"routes\":[" ROUTE("") "]}", "broker.uri: missing", NULL);
    ERR2("{\"broker\":[]," WAL ",\"routes\":[" ROUTE("") "]}", "test.json: broker:",
         "expected an object, got an array");
    ERR2("{\"broker\":{\"uri\":5}," WAL ",\"routes\":[" ROUTE("") "]}", "broker.uri:",
         "expected a string or an array of strings, got 5");
    ERR2("{\"broker\":{\"uri\":\"http://h/\"}," WAL ",\"routes\":[" ROUTE("") "]}",
         "broker.uri:", "amqp:// or amqps://");
    ERR2("{\"broker\":{\"uri\":\"\"}," WAL ",\"routes\":[" ROUTE("") "]}", "broker.uri:",
         "must not be empty");
    ERR2("{\"broker\":{\"uri\":\"AMQP://h/\"}," WAL ",\"routes\":[" ROUTE("") "]}",
         "broker.uri:", "amqp://");
    ERR2("{\"broker\":{\"uri\":\"amqp://h:99999/\"}," WAL ",\"routes\":[" ROUTE("") "]}",
         "broker.uri:", "not a valid AMQP URI");
    ERR2("{\"broker\":{\"uri\":\"amqp://h:0/\"}," WAL ",\"routes\":[" ROUTE("") "]}",
         "broker.uri:", "not a valid AMQP URI");
    ERR2("{\"broker\":{\"uri\":\"amqp://h/a/b\"}," WAL ",\"routes\":[" ROUTE("") "]}",
         "broker.uri:", "%2f");
    ERR2("{\"broker\":{\"uri\":[]}," WAL ",\"routes\":[" ROUTE("") "]}", "broker.uri:",
         "expected 1..8 URIs, got 0");
    ERR2("{\"broker\":{\"uri\":[\"" URI "\",7]}," WAL ",\"routes\":[" ROUTE("") "]}",
         "broker.uri[1]:", "expected a string, got 7");
    ERR2("{\"broker\":{\"uri\":[\"" URI "\",\"amqp://h/a/b\"]}," WAL ",\"routes\":[" ROUTE("") "]}",
         "broker.uri[1]:", "not a valid AMQP URI");
    ERR2("{\"broker\":{\"uri\":[\"amqp://a\",\"amqp://b\",\"amqp://c\",\"amqp://d\",\"amqp://e\","
         "\"amqp://f\",\"amqp://g\",\"amqp://h\",\"amqp://i\"]}," WAL ",\"routes\":[" ROUTE("") "]}",
         "broker.uri:", "expected 1..8 URIs, got 9");

    ERR2("{\"broker\":{\"uri\":\"amqp://h/\\u0000x\"}," WAL ",\"routes\":[" ROUTE("") "]}",
         "broker.uri:", "NUL");

    /* the password never shows in a message */
    struct config c;
    char err[512];
    CHECK(config_parse(&c,
                       "{\"broker\":{\"uri\":\"amqp://u:hunter2@h:99999/\"}," WAL
                       ",\"routes\":[" ROUTE("") "]}",
                       "test.json", err, sizeof err) == -1);
    CHECK(strstr(err, "hunter2") == NULL);
    CHECK(strstr(err, "amqp://u:***@h:99999/") != NULL);

    /* the default vhost "/" written %2f */
    if (OK("{\"broker\":{\"uri\":\"amqp://guest:guest@127.0.0.1:5672/%2f\"}," WAL
           ",\"routes\":[" ROUTE("") "]}",
           &c) == 0) {
        CHECK(strcmp(c.uris[0], "amqp://guest:guest@127.0.0.1:5672/%2f") == 0);
        config_free(&c);
    }

    /* eight URIs is the limit, not an error */
    if (OK("{\"broker\":{\"uri\":[\"amqp://a\",\"amqp://b\",\"amqp://c\",\"amqp://d\",\"amqp://e\","
           "\"amqp://f\",\"amqp://g\",\"amqps://u:p@[::1]:5671/v\"]}," WAL
           ",\"routes\":[" ROUTE("") "]}",
           &c) == 0) {
        CHECK(c.nuris == 8 && strcmp(c.uris[7], "amqps://u:p@[::1]:5671/v") == 0);
        config_free(&c);
    }

#define B(kv) "{\"broker\":{\"uri\":\"" URI "\"," kv "}," WAL ",\"routes\":[" ROUTE("") "]}"
    ERR(B("\"heartbeat_s\":\"30\""),
        "test.json: broker.heartbeat_s: expected an integer 0..65535, got \"30\"");
    ERR(B("\"heartbeat_s\":65536"), "broker.heartbeat_s: expected an integer 0..65535, got 65536");
    ERR(B("\"heartbeat_s\":-1"), "broker.heartbeat_s: expected an integer 0..65535, got -1");
    ERR(B("\"heartbeat_s\":1.5"), "broker.heartbeat_s: expected an integer 0..65535, got 1.5");
    ERR(B("\"heartbeat_s\":30.0"), "broker.heartbeat_s: expected an integer 0..65535, got 30.0");
    ERR(B("\"heartbeat_s\":3e1"), "broker.heartbeat_s: expected an integer 0..65535, got 3e1");
    ERR(B("\"heartbeat_s\":true"), "broker.heartbeat_s: expected an integer 0..65535, got true");
    ERR(B("\"heartbeat_s\":null"), "broker.heartbeat_s: expected an integer 0..65535, got null");
    ERR(B("\"heartbeat_s\":{}"), "got an object");
    ERR(B("\"connect_timeout_ms\":0"), "broker.connect_timeout_ms: expected an integer 1..");
    ERR(B("\"connect_timeout_ms\":4294967296"), "broker.connect_timeout_ms: expected an integer");
    ERR(B("\"connect_timeout_ms\":99999999999999999999"), "got a number out of range");
    ERR(B("\"reconnect_min_ms\":\"1\""), "broker.reconnect_min_ms:");
    ERR2(B("\"reconnect_min_ms\":1000,\"reconnect_max_ms\":999"), "broker.reconnect_max_ms:",
         "reconnect_min_ms");
    ERR2(B("\"reconnect_min_ms\":40000"), "broker.reconnect_max_ms:", "30000");
    ERR2(B("\"publish_retry_min_ms\":61000"), "broker.publish_retry_max_ms:", "expected max >= min");
    ERR(B("\"publish_retry_max_ms\":false"), "broker.publish_retry_max_ms:");
#undef B
    if (OK("{\"broker\":{\"uri\":\"" URI "\",\"heartbeat_s\":65535,\"connect_timeout_ms\":4294967295}," WAL
           ",\"routes\":[" ROUTE("") "]}",
           &c) == 0) {
        CHECK(c.heartbeat_s == 65535 && c.connect_timeout_ms == 4294967295u);
        config_free(&c);
    }
}

static void test_tls(void)
{
    struct config c;
    char ca[] = "/tmp/test_config_ca.XXXXXX";
    int fd = mkstemp(ca);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    close(fd);

    /* defaults: the system bundle, host names verified, no client certificate */
    if (OK(CFG(ROUTE("")), &c) == 0) {
        CHECK(strcmp(c.tls.ca_file, "/etc/ssl/certs/ca-certificates.crt") == 0);
        CHECK(c.tls.cert_file[0] == '\0' && c.tls.key_file[0] == '\0');
        CHECK(c.tls.verify_hostname == 1);
        config_free(&c);
    }

#define T(uri, tls) "{\"broker\":{\"uri\":\"" uri "\",\"tls\":" tls "}," WAL \
                    ",\"routes\":[" ROUTE("") "]}"
    char json[1024];
    snprintf(json, sizeof json,
             T("amqps://u:p@h/", "{\"ca_file\":\"%s\",\"cert_file\":\"%s\",\"key_file\":\"%s\","
                                 "\"verify_hostname\":false}"),
             ca, ca, ca);
    if (OK(json, &c) == 0) {
        CHECK(strcmp(c.tls.ca_file, ca) == 0 && strcmp(c.tls.cert_file, ca) == 0 &&
              strcmp(c.tls.key_file, ca) == 0);
        CHECK(c.tls.verify_hostname == 0);
        config_free(&c);
    }
    ERR(T("amqps://h/", "[]"), "test.json: broker.tls: expected an object, got an array");
    ERR2(T("amqps://h/", "{\"cafile\":\"/x\"}"), "broker.tls.cafile: unknown key",
         "ca_file, cert_file, key_file, verify_hostname");
    ERR(T("amqps://h/", "{\"verify_hostname\":\"no\"}"),
        "broker.tls.verify_hostname: expected true or false, got \"no\"");
    ERR(T("amqps://h/", "{\"ca_file\":\"\"}"), "broker.tls.ca_file: must not be empty");
    ERR(T("amqps://h/", "{\"ca_file\":7}"), "broker.tls.ca_file: expected a string, got 7");
    /* both or neither, named at the missing one, with amqp:// too */
    ERR(T("amqp://h/", "{\"cert_file\":\"/c.pem\"}"),
        "broker.tls.key_file: set cert_file and key_file together");
    ERR(T("amqp://h/", "{\"key_file\":\"/k.pem\"}"),
        "broker.tls.cert_file: set cert_file and key_file together");
    /* with an amqps:// URI the files must be readable now, not at the first connect */
    ERR2(T("amqps://h/", "{\"ca_file\":\"/nonexistent/ca.pem\"}"),
         "broker.tls.ca_file: cannot read \"/nonexistent/ca.pem\"", "No such file or directory");
    ERR2(T("amqps://h/", "{\"ca_file\":\"/tmp\"}"), "broker.tls.ca_file:", "Is a directory");
    snprintf(json, sizeof json,
             T("amqps://h/", "{\"ca_file\":\"%s\",\"cert_file\":\"%s\",\"key_file\":\"/no/key\"}"),
             ca, ca);
    ERR2(json, "broker.tls.key_file: cannot read \"/no/key\"", "No such file");
    snprintf(json, sizeof json,
             "{\"broker\":{\"uri\":[\"amqp://h/\",\"amqps://h/\"],\"tls\":{\"cert_file\":\"/no/c\","
             "\"key_file\":\"%s\"}}," WAL ",\"routes\":[" ROUTE("") "]}", ca);
    ERR2(json, "broker.tls.cert_file: cannot read \"/no/c\"", "No such file");
    /* TLS settings are ignored (not an error) when no URI is amqps:// */
    if (OK(T("amqp://h/", "{\"ca_file\":\"/nonexistent/ca.pem\",\"verify_hostname\":false}"),
           &c) == 0) {
        CHECK(c.tls.verify_hostname == 0);
        config_free(&c);
    }
#undef T
    unlink(ca);
}

static void test_env(void)
{
    struct config c;
    const char *no_uri = "{\"broker\":{\"heartbeat_s\":5}," WAL ",\"routes\":[" ROUTE("") "]}";
    const char *no_broker = "{" WAL ",\"routes\":[" ROUTE("") "]}";

    setenv("DELAY_BRIDGE_BROKER_URI", "amqp://a:b@h1:5672/v, amqps://h2 ,amqp://h3", 1);
    if (OK(no_uri, &c) == 0) {
        CHECK(c.uri_from_env == 1);
        CHECK(c.nuris == 3);
        CHECK(strcmp(c.uris[0], "amqp://a:b@h1:5672/v") == 0);
        CHECK(strcmp(c.uris[1], "amqps://h2") == 0);
        CHECK(strcmp(c.uris[2], "amqp://h3") == 0);
        CHECK(c.heartbeat_s == 5);
        config_free(&c);
    }
    if (OK(no_broker, &c) == 0) {
        CHECK(c.uri_from_env == 1 && c.nuris == 3);
        config_free(&c);
    }
    /* the environment wins over the file */
    if (OK(CFG(ROUTE("")), &c) == 0) {
        CHECK(c.uri_from_env == 1 && c.nuris == 3 && strcmp(c.uris[0], "amqp://a:b@h1:5672/v") == 0);
        config_free(&c);
    }
    setenv("DELAY_BRIDGE_BROKER_URI", "amqp://only", 1);
    if (OK(CFG(ROUTE("")), &c) == 0) {
        CHECK(c.uri_from_env == 1 && c.nuris == 1 && strcmp(c.uris[0], "amqp://only") == 0);
        config_free(&c);
    }
    /* unknown keys in broker are still errors */
    ERR("{\"broker\":{\"uri\":\"" URI "\",\"x\":1}," WAL ",\"routes\":[" ROUTE("") "]}",
        "broker.x: unknown key");

    setenv("DELAY_BRIDGE_BROKER_URI", "amqp://h1,http://u:pw@h2", 1);
    ERR3(no_uri, "DELAY_BRIDGE_BROKER_URI (item 2)", "amqp://", "u:***@h2");
    setenv("DELAY_BRIDGE_BROKER_URI", "amqp://h1,,amqp://h2", 1);
    ERR2(no_uri, "DELAY_BRIDGE_BROKER_URI (item 2)", "empty");
    setenv("DELAY_BRIDGE_BROKER_URI", "amqp://h1,", 1);
    ERR2(no_uri, "DELAY_BRIDGE_BROKER_URI (item 2)", "empty");
    setenv("DELAY_BRIDGE_BROKER_URI", "amqp://1,amqp://2,amqp://3,amqp://4,amqp://5,amqp://6,"
                                      "amqp://7,amqp://8,amqp://9", 1);
    ERR2(no_uri, "DELAY_BRIDGE_BROKER_URI (item 9)", "at most 8");

    /* empty variable: the file is used */
    setenv("DELAY_BRIDGE_BROKER_URI", "", 1);
    if (OK(CFG(ROUTE("")), &c) == 0) {
        CHECK(c.uri_from_env == 0 && c.nuris == 1 && strcmp(c.uris[0], URI) == 0);
        config_free(&c);
    }
    ERR(no_uri, "broker.uri: missing");
    unsetenv("DELAY_BRIDGE_BROKER_URI");
    ERR(no_broker, "broker.uri: missing");
}

static void test_wal_http_log(void)
{
    struct config c;
#define W(kv) "{" BROKER ",\"wal\":{\"dir\":\"/w\"" kv "},\"routes\":[" ROUTE("") "]}"
    ERR("{" BROKER ",\"routes\":[" ROUTE("") "]}", "test.json: wal.dir: missing");
    ERR("{" BROKER ",\"wal\":{},\"routes\":[" ROUTE("") "]}", "wal.dir: missing");
    ERR("{" BROKER ",\"wal\":{\"dir\":\"\"},\"routes\":[" ROUTE("") "]}", "wal.dir: must not be empty");
    ERR("{" BROKER ",\"wal\":{\"dir\":7},\"routes\":[" ROUTE("") "]}", "wal.dir: expected a string, got 7");
    ERR("{" BROKER ",\"wal\":\"/w\",\"routes\":[" ROUTE("") "]}", "test.json: wal: expected an object, got \"/w\"");
    ERR("{" BROKER ",\"wal\":{\"dir\":\"/w\\u0000x\"},\"routes\":[" ROUTE("") "]}", "wal.dir: must not contain a NUL");
    ERR(W(",\"segment_mb\":0"), "wal.segment_mb: expected an integer 1..2048, got 0");
    ERR(W(",\"segment_mb\":4096"), "wal.segment_mb: expected an integer 1..2048, got 4096");
    ERR(W(",\"segment_mb\":\"64\""), "wal.segment_mb: expected an integer 1..2048, got \"64\"");
    ERR(W(",\"fsync\":\"true\""), "wal.fsync: expected true or false, got \"true\"");
    ERR(W(",\"fsync\":1"), "wal.fsync: expected true or false, got 1");
    ERR(W(",\"fsync\":null"), "wal.fsync: expected true or false, got null");
    ERR(W(",\"max_message_bytes\":0"), "wal.max_message_bytes: expected an integer 1..536870912, got 0");
    ERR(W(",\"max_message_bytes\":536870913"), "wal.max_message_bytes:");
    ERR(W(",\"checkpoint_interval_s\":-1"), "wal.checkpoint_interval_s: expected an integer 0..604800, got -1");
    ERR(W(",\"checkpoint_interval_s\":604801"), "wal.checkpoint_interval_s:");
    ERR(W(",\"checkpoint_min_mb\":0"), "wal.checkpoint_min_mb: expected an integer 1..1048576, got 0");
    ERR(W(",\"commit_interval_ms\":1001"), "wal.commit_interval_ms: expected an integer 0..1000, got 1001");
    ERR(W(",\"commit_interval_ms\":\"10\""), "wal.commit_interval_ms: expected an integer 0..1000");
    if (OK(W(",\"commit_interval_ms\":0"), &c) == 0) {
        CHECK(c.commit_interval_ms == 0);
        config_free(&c);
    }
    if (OK(W(",\"checkpoint_interval_s\":0,\"checkpoint_min_mb\":1"), &c) == 0) {
        CHECK(c.checkpoint_interval_s == 0 && c.checkpoint_min_mb == 1);
        config_free(&c);
    }
    if (OK(W(",\"segment_mb\":2048,\"max_message_bytes\":536870912"), &c) == 0) {
        CHECK(c.segment_bytes == 2048ull << 20 && c.max_message_bytes == 536870912u);
        config_free(&c);
    }
    if (OK(W(",\"segment_mb\":1"), &c) == 0) {
        CHECK(c.segment_bytes == 1u << 20);
        config_free(&c);
    }
    /* a 4095-byte dir fits, 4096 does not (routes_file set: its default would not fit) */
    static char json[8192];
    char dir[4097];
    memset(dir, 'd', sizeof dir);
    dir[0] = '/';
    dir[4095] = '\0';
    snprintf(json, sizeof json, "{" BROKER ",\"wal\":{\"dir\":\"%s\"},\"routes_file\":\"/r\","
             "\"routes\":[" ROUTE("") "]}", dir);
    if (OK(json, &c) == 0) {
        CHECK(strlen(c.wal_dir) == 4095);
        config_free(&c);
    }
    dir[4095] = 'd';
    dir[4096] = '\0';
    snprintf(json, sizeof json, "{" BROKER ",\"wal\":{\"dir\":\"%s\"},\"routes\":[" ROUTE("") "]}", dir);
    ERR2(json, "wal.dir: too long (4096 bytes)", "at most 4095");
#undef W

#define H(v) CFGX(",\"http\":{\"listen\":" v "}", ROUTE(""))
    const char *good[] = { H("\"127.0.0.1:9187\""), H("\"[::1]:65535\""), H("\"127.0.0.2:80\"") };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        if (OK(good[i], &c) == 0)
            config_free(&c);
    /* a bare port binds loopback */
    if (OK(H("\"9800\""), &c) == 0) {
        CHECK(strcmp(c.http_host, "127.0.0.1") == 0 && c.http_port == 9800);
        config_free(&c);
    }
    if (OK(H("\"[::1]:9801\""), &c) == 0) {
        CHECK(strcmp(c.http_host, "::1") == 0 && c.http_port == 9801 && !c.http_allow_remote);
        config_free(&c);
    }
    /* beyond this host only when asked for */
    ERR2(H("\"0.0.0.0:1\""), "http.listen: 0.0.0.0 is not a loopback address", "allow_remote");
    ERR(H("\"[::]:9187\""), "http.listen: :: is not a loopback address");
#define HR(v) CFGX(",\"http\":{\"listen\":" v ",\"allow_remote\":true}", ROUTE(""))
    /* ... and with a token: protected mode, refused at start without one */
    unsetenv("DELAY_BRIDGE_HTTP_TOKEN");
    ERR2(HR("\"0.0.0.0:9800\""), "test.json: http.listen: 0.0.0.0 is beyond loopback and no "
         "token is set", "set DELAY_BRIDGE_HTTP_TOKEN");
    ERR(HR("\"[::]:9800\""), "http.listen: :: is beyond loopback and no token is set");
    setenv("DELAY_BRIDGE_HTTP_TOKEN", "", 1); /* empty is none */
    ERR(HR("\"10.1.2.3:9800\""), "http.listen: 10.1.2.3 is beyond loopback and no token");
    setenv("DELAY_BRIDGE_HTTP_TOKEN", "a-long-random-secret", 1);
    if (OK(HR("\"0.0.0.0:9800\""), &c) == 0) {
        CHECK(c.http_allow_remote && c.http_token_set && strcmp(c.http_host, "0.0.0.0") == 0);
        config_free(&c);
    }
    if (OK(HR("\"[::]:9800\""), &c) == 0)
        config_free(&c);
    /* a token alone does not open it: allow_remote stays the explicit choice */
    ERR2(H("\"0.0.0.0:1\""), "http.listen: 0.0.0.0 is not a loopback address", "allow_remote");
    unsetenv("DELAY_BRIDGE_HTTP_TOKEN");
    /* loopback needs no token */
    if (OK(H("\"127.0.0.1:9800\""), &c) == 0) {
        CHECK(!c.http_token_set && c.http_nallowed_hosts == 0);
        config_free(&c);
    }
#undef HR
#define HA(v) CFGX(",\"http\":{\"listen\":\"9800\",\"allowed_hosts\":" v "}", ROUTE(""))
    if (OK(HA("[\"bridge.internal\", \"[fd00::1]\", \"10.0.0.5\"]"), &c) == 0) {
        CHECK(c.http_nallowed_hosts == 3 && !strcmp(c.http_allowed_hosts[0], "bridge.internal") &&
              !strcmp(c.http_allowed_hosts[1], "[fd00::1]"));
        config_free(&c);
    }
    if (OK(HA("[]"), &c) == 0) {
        CHECK(c.http_nallowed_hosts == 0);
        config_free(&c);
    }
    ERR(HA("\"bridge.internal\""), "http.allowed_hosts: expected an array of at most 16 host names");
    ERR(HA("[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\",\"j\",\"k\",\"l\",\"m\","
           "\"n\",\"o\",\"p\",\"q\"]"), "http.allowed_hosts: expected an array of at most 16");
    ERR(HA("[\"ok\", 7]"), "http.allowed_hosts[1]: expected a host name, got 7");
    ERR(HA("[\"\"]"), "http.allowed_hosts[0]: expected a host name or address of 1..253");
    ERR(HA("[\"evil.example/x\"]"), "http.allowed_hosts[0]: expected a host name or address");
    ERR(HA("[\"a b\"]"), "http.allowed_hosts[0]:");
#undef HA
    /* numeric addresses only: no name lookup at start */
    ERR(H("\"localhost:80\""), "http.listen: expected \"\" (disabled), a port (loopback)");
    ERR(H("\"127.0.0.1\""), "http.listen: expected \"\" (disabled), a port (loopback)");
    ERR2(H("\":9187\""), "http.listen:", "got \":9187\"");
    ERR(H("\"h:0\""), "http.listen:");
    ERR(H("\"h:65536\""), "http.listen:");
    ERR(H("\"h:\""), "http.listen:");
    ERR(H("\"h:80x\""), "http.listen:");
    ERR(H("\"h:-80\""), "http.listen:");
    ERR(H("\"::1:80\""), "http.listen:");
    ERR(H("\"[::1:80\""), "http.listen:");
    ERR(H("\"[]:80\""), "http.listen:");
    ERR(H("\"h:0000080\""), "http.listen:");
    ERR(H("9187"), "http.listen: expected a string, got 9187");
    ERR(CFGX(",\"http\":\"127.0.0.1:1\"", ROUTE("")), "test.json: http: expected an object");
#undef H

    const char *levels[] = { "debug", "info", "warn", "error" };
    for (int i = 0; i < 4; i++) {
        char j[1024];
        snprintf(j, sizeof j, CFGX(",\"log\":{\"level\":\"%s\"}", ROUTE("")), levels[i]);
        if (OK(j, &c) == 0) {
            CHECK(c.log_level == i);
            config_free(&c);
        }
    }
    ERR(CFGX(",\"log\":{\"level\":\"verbose\"}", ROUTE("")),
        "log.level: expected \"debug\", \"info\", \"warn\" or \"error\", got \"verbose\"");
    ERR(CFGX(",\"log\":{\"level\":\"INFO\"}", ROUTE("")), "log.level:");
    ERR(CFGX(",\"log\":{\"level\":1}", ROUTE("")), "log.level:");
    ERR(CFGX(",\"log\":{\"level\":\"informational-and-more\"}", ROUTE("")), "log.level:");
    ERR(CFGX(",\"log\":[]", ROUTE("")), "test.json: log: expected an object");

    ERR(CFGX(",\"shutdown_timeout_ms\":\"10\"", ROUTE("")),
        "test.json: shutdown_timeout_ms: expected an integer 0..4294967295, got \"10\"");
    ERR(CFGX(",\"shutdown_timeout_ms\":-1", ROUTE("")), "shutdown_timeout_ms:");
    ERR(CFGX(",\"shutdown_timeout_ms\":4294967296", ROUTE("")), "shutdown_timeout_ms:");
}

static void test_routes(void)
{
    struct config c;
    ERR("{" BROKER "," WAL "}", "test.json: routes: missing");
    ERR("{" BROKER "," WAL ",\"routes\":{}}", "routes: expected an array, got an object");
    ERR("{" BROKER "," WAL ",\"routes\":[]}", "routes: expected 1..256 routes, got 0");
    ERR(CFG("5"), "routes[0]: expected an object, got 5");
    ERR(CFG(ROUTE("") ",[]"), "routes[1]: expected an object, got an array");

    /* the example from the brief, word for word */
    ERR(CFG(ROUTE("") "," ROUTE2(",\"prefetch\":\"100\"")),
        "test.json: routes[1].prefetch: expected an integer 1..65535, got \"100\"");

    /* required keys */
    ERR(CFG("{\"ingress_exchange\":\"a\",\"ingress_queue\":\"q\",\"target_exchange\":\"t\"}"),
        "routes[0].name: missing");
    ERR(CFG("{\"name\":\"n\",\"ingress_queue\":\"q\",\"target_exchange\":\"t\"}"),
        "routes[0].ingress_exchange: missing");
    ERR(CFG("{\"name\":\"n\",\"ingress_exchange\":\"a\",\"target_exchange\":\"t\"}"),
        "routes[0].ingress_queue: missing");
    ERR(CFG("{\"name\":\"n\",\"ingress_exchange\":\"a\",\"ingress_queue\":\"q\"}"),
        "routes[0].target_exchange: missing");
    ERR(CFG("{\"name\":\"\",\"ingress_exchange\":\"a\",\"ingress_queue\":\"q\",\"target_exchange\":\"t\"}"),
        "routes[0].name: must not be empty");
    ERR(CFG("{\"name\":\"n\",\"ingress_exchange\":\"\",\"ingress_queue\":\"q\",\"target_exchange\":\"t\"}"),
        "routes[0].ingress_exchange: must not be empty");
    ERR(CFG("{\"name\":\"n\",\"ingress_exchange\":\"a\",\"ingress_queue\":\"\",\"target_exchange\":\"t\"}"),
        "routes[0].ingress_queue: must not be empty");
    ERR(CFG("{\"name\":\"n\",\"ingress_exchange\":\"a\",\"ingress_queue\":\"q\",\"target_exchange\":null}"),
        "routes[0].target_exchange: expected a string, got null");
    ERR(CFG("{\"name\":5,\"ingress_exchange\":\"a\",\"ingress_queue\":\"q\",\"target_exchange\":\"t\"}"),
        "routes[0].name: expected a string, got 5");

    /* name characters */
    ERR2(CFG("{\"name\":\"a b\",\"ingress_exchange\":\"a\",\"ingress_queue\":\"q\",\"target_exchange\":\"t\"}"),
         "routes[0].name: \"a b\"", "letters, digits");
    ERR(CFG("{\"name\":\"caf\xc3\xa9\",\"ingress_exchange\":\"a\",\"ingress_queue\":\"q\",\"target_exchange\":\"t\"}"),
        "routes[0].name:");
    ERR(CFG("{\"name\":\"a/b\",\"ingress_exchange\":\"a\",\"ingress_queue\":\"q\",\"target_exchange\":\"t\"}"),
        "routes[0].name:");

    /* 255 bytes fit, 256 do not */
    char n255[256], n256[257], json[4096];
    memset(n255, 'n', 255);
    n255[255] = '\0';
    memset(n256, 'n', 256);
    n256[256] = '\0';
    snprintf(json, sizeof json,
             CFG("{\"name\":\"%s\",\"ingress_exchange\":\"%s\",\"ingress_queue\":\"%s\","
                 "\"target_exchange\":\"t\"}"),
             n255, n255, n255);
    if (OK(json, &c) == 0) {
        CHECK(strlen(c.routes[0].name) == 255 && strlen(c.routes[0].ingress_queue) == 255);
        config_free(&c);
    }
    snprintf(json, sizeof json,
             CFG("{\"name\":\"%s\",\"ingress_exchange\":\"a\",\"ingress_queue\":\"q\",\"target_exchange\":\"t\"}"),
             n256);
    ERR2(json, "routes[0].name: too long (256 bytes)", "at most 255");
    snprintf(json, sizeof json,
             CFG("{\"name\":\"n\",\"ingress_exchange\":\"%s\",\"ingress_queue\":\"q\",\"target_exchange\":\"t\"}"),
             n256);
    ERR(json, "routes[0].ingress_exchange: too long");
    snprintf(json, sizeof json,
             CFG("{\"name\":\"n\",\"ingress_exchange\":\"a\",\"ingress_queue\":\"%s\",\"target_exchange\":\"t\"}"),
             n256);
    ERR(json, "routes[0].ingress_queue: too long");
    snprintf(json, sizeof json,
             CFG("{\"name\":\"n\",\"ingress_exchange\":\"a\",\"ingress_queue\":\"q\",\"target_exchange\":\"%s\"}"),
             n256);
    ERR(json, "routes[0].target_exchange: too long");

    /* uniqueness */
    ERR2(CFG(ROUTE("") ",{\"name\":\"orders\",\"ingress_exchange\":\"x\",\"ingress_queue\":\"y\","
                       "\"target_exchange\":\"z\"}"),
         "routes[1].name: \"orders\" is already used by routes[0]", "unique name");
    ERR2(CFG(ROUTE("") ",{\"name\":\"b\",\"ingress_exchange\":\"orders.delayed\",\"ingress_queue\":\"y\","
                       "\"target_exchange\":\"z\"}"),
         "routes[1].ingress_exchange: \"orders.delayed\" is already used by routes[0]", NULL);
    ERR2(CFG(ROUTE("") "," ROUTE2("") ",{\"name\":\"c\",\"ingress_exchange\":\"c.d\","
                       "\"ingress_queue\":\"billing.delayed.q\",\"target_exchange\":\"z\"}"),
         "routes[2].ingress_queue: \"billing.delayed.q\" is already used by routes[1]", NULL);
    /* a queue may share its name with an exchange, targets may be shared */
    if (OK(CFG(ROUTE("") ",{\"name\":\"b\",\"ingress_exchange\":\"orders.delayed.q\","
                         "\"ingress_queue\":\"orders.delayed\",\"target_exchange\":\"orders\"}"),
           &c) == 0)
        config_free(&c);

    /* loops */
    ERR2(CFG("{\"name\":\"n\",\"ingress_exchange\":\"a\",\"ingress_queue\":\"q\",\"target_exchange\":\"a\"}"),
         "routes[0].target_exchange: same as ingress_exchange \"a\"", "loop");
    ERR3(CFG("{\"name\":\"orders\",\"ingress_exchange\":\"orders.delayed\",\"ingress_queue\":\"q1\","
             "\"target_exchange\":\"billing.delayed\"},"
             "{\"name\":\"billing\",\"ingress_exchange\":\"billing.delayed\",\"ingress_queue\":\"q2\","
             "\"target_exchange\":\"orders.delayed\"}"),
         "test.json: routes[0].target_exchange: routes form a loop", "orders -> billing -> orders",
         "republished for ever");
    ERR2(CFG("{\"name\":\"a\",\"ingress_exchange\":\"ea\",\"ingress_queue\":\"qa\",\"target_exchange\":\"eb\"},"
             "{\"name\":\"b\",\"ingress_exchange\":\"eb\",\"ingress_queue\":\"qb\",\"target_exchange\":\"ec\"},"
             "{\"name\":\"c\",\"ingress_exchange\":\"ec\",\"ingress_queue\":\"qc\",\"target_exchange\":\"eb\"}"),
         "routes[1].target_exchange: routes form a loop (b -> c -> b)", NULL);
    /* a chain without a loop is fine: a -> b -> plain exchange */
    if (OK(CFG("{\"name\":\"a\",\"ingress_exchange\":\"ea\",\"ingress_queue\":\"qa\",\"target_exchange\":\"eb\"},"
               "{\"name\":\"b\",\"ingress_exchange\":\"eb\",\"ingress_queue\":\"qb\",\"target_exchange\":\"plain\"}"),
           &c) == 0)
        config_free(&c);
    /* invalid x-delay going round through dead-letter exchanges */
    ERR2(CFG(ROUTE(",\"invalid_delay\":\"dead-letter\",\"dead_letter_exchange\":\"billing.delayed\"") ","
             ROUTE2(",\"invalid_delay\":\"dead-letter\",\"dead_letter_exchange\":\"orders.delayed\"")),
         "dead_letter_exchange: routes form a loop", "invalid x-delay");
    /* ... or dead-lettered into a route that publishes back */
    ERR2(CFG(ROUTE(",\"invalid_delay\":\"dead-letter\",\"dead_letter_exchange\":\"billing.delayed\"") ","
             "{\"name\":\"billing\",\"ingress_exchange\":\"billing.delayed\",\"ingress_queue\":\"q2\","
             "\"target_exchange\":\"orders.delayed\"}"),
         "routes[0].dead_letter_exchange: routes form a loop", "invalid x-delay");
    /* dead_letter_exchange pointing at a route is fine when it leads out */
    if (OK(CFG(ROUTE(",\"invalid_delay\":\"dead-letter\",\"dead_letter_exchange\":\"billing.delayed\"") ","
               ROUTE2("")),
           &c) == 0)
        config_free(&c);
    /* dead_letter_exchange unused with "publish": no loop through it */
    if (OK(CFG(ROUTE(",\"dead_letter_exchange\":\"orders.delayed\"")), &c) == 0)
        config_free(&c);

    /* enums and booleans */
    ERR(CFG(ROUTE(",\"delay_from\":\"publisher\"")),
        "routes[0].delay_from: expected \"bridge\" or \"broker\", got \"publisher\"");
    ERR(CFG(ROUTE(",\"delay_from\":true")), "routes[0].delay_from: expected a string, got true");
    ERR(CFG(ROUTE(",\"target_type\":\"x-delayed-message\"")),
        "routes[0].target_type: expected \"direct\", \"topic\", \"fanout\" or \"headers\", got "
        "\"x-delayed-message\"");
    ERR(CFG(ROUTE(",\"target_type\":1")), "routes[0].target_type: expected a string, got 1");
    ERR(CFG(ROUTE(",\"queue_type\":\"lazy\"")),
        "routes[0].queue_type: expected \"classic\", \"quorum\" or \"stream\", got \"lazy\"");
    ERR(CFG(ROUTE(",\"queue_type\":\"Quorum\"")), "routes[0].queue_type:");

    /* a stream ingress: its retention, and what it cannot go with */
    {
        struct config st;
        if (OK(CFG(ROUTE(",\"queue_type\":\"stream\"")), &st) == 0) {
            CHECK(st.routes[0].queue_type == QUEUE_STREAM);
            CHECK(strcmp(st.routes[0].stream_max_age, "7D") == 0);
            CHECK(st.routes[0].stream_max_bytes == 0);
            config_free(&st);
        }
        if (OK(CFG(ROUTE(",\"queue_type\":\"stream\",\"stream_max_age\":\"36h\","
                         "\"stream_max_mb\":2048")), &st) == 0) {
            CHECK(strcmp(st.routes[0].stream_max_age, "36h") == 0);
            CHECK(st.routes[0].stream_max_bytes == 2048ull << 20);
            config_free(&st);
        }
        if (OK(CFG(ROUTE(",\"queue_type\":\"quorum\"")), &st) == 0) {
            CHECK(st.routes[0].queue_type == QUEUE_QUORUM);
            config_free(&st);
        }
    }
    ERR(CFG(ROUTE(",\"stream_max_age\":\"7D\"")),
        "routes[0].stream_max_age: only for queue_type \"stream\"");
    ERR(CFG(ROUTE(",\"queue_type\":\"quorum\",\"stream_max_mb\":10")),
        "routes[0].stream_max_mb: only for queue_type \"stream\"");
    ERR(CFG(ROUTE(",\"queue_type\":\"stream\",\"stream_max_age\":\"7days\"")),
        "routes[0].stream_max_age: expected 1..9 digits and a unit");
    ERR(CFG(ROUTE(",\"queue_type\":\"stream\",\"stream_max_age\":7")),
        "routes[0].stream_max_age: expected 1..9 digits and a unit");
    ERR(CFG(ROUTE(",\"queue_type\":\"stream\",\"stream_max_mb\":-1")),
        "routes[0].stream_max_mb:");
    ERR2(CFG(ROUTE(",\"queue_type\":\"stream\",\"single_active_consumer\":true")),
         "routes[0].queue_type: \"stream\" cannot be combined with single_active_consumer",
         "one bridge per stream route");
    ERR2(CFGX(",\"instance\":\"eu-1\"", ROUTE(",\"queue_type\":\"stream\",\"share_keys\":true")),
         "routes[0].queue_type: \"stream\" cannot be combined with share_keys",
         "every reader of a stream gets every message");
    ERR2("{" BROKER ",\"wal\":{\"dir\":\"/w\",\"replicate\":{}},\"routes\":[" ROUTE("")
         "," ROUTE2(",\"queue_type\":\"stream\"") "]}",
         "routes[1].queue_type: \"stream\" cannot be combined with wal.replicate",
         "a standby taking the log over would not have it");
    ERR(CFG(ROUTE(",\"declare_target\":\"yes\"")),
        "routes[0].declare_target: expected true or false, got \"yes\"");
    ERR(CFG(ROUTE(",\"declare_target\":0")), "routes[0].declare_target: expected true or false, got 0");
    ERR(CFG(ROUTE(",\"single_active_consumer\":\"true\"")),
        "routes[0].single_active_consumer: expected true or false, got \"true\"");
    ERR(CFG(ROUTE(",\"share_keys\":1")), "routes[0].share_keys: expected true or false, got 1");
    ERR(CFG(ROUTE(",\"share_keys\":true")), "routes[0].share_keys: needs \"instance\" set");
    {
        struct config sk;
        if (OK(CFGX(",\"instance\":\"eu-1\"", ROUTE(",\"share_keys\":true")), &sk) == 0) {
            CHECK(sk.routes[0].share_keys == 1);
            config_free(&sk);
        }
        if (OK(CFG(ROUTE("")), &sk) == 0) {
            CHECK(sk.routes[0].share_keys == 0);
            config_free(&sk);
        }
    }
    ERR(CFG(ROUTE(",\"invalid_delay\":\"drop\"")),
        "routes[0].invalid_delay: expected \"publish\" or \"dead-letter\", got \"drop\"");
    ERR(CFG(ROUTE(",\"invalid_delay\":\"dead-letter\"")),
        "routes[0].dead_letter_exchange: required when invalid_delay is \"dead-letter\"");
    ERR(CFG(ROUTE(",\"invalid_delay\":\"dead-letter\",\"dead_letter_exchange\":\"\"")),
        "routes[0].dead_letter_exchange: required");
    ERR2(CFG(ROUTE(",\"invalid_delay\":\"dead-letter\",\"dead_letter_exchange\":\"orders.delayed\"")),
         "routes[0].dead_letter_exchange: same as ingress_exchange", "loop");
    ERR(CFG(ROUTE(",\"dead_letter_exchange\":false")), "routes[0].dead_letter_exchange: expected a string");

    /* names RabbitMQ would refuse to declare */
    ERR(CFG("{\"name\":\"n\",\"ingress_exchange\":\"amq.x\",\"ingress_queue\":\"q\",\"target_exchange\":\"t\"}"),
        "routes[0].ingress_exchange: the \"amq.\" prefix is reserved");
    ERR(CFG("{\"name\":\"n\",\"ingress_exchange\":\"a\",\"ingress_queue\":\"amq.q\",\"target_exchange\":\"t\"}"),
        "routes[0].ingress_queue: the \"amq.\" prefix is reserved");
    ERR(CFG("{\"name\":\"n\",\"ingress_exchange\":\"a\",\"ingress_queue\":\"q\",\"target_exchange\":\"\","
            "\"declare_target\":true}"),
        "routes[0].declare_target: the default exchange");
    ERR(CFG("{\"name\":\"n\",\"ingress_exchange\":\"a\",\"ingress_queue\":\"q\",\"target_exchange\":\"amq.topic\","
            "\"declare_target\":true}"),
        "routes[0].declare_target:");
    if (OK(CFG("{\"name\":\"n\",\"ingress_exchange\":\"a\",\"ingress_queue\":\"q\",\"target_exchange\":\"amq.topic\"}"),
           &c) == 0)
        config_free(&c);

    /* integer ranges */
    ERR(CFG(ROUTE(",\"prefetch\":0")), "routes[0].prefetch: expected an integer 1..65535, got 0");
    ERR(CFG(ROUTE(",\"prefetch\":65536")), "routes[0].prefetch: expected an integer 1..65535, got 65536");
    ERR(CFG(ROUTE(",\"prefetch\":100.0")), "routes[0].prefetch: expected an integer 1..65535, got 100.0");
    ERR(CFG(ROUTE(",\"prefetch\":true")), "routes[0].prefetch: expected an integer 1..65535, got true");
    ERR(CFG(ROUTE(",\"max_inflight\":0")), "routes[0].max_inflight: expected an integer 1..1000000, got 0");
    ERR(CFG(ROUTE(",\"max_inflight\":1000001")), "routes[0].max_inflight: expected an integer 1..1000000");
    ERR(CFG(ROUTE(",\"max_delay_ms\":0")),
        "routes[0].max_delay_ms: expected an integer 1..9223372036854775807, got 0");
    ERR(CFG(ROUTE(",\"max_delay_ms\":-5")), "routes[0].max_delay_ms: expected an integer 1..");
    ERR(CFG(ROUTE(",\"max_delay_ms\":9223372036854775808")),
        "routes[0].max_delay_ms: expected an integer 1..9223372036854775807, got 9223372036854775808");
    ERR(CFG(ROUTE(",\"max_delay_ms\":18446744073709551616")), "got a number out of range");
    ERR(CFG(ROUTE(",\"max_delay_ms\":-9223372036854775809")), "got a number out of range");
    ERR(CFG(ROUTE(",\"max_delay_ms\":1e3")), "routes[0].max_delay_ms:");
    ERR(CFG(ROUTE(",\"max_delay_ms\":\"4294967295\"")), "routes[0].max_delay_ms:");

    /* 256 routes is the limit */
    size_t cap = 300 * 160;
    char *big = malloc(cap);
    for (int nr = 256; nr <= 257; nr++) {
        size_t o = (size_t)snprintf(big, cap, "{" BROKER "," WAL ",\"routes\":[");
        for (int i = 0; i < nr; i++)
            o += (size_t)snprintf(big + o, cap - o,
                                  "%s{\"name\":\"r%d\",\"ingress_exchange\":\"e%d\","
                                  "\"ingress_queue\":\"q%d\",\"target_exchange\":\"t\"}",
                                  i ? "," : "", i, i, i);
        snprintf(big + o, cap - o, "]}");
        if (nr == 256) {
            if (OK(big, &c) == 0) {
                CHECK(c.nroutes == 256 && strcmp(c.routes[255].name, "r255") == 0);
                config_free(&c);
            }
        } else {
            ERR(big, "routes: expected 1..256 routes, got 257");
        }
    }
    free(big);
}

static void test_err_buffer(void)
{
    struct config c;
    char small[16];
    memset(small, 'Z', sizeof small);
    CHECK(config_parse(&c, "[]", "a-rather-long-file-name.json", small, 10) == -1);
    CHECK(strlen(small) == 9 && small[10] == 'Z');
    CHECK(is_zero(&c));
    CHECK(config_parse(&c, "[]", "x.json", NULL, 0) == -1);
    CHECK(config_parse(&c, CFG(ROUTE(",\"prefetch\":0")), "x.json", small, 1) == -1 && small[0] == '\0');
    CHECK(is_zero(&c));
    /* a failure after URIs and routes were allocated leaves nothing behind (ASan checks) */
    CHECK(config_parse(&c, CFG(ROUTE("") "," ROUTE2(",\"prefetch\":0")), "x.json", NULL, 0) == -1);
    CHECK(is_zero(&c));
}

static void test_replicate(void)
{
    struct config c;
    static const struct config_replicate off;
/* a config whose wal.replicate object holds kv */
#define R(kv) "{" BROKER ",\"wal\":{\"dir\":\"/w\",\"replicate\":{" kv "}},\"routes\":[" ROUTE("") "]}"
/* the same, with "instance" after "wal" */
#define RI(kv) "{" BROKER ",\"wal\":{\"dir\":\"/w\",\"replicate\":{" kv "}},\"instance\":\"eu-1\"," \
               "\"routes\":[" ROUTE("") "]}"

    /* absent: off, and nothing else set */
    if (OK(CFG(ROUTE("")), &c) == 0) {
        CHECK(memcmp(&c.repl, &off, sizeof off) == 0);
        config_free(&c);
    }
    /* present and empty: on, every default */
    if (OK(R(""), &c) == 0) {
        CHECK(c.repl.enabled == 1);
        CHECK(strcmp(c.repl.stream, "delay-bridge.wal") == 0);
        CHECK(strcmp(c.repl.lease_queue, "delay-bridge.wal.lease") == 0);
        CHECK(c.repl.max_bytes == 20480ull << 20);
        CHECK(c.repl.max_age[0] == '\0');
        CHECK(c.repl.segment_bytes == 64ull << 20);
        CHECK(c.repl.checkpoint_bytes == 1024ull << 20);
        CHECK(c.repl.checkpoint_interval_s == 3600);
        CHECK(c.repl.batch_bytes == 1024u << 10);
        CHECK(c.repl.confirm_timeout_ms == 10000);
        CHECK(c.fsync == 1 && c.checkpoint_interval_s == 60); /* wal's own keys untouched */
        config_free(&c);
    }
    /* the default names carry the instance, whichever comes first in the file */
    if (OK(RI(""), &c) == 0) {
        CHECK(strcmp(c.repl.stream, "delay-bridge.wal.eu-1") == 0);
        CHECK(strcmp(c.repl.lease_queue, "delay-bridge.wal.eu-1.lease") == 0);
        config_free(&c);
    }
    if (OK("{\"instance\":\"eu-1\"," BROKER ",\"wal\":{\"dir\":\"/w\",\"replicate\":{}},"
           "\"routes\":[" ROUTE("") "]}", &c) == 0) {
        CHECK(strcmp(c.repl.stream, "delay-bridge.wal.eu-1") == 0);
        CHECK(strcmp(c.repl.lease_queue, "delay-bridge.wal.eu-1.lease") == 0);
        config_free(&c);
    }
    /* an explicit stream: the lease queue follows it; an explicit lease queue stays */
    if (OK(RI("\"stream\":\"Wal:a_b-c.1\""), &c) == 0) {
        CHECK(strcmp(c.repl.stream, "Wal:a_b-c.1") == 0);
        CHECK(strcmp(c.repl.lease_queue, "Wal:a_b-c.1.lease") == 0);
        config_free(&c);
    }
    if (OK(RI("\"lease_queue\":\"lease\""), &c) == 0) {
        CHECK(strcmp(c.repl.stream, "delay-bridge.wal.eu-1") == 0);
        CHECK(strcmp(c.repl.lease_queue, "lease") == 0);
        config_free(&c);
    }
    /* the upper ends; max_mb 0 = no size limit, so no retention check by size */
    if (OK(R("\"max_mb\":0,\"max_age\":\"7D\",\"segment_mb\":2861,\"checkpoint_mb\":1048576,"
             "\"checkpoint_interval_s\":302400,\"batch_kb\":65536,\"confirm_timeout_ms\":600000,"
             "\"lease_renew_ms\":600000"),
           &c) == 0) {
        CHECK(c.repl.max_bytes == 0);
        CHECK(strcmp(c.repl.max_age, "7D") == 0);
        CHECK(c.repl.segment_bytes == 2861ull << 20); /* 2,999,975,936 <= a stream's 3e9 */
        CHECK(c.repl.lease_renew_ms == 600000);
        CHECK(c.repl.checkpoint_bytes == 1048576ull << 20);
        CHECK(c.repl.checkpoint_interval_s == 302400);
        CHECK(c.repl.batch_bytes == 65536u << 10);
        CHECK(c.repl.confirm_timeout_ms == 600000);
        config_free(&c);
    }
    if (OK(R("\"max_mb\":16777216,\"checkpoint_interval_s\":31536000"), &c) == 0) {
        CHECK(c.repl.max_bytes == 16777216ull << 20 && c.repl.checkpoint_interval_s == 31536000);
        config_free(&c);
    }
    /* the lower ends: max_mb 4 = 2 x 1 + 2 x 1 */
    if (OK(R("\"max_mb\":4,\"max_age\":\"\",\"segment_mb\":1,\"checkpoint_mb\":1,"
             "\"checkpoint_interval_s\":0,\"batch_kb\":4,\"confirm_timeout_ms\":100,"
             "\"lease_renew_ms\":100"), &c) == 0) {
        CHECK(c.repl.lease_renew_ms == 100);
        CHECK(c.repl.max_bytes == 4u << 20 && c.repl.max_age[0] == '\0');
        CHECK(c.repl.segment_bytes == 1u << 20 && c.repl.checkpoint_bytes == 1u << 20);
        CHECK(c.repl.checkpoint_interval_s == 0 && c.repl.batch_bytes == 4096);
        CHECK(c.repl.confirm_timeout_ms == 100);
        config_free(&c);
    }
    /* replicating a log that is not fsynced is allowed */
    if (OK("{" BROKER ",\"wal\":{\"dir\":\"/w\",\"fsync\":false,\"replicate\":{}},\"routes\":["
           ROUTE("") "]}", &c) == 0) {
        CHECK(c.fsync == 0 && c.repl.enabled == 1);
        config_free(&c);
    }

    /* the object itself */
    ERR("{" BROKER ",\"wal\":{\"dir\":\"/w\",\"replicate\":true},\"routes\":[" ROUTE("") "]}",
        "test.json: wal.replicate: expected an object, got true");
    ERR("{" BROKER ",\"wal\":{\"dir\":\"/w\",\"replicate\":null},\"routes\":[" ROUTE("") "]}",
        "test.json: wal.replicate: expected an object, got null");
    ERR3(R("\"streams\":\"x\""), "test.json: wal.replicate.streams:", "unknown key",
         "lease_queue");

    /* every range */
    ERR(R("\"max_mb\":-1"), "test.json: wal.replicate.max_mb: expected an integer 0..16777216, got -1");
    ERR(R("\"max_mb\":16777217"), "wal.replicate.max_mb: expected an integer 0..16777216, got 16777217");
    ERR(R("\"max_mb\":\"20480\""), "wal.replicate.max_mb: expected an integer 0..16777216, got \"20480\"");
    ERR(R("\"max_mb\":1.5"), "wal.replicate.max_mb: expected an integer 0..16777216, got 1.5");
    ERR(R("\"segment_mb\":0"), "wal.replicate.segment_mb: expected an integer 1..2861, got 0");
    /* 2862 MiB is more than the 3,000,000,000 bytes a stream accepts as its segment size */
    ERR(R("\"segment_mb\":2862"), "wal.replicate.segment_mb: expected an integer 1..2861, got 2862");
    ERR(R("\"lease_renew_ms\":99"), "wal.replicate.lease_renew_ms: expected an integer 100..600000, got 99");
    ERR(R("\"lease_renew_ms\":600001"), "wal.replicate.lease_renew_ms: expected an integer 100..600000, got 600001");
    ERR(R("\"checkpoint_mb\":0"), "wal.replicate.checkpoint_mb: expected an integer 1..1048576, got 0");
    ERR(R("\"checkpoint_mb\":1048577"), "wal.replicate.checkpoint_mb: expected an integer 1..1048576, got 1048577");
    ERR(R("\"checkpoint_interval_s\":-1"), "wal.replicate.checkpoint_interval_s: expected an integer 0..31536000, got -1");
    ERR(R("\"checkpoint_interval_s\":31536001"), "wal.replicate.checkpoint_interval_s: expected an integer 0..31536000, got 31536001");
    ERR(R("\"batch_kb\":3"), "wal.replicate.batch_kb: expected an integer 4..65536, got 3");
    ERR(R("\"batch_kb\":65537"), "wal.replicate.batch_kb: expected an integer 4..65536, got 65537");
    ERR(R("\"confirm_timeout_ms\":99"), "wal.replicate.confirm_timeout_ms: expected an integer 100..600000, got 99");
    ERR(R("\"confirm_timeout_ms\":600001"), "wal.replicate.confirm_timeout_ms: expected an integer 100..600000, got 600001");
    ERR(R("\"confirm_timeout_ms\":true"), "wal.replicate.confirm_timeout_ms: expected an integer 100..600000, got true");

    /* names */
    ERR(R("\"stream\":\"\""), "wal.replicate.stream: must not be empty");
    ERR(R("\"stream\":7"), "wal.replicate.stream: expected a string, got 7");
    ERR2(R("\"stream\":\"a b\""), "wal.replicate.stream: \"a b\":", "only letters, digits, '.', '_', '-' and ':'");
    ERR(R("\"stream\":\"a/b\""), "wal.replicate.stream: \"a/b\": only letters");
    ERR(R("\"stream\":\"a\\u0000b\""), "wal.replicate.stream: must not contain a NUL");
    ERR(R("\"lease_queue\":\"\""), "wal.replicate.lease_queue: must not be empty");
    ERR(R("\"lease_queue\":\"l\\u00e9\""), "wal.replicate.lease_queue: \"l\xc3\xa9\": only letters");
    ERR(R("\"lease_queue\":\"a,b\""), "wal.replicate.lease_queue: \"a,b\": only letters");
    ERR2(R("\"stream\":\"amq.wal\""), "wal.replicate.stream: \"amq.wal\":",
         "the \"amq.\" prefix is reserved by RabbitMQ");
    ERR2(R("\"lease_queue\":\"amq.lease\""), "wal.replicate.lease_queue: \"amq.lease\":",
         "reserved by RabbitMQ");
    if (OK(R("\"stream\":\"amq\",\"lease_queue\":\"amqp.lease\""), &c) == 0)
        config_free(&c); /* only "amq." itself is reserved */
    /* two queues, two names */
    ERR2(R("\"stream\":\"w\",\"lease_queue\":\"w\""), "wal.replicate.lease_queue: same as stream \"w\"",
         "another name");
    ERR(R("\"lease_queue\":\"delay-bridge.wal\""),
        "wal.replicate.lease_queue: same as stream \"delay-bridge.wal\"");
    ERR(RI("\"lease_queue\":\"delay-bridge.wal.eu-1\""), "wal.replicate.lease_queue: same as stream");
    /* and neither is a route's ingress queue */
    ERR(R("\"stream\":\"orders.delayed.q\""),
        "wal.replicate.stream: \"orders.delayed.q\" is also routes[0].ingress_queue");
    ERR(R("\"lease_queue\":\"orders.delayed.q\""),
        "wal.replicate.lease_queue: \"orders.delayed.q\" is also routes[0].ingress_queue");

    /* 255 bytes fit; then the default lease queue must fit too */
    static char json[2048];
    char name[300];
    memset(name, 's', sizeof name);
    name[255] = '\0';
    snprintf(json, sizeof json, R("\"stream\":\"%s\",\"lease_queue\":\"%s\""), name, name + 1);
    if (OK(json, &c) == 0) {
        CHECK(strlen(c.repl.stream) == 255 && strlen(c.repl.lease_queue) == 254);
        config_free(&c);
    }
    snprintf(json, sizeof json, R("\"stream\":\"%s\""), name);
    ERR2(json, "wal.replicate.lease_queue: the default, stream + \".lease\", would be 261 bytes",
         "set lease_queue or shorten stream");
    name[249] = '\0';
    snprintf(json, sizeof json, R("\"stream\":\"%s\""), name);
    if (OK(json, &c) == 0) {
        CHECK(strlen(c.repl.lease_queue) == 255);
        config_free(&c);
    }
    name[249] = name[255] = 's';
    name[256] = '\0';
    snprintf(json, sizeof json, R("\"stream\":\"%s\""), name);
    ERR2(json, "wal.replicate.stream: too long (256 bytes)", "at most 255");
    snprintf(json, sizeof json, R("\"lease_queue\":\"%s\""), name);
    ERR2(json, "wal.replicate.lease_queue: too long (256 bytes)", "at most 255");

    /* max_age: RabbitMQ's x-max-age syntax */
    const char *bad_age[] = { "\"7\"", "\"D\"", "\"7d\"", "\"7W\"", "\"7DD\"", "\"-7D\"",
                              "\"7.5D\"", "\" 7D\"", "\"7D \"", "\"1234567890s\"", "7",
                              "\"7\\u0000D\"" };
    for (size_t i = 0; i < sizeof bad_age / sizeof *bad_age; i++) {
        snprintf(json, sizeof json, R("\"max_age\":%s"), bad_age[i]);
        ERR3(json, "wal.replicate.max_age: expected \"\" (none) or 1..9 digits and a unit",
             "x-max-age, e.g. \"7D\"", "got ");
    }
    ERR(R("\"max_age\":7"), "wal.replicate.max_age: expected \"\" (none) or 1..9 digits and a "
        "unit Y, M, D, h, m or s (RabbitMQ's x-max-age, e.g. \"7D\"), got 7");
    ERR(R("\"max_age\":\"7d\""), "got \"7d\"");
    if (OK(R("\"max_age\":\"999999999Y\""), &c) == 0) {
        CHECK(strcmp(c.repl.max_age, "999999999Y") == 0);
        config_free(&c);
    }

    /* cross-check: max_age at least 2 x checkpoint_interval_s, each unit in seconds */
    struct { const char *age; unsigned ok_s; } ages[] = {
        { "2s", 1 }, { "2m", 60 }, { "2h", 3600 }, { "1D", 43200 },
        { "1M", 15 * 86400 }, { "1Y", 365 * 43200 }, { "0002h", 3600 },
    };
    for (size_t i = 0; i < sizeof ages / sizeof *ages; i++) {
        char want[256];
        snprintf(json, sizeof json, R("\"max_age\":\"%s\",\"checkpoint_interval_s\":%u"),
                 ages[i].age, ages[i].ok_s);
        if (OK(json, &c) == 0) {
            CHECK(strcmp(c.repl.max_age, ages[i].age) == 0);
            config_free(&c);
        }
        snprintf(json, sizeof json, R("\"max_age\":\"%s\",\"checkpoint_interval_s\":%u"),
                 ages[i].age, ages[i].ok_s + 1);
        snprintf(want, sizeof want, "wal.replicate.max_age: \"%s\" (%u s) is too short; must be "
                 "at least 2 x checkpoint_interval_s (%u s)", ages[i].age, 2 * ages[i].ok_s,
                 2 * ages[i].ok_s + 2);
        ERR2(json, want, "the stream must keep everything since the last completed stream "
             "checkpoint");
    }
    /* with the default interval (3600 s) */
    ERR(R("\"max_age\":\"119m\""), "wal.replicate.max_age: \"119m\" (7140 s) is too short; must "
        "be at least 2 x checkpoint_interval_s (7200 s): the stream must keep everything since "
        "the last completed stream checkpoint");
    ERR(R("\"max_age\":\"0s\""), "wal.replicate.max_age: \"0s\" (0 s) is too short");
    /* max_age needs a time-based checkpoint */
    ERR2(R("\"max_age\":\"7D\",\"checkpoint_interval_s\":0"),
         "test.json: wal.replicate.checkpoint_interval_s: must not be 0 when max_age is set", NULL);
    if (OK(R("\"max_age\":\"\",\"checkpoint_interval_s\":0"), &c) == 0)
        config_free(&c);

    /* cross-check: max_mb at least 2 x checkpoint_mb + 2 x segment_mb (defaults: 2176) */
    ERR(R("\"max_mb\":2175"), "test.json: wal.replicate.max_mb: 2175 is too small; must be at "
        "least 2 x checkpoint_mb + 2 x segment_mb (2176): the stream must keep everything since "
        "the last completed stream checkpoint");
    if (OK(R("\"max_mb\":2176"), &c) == 0) {
        CHECK(c.repl.max_bytes == 2176ull << 20);
        config_free(&c);
    }
    ERR(R("\"max_mb\":300,\"checkpoint_mb\":100,\"segment_mb\":51"),
        "wal.replicate.max_mb: 300 is too small; must be at least 2 x checkpoint_mb + 2 x "
        "segment_mb (302)");
    if (OK(R("\"max_mb\":300,\"checkpoint_mb\":100,\"segment_mb\":50"), &c) == 0)
        config_free(&c);
    if (OK(R("\"max_mb\":0,\"checkpoint_mb\":1048576,\"segment_mb\":2861"), &c) == 0)
        config_free(&c);
#undef RI
#undef R
}

static void test_load(void)
{
    char path[] = "/tmp/test_config.XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    const char *json = CFG(ROUTE(""));
    CHECK(write(fd, json, strlen(json)) == (ssize_t)strlen(json));
    close(fd);

    struct config c;
    char err[512] = "";
    CHECK(config_load(&c, path, err, sizeof err) == 0);
    if (err[0])
        printf("  err: %s\n", err);
    CHECK(c.nroutes == 1 && strcmp(c.routes[0].name, "orders") == 0);
    config_free(&c);

    /* errors name the path given */
    FILE *f = fopen(path, "w");
    fputs("{\n  \"broker\": {\"uri\": \"" URI "\"},\n  \"wal\": {\"dir\": \"/w\"},\n"
          "  \"routes\": [" ROUTE(",\"prefetch\":\"100\"") "]\n}\n",
          f);
    fclose(f);
    CHECK(config_load(&c, path, err, sizeof err) == -1);
    CHECK(strncmp(err, path, strlen(path)) == 0 && strstr(err, ": routes[0].prefetch: ") != NULL);
    CHECK(is_zero(&c));

    f = fopen(path, "w");
    fputs("{\n  \"broker\": {\"uri\": \"" URI "\"},\n  \"wal\": {\"dir\": \"/w\"}\n  \"routes\": []\n}\n", f);
    fclose(f);
    CHECK(config_load(&c, path, err, sizeof err) == -1);
    char want[256];
    snprintf(want, sizeof want, "%s:4:3: invalid JSON", path);
    CHECK(strncmp(err, want, strlen(want)) == 0, "got: %s\n  want: %s", err, want);

    /* a NUL byte in the file */
    f = fopen(path, "w");
    fwrite("{\"a\":\0}", 1, 7, f);
    fclose(f);
    CHECK(config_load(&c, path, err, sizeof err) == -1 && strstr(err, "NUL"));

    unlink(path);
    CHECK(config_load(&c, path, err, sizeof err) == -1);
    CHECK(strncmp(err, path, strlen(path)) == 0 && strstr(err, "cannot open: No such file"));
    CHECK(is_zero(&c));
    CHECK(config_load(&c, "/tmp", err, sizeof err) == -1);
    CHECK(strstr(err, "/tmp: cannot read") != NULL);
}

/*
 * limits.max_held and routes[].max_held: the default protects (10M in all,
 * none of a route's own), 0 is "no bound" only when written, the ranges and
 * the errors name the key path; a template's max_held reaches its routes.
 */
static void test_max_held(void)
{
    struct config c;

    if (OK(CFG(ROUTE("")), &c) == 0) {
        CHECK(c.max_held == 10000000 && c.max_held == CONFIG_MAX_HELD_DEFAULT);
        CHECK(c.routes[0].max_held == 0);
        config_free(&c);
    }
    /* limits present without the key: still the default, never 0 */
    if (OK(CFGX(",\"limits\":{}", ROUTE("")), &c) == 0) {
        CHECK(c.max_held == CONFIG_MAX_HELD_DEFAULT);
        config_free(&c);
    }
    if (OK(CFGX(",\"limits\":{\"max_held\":0}", ROUTE(",\"max_held\":0")), &c) == 0) {
        CHECK(c.max_held == 0 && c.routes[0].max_held == 0);
        config_free(&c);
    }
    if (OK(CFGX(",\"limits\":{\"max_held\":4294967295}",
                ROUTE(",\"max_held\":200") "," ROUTE2(",\"max_held\":4294967295")), &c) == 0) {
        CHECK(c.max_held == 4294967295ull);
        CHECK(c.routes[0].max_held == 200 && c.routes[1].max_held == 4294967295ull);
        config_free(&c);
    }
    /* a route's bound above the one in all is allowed: the lower one binds first */
    if (OK(CFGX(",\"limits\":{\"max_held\":10}", ROUTE(",\"max_held\":1000")), &c) == 0) {
        CHECK(c.max_held == 10 && c.routes[0].max_held == 1000);
        config_free(&c);
    }
    ERR(CFGX(",\"limits\":{\"max_held\":-1}", ROUTE("")),
        "test.json: limits.max_held: expected an integer 0..4294967295, got -1");
    ERR(CFGX(",\"limits\":{\"max_held\":4294967296}", ROUTE("")),
        "test.json: limits.max_held: expected an integer 0..4294967295, got 4294967296");
    ERR(CFGX(",\"limits\":{\"max_held\":\"1000\"}", ROUTE("")),
        "test.json: limits.max_held: expected an integer 0..4294967295, got \"1000\"");
    ERR(CFGX(",\"limits\":{\"max_held\":1.5}", ROUTE("")), "limits.max_held: expected an integer");
    ERR(CFGX(",\"limits\":{\"max_held\":null}", ROUTE("")), "limits.max_held: expected an integer");
    ERR(CFGX(",\"limits\":[]", ROUTE("")), "test.json: limits: expected an object");
    ERR3(CFGX(",\"limits\":{\"max_hold\":1}", ROUTE("")), "test.json: limits.max_hold:",
         "unknown key \"max_hold\"", "max_held");
    ERR(CFG(ROUTE(",\"max_held\":-5")),
        "test.json: routes[0].max_held: expected an integer 0..4294967295, got -5");
    ERR(CFG(ROUTE("") "," ROUTE2(",\"max_held\":4294967296")),
        "test.json: routes[1].max_held: expected an integer 0..4294967295, got 4294967296");
    ERR(CFG(ROUTE(",\"max_held\":true")), "routes[0].max_held: expected an integer 0..4294967295");
    ERR(CFG(ROUTE(",\"max_held\":\"200\"")), "routes[0].max_held: expected an integer");
}

static const struct check_case cases[] = {
    {"full", test_full},
    {"defaults", test_defaults},
    {"syntax", test_syntax},
    {"unknown_keys", test_unknown_keys},
    {"broker", test_broker},
    {"tls", test_tls},
    {"env", test_env},
    {"wal_http_log", test_wal_http_log},
    {"replicate", test_replicate},
    {"routes", test_routes},
    {"max_held", test_max_held},
    {"err_buffer", test_err_buffer},
    {"load", test_load},
};

int main(int argc, char **argv)
{
    /* Every case but "env" wants the broker URI from the file; "env" unsets it again. */
    unsetenv("DELAY_BRIDGE_BROKER_URI");
    return CHECK_MAIN(argc, argv, cases);
}
