/*
 * test_broker_frames.c -- the publisher's own frames are rabbitmq-c's, byte
 * for byte.
 *
 * The publisher encodes publishes, close-oks and heartbeats itself
 * (broker_conn_encode_*) and writes them in one buffer. Here every encoding
 * is compared with what rabbitmq-c itself writes for the same call
 * (amqp_basic_publish, amqp_send_method) on a socketpair, over bodies that
 * take no frame, one, exactly one full frame, one byte more, and several,
 * with no properties and with every property and a header table of every
 * field kind. One publish is also spelled out byte by byte, so that a
 * change in rabbitmq-c could not make both sides wrong the same way. Every
 * encoding goes into a buffer of exactly broker_conn_publish_bound() bytes
 * (ASan in CI catches a write past it); a shorter buffer and properties
 * larger than a frame are refused.
 */
#include "delay-bridge/broker_conn.h"

#include <amqp_tcp_socket.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"

/* ---- what rabbitmq-c writes --------------------------------------------------- */

struct sink {
    int fd;
    uint8_t *buf;
    size_t len, cap;
};

static void *sink_run(void *arg)
{
    struct sink *s = arg;
    ssize_t n;

    for (;;) {
        if (s->cap - s->len < 65536) {
            s->cap = s->cap ? s->cap * 2 : 1 << 20;
            s->buf = realloc(s->buf, s->cap);
        }
        n = read(s->fd, s->buf + s->len, s->cap - s->len);
        if (n <= 0)
            return NULL;
        s->len += (size_t)n;
    }
}

/*
 * A rabbitmq-c connection state writing into a socketpair whose other end a
 * thread reads to EOF (rabbitmq-c's writes block; a large body would fill
 * the socket). No login: the state keeps its initial frame_max.
 */
struct rmq {
    amqp_connection_state_t st;
    struct sink sink;
    pthread_t th;
};

static void rmq_open(struct rmq *r)
{
    int sv[2];
    amqp_socket_t *sock;

    memset(r, 0, sizeof(*r));
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    r->st = amqp_new_connection();
    sock = amqp_tcp_socket_new(r->st);
    amqp_tcp_socket_set_sockfd(sock, sv[0]);
    r->sink.fd = sv[1];
    CHECK(pthread_create(&r->th, NULL, sink_run, &r->sink) == 0);
}

/* Close rabbitmq-c's end, wait for everything it wrote; the caller frees sink.buf. */
static void rmq_close(struct rmq *r)
{
    amqp_destroy_connection(r->st); /* closes sv[0]: the reader sees EOF */
    pthread_join(r->th, NULL);
    close(r->sink.fd);
}

/* ---- cases ------------------------------------------------------------------- */

static amqp_table_entry_t entry(const char *key, amqp_field_value_t v)
{
    amqp_table_entry_t e;

    e.key = amqp_cstring_bytes(key);
    e.value = v;
    return e;
}

/* Every basic property, and headers of many field kinds (a nested table, an array). */
static void full_props(amqp_basic_properties_t *p, amqp_table_entry_t *h, amqp_table_entry_t *in,
                       amqp_field_value_t *arr)
{
    amqp_field_value_t v;

    memset(p, 0, sizeof(*p));
    p->_flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_CONTENT_ENCODING_FLAG |
                AMQP_BASIC_HEADERS_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG |
                AMQP_BASIC_PRIORITY_FLAG | AMQP_BASIC_CORRELATION_ID_FLAG |
                AMQP_BASIC_REPLY_TO_FLAG | AMQP_BASIC_EXPIRATION_FLAG |
                AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_TIMESTAMP_FLAG | AMQP_BASIC_TYPE_FLAG |
                AMQP_BASIC_USER_ID_FLAG | AMQP_BASIC_APP_ID_FLAG | AMQP_BASIC_CLUSTER_ID_FLAG;
    p->content_type = amqp_cstring_bytes("application/json");
    p->content_encoding = amqp_cstring_bytes("gzip");
    p->delivery_mode = 2;
    p->priority = 7;
    p->correlation_id = amqp_cstring_bytes("corr-1");
    p->reply_to = amqp_cstring_bytes("amq.rabbitmq.reply-to");
    p->expiration = amqp_cstring_bytes("60000");
    p->message_id = amqp_cstring_bytes("m-42");
    p->timestamp = 1795000000;
    p->type = amqp_cstring_bytes("order.created");
    p->user_id = amqp_cstring_bytes("guest");
    p->app_id = amqp_cstring_bytes("shop");
    p->cluster_id = amqp_cstring_bytes("c1");

    v.kind = AMQP_FIELD_KIND_I32;
    v.value.i32 = 5000;
    in[0] = entry("n", v);
    v.kind = AMQP_FIELD_KIND_UTF8;
    v.value.bytes = amqp_cstring_bytes("\xc3\xa9t\xc3\xa9");
    in[1] = entry("s", v);
    arr[0].kind = AMQP_FIELD_KIND_U8;
    arr[0].value.u8 = 200;
    arr[1].kind = AMQP_FIELD_KIND_F64;
    arr[1].value.f64 = 2.5;

    v.kind = AMQP_FIELD_KIND_I64;
    v.value.i64 = -1234567890123LL;
    h[0] = entry("x-delay", v);
    v.kind = AMQP_FIELD_KIND_BYTES;
    v.value.bytes = (amqp_bytes_t){3, "\x00\xff\x01"};
    h[1] = entry("raw", v);
    v.kind = AMQP_FIELD_KIND_TABLE;
    v.value.table = (amqp_table_t){2, in};
    h[2] = entry("nested", v);
    v.kind = AMQP_FIELD_KIND_ARRAY;
    v.value.array = (amqp_array_t){2, arr};
    h[3] = entry("list", v);
    v.kind = AMQP_FIELD_KIND_BOOLEAN;
    v.value.boolean = 1;
    h[4] = entry("flag", v);
    v.kind = AMQP_FIELD_KIND_VOID;
    h[5] = entry("nothing", v);
    v.kind = AMQP_FIELD_KIND_DECIMAL;
    v.value.decimal = (amqp_decimal_t){2, 12345};
    h[6] = entry("price", v);
    v.kind = AMQP_FIELD_KIND_TIMESTAMP;
    v.value.u64 = 1795000000;
    h[7] = entry("when", v);
    p->headers = (amqp_table_t){8, h};
}

