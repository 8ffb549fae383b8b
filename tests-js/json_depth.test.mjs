// How deep a task's value may nest: the core's limit (100 levels, the
// outermost counting as one), the same in Python and Node. Deeper, or
// circular, is a RangeError naming where, at send.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { App } from 'headway';

function nested(levels) {
  let v = [];
  for (let i = 1; i < levels; i++) v = [v];
  return v;
}

test('values nest to the core limit, 100 levels, and no deeper', async () => {
  const app = new App();
  const t = app.task('t', () => null);
  // args is level 1: the argument may nest 99 more.
  await t.send([nested(99)]);
  await assert.rejects(t.send([nested(100)]), {
    name: 'RangeError',
    message: `t: args${'[0]'.repeat(100)} nests deeper than 100 levels (or is circular)`,
  });
  await assert.rejects(t.send([nested(10_000)]), { name: 'RangeError', message: /nests deeper than 100 levels/ });
});
