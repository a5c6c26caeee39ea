// Publish.java -- the RabbitMQ Java client as its documentation shows:
// ConnectionFactory.setUri, createChannel, confirmSelect, basicPublish with
// BasicProperties.Builder().headers(Map), waitForConfirmsOrDie. An Integer
// goes out as 'I', a Long as 'l', a Double as 'd', a java.util.Date as a
// timestamp in seconds. Protocol: see tests/clients/run_client.py.
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

    public static void main(String[] args) throws Exception {
        ConnectionFactory f = new ConnectionFactory();
        f.setUri(System.getenv("DB_URI"));
        String ex = System.getenv("DB_EXCHANGE"), rk = System.getenv("DB_RK");
        String version = ConnectionFactory.class.getPackage().getImplementationVersion();
        System.out.println("VERSION " + (version != null ? version : "5.0.0 (Debian librabbitmq-client-java)"));
        try (Connection conn = f.newConnection()) {
            Channel ch = conn.createChannel();
            ch.confirmSelect();
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
