// RetryConsumer.java -- the shape of the README's Spring AMQP recipe with the
// plain RabbitMQ Java client (Spring AMQP is not packaged in Debian 12): the
// queue names the retry route's ingress exchange as x-dead-letter-exchange,
// a delivery whose handling fails is rejected without requeue -- what Spring's
// RejectAndDontRequeueRecoverer (or defaultRequeueRejected=false) makes the
// listener container do -- and x-retry-attempt says which attempt it is.
// Protocol: see run_recipe.py.
import com.rabbitmq.client.AMQP;
import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.ConnectionFactory;
import com.rabbitmq.client.DeliverCallback;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;

public class RetryConsumer {
    static final Map<String, Integer> fails = new LinkedHashMap<>();
    static final Map<String, Integer> seen = new HashMap<>();

    static class TemporaryException extends Exception {
        TemporaryException(String m) { super(m); }
    }

    // The application's work: here, fail the first `fails` deliveries.
    static void handle(String id) throws TemporaryException {
        int n = seen.merge(id, 1, Integer::sum);
        if (n <= fails.get(id)) throw new TemporaryException("smtp down");
    }

    public static void main(String[] args) throws Exception {
        for (String c : System.getenv("DB_CASES").split(",")) {
            String[] kv = c.split(":");
            fails.put(kv[0], Integer.parseInt(kv[1]));
        }
        String exchange = System.getenv("DB_EXCHANGE"), queue = System.getenv("DB_QUEUE");
        String retryExchange = System.getenv("DB_RETRY_EXCHANGE");
        ConnectionFactory f = new ConnectionFactory();
        f.setUri(System.getenv("DB_URI"));
        String version = ConnectionFactory.class.getPackage().getImplementationVersion();
        System.out.println("VERSION " + (version != null ? version : "5.0.0 (Debian librabbitmq-client-java)"));
        Connection conn = f.newConnection();
        Channel ch = conn.createChannel();

        // --- the recipe ---------------------------------------------------------
        Map<String, Object> arguments = new HashMap<>();
        arguments.put("x-queue-type", System.getenv().getOrDefault("DB_QUEUE_TYPE", "classic"));
        if (retryExchange != null && !retryExchange.isEmpty())
            arguments.put("x-dead-letter-exchange", retryExchange);   // the route's ingress exchange
        ch.exchangeDeclare(exchange, "direct", true);
        ch.queueDeclare(queue, true, false, false, arguments);
        ch.queueBind(queue, exchange, "email");
        ch.basicQos(10);
        DeliverCallback onMessage = (tag, d) -> {
            String id = new String(d.getBody(), StandardCharsets.UTF_8);
            Map<String, Object> h = d.getProperties().getHeaders();
            Object a = h == null ? null : h.get("x-retry-attempt");        // a Long, absent the first time
            long attempt = a == null ? 1 : ((Number) a).longValue();
            String outcome;
            try {
                handle(id);
                ch.basicAck(d.getEnvelope().getDeliveryTag(), false);
                outcome = "ok";
            } catch (TemporaryException e) {
                // dead-lettered to the retry route: back in the queue after the backoff
                ch.basicReject(d.getEnvelope().getDeliveryTag(), false);
                outcome = "fail";
            }
            System.out.println("DELIVERY " + id + " " + attempt + " " + System.currentTimeMillis() + " " + outcome);
            System.out.flush();
        };
        ch.basicConsume(queue, false, onMessage, tag -> { });
        // -------------------------------------------------------------------------

        Channel pub = conn.createChannel();
        pub.confirmSelect();
        for (String id : fails.keySet()) {
            AMQP.BasicProperties p = new AMQP.BasicProperties.Builder().messageId(id).deliveryMode(2).build();
            pub.basicPublish(exchange, "email", p, id.getBytes(StandardCharsets.UTF_8));
        }
        pub.waitForConfirmsOrDie(10000);
        Thread.sleep(Long.MAX_VALUE);  // until run_recipe.py ends it
    }
}
