// The admin page in a real browser: Debian's headless `chromium`, driven by
// playwright-core (no browser download: `executablePath`). For each adapter
// that can serve here — Python's (`headway admin`, uvicorn, in a subprocess)
// and Node's (`admin.handler` on `http.createServer`, in this process) — with a worker
// running tasks: open the page with the token, see the counts move, send a
// task from the form and see it succeed, revoke a queued one and see it
// REVOKED, and check that XSS payloads render as text. On Node's server,
// bytes pushed onto the queue as a foreign producer would are quarantined by
// its worker and shown in the Dead letters card (escaped, as text), one is
// re-queued from its row and the rest purged. The last run saves a
// screenshot to docs/admin.png (HEADWAY_ADMIN_SCREENSHOT overrides the path).
//
// Without chromium (or a Python with headway and uvicorn for the Python
// server) the test is skipped with the reason printed — unless
// HEADWAY_REQUIRE_REDIS=1 (as CI sets), which makes that a failure.
//
// Waits are bounded polls on what the page shows, never sleeps that hope.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..');
const CHROMIUM = process.env.HEADWAY_CHROMIUM || '/usr/bin/chromium';
const REQUIRE = process.env.HEADWAY_REQUIRE_REDIS === '1';
const TOKEN = 'browser-test-token-0123456789';
const WAIT = 20000;
const SCREENSHOT = process.env.HEADWAY_ADMIN_SCREENSHOT || join(root, 'docs', 'admin.png');
const FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

const XSS = [
  '<script>window.__xss = 1</script>',
  '"><img src=x onerror="window.__xss = 2">',
  'javascript:window.__xss = 3',
];

