// main.ts -- the README's NestJS recipe ("Retries with backoff"): a
// microservice on the RMQ transport with noAck: false, its queue declared
// with the retry route's ingress exchange as x-dead-letter-exchange (a
// quorum queue here); a handler that fails nacks without requeue
// (channel.nack(msg, false, false)): the message is dead-lettered to the
// route, and the bridge sends it back to this queue after the backoff with
// x-retry-attempt. Protocol: see run_recipe.py (this program publishes the
// cases with a ClientRMQ, then consumes them).
import 'reflect-metadata';
import { Controller, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ClientProxyFactory, Ctx, EventPattern, MicroserviceOptions, Payload, RmqContext,
         Transport } from '@nestjs/microservices';
import { createRequire } from 'node:module';

const env = process.env;
const fails = new Map<string, number>(env.DB_CASES!.split(',').map(c => {
  const [id, k] = c.split(':');
  return [id, Number(k)] as [string, number];
}));
const seen = new Map<string, number>();

class TemporaryError extends Error {}

// The application's work: here, fail the first `fails` deliveries.
async function sendEmail(order: { id: string }): Promise<void> {
  const n = (seen.get(order.id) ?? 0) + 1;
  seen.set(order.id, n);
  if (n <= fails.get(order.id)!) throw new TemporaryError('smtp down');
}

// --- the recipe -----------------------------------------------------------------
const queueOptions = {
  durable: true,
  arguments: {
    'x-queue-type': env.DB_QUEUE_TYPE ?? 'quorum',
    ...(env.DB_RETRY_EXCHANGE ? { 'x-dead-letter-exchange': env.DB_RETRY_EXCHANGE } : {}),
  },
};

@Controller()
class EmailController {
  @EventPattern('order.placed')
  async onOrderPlaced(@Payload() order: { id: string }, @Ctx() ctx: RmqContext) {
    const channel = ctx.getChannelRef();
    const msg = ctx.getMessage();
    const attempt = msg.properties.headers?.['x-retry-attempt'] ?? 1; // 1, 2, ... max_attempts
    let outcome = 'ok';
    try {
      await sendEmail(order);
      channel.ack(msg);
    } catch (e) {
      channel.nack(msg, false, false); // dead-lettered to the retry route: back after the backoff
      outcome = 'fail';
    }
    console.log(`DELIVERY ${order.id} ${attempt} ${Date.now()} ${outcome}`);
  }
}

@Module({ controllers: [EmailController] })
class AppModule {}

const app = await NestFactory.createMicroservice<MicroserviceOptions>(AppModule, {
  transport: Transport.RMQ,
  options: { urls: [env.DB_URI!], queue: env.DB_QUEUE!, noAck: false, prefetchCount: 10, queueOptions },
  logger: ['error', 'warn'],
});
await app.listen();
// ----------------------------------------------------------------------------------

const require = createRequire(import.meta.url);
console.log('VERSION @nestjs/microservices ' +
            require('../node_modules/@nestjs/microservices/package.json').version);
const client = ClientProxyFactory.create({
  transport: Transport.RMQ,
  options: { urls: [env.DB_URI!], queue: env.DB_QUEUE!, queueOptions },
});
await client.connect();
for (const id of fails.keys()) {
  await new Promise<void>((resolve, reject) =>
    client.emit('order.placed', { id }).subscribe({ complete: resolve, error: reject }));
}
