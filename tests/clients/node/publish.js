// publish.js -- amqplib (Node) as its documentation shows: a confirm channel,
// publish() with a callback, waitForConfirms(). Header values are plain JS
// values; amqplib picks the smallest signed integer type for integers and a
// double for the rest (see run_client.py for the protocol).
//
// DB_MODE=x-delayed-message: an application written for the delayed-message
// plugin, unchanged (run_client.py shim): assertExchange of type
// x-delayed-message with arguments x-delayed-type, assertQueue, bindQueue,
// publish with header x-delay (not mandatory: the plugin returned every
// delayed mandatory message).
'use strict';
const amqp = require('amqplib');

const uri = process.env.DB_URI, ex = process.env.DB_EXCHANGE, rk = process.env.DB_RK;
const path = require('path');
// the package exports no './package.json': read it beside its entry point
const version = require(path.join(path.dirname(require.resolve('amqplib')), 'package.json')).version;

async function main() {
  console.log('VERSION ' + version);
  const conn = await amqp.connect(uri);
  const ch = await conn.createConfirmChannel();
  if (process.env.DB_MODE === 'x-delayed-message') {
    await delayedExchanges(ch);
    await conn.close();
    return;
  }
  const now = Date.now();
  const iso = (ms) => new Date(ms).toISOString(); // 2026-12-01T08:00:00.000Z
  const cases = [
    ['int', { 'x-delay': 1500 }, 'delay:1500'],                 // 's' (int16)
    ['int32', { 'x-delay': 4000000 }, 'dlx:x-delay above max_delay_ms'], // 'I', read as 4000000
    ['float', { 'x-delay': 1500.7 }, 'delay:1500'],             // 'd', truncated
    ['string', { 'x-delay': '1500' }, 'delay:1500'],            // 'S'
    ['negative', { 'x-delay': -1000 }, 'now'],                  // as the plugin: at once
    ['until-iso', { 'x-delay-until': iso(now + 2500) }, 'due:' + (now + 2500)],
    ['until-ms', { 'x-delay-until': now + 2000 }, 'due:' + (now + 2000)], // 'l' (above 2^31)
    ['until-past', { 'x-delay-until': iso(now - 60000), 'x-delay': 50000 }, 'now'],
    ['bad', { 'x-delay': 'soon' }, 'dlx:invalid x-delay'],
    ['too-far', { 'x-delay-until': now + 7200000 }, 'dlx:x-delay-until beyond max_delay_ms'],
  ];
  for (const [id, headers, expect] of cases) {
    headers['x-client'] = 'amqplib';
    const t = Date.now();
    await new Promise((resolve, reject) => {
      ch.publish(ex, rk, Buffer.from(id), { messageId: id, headers, mandatory: true },
                 (err) => (err ? reject(err) : resolve()));
    });
    console.log(`SENT ${id} ${t} ${expect}`);
  }
  await ch.waitForConfirms();
  await conn.close();
}

// run_client.SHIM_TYPES: type, routing key, binding of .q, of .decoy (an object: headers)
const TYPES = [['direct', 'rk', 'rk', 'other'], ['topic', 'order.eu', '*.eu', '*.us'],
  ['fanout', 'rk', '', null], ['headers', 'rk', { kind: 'a' }, { kind: 'b' }]];

async function delayedExchanges(ch) {
  const cases = [ // [case, x-delay, the plugin_compat check it is: kind and value]
    ['int', 1500, 'int16:1500'],            // 's'
    ['small', 100, 'int8:100'],             // 'b': the plugin 4.x routes it at once, the shim delays it
    ['float', 1500.7, 'float64:1500'],      // 'd'
    ['string', '1500', 'string:1500'],
    ['zero', 0, 'zero:0'],
    ['negative', -1000, 'negative-int32:0'], // 's'
    ['none', undefined, 'missing:0'],
  ];
  for (const [type, key, main, decoy] of TYPES) {
    const x = `${ex}.${type}`;
    await ch.assertExchange(x, 'x-delayed-message', { durable: true, arguments: { 'x-delayed-type': type } });
    for (const [q, b] of [[x + '.q', main], [x + '.decoy', decoy]]) {
      if (b === null) continue;
      await ch.assertQueue(q, { durable: true });
      if (typeof b === 'object') await ch.bindQueue(q, x, '', Object.assign({ 'x-match': 'all' }, b));
      else await ch.bindQueue(q, x, b);
    }
    for (const [id, delay, expect] of cases) {
      const headers = { 'x-client': 'amqplib', kind: 'a' };
      if (delay !== undefined) headers['x-delay'] = delay;
      const mid = `${type}/${id}`;
      const t = Date.now();
      await new Promise((resolve, reject) => {
        ch.publish(x, key, Buffer.from(mid), { messageId: mid, headers },
                   (err) => (err ? reject(err) : resolve()));
      });
      console.log(`SENT ${mid} ${t} ${expect}`);
    }
  }
  await ch.waitForConfirms();
}

main().catch((e) => { console.error(e); process.exit(1); });
