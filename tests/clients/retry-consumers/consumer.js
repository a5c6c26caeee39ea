// consumer.js -- a consumer written with amqplib (Node), as its documentation
// shows: connect, createChannel, prefetch, consume with noAck false. It fails
// chosen messages a chosen number of times: a delivery whose attempt
// (x-retry-attempt, the bridge's count; 1 when absent) is <= the message's
// header "fail-times" is nacked without requeue (channel.nack(msg, false,
// false): the broker dead-letters it to the retry route), any later one is
// acked. The first delivery (attempt 1, not redelivered) of a message with a
// header "hold-ms" is acked or nacked that many ms later (the crash test holds
// some across a broker restart, so that their ack is lost). The decision reads
// only the message, so a reconnected consumer, or a delivery repeated after a
// lost ack, decides the same way.
//
// Protocol (run_consumers.py): environment DB_URI, DB_QUEUES (comma-separated),
// DB_PREFETCH; one JSON object a line: {"event": "version" | "ready" |
// "delivery" | "disconnected", ...} as consumer_pika.py's docstring says.
// Reconnects every 0.3 s when the connection drops; runs until SIGTERM.
'use strict';
const amqp = require('amqplib');
const path = require('path');

const uri = process.env.DB_URI;
const queues = process.env.DB_QUEUES.split(',').filter((q) => q);
const prefetch = parseInt(process.env.DB_PREFETCH || '20', 10);
// the package exports no './package.json': read it beside its entry point
const version = require(path.join(path.dirname(require.resolve('amqplib')), 'package.json')).version;

const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const asInt = (v, dflt) => {
  if (v === undefined || v === null) return dflt;
  if (Buffer.isBuffer(v)) v = v.toString();
  const n = Number(v);
  return Number.isFinite(n) ? Math.trunc(n) : dflt;
};

function onMessage(ch, queue, msg) {
  if (msg === null) return; // the broker cancelled the consumer (queue deleted)
  const recvMs = Date.now();
  const headers = msg.properties.headers || {};
  const attempt = asInt(headers['x-retry-attempt'], 1);
  const failTimes = asInt(headers['fail-times'], 0);
  const holdMs = attempt === 1 && !msg.fields.redelivered ? asInt(headers['hold-ms'], 0) : 0;
  const action = attempt <= failTimes ? 'reject' : 'ack';
  const act = () => {
    try {
      if (action === 'reject') ch.nack(msg, false, false); // dead-lettered to the retry route
      else ch.ack(msg);
    } catch (e) { /* the channel is gone: the broker redelivers it */ }
  };
  // held (still unacked) until then: a connection lost meanwhile loses the ack
  if (holdMs > 0) setTimeout(act, holdMs);
  else act();
  const bid = headers['x-delay-bridge-id'];
  const hist = headers['x-retry-history'];
  out({
    event: 'delivery', id: msg.properties.messageId, queue, attempt, recv_ms: recvMs, action, hold_ms: holdMs,
    redelivered: msg.fields.redelivered,
    bridge_id: bid === undefined ? null : String(bid),
    history: Array.isArray(hist) ? hist.map((x) => Number(x)) : null,
  });
}

let stopping = false;

async function connect() {
  while (!stopping) {
    let conn = null;
    try {
      conn = await amqp.connect(uri);
      conn.on('error', () => {}); // 'close' follows
      const ch = await conn.createChannel();
      ch.on('error', () => {});
      await ch.prefetch(prefetch);
      for (const q of queues) {
        await ch.consume(q, (msg) => onMessage(ch, q, msg), { noAck: false });
      }
      conn.once('close', (err) => { // the broker went away: connect again
        if (stopping) return;
        out({ event: 'disconnected', error: String(err || 'closed') });
        setTimeout(connect, 300);
      });
      out({ event: 'ready' });
      return;
    } catch (e) {
      out({ event: 'disconnected', error: String(e) });
      if (conn) conn.close().catch(() => {});
      await new Promise((r) => setTimeout(r, 300));
    }
  }
}

process.on('SIGTERM', () => { stopping = true; process.exit(0); });
out({ event: 'version', client: 'amqplib', version });
connect();
