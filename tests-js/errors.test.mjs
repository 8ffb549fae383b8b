// A broker failure's kind, as a Node error carries it: a Redis nobody
// answers rejects with code 'BROKER' and kind 'connection', one that refuses
// every write (out of memory) with kind 'server' — in both Redis layouts.
// The kinds are the core's; the binding only copies them.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { App, RedisBroker } from 'headway';

import { RedisServer, command, freePort } from './fixtures/brokers.mjs';

const layouts = {
  redis: (url) => new RedisBroker(url, { prefix: 'kinds:' }),
  celery: (url) => RedisBroker.celery(url),
};

for (const [layout, broker] of Object.entries(layouts)) {
  test(`an unreachable Redis is kind 'connection' (${layout})`, async () => {
    const url = `redis://:secret@127.0.0.1:${await freePort()}/0`;
    assert.throws(
      () => new App({ broker: broker(url) }),
      (e) => {
        assert.equal(e.code, 'BROKER');
        assert.equal(e.kind, 'connection');
        assert.ok(e.message.startsWith('broker error: '), e.message);
        assert.ok(!e.message.includes('secret'), e.message);
        return true;
      },
    );
  });
}

const why = RedisServer.missing();
describe('a Redis out of memory', { skip: why ?? false }, () => {
  let server;
  before(async () => {
    server = await new RedisServer().start();
  });
  after(() => server?.stop());

  for (const [layout, broker] of Object.entries(layouts)) {
    test(`is kind 'server' (${layout})`, async () => {
      const app = new App({ broker: broker(server.db(layout === 'celery' ? 1 : 0)) });
      const echo = app.task('echo', ([x]) => x);
      // Every write refused: noeviction, and more in use than allowed.
      assert.equal(await command(server.port, 'CONFIG', 'SET', 'maxmemory-policy', 'noeviction'), '+OK');
      assert.equal(await command(server.port, 'CONFIG', 'SET', 'maxmemory', '1'), '+OK');
      try {
        await assert.rejects(echo.send([1]), (e) => {
          assert.equal(e.code, 'BROKER');
          assert.equal(e.kind, 'server');
          assert.match(e.message, /OOM/);
          return true;
        });
      } finally {
        assert.equal(await command(server.port, 'CONFIG', 'SET', 'maxmemory', '0'), '+OK');
      }
    });
  }
});
