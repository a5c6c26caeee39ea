// Publish.java -- the RabbitMQ Java client as its documentation shows:
// ConnectionFactory.setUri, createChannel, confirmSelect, basicPublish with
// BasicProperties.Builder().headers(Map), waitForConfirmsOrDie. An Integer
// goes out as 'I', a Long as 'l', a Double as 'd', a java.util.Date as a
// timestamp in seconds. Protocol: see tests/clients/run_client.py.
//
// DB_MODE=x-delayed-message: an application written for the delayed-message
// plugin, unchanged (run_client.py shim), declaring what Spring AMQP's
// CustomExchange(name, "x-delayed-message", durable, autoDelete, {x-delayed-type})
// declares through RabbitAdmin -- exchangeDeclare(name, "x-delayed-message",
// true, false, false, args) --, its queues and Bindings, and publishing what
// MessageProperties.setDelay(Integer) / setDelayLong(Long) put in x-delay.
import com.rabbitmq.client.AMQP;
import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.ConnectionFactory;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Date;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

public class Publish {
    static Object[] c(String id, String key, Object value, String expect) {
        return new Object[] {id, key, value, expect};
    }

    // run_client.SHIM_TYPES: type, routing key, binding of .q, of .decoy (a Map: headers)
    static final Object[][] TYPES = {
        {"direct", "rk", "rk", "other"}, {"topic", "order.eu", "*.eu", "*.us"},
        {"fanout", "rk", "", null}, {"headers", "rk", Map.of("kind", "a"), Map.of("kind", "b")},
    };

    @SuppressWarnings("unchecked")
    static void delayedExchanges(Channel ch, String ex) throws Exception {
        Object[][] cases = { // case, x-delay, the plugin_compat check it is: kind and value
            {"integer", 1500, "int32:1500"},              // setDelay(1500): 'I'
            {"long", 1500L, "int64:1500"},                // setDelayLong(1500L): 'l'
            {"string", "1500", "string:1500"},
            {"zero", 0, "zero:0"},
            {"negative", -1000, "negative-int32:0"},      // setDelay(-1000): 'I'
            {"none", null, "missing:0"},
        };
        List<String> lines = new ArrayList<>();
        for (Object[] ty : TYPES) {
            String type = (String) ty[0], key = (String) ty[1], x = ex + "." + type;
            Map<String, Object> xargs = new HashMap<>();
            xargs.put("x-delayed-type", type);
            ch.exchangeDeclare(x, "x-delayed-message", true, false, false, xargs);
            for (int i = 2; i < 4; i++) {
                if (ty[i] == null)
                    continue;
                String q = x + (i == 2 ? ".q" : ".decoy");
                ch.queueDeclare(q, true, false, false, null);
                if (ty[i] instanceof Map) {
                    Map<String, Object> bargs = new HashMap<>((Map<String, Object>) ty[i]);
                    bargs.put("x-match", "all");
                    ch.queueBind(q, x, "", bargs);
                } else {
                    ch.queueBind(q, x, (String) ty[i]);
                }
            }
            for (Object[] k : cases) {
                String mid = type + "/" + k[0];
                Map<String, Object> h = new HashMap<>();
                if (k[1] != null)
                    h.put("x-delay", k[1]);
                h.put("x-client", "java");
                h.put("kind", "a");
                AMQP.BasicProperties p = new AMQP.BasicProperties.Builder().messageId(mid).headers(h).build();
                long t = System.currentTimeMillis();
                ch.basicPublish(x, key, p, mid.getBytes(StandardCharsets.UTF_8));
                lines.add("SENT " + mid + " " + t + " " + k[2]);
            }
        }
        ch.waitForConfirmsOrDie(10000);
        for (String l : lines)
            System.out.println(l);
    }

    public static void main(String[] args) throws Exception {
        ConnectionFactory f = new ConnectionFactory();
        f.setUri(System.getenv("DB_URI"));
        String ex = System.getenv("DB_EXCHANGE"), rk = System.getenv("DB_RK");
        String version = ConnectionFactory.class.getPackage().getImplementationVersion();
        System.out.println("VERSION " + (version != null ? version : "5.0.0 (Debian librabbitmq-client-java)"));
        try (Connection conn = f.newConnection()) {
            Channel ch = conn.createChannel();
            ch.confirmSelect();
            if ("x-delayed-message".equals(System.getenv("DB_MODE"))) {
                delayedExchanges(ch, ex);
                return;
            }
            long now = System.currentTimeMillis();
            long dueS = now / 1000 + 3;
            Object[][] cases = {
                c("integer", "x-delay", 1500, "delay:1500"),                       // 'I'
                c("long", "x-delay", 1500L, "delay:1500"),                         // 'l' (Spring's setDelayLong)
                c("double", "x-delay", 1500.7, "delay:1500"),                      // 'd'
                c("string", "x-delay", "1500", "delay:1500"),
                c("long-big", "x-delay", 5000000000L, "dlx:x-delay above max_delay_ms"),
                c("until-date", "x-delay-until", new Date(dueS * 1000), "due:" + dueS * 1000), // 'T'
                c("until-instant", "x-delay-until", Instant.ofEpochMilli(now + 2500).toString(), "due:" + (now + 2500)),
                c("until-ms", "x-delay-until", now + 2000, "due:" + (now + 2000)),  // 'l'
                c("negative", "x-delay", -5000, "now"),
                c("bad", "x-delay", "soon", "dlx:invalid x-delay"),
            };
            List<String> lines = new ArrayList<>();
            for (Object[] k : cases) {
                Map<String, Object> h = new HashMap<>();
                h.put((String) k[1], k[2]);
                h.put("x-client", "java");
                AMQP.BasicProperties p = new AMQP.BasicProperties.Builder()
                    .messageId((String) k[0]).headers(h).build();
                long t = System.currentTimeMillis();
                ch.basicPublish(ex, rk, true, p, ((String) k[0]).getBytes(StandardCharsets.UTF_8));
                lines.add("SENT " + k[0] + " " + t + " " + k[3]);
            }
            ch.waitForConfirmsOrDie(10000);
            for (String l : lines)
                System.out.println(l);
        }
    }
}
