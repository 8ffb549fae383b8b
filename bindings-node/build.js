'use strict';
// The native addon at install time and in a checkout.
//
//   node bindings-node/build.js            `npm run build`: build from source
//   node bindings-node/build.js --install  npm's `install` script
//
// A source build is `napi build --release` for bindings-node/Cargo.toml; it
// leaves bindings-node/headway.node beside index.js (addon.js loads it first).
//
// At install, a user should not need Rust: the published package carries a
// prebuilt addon for linux-x64 (glibc), `headway.linux-x64-gnu.node`, made by
// .ci/packages. `--install` uses it when it is there and loads; otherwise it
// builds from source when cargo is on PATH (a checkout has no prebuilt, so
// `npm install` in the repo always builds), and otherwise fails saying that
// cargo is missing. HEADWAY_BUILD_FROM_SOURCE=1 skips the prebuilt.
//
// @napi-rs/cli is a devDependency: a checkout has it in node_modules. A user
// install that has to build from source fetches it through `npm exec` from
// the registry instead.
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const { platformName } = require('./platform.js');

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

function say(line) {
  console.error(`headway: ${line}`);
}

function localCli() {
  try {
    const manifest = require.resolve('@napi-rs/cli/package.json', { paths: [root] });
    const { bin } = require(manifest);
    return path.join(path.dirname(manifest), typeof bin === 'string' ? bin : bin.napi);
  } catch {
    return undefined;
  }
}

function hasCargo() {
  const r = spawnSync('cargo', ['--version'], { stdio: 'ignore' });
  return !r.error && r.status === 0;
}

/** The prebuilt for this machine, if the package has one and it loads. */
function usablePrebuilt() {
  const platform = platformName();
  if (platform === undefined) return undefined;
  const file = path.join(__dirname, `headway.${platform}.node`);
  if (!fs.existsSync(file)) return undefined;
  try {
    require(file);
    return file;
  } catch (err) {
    say(`the prebuilt ${path.basename(file)} does not load here (${err.message.split('\n')[0]})`);
    return undefined;
  }
}

function buildFromSource() {
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
    say(`could not run the addon build: ${r.error.message}`);
    return 1;
  }
  return r.status === null ? 1 : r.status;
}

function install() {
  const forced = process.env.HEADWAY_BUILD_FROM_SOURCE === '1';
  if (!forced) {
    const prebuilt = usablePrebuilt();
    if (prebuilt !== undefined) {
      say(`using the prebuilt addon ${path.basename(prebuilt)}`);
      return 0;
    }
  }
  const why = forced
    ? 'HEADWAY_BUILD_FROM_SOURCE=1'
    : `no usable prebuilt addon for ${platformName() ?? `${process.platform}-${process.arch}`}`;
  if (!hasCargo()) {
    say(
      `${why}, and cargo is missing, so the addon cannot be built from source. ` +
        'Install Rust (cargo, from rustup or your system) and install headway again' +
        (forced ? ', or unset HEADWAY_BUILD_FROM_SOURCE to use the prebuilt.' : '.'),
    );
    return 1;
  }
  say(`${why}: building the addon from source with cargo`);
  return buildFromSource();
}

process.exit(process.argv.includes('--install') ? install() : buildFromSource());