/* One publish both ways; the bytes must be equal. */
static void same_publish(const char *what, amqp_channel_t ch, const char *ex, const char *rk,
                         amqp_basic_properties_t *props, size_t body_len)
{
    struct rmq r;
    uint8_t *body = malloc(body_len ? body_len : 1), *mine;
    size_t i, bound;
    long n;
    uint32_t frame_max;

    for (i = 0; i < body_len; i++)
        body[i] = (uint8_t)(i * 7 + 3);
    rmq_open(&r);
    frame_max = (uint32_t)amqp_get_frame_max(r.st);
    amqp_basic_publish_t m = {.exchange = amqp_cstring_bytes(ex),
                              .routing_key = amqp_cstring_bytes(rk),
                              .mandatory = 1};
    bound = broker_conn_publish_bound(m.exchange.len, m.routing_key.len, body_len, frame_max);
    mine = malloc(bound);
    n = broker_conn_encode_publish(mine, bound, ch, &m, props, (amqp_bytes_t){body_len, body},
                                 frame_max);
    CHECK(amqp_basic_publish(r.st, ch, m.exchange, m.routing_key, 1, 0, props,
                             (amqp_bytes_t){body_len, body}) == AMQP_STATUS_OK,
          "%s", what);
    rmq_close(&r);
    CHECK(n > 0, "%s: encode returned %ld", what, n);
    if (n > 0) {
        CHECK_U64(n, r.sink.len);
        CHECK((size_t)n <= bound, "%s: used %ld of a bound of %zu", what, n, bound);
        if ((size_t)n == r.sink.len)
            for (i = 0; i < r.sink.len; i++)
                if (mine[i] != r.sink.buf[i]) {
                    CHECK(mine[i] == r.sink.buf[i], "%s: byte %zu differs (%02x, rabbitmq-c %02x)",
                          what, i, mine[i], r.sink.buf[i]);
                    break;
                }
    }
    free(r.sink.buf);
    free(mine);
    free(body);
}

static void test_publish_like_rabbitmq_c(void)
{
    amqp_basic_properties_t full, none;
    amqp_table_entry_t h[8], in[2];
    amqp_field_value_t arr[2];
    struct rmq probe;
    size_t chunk;

    rmq_open(&probe);
    chunk = (size_t)amqp_get_frame_max(probe.st) - 8;
    rmq_close(&probe);
    free(probe.sink.buf);

    full_props(&full, h, in, arr);
    memset(&none, 0, sizeof(none));
    const size_t sizes[] = {0, 1, 256, chunk - 1, chunk, chunk + 1, 3 * chunk + 17};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        char what[64];
        snprintf(what, sizeof(what), "body %zu, no properties", sizes[i]);
        same_publish(what, 2, "target", "rk", &none, sizes[i]);
        snprintf(what, sizeof(what), "body %zu, every property", sizes[i]);
        same_publish(what, 300, "", "a.routing.key", &full, sizes[i]);
    }
    char longname[256];
    memset(longname, 'e', 255);
    longname[255] = '\0';
    same_publish("255-byte exchange and routing key", 65535, longname, longname, &full, 10);
}