function python() {
  if (process.env.HEADWAY_PYTHON) return process.env.HEADWAY_PYTHON;
  const venv = join(root, '.venv', 'bin', 'python');
  return existsSync(venv) ? venv : 'python3';
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

async function until(what, fn, ms = WAIT) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function api(base, method, path, body) {
  const res = await fetch(base + path, {
    method,
    headers: {
      Authorization: `Bearer ${TOKEN}`,
      ...(body === undefined ? {} : { 'Content-Type': 'application/json' }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

/** Why a Python server cannot run here, or null. */
function pythonMissing() {
  const r = spawnSync(python(), ['-c', 'import headway.admin, uvicorn'], { encoding: 'utf8' });
  if (r.error) return `${python()} cannot run (${r.error.code})`;
  if (r.status !== 0) return `${python()} lacks headway or uvicorn: ${r.stderr.trim().split('\n').pop()}`;
  return null;
}

/** Python's adapter: `headway admin` with a worker in its process. */
async function pythonServer() {
  const port = await freePort();
  const proc = spawn(
    python(),
    ['-m', 'headway', 'admin', '-A', 'admin_app:app', '--port', String(port), '--token', TOKEN, '--worker', '1'],
    { cwd: join(here, 'fixtures'), stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let log = '';
  proc.stdout.on('data', (d) => (log += d));
  proc.stderr.on('data', (d) => (log += d));
  const base = `http://127.0.0.1:${port}`;
  await until('the Python admin to listen', async () => {
    if (proc.exitCode !== null) throw new Error(`headway admin exited: ${log}`);
    try {
      return (await fetch(base + '/health')).ok;
    } catch {
      return false;
    }
  });
  return {
    base,
    log: () => log,
    async stop() {
      if (proc.exitCode !== null) return;
      const gone = new Promise((r) => proc.once('exit', r));
      proc.kill('SIGTERM');
      const t = setTimeout(() => proc.kill('SIGKILL'), 8000);
      await gone;
      clearTimeout(t);
    },
  };
}

/** Why Node's adapter cannot run here, or null. */
async function nodeMissing() {
  try {
    const h = await import('headway');
    return typeof h.admin?.handler === 'function' && typeof h.App === 'function'
      ? null
      : 'this build of headway has no App or admin';
  } catch (e) {
    return `headway does not load (${e.message})`;
  }
}

/** Node's adapter: admin.handler on http.createServer, a worker in this process. */
async function nodeServer() {
  const { App, admin, testing } = await import('headway');
  const http = await import('node:http');
  const app = new App();
  app.task('add', ([x, y]) => x + y);
  // Long enough that a batch takes several of the stream's ticks.
  app.task('slow', async ([i]) => {
    await new Promise((r) => setTimeout(r, 150));
    return i;
  });
  app.task('echo', (args) => args);
  app.task('boom', ([why]) => {
    throw new RangeError(why);
  });
  const worker = app.worker({ concurrency: 1 });
  const running = worker.run();
  const handler = admin.handler(app, { token: TOKEN });
  const server = http.createServer(handler);
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return {
    base: `http://127.0.0.1:${server.address().port}`,
    pushRaw: (queue, data) => testing.pushRaw(app, queue, data),
    async stop() {
      handler.closeStreams();
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
      await worker.stop({ grace: 1000 });
      await running;
    },
  };
}

const servers = [
  { name: 'python (headway admin, uvicorn)', missing: pythonMissing, start: pythonServer },
  { name: 'node (admin.handler, http.createServer)', missing: nodeMissing, start: nodeServer },
];

async function launch() {
  const { chromium } = await import('playwright-core');
  const dir = mkdtempSync(join(tmpdir(), 'headway-chromium-'));
  const ctx = await chromium.launchPersistentContext(dir, {
    executablePath: CHROMIUM,
    headless: true,
    args: FLAGS,
    viewport: { width: 1280, height: 900 },
    deviceScaleFactor: 1,
  });
  return {
    ctx,
    async close() {
      await ctx.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

const tile = (page, state) => page.locator(`#counts .n[data-state="${state}"]`);

async function runRowState(page, id) {
  return page.locator(`#runs tbody tr[data-id="${id}"]`).getAttribute('data-state', { timeout: 500 }).catch(() => null);
}

/** Dead letters: quarantined by the worker, shown escaped, re-queued, purged. */
async function deadLetters(page, server) {
  const count = () => page.locator('#dead-count').getAttribute('data-count', { timeout: 500 }).catch(() => null);
  await server.pushRaw('default', Buffer.from([0x80, 0x04, 0x95]));
  await server.pushRaw('default', '<script>window.__xss = 4</script>');
  await server.pushRaw('default', '{"id":"dl-1","queue":"default"}');
  await page.selectOption('#dead-queue', 'default');
  await until('three dead letters on the page', async () => (await count()) === '3');
  const rows = page.locator('#dead tbody tr');
  assert.equal(await rows.count(), 3);
  // Newest first: the one with an id (re-queueable from its row), the
  // script as text, the pickle's bytes escaped.
  assert.equal(await rows.nth(0).getAttribute('data-id'), 'dl-1');
  assert.equal(await rows.nth(0).locator('.reason').textContent(), 'no task name');
  assert.equal(await rows.nth(1).locator('pre.preview').textContent(), '<script>window.__xss = 4</script>');
  assert.equal(await rows.nth(2).locator('pre.preview').textContent(), '\\x80\\x04\\x95');
  assert.equal(await rows.nth(2).locator('.size').textContent(), '3');
  assert.equal(await rows.nth(1).locator('button').count(), 0, 'no id, no row button');
  // Re-queue the one with an id: the worker claims it again and, still bad,
  // sets it aside again.
  await rows.nth(0).locator('button[data-action="requeue"]').click({ timeout: WAIT });
  await page.locator('#dead-result', { hasText: 'Requeue: 1 requeued' }).waitFor({ timeout: WAIT });
  await until('it back among the dead', async () => (await count()) === '3');
  // Purge takes a second click to confirm.
  await page.click('#dead-purge');
  assert.equal(await page.locator('#dead-purge').textContent(), 'Purge for good?');
  assert.equal(await count(), '3');
  await page.click('#dead-purge');
  await page.locator('#dead-result', { hasText: 'Purge: 3 purged' }).waitFor({ timeout: WAIT });
  await until('no dead letters on the page', async () => (await count()) === '0');
  assert.equal(await page.locator('[data-empty-for="dead"]').isVisible(), true);
  const audit = await api(server.base, 'GET', '/api/audit');
  const actions = audit.body.audit.map((e) => `${e.action} by ${e.by}`);
  assert.deepEqual(actions.slice(0, 2), ['dead.purge by session', 'dead.requeue by session']);
}

async function drive(server, screenshot) {
  const browser = await launch();
  const problems = [];
  try {
    const page = await browser.ctx.newPage();
    page.on('dialog', (d) => {
      problems.push(`a dialog opened: ${d.message()}`);
      d.dismiss();
    });
    page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
    page.on('console', (m) => {
      if (m.type() === 'error') problems.push(`console error: ${m.text()}`);
    });

    // A token in the URL is no login: the page asks for it instead.
    assert.equal((await fetch(server.base + '/')).status, 401);
    const byUrl = await page.goto(`${server.base}/?token=${TOKEN}`);
    assert.equal(byUrl.status(), 401);
    assert.equal(new URL(page.url()).search, '', 'the token left the address bar');
    assert.equal(await page.title(), 'headway admin: log in');
    assert.deepEqual(await page.context().cookies(), [], 'a URL token set a cookie');
    // A wrong token: the form again, saying so.
    await page.fill('#login-token', 'not-the-token-at-all');
    await Promise.all([page.waitForNavigation(), page.click('#login-submit')]);
    assert.match(await page.locator('#login-message').textContent(), /not this admin's token/);
    // The right one, typed and posted: a session cookie, then the page.
    await page.fill('#login-token', TOKEN);
    const [opened] = await Promise.all([page.waitForNavigation(), page.click('#login-submit')]);
    assert.equal(opened.status(), 200);
    assert.equal(new URL(page.url()).pathname, '/');
    assert.equal(await page.title(), 'headway admin');
    assert.equal(opened.headers()['content-security-policy'], "default-src 'self'; frame-ancestors 'none'");
    const jar = await page.context().cookies();
    assert.equal(jar.length, 1);
    assert.equal(jar[0].httpOnly, true);
    assert.equal(jar[0].path, '/');
    assert.equal(jar[0].sameSite, 'Strict');
    assert.ok(jar[0].expires > Date.now() / 1000, 'the cookie has a Max-Age');
    assert.ok(!jar[0].value.includes(TOKEN));
    // The 401s of the login itself were expected; count from here on.
    problems.length = 0;
    await page.locator('#live[data-live="live"]').waitFor({ timeout: WAIT });
    await until('the task list', async () => (await page.locator('#send-task option').count()) === 4);

    // The counts move while the worker runs a batch (one body at a time).
    const before = Number(await tile(page, 'SUCCESS').textContent());
    const N = 16;
    for (let i = 0; i < N; i++) {
      const r = await api(server.base, 'POST', '/api/send', { task: 'slow', args: [i] });
      assert.equal(r.status, 200, JSON.stringify(r.body));
    }
    const seen = new Set();
    await until(`SUCCESS to reach ${before + N}`, async () => {
      const n = Number(await tile(page, 'SUCCESS').textContent());
      seen.add(n);
      return n >= before + N;
    });
    const between = [...seen].filter((n) => n > before && n < before + N);
    assert.ok(between.length >= 1, `the page never showed the batch in progress: saw ${[...seen]}`);

    // Send from the form and follow it to SUCCESS.
    await page.selectOption('#send-task', 'add');
    await page.fill('#send-args', '[20, 22]');
    await page.fill('#send-kwargs', '{}');
    await page.click('#send-submit');
    await page.locator('#send-result[data-state="SUCCESS"]').waitFor({ timeout: WAIT });
    const sentId = await page.locator('#send-result .id').textContent();
    const one = await api(server.base, 'GET', `/api/runs/${sentId}`);
    assert.equal(one.body.result, 42);

    // A bad form input is refused with its reason, on the page.
    await page.fill('#send-args', '[1, 2');
    await page.click('#send-submit');
    await page.locator('#send-result[data-state="error"]').waitFor({ timeout: WAIT });
    assert.match(await page.locator('#send-result').textContent(), /Args are not JSON/);

    // Queue one for an hour from now, then revoke it from its row.
    await page.selectOption('#send-task', 'echo');
    await page.fill('#send-args', '["later"]');
    await page.fill('#send-countdown', '3600');
    await page.click('#send-submit');
    await page.locator('#send-result[data-state="PENDING"]').waitFor({ timeout: WAIT });
    const queuedId = await page.locator('#send-result .id').textContent();
    const row = page.locator(`#runs tbody tr[data-id="${queuedId}"]`);
    await row.locator('button[data-action="revoke"]').click({ timeout: WAIT });
    await until('the queued run to show REVOKED', async () => (await runRowState(page, queuedId)) === 'REVOKED');
    assert.equal(await row.locator('.state').textContent(), 'REVOKED');
    assert.equal(await row.locator('button[data-action="revoke"]').count(), 0);
    await page.fill('#send-countdown', '');

    // XSS payloads as args, as a result and as an error: shown as text.
    await page.fill('#send-args', JSON.stringify(XSS));
    await page.click('#send-submit');
    await page.locator('#send-result[data-state="SUCCESS"]').waitFor({ timeout: WAIT });
    const xssId = await page.locator('#send-result .id').textContent();
    const failed = await api(server.base, 'POST', '/api/send', { task: 'boom', args: [XSS[1]] });
    assert.equal(failed.status, 200);
    await until('the XSS run to be listed', async () => (await runRowState(page, xssId)) === 'SUCCESS');
    await until('the failure to be listed', async () =>
      (await page.locator(`#failures tbody tr[data-id="${failed.body.id}"]`).count()) === 1,
    );
    const xssRow = page.locator(`#runs tbody tr[data-id="${xssId}"]`);
    const argsText = await xssRow.locator('code.args').textContent();
    for (const p of XSS) assert.ok(argsText.includes(JSON.stringify(p).slice(1, -1)) || argsText.includes(p), argsText);
    assert.ok(argsText.includes('<script>'), argsText);
    assert.ok(argsText.includes('<img src=x onerror='), argsText);
    const failureText = await page.locator(`#failures tbody tr[data-id="${failed.body.id}"] .detail`).textContent();
    assert.ok(failureText.includes('<img src=x onerror="window.__xss = 2">'), failureText);
    if (server.pushRaw) await deadLetters(page, server);
    const injected = await page.evaluate(() => ({
      xss: window.__xss,
      imgs: document.querySelectorAll('img').length,
      scripts: [...document.scripts].map((s) => s.getAttribute('src')),
      jsLinks: document.querySelectorAll('[href^="javascript:"], [src^="javascript:"]').length,
      handlers: [...document.querySelectorAll('*')].filter((e) =>
        [...e.attributes].some((a) => a.name.startsWith('on')),
      ).length,
    }));
    assert.deepEqual(injected, { xss: undefined, imgs: 0, scripts: ['app.js'], jsLinks: 0, handlers: 0 });

    assert.deepEqual(problems, []);
    if (screenshot) {
      // Settle on a quiet page: the runs listing refreshed, nothing moving.
      await page.locator('#updated').waitFor({ timeout: WAIT });
      await page.evaluate(() => window.scrollTo(0, 0));
      mkdirSync(dirname(SCREENSHOT), { recursive: true });
      await page.screenshot({ path: SCREENSHOT, fullPage: true });
    }

    // The Workers card: this process's node, a rate limit set from the
    // form, then the node shut down from its row (a second click confirms).
    const workerRows = page.locator('#workers tbody tr');
    await workerRows.first().waitFor({ timeout: WAIT });
    assert.equal(await workerRows.count(), 1);
    await page.selectOption('#rate-task', 'add');
    await page.fill('#rate-value', '100/s');
    await page.click('#rate-submit');
    await page.locator('#workers-result', { hasText: 'Rate limit of add: 100/s' }).waitFor({ timeout: WAIT });
    await page.fill('#rate-value', 'fast');
    await page.click('#rate-submit');
    await page.locator('#workers-result .error', { hasText: 'Invalid rate limit string' }).waitFor({ timeout: WAIT });
    const shut = workerRows.first().locator('button[data-action="shutdown"]');
    await shut.click();
    assert.equal(await shut.textContent(), 'Shut down for good?');
    await shut.click();
    await page.locator('#workers-result', { hasText: 'Shutting down' }).waitFor({ timeout: WAIT });
    await until('no worker listed', async () => (await workerRows.count()) === 0);
    const controls = (await api(server.base, 'GET', '/api/audit')).body.audit
      .filter((e) => e.action === 'control')
      .map((e) => e.by);
    assert.deepEqual(controls, ['session', 'session']);

    // Logging out revokes the session: a kept copy of its cookie is refused.
    const kept = (await page.context().cookies())[0];
    await Promise.all([page.waitForNavigation(), page.click('#logout')]);
    assert.equal(await page.title(), 'headway admin: log in');
    const reused = await fetch(server.base + '/api/runs', { headers: { Cookie: `${kept.name}=${kept.value}` } });
    assert.equal(reused.status, 401);
    await page.close();
  } finally {
    await browser.close();
  }
}

for (const [i, s] of servers.entries()) {
  test(`admin page in headless chromium: ${s.name}`, { timeout: 180000 }, async (t) => {
    const why = !existsSync(CHROMIUM)
      ? `${CHROMIUM} is not installed (apt-get install -y chromium)`
      : await s.missing();
    if (why) {
      if (REQUIRE) assert.fail(`HEADWAY_REQUIRE_REDIS=1 but ${why}`);
      console.log(`skipping the browser test (${s.name}): ${why}`);
      t.skip(why);
      return;
    }
    const server = await s.start();
    try {
      await drive(server, i === servers.length - 1);
    } catch (e) {
      if (server.log) e.message += `\n--- server output ---\n${server.log()}`;
      throw e;
    } finally {
      await server.stop();
    }
  });
}
