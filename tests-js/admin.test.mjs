// The admin through Node's adapter (`admin.handler`) on a real `http` server
// on a free port, for every broker: memory, headway's Redis layout and
// Celery's (on a redis-server of this file's own; skipped with the reason
// printed when there is none, unless HEADWAY_REQUIRE_REDIS=1).
//
// The rules are the core's (core/tests/admin.rs tests them at length); this
// file checks that the adapter carries them through unchanged: method, URL,
// raw headers and body reach the core; status, headers and body come back;
// a body stops being read past maxBody; a live stream sends frames until the
// client leaves and is then dropped, so nothing keeps the process alive.
//
// Waits on a real worker are bounded polls, never sleeps that hope.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import http from 'node:http';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';

import { App, RedisBroker, admin } from 'headway';

import { redisMissing, startRedis } from './fixtures/admin-redis.mjs';

const here = dirname(fileURLToPath(import.meta.url));
const tasks = createRequire(import.meta.url)('../bindings-node/lib/tasks.js');
const T = 's3cret-token-for-tests';
const WAIT = 10000;
const CSP = "default-src 'self'; frame-ancestors 'none'";
const REQUIRE = process.env.HEADWAY_REQUIRE_REDIS === '1';

async function until(what, fn, ms = WAIT) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** One request over a fresh connection; resolves {status, headers, body, json}. */
function request(base, method, path, { headers = {}, body } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request(base + path, { method, headers, agent: false }, (res) => {
      const parts = [];
      res.on('data', (d) => parts.push(d));
      res.on('end', () => {
        const text = Buffer.concat(parts).toString('utf8');
        let json;
        try {
          json = JSON.parse(text);
        } catch {
          json = undefined;
        }
        resolve({ status: res.statusCode, headers: res.headers, raw: res.rawHeaders, body: text, json });
      });
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
}

const bearer = (more = {}) => ({ Authorization: `Bearer ${T}`, ...more });
const JSONH = { 'Content-Type': 'application/json' };
const post = (base, path, value, headers = bearer(JSONH)) =>
  request(base, 'POST', path, { headers, body: JSON.stringify(value) });

async function serve(handler) {
  const server = http.createServer(handler);
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address();
  return {
    server,
    base: `http://127.0.0.1:${port}`,
    host: `127.0.0.1:${port}`,
    close: () =>
      new Promise((r) => {
        server.closeAllConnections();
        server.close(r);
      }),
  };
}

function meta(html, name) {
  const m = new RegExp(`<meta name="${name}" content="([^"]*)"`).exec(html);
  assert.ok(m, html.slice(0, 300));
  return m[1];
}

async function runRow(base, id, state) {
  return until(`run ${id} to show ${state}`, async () => {
    const r = await request(base, 'GET', '/api/runs?limit=100', { headers: bearer() });
    assert.equal(r.status, 200, r.body);
    return r.json.runs.find((x) => x.id === id && x.state === state);
  });
}

// ---------------------------------------------------------------- brokers

let redis = null;
const redisWhy = redisMissing();

const kinds = [
  { name: 'memory', make: () => new App({ broker: 'memory://' }) },
  {
    name: 'redis',
    needs: true,
    make: () => new App({ broker: new RedisBroker(redis.url, { prefix: `a${Math.random().toString(16).slice(2, 10)}:` }) }),
  },
  {
    name: 'celery',
    needs: true,
    // Celery's key names are fixed: a clean database per app.
    make: async () => {
      await redis.command('FLUSHALL');
      return new App({ broker: RedisBroker.celery(redis.url) });
    },
  },
];

before(async () => {
  if (redisWhy === null) redis = await startRedis();
  else if (REQUIRE) throw new Error(`HEADWAY_REQUIRE_REDIS=1 but ${redisWhy}`);
  else console.log(`skipping the Redis brokers: ${redisWhy}`);
});

after(async () => {
  if (redis) await redis.stop();
});

/** An app with `add`, `echo` and `slow`, its admin on a server, a worker when asked. */
async function setup(kind, { worker = false, ...options } = {}) {
  const app = await kind.make();
  app.task('add', ([x, y]) => x + y);
  app.task('echo', (args) => args);
  const h = admin.handler(app, { token: T, ...options });
  const srv = await serve(h);
  let w = null;
  let running = null;
  if (worker) {
    w = app.worker({ concurrency: 2 });
    running = w.run();
  }
  return {
    app,
    h,
    ...srv,
    async close() {
      await srv.close();
      if (w) {
        await w.stop({ grace: 1000 });
        await running;
      }
    },
  };
}

for (const kind of kinds) {
  describe(`admin over http, ${kind.name} broker`, { skip: kind.needs && redisWhy !== null ? redisWhy : false }, () => {
    test('/health is open; every other route needs the token', async () => {
      const s = await setup(kind);
      try {
        const h = await request(s.base, 'GET', '/health');
        assert.equal(h.status, 200);
        assert.deepEqual(h.json, { ok: true });
        assert.equal(h.headers['content-security-policy'], CSP);
        // The page without a session is the login form (401, HTML).
        const login = await request(s.base, 'GET', '/');
        assert.equal(login.status, 401);
        assert.match(login.body, /name="token"/);
        assert.equal(login.headers['content-security-policy'], CSP);
        for (const [method, path] of [
          ['GET', '/app.js'],
          ['GET', '/api/overview'],
          ['GET', '/api/runs'],
          ['GET', '/api/stream'],
          ['POST', '/api/send'],
          ['POST', '/api/revoke'],
          ['GET', '/api/dead?queue=default'],
          ['POST', '/api/dead/requeue'],
          ['POST', '/api/dead/purge'],
          ['GET', '/api/audit'],
          ['GET', '/no/such/route'],
        ]) {
          const r = await request(s.base, method, path);
          assert.equal(r.status, 401, `${method} ${path}`);
          assert.equal(r.json.error, 'unauthorized');
          assert.equal(r.headers['www-authenticate'], 'Bearer realm="headway admin"');
          assert.equal(r.headers['content-security-policy'], CSP);
          const wrong = await request(s.base, method, path, { headers: { Authorization: 'Bearer not-it' } });
          assert.equal(wrong.status, 401, `${method} ${path}`);
        }
        const ok = await request(s.base, 'GET', '/api/runs', { headers: bearer() });
        assert.equal(ok.status, 200);
        assert.deepEqual(ok.json, { runs: [] });
        assert.equal(ok.headers['x-content-type-options'], 'nosniff');
        assert.equal(ok.headers['cache-control'], 'no-store');
        assert.equal((await request(s.base, 'GET', '/nope', { headers: bearer() })).status, 404);
      } finally {
        await s.close();
      }
    });

    test('dead letters a worker quarantined are listed, re-queued and purged', async () => {
      const s = await setup(kind, { worker: true });
      try {
        await tasks.testing.pushRaw(s.app, 'default', Buffer.from([0x80, 0x04, 0x95]));
        await tasks.testing.pushRaw(s.app, 'default', '<b>not a message</b>');
        const dead = () => request(s.base, 'GET', '/api/dead?queue=default', { headers: bearer() });
        const got = await until('two dead letters', async () => {
          const r = await dead();
          assert.equal(r.status, 200, r.body);
          return r.json.count === 2 && r.json;
        });
        assert.deepEqual(got.letters.map((d) => [d.preview, d.size]), [
          ['<b>not a message</b>', 20],
          ['\\x80\\x04\\x95', 3],
        ]);
        assert.ok(!(await dead()).body.includes('<b>'), 'JSON escapes `<`');
        const o = await request(s.base, 'GET', '/api/overview', { headers: bearer() });
        assert.deepEqual(o.json.dead.find((d) => d.queue === 'default'), { queue: 'default', count: 2 });
        // Re-queued, the worker claims it again and sets it aside again.
        const rq = await post(s.base, '/api/dead/requeue', { queue: 'default', limit: 1 });
        assert.equal(rq.status, 200, rq.body);
        assert.equal(rq.json.requeued, 1);
        await until('it set aside again, newest', async () => {
          const r = (await dead()).json;
          return r.count === 2 && r.letters[0].size === 3;
        });
        const bad = await post(s.base, '/api/dead/requeue', { queue: 'default', limit: 0 });
        assert.equal(bad.status, 400);
        assert.equal(bad.json.error, 'invalid');
        const pg = await post(s.base, '/api/dead/purge', { queue: 'default' });
        assert.deepEqual(pg.json, { queue: 'default', purged: 2 });
        assert.equal((await dead()).json.count, 0);
        const audit = await request(s.base, 'GET', '/api/audit', { headers: bearer() });
        assert.deepEqual(audit.json.audit.map((e) => e.action), ['dead.purge', 'dead.requeue']);
      } finally {
        await s.close();
      }
    });

    test('a posted token becomes a cookie that reads; with CSRF and Origin it changes', async () => {
      const s = await setup(kind);
      try {
        // A token in the URL is no login: a redirect, no cookie.
        const byUrl = await request(s.base, 'GET', `/?token=${T}`);
        assert.equal(byUrl.status, 303);
        assert.equal(byUrl.headers['set-cookie'], undefined);
        const form = { 'Content-Type': 'application/x-www-form-urlencoded', Origin: `http://${s.host}` };
        assert.equal((await request(s.base, 'POST', '/login', { headers: form, body: 'token=wrong' })).status, 401);
        const login = await request(s.base, 'POST', '/login', { headers: form, body: `token=${T}` });
        assert.equal(login.status, 303);
        assert.equal(login.headers.location, '/');
        const set = login.headers['set-cookie'][0];
        assert.match(set, /HttpOnly/);
        assert.match(set, /SameSite=Strict/);
        assert.ok(!set.includes(T));
        const cookie = set.split(';')[0];
        const page = await request(s.base, 'GET', '/', { headers: { Cookie: cookie } });
        assert.equal(page.status, 200);
        assert.equal(page.headers['content-type'], 'text/html; charset=utf-8');
        const csrf = meta(page.body, 'headway-csrf');
        assert.equal(meta(page.body, 'headway-read-only'), 'false');
        assert.equal((await request(s.base, 'GET', '/api/runs', { headers: { Cookie: cookie } })).status, 200);

        const origin = `http://${s.host}`;
        const good = { Cookie: cookie, ...JSONH, 'X-CSRF-Token': csrf, Origin: origin };
        const sent = await post(s.base, '/api/send', { task: 'add', args: [1, 2] }, good);
        assert.equal(sent.status, 200, sent.body);
        assert.equal(sent.json.state, 'PENDING');
        for (const [headers, code] of [
          [{ Cookie: cookie, ...JSONH, Origin: origin }, 'csrf'],
          [{ Cookie: cookie, ...JSONH, 'X-CSRF-Token': 'x' + csrf, Origin: origin }, 'csrf'],
          [{ Cookie: cookie, ...JSONH, 'X-CSRF-Token': csrf, Origin: 'http://evil.example' }, 'origin'],
          [{ Cookie: cookie, ...JSONH, 'X-CSRF-Token': csrf }, 'origin'],
          [{ Cookie: cookie, ...JSONH, 'X-CSRF-Token': csrf, Origin: `${origin}.evil` }, 'origin'],
        ]) {
          const r = await post(s.base, '/api/send', { task: 'add', args: [1, 2] }, headers);
          assert.deepEqual([r.status, r.json.error], [403, code], JSON.stringify(headers));
        }
        const r = await request(s.base, 'GET', '/api/send', { headers: bearer() });
        assert.deepEqual([r.status, r.headers.allow], [405, 'POST']);
      } finally {
        await s.close();
      }
    });

    test('a Bearer send is run by a worker and reported', async () => {
      const s = await setup(kind, { worker: true });
      try {
        const r = await post(s.base, '/api/send', { task: 'add', args: [2, 3], kwargs: {} });
        assert.equal(r.status, 200, r.body);
        assert.deepEqual([r.json.task, r.json.queue, r.json.state], ['add', 'default', 'PENDING']);
        assert.equal(await s.app.handle(r.json.id).get(WAIT), 5);
        const row = await runRow(s.base, r.json.id, 'SUCCESS');
        assert.deepEqual([row.task, row.final], ['add', true]);
        const one = await request(s.base, 'GET', `/api/runs/${r.json.id}`, { headers: bearer() });
        assert.deepEqual([one.json.state, one.json.result], ['SUCCESS', 5]);
        const o = await request(s.base, 'GET', '/api/overview', { headers: bearer() });
        assert.equal(o.status, 200, o.body);
        assert.ok(o.json.counts.SUCCESS >= 1);
        assert.deepEqual(o.json.task_names, ['add', 'echo']);
      } finally {
        await s.close();
      }
    });

    test('revoking a queued run (an hour away) shows it REVOKED', async () => {
      const s = await setup(kind, { worker: true });
      try {
        const r = await post(s.base, '/api/send', { task: 'echo', args: ['later'], countdown: 3600 });
        assert.equal(r.status, 200, r.body);
        const id = r.json.id;
        await runRow(s.base, id, 'PENDING');
        const rv = await post(s.base, '/api/revoke', { id });
        assert.equal(rv.status, 200);
        assert.deepEqual(rv.json, { id, revoked: true, terminate: false });
        const row = await runRow(s.base, id, 'REVOKED');
        assert.deepEqual([row.final, row.revoked], [true, true]);
        const one = await request(s.base, 'GET', `/api/runs/${encodeURIComponent(id)}`, { headers: bearer() });
        assert.deepEqual([one.json.state, one.json.stored_state], ['REVOKED', 'PENDING']);
      } finally {
        await s.close();
      }
    });

    test('read-only refuses every change and still reads', async () => {
      const s = await setup(kind, { readOnly: true });
      try {
        assert.equal(s.h.readOnly, true);
        for (const [path, body] of [
          ['/api/send', { task: 'add', args: [1, 2] }],
          ['/api/revoke', { id: 'x' }],
        ]) {
          const r = await post(s.base, path, body);
          assert.deepEqual([r.status, r.json.error], [403, 'read_only']);
        }
        assert.equal((await request(s.base, 'GET', '/api/runs', { headers: bearer() })).status, 200);
        const page = await request(s.base, 'GET', '/', { headers: bearer() });
        assert.equal(meta(page.body, 'headway-read-only'), 'true');
      } finally {
        await s.close();
      }
    });

    test('bad sends get a 4xx with a reason; a long body is not read to its end', async () => {
      const s = await setup(kind, { maxBody: 1024 });
      try {
        assert.equal(s.h.maxBody, 1024);
        let r = await post(s.base, '/api/send', { task: 'nope' });
        assert.deepEqual([r.status, r.json.error], [404, 'unknown_task']);
        assert.match(r.json.reason, /nope/);
        r = await request(s.base, 'POST', '/api/send', { headers: bearer(JSONH), body: '{"task": "add", args: [1]}' });
        assert.deepEqual([r.status, r.json.error], [400, 'not_json']);
        r = await post(s.base, '/api/send', { task: 'add', args: '1,2' });
        assert.deepEqual([r.status, r.json.error], [400, 'invalid']);
        assert.match(r.json.reason, /`args`/);
        r = await request(s.base, 'POST', '/api/send', { headers: bearer({ 'Content-Type': 'text/plain' }), body: '{}' });
        assert.equal(r.status, 415);
        // A declared length past maxBody: answered before any body is sent.
        r = await new Promise((resolve, reject) => {
          const req = http.request(
            s.base + '/api/send',
            { method: 'POST', agent: false, headers: bearer({ ...JSONH, 'Content-Length': '999999' }) },
            (res) => {
              let text = '';
              res.on('data', (d) => (text += d));
              res.on('end', () => resolve({ status: res.statusCode, json: JSON.parse(text) }));
            },
          );
          req.on('error', () => {}); // the server closes a connection it stopped reading
          req.flushHeaders();
        });
        assert.deepEqual([r.status, r.json.error], [413, 'too_large']);
        // A chunked body past maxBody that never ends: answered all the same
        // (were it read to its end, this would hang).
        r = await new Promise((resolve, reject) => {
          const req = http.request(
            s.base + '/api/send',
            { method: 'POST', agent: false, headers: bearer(JSONH) },
            (res) => {
              let text = '';
              res.on('data', (d) => (text += d));
              res.on('end', () => resolve({ status: res.statusCode, json: JSON.parse(text) }));
              res.on('error', reject);
            },
          );
          req.on('error', () => {});
          for (let i = 0; i < 3; i++) req.write('x'.repeat(512));
        });
        assert.deepEqual([r.status, r.json.error], [413, 'too_large']);
      } finally {
        await s.close();
      }
    });

    test('XSS payloads come back as escaped JSON', async () => {
      const s = await setup(kind);
      try {
        const payloads = ['<script>alert(1)</script>', '"><img src=x onerror=alert(1)>', 'javascript:alert(1)'];
        const r = await post(s.base, '/api/send', { task: 'echo', args: payloads });
        const runs = await request(s.base, 'GET', '/api/runs', { headers: bearer() });
        assert.ok(!runs.body.includes('<') && !runs.body.includes('>'), runs.body);
        const row = runs.json.runs.find((x) => x.id === r.json.id);
        assert.deepEqual(JSON.parse(row.args), payloads);
      } finally {
        await s.close();
      }
    });

    test('the stream sends counts each tick and is dropped when the client leaves', async () => {
      const s = await setup(kind, { worker: true });
      try {
        assert.equal(await (await s.app.send('add', [1, 1])).get(WAIT), 2);
        const outstanding = tasks._outstanding();
        const got = await new Promise((resolve, reject) => {
          const req = http.get(s.base + '/api/stream', { headers: bearer(), agent: false }, (res) => {
            let text = '';
            res.setEncoding('utf8');
            res.on('data', (d) => {
              text += d;
              if ((text.match(/event: counts/g) || []).length >= 2) {
                req.destroy();
                resolve({ res, text });
              }
            });
            res.on('error', () => {});
          });
          req.on('error', reject);
        });
        assert.equal(got.res.statusCode, 200);
        assert.equal(got.res.headers['content-type'], 'text/event-stream; charset=utf-8');
        assert.equal(got.res.headers['content-security-policy'], CSP);
        assert.ok(got.text.startsWith('retry: 2000\n'), got.text);
        const frames = got.text
          .split('\n\n')
          .map((b) => /event: counts\ndata: (.*)/.exec(b))
          .filter(Boolean)
          .map((m) => JSON.parse(m[1]));
        assert.ok(frames[frames.length - 1].counts.SUCCESS >= 1);
        assert.ok(frames[1].at - frames[0].at >= 500, 'one frame per tick, not a burst');
        // Gone: the native stream is dropped and its waiting next() answered.
        await until('the stream to be dropped', () => s.h.openStreams === 0, 2000);
        await until('no ticket left behind', () => tasks._outstanding() <= outstanding, 2000);
      } finally {
        await s.close();
      }
    });
  });
}

// ---------------------------------------------------------------- adapter

test('closeStreams ends open streams cleanly', async () => {
  const app = new App();
  const h = admin.handler(app, { token: T });
  const s = await serve(h);
  try {
    const ended = await new Promise((resolve, reject) => {
      const req = http.get(s.base + '/api/stream', { headers: bearer(), agent: false }, (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (d) => {
          text += d;
          if (text.includes('event: counts')) h.closeStreams();
        });
        res.on('end', () => resolve(text));
        res.on('error', reject);
      });
      req.on('error', reject);
    });
    assert.match(ended, /event: counts/);
    assert.equal(h.openStreams, 0);
  } finally {
    await s.close();
  }
});

test('mounted below a prefix, as Express passes req.url', async () => {
  const app = new App();
  app.task('add', ([x, y]) => x + y);
  const h = admin.handler(app, { token: T });
  const s = await serve((req, res) => {
    // What Express's app.use('/admin', h) does.
    assert.ok(req.url.startsWith('/admin'));
    req.url = req.url.slice('/admin'.length) || '/';
    req.baseUrl = '/admin';
    h(req, res);
  });
  try {
    const r = await request(s.base, 'GET', '/admin/api/runs', { headers: bearer() });
    assert.equal(r.status, 200);
    const id = await request(s.base, 'GET', '/admin/api/runs/a%2Fb', { headers: bearer() });
    assert.equal(id.json.id, 'a/b');
    const login = await request(s.base, 'POST', '/admin/login', {
      headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
      body: `token=${T}`,
    });
    assert.equal(login.status, 303);
    assert.equal(login.headers.location, '/admin/');
    assert.match(login.headers['set-cookie'][0], /; Path=\/admin;/);
    assert.doesNotMatch(login.headers['set-cookie'][0], /Secure/);
  } finally {
    await s.close();
  }
});

test('a generated token is printed and works', async () => {
  const app = new App();
  const write = process.stderr.write;
  let printed = '';
  process.stderr.write = (chunk, ...rest) => {
    printed += chunk;
    return true;
  };
  let h;
  try {
    h = admin.handler(app);
  } finally {
    process.stderr.write = write;
  }
  assert.equal(h.tokenGenerated, true);
  assert.match(h.token, /^[A-Za-z0-9_-]{43}$/);
  assert.ok(printed.includes(`generated token ${h.token}`), printed);
  assert.ok(!printed.includes('?token='), printed);
  const quiet = admin.handler(app, { announce: false });
  assert.notEqual(quiet.token, h.token);
  assert.equal(admin.handler(app, { token: 'given-token-0123456789' }).tokenGenerated, false);
  const s = await serve(h);
  try {
    const r = await request(s.base, 'GET', '/api/runs', { headers: { Authorization: `Bearer ${h.token}` } });
    assert.equal(r.status, 200);
  } finally {
    await s.close();
  }
});

test('bad arguments are refused with typed errors naming them', () => {
  const app = new App();
  assert.throws(() => admin.handler({}, { token: T }), { name: 'TypeError', message: /`app`/ });
  assert.throws(() => admin.handler(app, { token: 5 }), { name: 'TypeError', message: /`token`/ });
  assert.throws(() => admin.handler(app, { token: T, readOnly: 'yes' }), { name: 'TypeError', message: /`readOnly`/ });
  assert.throws(() => admin.handler(app, { token: T, maxBody: 0 }), { name: 'RangeError', message: /`maxBody`/ });
  assert.throws(() => admin.handler(app, { token: T, maxBody: 1.5 }), { name: 'RangeError', message: /`maxBody`/ });
  assert.throws(() => admin.handler(app, { token: T, allowedOrigins: 'x' }), { name: 'TypeError', message: /`allowedOrigins`/ });
  assert.throws(() => admin.handler(app, { tokn: T }), { name: 'TypeError', message: /`tokn`/ });
  // The core refuses a token too short to be a secret.
  assert.throws(() => admin.handler(app, { token: 'short-token' }), { name: 'RangeError', message: /`token`.*16/ });
  assert.equal(admin.handler(app, { token: 'x'.repeat(16) }).tokenGenerated, false);
});

test('a process that served a stream exits once its server closes', () => {
  const r = spawnSync(process.execPath, [join(here, 'fixtures', 'admin-exit.mjs')], {
    encoding: 'utf8',
    timeout: 15000,
  });
  assert.equal(r.signal, null, `did not exit by itself: ${r.stdout}${r.stderr}`);
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /streamed/);
});
