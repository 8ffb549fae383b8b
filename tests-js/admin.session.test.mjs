// Logging in through Node's adapter: the client's address comes from the
// socket (so failed logins are limited per client), the mount from
// Express's baseUrl (the cookie's Path), and logging out revokes the
// session. The rules themselves are the core's (core/tests/admin_session.rs).
import assert from 'node:assert/strict';
import http from 'node:http';
import { test } from 'node:test';

import { App, admin } from 'headway';

const T = 's3cret-token-for-tests';

function request(base, method, path, { headers = {}, body } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request(base + path, { method, headers, agent: false }, (res) => {
      const parts = [];
      res.on('data', (d) => parts.push(d));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(parts).toString() }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
}

async function serve(handler) {
  const server = http.createServer(handler);
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address();
  return {
    base: `http://127.0.0.1:${port}`,
    origin: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise((r) => {
        server.closeAllConnections();
        server.close(r);
      }),
  };
}

const FORM = { 'Content-Type': 'application/x-www-form-urlencoded' };

test('failed logins from one socket address are limited (429), logged in ones are not', async () => {
  const h = admin.handler(new App(), { token: T });
  const s = await serve(h);
  try {
    for (let i = 0; i < 5; i++) {
      const r = await request(s.base, 'POST', '/login', { headers: FORM, body: 'token=not-the-token-at-all' });
      assert.equal(r.status, 401, `failure ${i}`);
    }
    const r = await request(s.base, 'POST', '/login', { headers: FORM, body: `token=${T}` });
    assert.equal(r.status, 429);
    assert.ok(Number(r.headers['retry-after']) >= 1);
    assert.equal(r.headers['set-cookie'], undefined);
    // A bearer client is not a login: it still reads.
    const b = await request(s.base, 'GET', '/api/runs', { headers: { Authorization: `Bearer ${T}` } });
    assert.equal(b.status, 200);
  } finally {
    await s.close();
  }
});

test('the cookie carries the mount; logout revokes the session', async () => {
  const h = admin.handler(new App(), { token: T });
  const s = await serve((req, res) => {
    req.url = req.url.slice('/ops'.length) || '/';
    req.baseUrl = '/ops';
    h(req, res);
  });
  try {
    const login = await request(s.base, 'POST', '/ops/login', { headers: { ...FORM, Origin: s.origin }, body: `token=${T}` });
    assert.equal(login.status, 303);
    assert.equal(login.headers.location, '/ops/');
    const set = login.headers['set-cookie'][0];
    assert.match(set, /; Path=\/ops;/);
    assert.match(set, /; Max-Age=43200;/);
    const cookie = set.split(';')[0];
    const page = await request(s.base, 'GET', '/ops/', { headers: { Cookie: cookie } });
    assert.equal(page.status, 200);
    const csrf = /<meta name="headway-csrf" content="([^"]+)"/.exec(page.body)[1];
    const out = await request(s.base, 'POST', '/ops/logout', {
      headers: { Cookie: cookie, 'X-CSRF-Token': csrf, Origin: s.origin, 'Content-Type': 'application/json' },
      body: '{}',
    });
    assert.equal(out.status, 200, out.body);
    assert.match(out.headers['set-cookie'][0], /Max-Age=0/);
    const after = await request(s.base, 'GET', '/ops/api/runs', { headers: { Cookie: cookie } });
    assert.equal(after.status, 401);
  } finally {
    await s.close();
  }
});
