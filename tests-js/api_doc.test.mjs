// Every export of the Node package is documented, twice: with JSDoc in its
// .d.ts (what an editor shows on hover) and in docs/api.md (the reference
// read side by side with Python's). The names come from the running module
// — the keys of index.js, the methods on each exported class's prototype,
// its static members, the keys of each exported object — so a name added
// later fails here until it is documented. Names starting with `_` are
// private and not checked.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(import.meta.url);
const headway = require(join(root, 'bindings-node', 'index.js'));
const esm = await import(join(root, 'bindings-node', 'index.mjs'));

const apiPath = join(root, 'docs', 'api.md');
const api = existsSync(apiPath) ? readFileSync(apiPath, 'utf8') : '';
// Everything api.md shows as code: inline spans and fenced blocks.
const code = [
  ...[...api.matchAll(/`([^`\n]+)`/g)].map((m) => m[1]),
  ...[...api.matchAll(/```[a-z]*\n([\s\S]*?)```/g)].map((m) => m[1]),
].join(' ');
const mentioned = (name) => new RegExp(`(?<![\\w$])${name.replace(/\$/g, '\\$')}(?![\\w$])`).test(code);

/**
 * A small reader of the declaration files: top-level declarations and the
 * members of each class or object type, each with whether a JSDoc block
 * (`/** ... *\/`) comes right before it. Depth counts braces, parentheses
 * and brackets outside comments, so a signature over several lines is one
 * member.
 */
function readDts(file) {
  const text = readFileSync(join(root, 'bindings-node', file), 'utf8');
  const decls = new Map(); // name -> { kind, doc, members: Map(name -> doc) }
  let depth = 0;
  let inBlock = false;
  let blockIsDoc = false;
  let docPending = false;
  let current = null; // the class / const / interface whose body we are in
  for (const raw of text.split('\n')) {
    // Split the line into code (comments removed), noting a JSDoc that ends.
    let codeText = '';
    let i = 0;
    while (i < raw.length) {
      if (inBlock) {
        const end = raw.indexOf('*/', i);
        if (end < 0) { i = raw.length; break; }
        inBlock = false;
        if (blockIsDoc) docPending = true;
        i = end + 2;
      } else if (raw.startsWith('/*', i)) {
        inBlock = true;
        blockIsDoc = raw.startsWith('/**', i) && !raw.startsWith('/**/', i);
        i += blockIsDoc ? 3 : 2;
      } else if (raw.startsWith('//', i)) {
        break;
      } else {
        codeText += raw[i++];
      }
    }
    const trimmed = codeText.trim();
    if (!trimmed) continue;
    const before = depth;
    for (const ch of trimmed) {
      if ('{(['.includes(ch)) depth++;
      else if ('})]'.includes(ch)) depth--;
    }
    if (before === 0) {
      const m = trimmed.match(
        /^(export\s+)?(declare\s+)?(class|function|const|interface|type)\s+([A-Za-z_$][\w$]*)/,
      );
      if (m) {
        const [, exp, , kind, name] = m;
        const prev = decls.get(name);
        const entry = prev ?? { kind, exported: Boolean(exp), doc: false, members: new Map() };
        entry.doc ||= docPending; // an overloaded function needs one JSDoc
        entry.exported ||= Boolean(exp);
        decls.set(name, entry);
        current = depth > 0 ? entry : null;
      }
      const re = trimmed.match(/^export\s+(type\s+)?\{([^}]*)\}/);
      if (re) {
        for (const part of re[2].split(',')) {
          const name = part.replace(/^\s*type\s+/, '').trim();
          if (decls.has(name)) decls.get(name).exported = true;
          else if (name) decls.set(name, { kind: 'reexport', exported: true, doc: true, members: new Map() });
        }
      }
    } else if (before === 1 && current) {
      const m = trimmed.match(/^(?:(?:readonly|static|private|public)\s+)*([A-Za-z_$][\w$]*)\??\s*[(<:]/);
      if (m && !/^private\b/.test(trimmed)) {
        const name = m[1];
        const doc = current.members.get(name) || docPending;
        current.members.set(name, doc);
      }
    }
    if (depth === 0) current = null;
    docPending = false;
  }
  return decls;
}

const dts = new Map([...readDts('index.d.ts'), ...readDts('admin.d.ts')]);
const isPublic = (name) => !name.startsWith('_');

test('docs/api.md exists', () => {
  assert.ok(existsSync(apiPath), 'docs/api.md is the API reference');
});

test('the ESM entry exports what the CommonJS entry does', () => {
  const cjs = Object.keys(headway).filter(isPublic).sort();
  const named = Object.keys(esm).filter((k) => k !== 'default').sort();
  assert.deepEqual(named, cjs);
});

for (const name of Object.keys(headway).filter(isPublic)) {
  test(`export ${name} is declared with JSDoc and in docs/api.md`, () => {
    const decl = dts.get(name);
    assert.ok(decl, `${name} is exported by index.js but not declared in index.d.ts`);
    assert.ok(decl.doc, `${name} has no JSDoc in its .d.ts`);
    assert.ok(mentioned(name), `${name} is not mentioned in docs/api.md`);
  });

  const value = headway[name];
  const decl = dts.get(name);
  const members = new Set();
  if (typeof value === 'function' && value.prototype && decl?.kind === 'class') {
    for (const m of Object.getOwnPropertyNames(value.prototype)) members.add(m);
    for (const m of Object.getOwnPropertyNames(value)) {
      if (!['length', 'name', 'prototype', 'arguments', 'caller'].includes(m)) members.add(m);
    }
  } else if (value && typeof value === 'object') {
    for (const m of Object.keys(value)) members.add(m);
  }
  // What the .d.ts promises counts too: getters made per instance do not
  // show on the prototype.
  for (const m of decl?.members.keys() ?? []) members.add(m);
  members.delete('constructor');
  for (const member of [...members].filter(isPublic).sort()) {
    test(`${name}.${member} is declared with JSDoc and in docs/api.md`, () => {
      assert.ok(decl.members.has(member), `${name}.${member} exists at run time but not in the .d.ts`);
      assert.ok(decl.members.get(member), `${name}.${member} has no JSDoc in its .d.ts`);
      assert.ok(mentioned(member), `${name}.${member} is not mentioned in docs/api.md`);
    });
  }
}

test('every exported declaration of the .d.ts files has JSDoc', () => {
  const missing = [...dts]
    .filter(([name, d]) => d.exported && isPublic(name) && !d.doc)
    .map(([name]) => name);
  assert.deepEqual(missing, []);
});

test('every member of an exported class, interface or object type has JSDoc', () => {
  const missing = [];
  for (const [name, d] of dts) {
    if (!d.exported || !['class', 'const', 'interface'].includes(d.kind)) continue;
    for (const [member, doc] of d.members) {
      if (isPublic(member) && !doc) missing.push(`${name}.${member}`);
    }
  }
  assert.deepEqual(missing, []);
});

test('every `headway` command of the Node CLI is in docs/api.md', () => {
  // The commands are the core parser's, as its usage for Node names them.
  const { text } = JSON.parse(headway._native._cliParse(['--help']));
  const commands = new Set([...text.matchAll(/headway ([a-z]+)/g)].map((m) => m[1]));
  assert.deepEqual([...commands].sort(), ['admin', 'beat', 'control', 'inspect', 'worker']);
  for (const command of commands) {
    assert.match(api, new RegExp(`headway ${command}\\b`), `\`headway ${command}\` not in docs/api.md`);
  }
});