static void test_publish_spelled_out(void)
{
    static const uint8_t want[] = {
        /* method: type 1, channel 2, size 12: basic.publish (60, 40) */
        1, 0, 2, 0, 0, 0, 12, 0, 60, 0, 40,
        0, 0,              /* ticket */
        1, 'x',            /* exchange */
        2, 'r', 'k',       /* routing key */
        1,                 /* bits: mandatory */
        0xCE,
        /* content header: type 2, channel 2, size 15: class 60, weight 0, body size 3 */
        2, 0, 2, 0, 0, 0, 15, 0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3,
        0x10, 0x00, /* property flags: delivery-mode */
        2,          /* delivery-mode 2 */
        0xCE,
        /* body: type 3, channel 2, size 3 */
        3, 0, 2, 0, 0, 0, 3, 'a', 'b', 'c', 0xCE,
    };
    amqp_basic_properties_t props = {._flags = AMQP_BASIC_DELIVERY_MODE_FLAG, .delivery_mode = 2};
    amqp_basic_publish_t m = {.exchange = amqp_cstring_bytes("x"),
                              .routing_key = amqp_cstring_bytes("rk"),
                              .mandatory = 1};
    size_t bound = broker_conn_publish_bound(1, 2, 3, 131072);
    uint8_t *buf = malloc(bound);
    long n = broker_conn_encode_publish(buf, bound, 2, &m, &props, amqp_cstring_bytes("abc"), 131072);

    CHECK_U64(n, sizeof(want));
    CHECK(n == (long)sizeof(want) && memcmp(buf, want, sizeof(want)) == 0);
    free(buf);
}

static void test_close_ok_like_rabbitmq_c(void)
{
    static const uint8_t channel_close_ok[] = {1, 0, 7, 0, 0, 0, 4, 0, 20, 0, 41, 0xCE};
    const struct {
        amqp_channel_t ch;
        amqp_method_number_t id;
    } cases[] = {{7, AMQP_CHANNEL_CLOSE_OK_METHOD}, {0, AMQP_CONNECTION_CLOSE_OK_METHOD}};

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        amqp_channel_close_ok_t ok;
        uint8_t buf[64];
        struct rmq r;
        long n = broker_conn_encode_method(buf, sizeof(buf), cases[i].ch, cases[i].id, &ok);

        rmq_open(&r);
        CHECK(amqp_send_method(r.st, cases[i].ch, cases[i].id, &ok) == AMQP_STATUS_OK);
        rmq_close(&r);
        CHECK_U64(n, r.sink.len);
        CHECK(n == (long)r.sink.len && memcmp(buf, r.sink.buf, r.sink.len) == 0,
              "method 0x%08x", cases[i].id);
        if (i == 0)
            CHECK(n == (long)sizeof(channel_close_ok) &&
                  memcmp(buf, channel_close_ok, sizeof(channel_close_ok)) == 0);
        free(r.sink.buf);
    }
}

static void test_refused(void)
{
    amqp_basic_publish_t m = {.exchange = amqp_cstring_bytes("x"),
                              .routing_key = amqp_cstring_bytes("rk")};
    amqp_basic_properties_t props = {._flags = AMQP_BASIC_HEADERS_FLAG};
    amqp_table_entry_t e;
    amqp_field_value_t v;
    size_t bound = broker_conn_publish_bound(1, 2, 10, 4096);
    uint8_t *buf = malloc(bound), *big = malloc(8192);
    uint8_t small[16];

    memset(&props.headers, 0, sizeof(props.headers));
    /* a buffer shorter than the bound, and a frame_max below the protocol's minimum */
    CHECK(broker_conn_encode_publish(buf, bound - 1, 1, &m, &props, amqp_cstring_bytes("0123456789"),
                                   4096) < 0);
    CHECK(broker_conn_encode_publish(buf, bound, 1, &m, &props, amqp_cstring_bytes("0123456789"),
                                   1024) < 0);
    CHECK(broker_conn_encode_method(small, 8, 1, AMQP_CHANNEL_CLOSE_OK_METHOD, &e) < 0);
    /* properties that do not fit one 4096-byte frame */
    memset(big, 'h', 8192);
    v.kind = AMQP_FIELD_KIND_BYTES;
    v.value.bytes = (amqp_bytes_t){8192, big};
    e = entry("big", v);
    props.headers = (amqp_table_t){1, &e};
    CHECK(broker_conn_encode_publish(buf, bound, 1, &m, &props, amqp_cstring_bytes("0123456789"),
                                   4096) < 0);
    /* the same header fits a larger frame */
    size_t bound2 = broker_conn_publish_bound(1, 2, 10, 131072);
    uint8_t *buf2 = malloc(bound2);
    CHECK(broker_conn_encode_publish(buf2, bound2, 1, &m, &props, amqp_cstring_bytes("0123456789"),
                                   131072) > 8192);
    free(buf2);
    free(big);
    free(buf);
}

static const struct check_case cases[] = {
    {"publish_like_rabbitmq_c", test_publish_like_rabbitmq_c},
    {"publish_spelled_out", test_publish_spelled_out},
    {"close_ok_like_rabbitmq_c", test_close_ok_like_rabbitmq_c},
    {"refused", test_refused},
};

int main(int argc, char **argv)
{
    return CHECK_MAIN(argc, argv, cases);
}
