<?php
// worker.php -- the README's Symfony Messenger recipe ("Retries with backoff"),
// wired by hand as FrameworkBundle would from messenger.yaml: an amqp transport
// whose queue names the retry route's ingress exchange as x-dead-letter-exchange,
// with retry_strategy max_retries: 0 (Messenger's own retry re-sends a copy
// through a TTL queue per delay; with 0 it does not). A handler that throws
// makes the Worker reject the message: AmqpReceiver nacks it without requeue,
// the broker dead-letters it to the route, and the bridge sends it back to the
// queue after the backoff with x-retry-attempt. Symfony 5.4 (Debian 12's
// php-symfony-messenger, php-symfony-amqp-messenger, php-amqp).
// Protocol: see run_recipe.py.
require_once '/usr/share/php/Symfony/Component/Messenger/autoload.php';

use Symfony\Component\Messenger\Bridge\Amqp\Transport\AmqpReceivedStamp;
use Symfony\Component\Messenger\Bridge\Amqp\Transport\AmqpTransportFactory;
use Symfony\Component\Messenger\Envelope;
use Symfony\Component\Messenger\Handler\HandlersLocator;
use Symfony\Component\Messenger\MessageBus;
use Symfony\Component\Messenger\Middleware\HandleMessageMiddleware;
use Symfony\Component\Messenger\Middleware\MiddlewareInterface;
use Symfony\Component\Messenger\Middleware\StackInterface;
use Symfony\Component\Messenger\Transport\Serialization\PhpSerializer;
use Symfony\Component\Messenger\Worker;

final class SendEmail
{
    public function __construct(public string $orderId) {}
}

final class TemporaryException extends \RuntimeException {}

$fails = [];
foreach (explode(',', getenv('DB_CASES')) as $c) {
    [$id, $k] = explode(':', $c);
    $fails[$id] = (int) $k;
}
$seen = [];
$attempt = 1;

// Which attempt this is: x-retry-attempt of the AMQP message (1 when absent).
final class RetryAttemptMiddleware implements MiddlewareInterface
{
    public function handle(Envelope $envelope, StackInterface $stack): Envelope
    {
        global $attempt;
        $stamp = $envelope->last(AmqpReceivedStamp::class);
        $attempt = $stamp ? ($stamp->getAmqpEnvelope()->getHeader('x-retry-attempt') ?: 1) : 1;
        return $stack->next()->handle($envelope, $stack);
    }
}

// The application's work: here, fail the first `fails` deliveries.
$handler = function (SendEmail $m) use (&$fails, &$seen) {
    global $attempt;
    $n = $seen[$m->orderId] = ($seen[$m->orderId] ?? 0) + 1;
    $ok = $n > $fails[$m->orderId];
    printf("DELIVERY %s %d %d %s\n", $m->orderId, $attempt, (int) (microtime(true) * 1000), $ok ? 'ok' : 'fail');
    if (!$ok) {
        throw new TemporaryException('smtp down');  // the Worker rejects: dead-lettered to the route
    }
};

// --- the recipe: what config/packages/messenger.yaml says --------------------------
// framework:
//   messenger:
//     transports:
//       orders:
//         dsn: '%env(MESSENGER_TRANSPORT_DSN)%'      # amqp://guest:guest@localhost:5672/%2f/messages
//         retry_strategy: { max_retries: 0 }       # the bridge retries, not Messenger
//         options:
//           exchange: { name: orders, type: direct, default_publish_routing_key: email }
//           queues:
//             orders.email:
//               binding_keys: [email]
//               arguments: { x-dead-letter-exchange: orders.retry }
$arguments = ['x-queue-type' => getenv('DB_QUEUE_TYPE') ?: 'classic'];
if (getenv('DB_RETRY_EXCHANGE')) {
    $arguments['x-dead-letter-exchange'] = getenv('DB_RETRY_EXCHANGE');
}
$transport = (new AmqpTransportFactory())->createTransport(getenv('DB_URI') . '/messages', [
    'exchange' => ['name' => getenv('DB_EXCHANGE'), 'type' => 'direct', 'default_publish_routing_key' => 'email'],
    'queues' => [getenv('DB_QUEUE') => ['binding_keys' => ['email'], 'arguments' => $arguments]],
], new PhpSerializer());
// max_retries: 0 -- no SendFailedMessageForRetryListener re-send: the failed message is only rejected
$bus = new MessageBus([
    new RetryAttemptMiddleware(),
    new HandleMessageMiddleware(new HandlersLocator([SendEmail::class => [$handler]])),
]);
// ------------------------------------------------------------------------------------

echo "VERSION symfony/messenger 5.4 (Debian php-symfony-messenger), php-amqp " . phpversion('amqp') . "\n";
$transport->setup();
foreach (array_keys($fails) as $id) {
    $transport->send(new Envelope(new SendEmail($id)));
}
// messenger:consume orders --sleep=0.05: Messenger polls the queue (basic.get), sleeping this long when it is empty
(new Worker(['orders' => $transport], $bus))->run(['sleep' => 50000]);
