'use strict';
// Importing the module that exports an app, and finding the App in it: what
// `npx headway worker ./app.js` does, and what each child of the process
// pool does (lib/child.js), by one rule so both find the same App.
//
// The rule, first match wins:
//   1. the default export, when it is an App (CommonJS `module.exports = app`,
//      ESM `export default app`);
//   2. the export named `app` (ESM `export const app`, CommonJS
//      `exports.app` — also read off the default object, for a CommonJS
//      module whose named exports Node could not detect);
//   3. the only App among the module's exports (and the default object's
//      own properties);
// otherwise an Error saying what was found: no App, or several (then
// export the one to run as default or as `app`).
//
// `import()` loads CommonJS and ESM alike. A specifier is a path (resolved
// from the current directory) or a `file:` URL.

const path = require('node:path');
const { pathToFileURL } = require('node:url');

/** `spec` (a path, a `file:` URL string or a URL) as a `file:` URL string. */
function moduleUrl(spec) {
  if (spec instanceof URL) return spec.href;
  if (spec.startsWith('file:')) return spec;
  return pathToFileURL(path.resolve(process.cwd(), spec)).href;
}

/** The App `mod` (a module namespace) exports, by the rule above; throws naming `where` otherwise. */
function appOf(mod, App, where) {
  const def = mod.default;
  if (def instanceof App) return def;
  if (mod.app instanceof App) return mod.app;
  const obj = def !== null && (typeof def === 'object' || typeof def === 'function') ? def : null;
  if (obj !== null && obj.app instanceof App) return obj.app;
  const found = new Map();
  for (const [k, v] of Object.entries(mod)) if (v instanceof App) found.set(v, k);
  if (obj !== null) {
    for (const k of Object.keys(obj)) {
      let v;
      try {
        v = obj[k];
      } catch {
        continue;
      }
      if (v instanceof App && !found.has(v)) found.set(v, `default.${k}`);
    }
  }
  if (found.size === 1) return found.keys().next().value;
  if (found.size > 1) {
    const names = [...found.values()].join(', ');
    throw new Error(`${where} exports several headway Apps (${names}): export the one to run as its default export or as \`app\``);
  }
  const got = def === undefined ? 'no default export' : `a default export of type ${typeof def}`;
  throw new Error(
    `${where} does not export a headway App (as its default export / module.exports, as \`app\`, or as its only App export; found ${got})`,
  );
}

/** Imports `spec` and answers the App it exports (see `appOf`). */
async function importApp(spec, App) {
  const where = typeof spec === 'string' ? spec : spec.href;
  let mod;
  try {
    mod = await import(moduleUrl(spec));
  } catch (e) {
    throw new Error(`cannot import ${where}: ${e && e.message}`, { cause: e });
  }
  return appOf(mod, App, where);
}

module.exports = { moduleUrl, appOf, importApp };
