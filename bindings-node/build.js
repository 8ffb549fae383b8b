'use strict';
// Builds the native addon from source — npm's `install` script, and
// `npm run build`: `napi build --release` for bindings-node/Cargo.toml, which
// leaves bindings-node/headway.node beside index.js.
//
// @napi-rs/cli comes from this package's dependencies. When npm links a
// checkout without installing them — `npm install <path to a checkout>` from
// another project does exactly that — it is fetched through `npm exec` from
// the registry instead, so that install still builds.
const { spawnSync } = require('node:child_process');
const path = require('node:path');

const root = path.join(__dirname, '..');
const CLI = '@napi-rs/cli@^3.10.12';
const args = [
  'build',
  '--release',
  '--manifest-path',
  'bindings-node/Cargo.toml',
  '--package-json-path',
  'package.json',
  '--output-dir',
  'bindings-node',
  // napi writes its own generated typings; index.d.ts is written by hand, so
  // send them out of the way (into the gitignored target dir).
  '--dts',
  '../target/napi/headway.d.ts',
];

function localCli() {
  try {
    const manifest = require.resolve('@napi-rs/cli/package.json', { paths: [root] });
    const { bin } = require(manifest);
    return path.join(path.dirname(manifest), typeof bin === 'string' ? bin : bin.napi);
  } catch {
    return undefined;
  }
}

let command;
let argv;
const cli = localCli();
if (cli !== undefined) {
  command = process.execPath;
  argv = [cli, ...args];
} else if (process.env.npm_execpath && process.env.npm_execpath.endsWith('.js')) {
  command = process.execPath;
  argv = [process.env.npm_execpath, 'exec', '--yes', `--package=${CLI}`, '--', 'napi', ...args];
} else {
  command = process.platform === 'win32' ? 'npm.cmd' : 'npm';
  argv = ['exec', '--yes', `--package=${CLI}`, '--', 'napi', ...args];
}

const r = spawnSync(command, argv, { cwd: root, stdio: 'inherit', shell: process.platform === 'win32' });
if (r.error) {
  console.error(`headway: could not run the addon build: ${r.error.message}`);
  process.exit(1);
}
process.exit(r.status === null ? 1 : r.status);
