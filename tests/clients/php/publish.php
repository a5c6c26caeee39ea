<?php
// publish.php -- php-amqplib as its documentation shows: AMQPStreamConnection,
// confirm_select(), basic_publish() of an AMQPMessage whose
// application_headers is an AMQPTable of plain PHP values, then
// wait_for_pending_acks(). php-amqplib writes a PHP int as 'I' (or 'l' above
// 32 bits), a PHP float as its string ("1500.7"), a DateTime as a timestamp
// in seconds. Protocol: see run_client.py.
require_once '/usr/share/php/PhpAmqpLib/autoload.php';

use PhpAmqpLib\Connection\AMQPStreamConnection;
use PhpAmqpLib\Message\AMQPMessage;
use PhpAmqpLib\Package;
use PhpAmqpLib\Wire\AMQPTable;

$u = parse_url(getenv('DB_URI'));
$vhost = isset($u['path']) && $u['path'] !== '/' ? urldecode(substr($u['path'], 1)) : '/';
$ex = getenv('DB_EXCHANGE');
$rk = getenv('DB_RK');
echo 'VERSION ', Package::VERSION, "\n";

$conn = new AMQPStreamConnection($u['host'], $u['port'], urldecode($u['user']), urldecode($u['pass']), $vhost);
$ch = $conn->channel();
$ch->confirm_select();
$nacked = false;
$ch->set_nack_handler(function (AMQPMessage $m) use (&$nacked) { $nacked = true; });

function now_ms() { return (int) floor(microtime(true) * 1000); }
$now = now_ms();
$due_s = intdiv($now, 1000) + 3;                     // a DateTime has whole seconds
$at = (new DateTimeImmutable('@' . $due_s));
$iso = (new DateTimeImmutable('@' . intdiv($now + 2500, 1000)))
    ->setTimezone(new DateTimeZone('+02:00'))
    ->format('Y-m-d\TH:i:s') . sprintf('.%03d', ($now + 2500) % 1000) . '+02:00';
$cases = [
    ['int', ['x-delay' => 1500], 'delay:1500'],                       // 'I'
    ['float', ['x-delay' => 1500.7], 'delay:1500'],                   // "1500.7"
    ['float-whole', ['x-delay' => 2000.0], 'delay:2000'],             // "2000"
    ['string', ['x-delay' => '1500'], 'delay:1500'],                  // 'S'
    ['long', ['x-delay' => 5000000000], 'dlx:x-delay above max_delay_ms'], // 'l', read as 5e9
    ['until-datetime', ['x-delay-until' => $at], 'due:' . ($due_s * 1000)], // 'T'
    ['until-iso', ['x-delay-until' => $iso], 'due:' . ($now + 2500)],
    ['until-ms', ['x-delay-until' => $now + 2000], 'due:' . ($now + 2000)],  // 'l'
    ['inf', ['x-delay' => INF], 'dlx:invalid x-delay'],               // "INF"
    ['bad', ['x-delay' => 'soon'], 'dlx:invalid x-delay'],
];
$sent = [];
foreach ($cases as [$id, $headers, $expect]) {
    $headers['x-client'] = 'php-amqplib';
    $msg = new AMQPMessage($id, ['message_id' => $id, 'application_headers' => new AMQPTable($headers)]);
    $t = now_ms();
    $ch->basic_publish($msg, $ex, $rk, true);
    $sent[] = "SENT $id $t $expect";
}
$ch->wait_for_pending_acks(10.0);
if ($nacked) {
    fwrite(STDERR, "a publish was nacked\n");
    exit(1);
}
foreach ($sent as $line) {
    echo $line, "\n";
}
$ch->close();
$conn->close();
