// headway admin page. Static, no build step, no external resources.
//
// Every value from the server is put on the page with textContent or as an
// attribute value through setAttribute/dataset, never through innerHTML, so a
// task's args such as "<script>" or "\"><img onerror=...>" show as text.
'use strict';

(function () {
  const STATES = ['PENDING', 'RECEIVED', 'STARTED', 'RETRY', 'SUCCESS', 'FAILURE', 'REVOKED'];
  const FINAL = new Set(['SUCCESS', 'FAILURE', 'REVOKED']);
  const REFRESH_MS = 2000;
  const POLL_MS = 500;

  const meta = (name) => {
    const m = document.querySelector('meta[name="' + name + '"]');
    return m ? m.getAttribute('content') : '';
  };
  const csrf = meta('headway-csrf');
  const readOnly = meta('headway-read-only') === 'true';

  const $ = (sel) => document.querySelector(sel);

  // An element with a class and text; children appended as nodes or text.
  function el(tag, cls, ...children) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    for (const c of children) {
      if (c === null || c === undefined) continue;
      e.append(c instanceof Node ? c : String(c));
    }
    return e;
  }

  function stateBadge(state) {
    const s = el('span', 'state', state);
    s.dataset.state = state;
    return s;
  }

  function when(ms) {
    if (typeof ms !== 'number') return '';
    const d = new Date(ms);
    return isNaN(d.getTime()) ? '' : d.toLocaleTimeString();
  }

  function showError(text) {
    const e = $('#error');
    if (!text) {
      e.hidden = true;
      e.textContent = '';
      return;
    }
    e.hidden = false;
    e.textContent = text;
  }

  async function answer(res) {
    let body = null;
    try {
      body = await res.json();
    } catch (_) {
      body = null;
    }
    if (!res.ok) {
      const why = body && body.reason ? body.reason : res.status + ' ' + res.statusText;
      const err = new Error(why);
      err.status = res.status;
      throw err;
    }
    return body;
  }

  async function api(path) {
    const res = await fetch(path, {
      credentials: 'same-origin',
      cache: 'no-store',
      headers: { Accept: 'application/json' },
    });
    return answer(res);
  }

  async function post(path, body) {
    const res = await fetch(path, {
      method: 'POST',
      credentials: 'same-origin',
      cache: 'no-store',
      headers: {
        Accept: 'application/json',
        'Content-Type': 'application/json',
        'X-CSRF-Token': csrf,
      },
      body: JSON.stringify(body),
    });
    return answer(res);
  }

  function setRows(id, rows) {
    $('#' + id + ' tbody').replaceChildren(...rows);
    const empty = document.querySelector('[data-empty-for="' + id + '"]');
    if (empty) empty.hidden = rows.length > 0;
  }

  // Counts per state and queue lengths: from the stream, and from overview.
  function renderCounts(counts) {
    for (const s of STATES) {
      const n = $('#counts [data-state="' + s + '"]');
      if (n) n.textContent = String(counts && counts[s] ? counts[s] : 0);
    }
  }

  function renderQueues(queues) {
    setRows('queues', (queues || []).map((q) => {
      const tr = el('tr');
      tr.dataset.queue = q.name;
      const steps = Object.entries(q.ready_by_priority || {})
        .map(([p, n]) => p + ': ' + n).join(', ');
      tr.append(
        el('td', 'name', q.name),
        el('td', 'num ready', q.ready),
        el('td', 'muted', steps || '—'),
        el('td', 'num delayed', q.delayed),
        el('td', 'num unacked', q.unacked),
      );
      return tr;
    }));
  }

  function renderConsumers(consumers) {
    setRows('consumers', (consumers || []).map((c) => {
      const tr = el('tr');
      tr.dataset.consumer = c.name;
      tr.append(
        el('td', 'name', c.name),
        el('td', '', c.lease_until ? when(c.lease_until) : '—'),
        el('td', 'ids', (c.holding || []).length ? (c.holding || []).join(', ') : '—'),
      );
      return tr;
    }));
  }

  function renderTasks(tasks) {
    setRows('tasks', (tasks || []).map((t) => {
      const tr = el('tr');
      tr.dataset.task = t.name;
      const c = t.counts || {};
      tr.append(
        el('td', 'name', t.name, t.registered ? null : el('span', 'muted', ' (not here)')),
        el('td', 'num', c.SUCCESS || 0),
        el('td', 'num', c.FAILURE || 0),
        el('td', 'num', c.RETRY || 0),
        el('td', 'num', c.REVOKED || 0),
      );
      return tr;
    }));
  }

  // Rebuilds a select's options only when the list changed, keeping the choice.
  function fillSelect(select, names, first) {
    const now = Array.from(select.options).slice(first ? 1 : 0).map((o) => o.value);
    if (now.length === names.length && now.every((v, i) => v === names[i])) return;
    const keep = select.value;
    const opts = names.map((n) => {
      const o = document.createElement('option');
      o.value = n;
      o.textContent = n;
      return o;
    });
    if (first) opts.unshift(first);
    select.replaceChildren(...opts);
    if (keep && (names.includes(keep) || keep === '')) select.value = keep;
  }

  function runRow(r) {
    const tr = el('tr');
    tr.dataset.id = r.id;
    tr.dataset.state = r.state;
    tr.dataset.task = r.task;
    const actions = el('td', 'actions');
    if (!r.final && !readOnly) {
      const rev = el('button', 'revoke', 'Revoke');
      rev.type = 'button';
      rev.dataset.action = 'revoke';
      const term = el('button', 'terminate danger', 'Terminate');
      term.type = 'button';
      term.dataset.action = 'terminate';
      actions.append(rev, term);
    }
    const id = el('code', 'id', r.id);
    id.title = r.id;
    tr.append(
      el('td', '', stateBadge(r.state)),
      el('td', 'task', r.task),
      el('td', '', id),
      el('td', '', el('code', 'args', r.args)),
      el('td', '', el('pre', 'detail', r.detail || '')),
      el('td', 'muted when', when(r.at)),
      actions,
    );
    return tr;
  }

  function failureRow(r) {
    const tr = el('tr');
    tr.dataset.id = r.id;
    const id = el('code', 'id', r.id);
    id.title = r.id;
    tr.append(
      el('td', 'task', r.task),
      el('td', '', id),
      el('td', '', el('code', 'args', r.args)),
      el('td', '', el('pre', 'detail', r.detail || '')),
      el('td', 'muted when', when(r.at)),
    );
    return tr;
  }

  // Dead letters: the chosen queue's count and newest entries.
  function deadRow(d) {
    const tr = el('tr');
    if (d.id) tr.dataset.id = d.id;
    tr.dataset.reason = d.reason;
    const actions = el('td', 'actions');
    if (d.id && !readOnly) {
      const b = el('button', 'requeue', 'Requeue');
      b.type = 'button';
      b.dataset.action = 'requeue';
      actions.append(b);
    }
    const id = el('code', 'id', d.id || '—');
    if (d.id) id.title = d.id;
    tr.append(
      el('td', 'muted when', when(d.at)),
      el('td', 'reason', d.reason),
      el('td', '', id),
      el('td', 'num size', d.size),
      el('td', '', el('pre', 'preview', d.preview)),
      actions,
    );
    return tr;
  }

  const deadResult = $('#dead-result');
  function deadSaid(text, bad) {
    deadResult.replaceChildren(el('span', bad ? 'error' : 'muted', text));
  }

  async function refreshDead(dead) {
    const select = $('#dead-queue');
    const names = (dead || []).map((d) => d.queue);
    fillSelect(select, names, null);
    if (!select.value && names.length) select.value = names[0];
    const queue = select.value;
    for (const o of select.options) {
      const d = (dead || []).find((x) => x.queue === o.value);
      o.textContent = o.value + (d ? ' (' + d.count + ')' : '');
    }
    if (!queue) {
      $('#dead-count').textContent = '';
      setRows('dead', []);
      return;
    }
    const r = await api('api/dead?' + new URLSearchParams({ queue, limit: '20' }).toString());
    $('#dead-count').textContent = String(r.count);
    $('#dead-count').dataset.count = String(r.count);
    setRows('dead', (r.letters || []).map(deadRow));
    $('#dead-requeue').disabled = readOnly || r.count === 0;
    $('#dead-purge').disabled = readOnly || r.count === 0;
  }

  // Workers in every process: a row per node, with a shutdown (a second
  // click confirms) and the rate form's choice of node.
  const workersResult = $('#workers-result');
  function workersSaid(text, bad) {
    workersResult.replaceChildren(el('span', bad ? 'error' : 'muted', text));
  }

  function workerRow(n) {
    const tr = el('tr');
    tr.dataset.node = n.node;
    const ws = (n.stats && n.stats.workers) || [];
    const actions = el('td', 'actions');
    if (!readOnly) {
      const b = el('button', 'danger', 'Shut down');
      b.type = 'button';
      b.dataset.action = 'shutdown';
      actions.append(b);
    }
    tr.append(
      el('td', 'name', n.node),
      el('td', 'names', ws.map((w) => w.name).join(', ')),
      el('td', 'num', ws.reduce((a, w) => a + (w.concurrency || 0), 0)),
      el('td', 'num', ws.reduce((a, w) => a + (w.active || 0), 0)),
      el('td', 'heartbeat', when(n.heartbeat)),
      actions,
    );
    return tr;
  }

  async function refreshWorkers(taskNames) {
    const r = await api('api/workers');
    $('#workers-reach').textContent = r.reach === 'process' ? '(this process)' : '';
    setRows('workers', (r.nodes || []).map(workerRow));
    fillSelect($('#rate-node'), (r.nodes || []).map((n) => n.node), null);
    fillSelect($('#rate-task'), taskNames || [], null);
    $('#rate-submit').disabled = readOnly || !(r.nodes || []).length;
  }

  $('#workers tbody').addEventListener('click', async (ev) => {
    const btn = ev.target.closest('button[data-action="shutdown"]');
    const tr = btn && btn.closest('tr[data-node]');
    if (!tr) return;
    if (btn.dataset.armed !== 'true') {
      btn.dataset.armed = 'true';
      btn.textContent = 'Shut down for good?';
      return;
    }
    btn.disabled = true;
    try {
      await post('api/control', { command: 'shutdown', node: tr.dataset.node });
      workersSaid('Shutting down ' + tr.dataset.node, false);
      await refresh();
    } catch (e) {
      workersSaid('Could not shut down: ' + e.message, true);
    }
  });

  $('#rate-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const body = {
      command: 'rate_limit',
      node: $('#rate-node').value,
      task: $('#rate-task').value,
      rate: $('#rate-value').value.trim(),
    };
    try {
      await post('api/control', body);
      workersSaid('Rate limit of ' + body.task + ': ' + (body.rate || 'none'), false);
    } catch (e) {
      workersSaid('Could not set the rate limit: ' + e.message, true);
    }
  });

  let busy = false;
  async function refresh() {
    if (busy) return;
    busy = true;
    try {
      const o = await api('api/overview');
      if (!streaming) {
        renderCounts(o.counts);
        renderQueues(o.queues);
      }
      renderConsumers(o.consumers);
      renderTasks(o.tasks);
      await refreshDead(o.dead);
      await refreshWorkers(o.task_names);
      fillSelect($('#send-task'), o.task_names || [], null);
      const taskFilter = document.createElement('option');
      taskFilter.value = '';
      taskFilter.textContent = 'all tasks';
      fillSelect($('#runs-task'), (o.tasks || []).map((t) => t.name), taskFilter);

      const q = new URLSearchParams({ limit: '50' });
      if ($('#runs-state').value) q.set('state', $('#runs-state').value);
      if ($('#runs-task').value) q.set('task', $('#runs-task').value);
      const runs = await api('api/runs?' + q.toString());
      setRows('runs', (runs.runs || []).map(runRow));

      const f = await api('api/failures?limit=20');
      setRows('failures', (f.failures || []).map(failureRow));
      $('#updated').textContent = 'updated ' + new Date().toLocaleTimeString();
      showError('');
    } catch (e) {
      showError(e.status === 401
        ? 'Not logged in (the session ended, or the admin restarted): reload the page to log in.'
        : 'Could not refresh: ' + e.message);
    } finally {
      busy = false;
    }
  }

  // The live stream of counts and queue lengths.
  let streaming = false;
  function connect() {
    if (!window.EventSource) return;
    const live = $('#live');
    const es = new EventSource('api/stream');
    es.addEventListener('counts', (ev) => {
      let data;
      try {
        data = JSON.parse(ev.data);
      } catch (_) {
        return;
      }
      streaming = true;
      live.dataset.live = 'live';
      live.textContent = 'live';
      renderCounts(data.counts);
      renderQueues(data.queues);
    });
    es.addEventListener('error', () => {
      streaming = false;
      live.dataset.live = 'offline';
      live.textContent = 'reconnecting';
    });
  }

  // Revoke and terminate, by delegation on the runs table.
  $('#runs tbody').addEventListener('click', async (ev) => {
    const btn = ev.target.closest('button[data-action]');
    if (!btn) return;
    const tr = btn.closest('tr[data-id]');
    if (!tr) return;
    btn.disabled = true;
    try {
      await post('api/revoke', { id: tr.dataset.id, terminate: btn.dataset.action === 'terminate' });
      await refresh();
    } catch (e) {
      showError('Could not revoke: ' + e.message);
      btn.disabled = false;
    }
  });

  ['#runs-state', '#runs-task', '#dead-queue'].forEach((s) => $(s).addEventListener('change', refresh));

  // Requeue one (by id), requeue all, purge (a second click confirms).
  async function deadChange(path, body, what) {
    try {
      const r = await post(path, body);
      deadSaid(what + ': ' + (r.requeued !== undefined ? r.requeued + ' requeued' : r.purged + ' purged'), false);
      await refresh();
    } catch (e) {
      deadSaid('Could not ' + what.toLowerCase() + ': ' + e.message, true);
    }
  }

  $('#dead tbody').addEventListener('click', async (ev) => {
    const btn = ev.target.closest('button[data-action="requeue"]');
    const tr = btn && btn.closest('tr[data-id]');
    if (!tr) return;
    btn.disabled = true;
    await deadChange('api/dead/requeue', { queue: $('#dead-queue').value, ids: [tr.dataset.id] }, 'Requeue');
  });

  $('#dead-requeue').addEventListener('click', () =>
    deadChange('api/dead/requeue', { queue: $('#dead-queue').value }, 'Requeue'));

  const purge = $('#dead-purge');
  purge.addEventListener('click', async () => {
    if (purge.dataset.armed !== 'true') {
      purge.dataset.armed = 'true';
      purge.textContent = 'Purge for good?';
      setTimeout(() => {
        purge.dataset.armed = 'false';
        purge.textContent = 'Purge';
      }, 5000);
      return;
    }
    purge.dataset.armed = 'false';
    purge.textContent = 'Purge';
    await deadChange('api/dead/purge', { queue: $('#dead-queue').value }, 'Purge');
  });

  // The send form: validate locally, send, then follow the new run's state.
  const result = $('#send-result');
  function sendError(text) {
    result.dataset.state = 'error';
    result.replaceChildren(el('span', 'error', text));
  }

  async function follow(id) {
    const deadline = Date.now() + 120000;
    while (Date.now() < deadline) {
      let r;
      try {
        r = await api('api/runs/' + encodeURIComponent(id));
      } catch (_) {
        return;
      }
      const cur = result.querySelector('.id');
      if (!cur || cur.textContent !== id) return; // another send took over
      const badge = result.querySelector('.state');
      badge.textContent = r.state;
      badge.dataset.state = r.state;
      result.dataset.state = r.state;
      if (r.final) return;
      await new Promise((ok) => setTimeout(ok, POLL_MS));
    }
  }

  $('#send-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    let args;
    let kwargs;
    try {
      args = JSON.parse($('#send-args').value || '[]');
    } catch (e) {
      return sendError('Args are not JSON: ' + e.message);
    }
    if (!Array.isArray(args)) return sendError('Args must be a JSON array, like [1, "two"].');
    try {
      kwargs = JSON.parse($('#send-kwargs').value || '{}');
    } catch (e) {
      return sendError('Kwargs are not JSON: ' + e.message);
    }
    if (kwargs === null || typeof kwargs !== 'object' || Array.isArray(kwargs)) {
      return sendError('Kwargs must be a JSON object, like {"x": 1}.');
    }
    const body = { task: $('#send-task').value, args, kwargs };
    const queue = $('#send-queue').value.trim();
    if (queue) body.queue = queue;
    const countdown = $('#send-countdown').value.trim();
    if (countdown) body.countdown = Number(countdown);
    const submit = $('#send-submit');
    submit.disabled = true;
    try {
      const r = await post('api/send', body);
      result.dataset.state = r.state;
      result.replaceChildren(
        el('span', 'muted', 'Sent '),
        el('code', 'id', r.id),
        ' ',
        stateBadge(r.state),
      );
      refresh();
      follow(r.id);
    } catch (e) {
      sendError(e.message);
    } finally {
      submit.disabled = false;
    }
  });

  // Logging out forgets the session on the server, then shows the login.
  $('#logout').addEventListener('click', async () => {
    try {
      await post('logout', {});
    } catch (e) {
      showError('Could not log out: ' + e.message);
      return;
    }
    location.reload();
  });
  // A page opened with a bearer token (no session) has nothing to log out.
  $('#logout').hidden = csrf === '';

  if (readOnly) {
    $('#send-section').hidden = true;
    $('#dead-requeue').hidden = true;
    $('#dead-purge').hidden = true;
    $('#rate-form').hidden = true;
    $('#read-only-badge').hidden = false;
  }

  connect();
  refresh();
  setInterval(refresh, REFRESH_MS);
})();
