'use strict';
// Loads the native addon, once, for every file of lib/.
//
// Two files can hold it. `headway.node` is a source build (`npm run build`,
// or an install that built from source); `headway.<platform>.node` (for
// example `headway.linux-x64-gnu.node`) is the prebuilt shipped in the npm
// package. A source build wins: it exists only where someone built one, on
// purpose or because no prebuilt fitted (see build.js).
const path = require('node:path');

const { platformName } = require('./platform.js');

function tryRequire(file) {
  try {
    return require(file);
  } catch (err) {
    // Only "no such file" moves on: a file that exists but does not load
    // (wrong libc, a broken build) is reported as it is.
    if (err && err.code === 'MODULE_NOT_FOUND' && String(err.message).includes(file.slice(2))) {
      return undefined;
    }
    throw err;
  }
}

function load() {
  const tried = ['./headway.node'];
  const built = tryRequire(tried[0]);
  if (built !== undefined) return built;
  // Only now: naming the platform reads the process report (glibc or musl).
  const platform = platformName();
  if (platform !== undefined) {
    tried.push(`./headway.${platform}.node`);
    const prebuilt = tryRequire(tried[1]);
    if (prebuilt !== undefined) return prebuilt;
  }
  const err = new Error(
    `headway: the native addon is not built: neither ${tried
      .map((f) => path.join(__dirname, f))
      .join(' nor ')} exists. An install uses the prebuilt for linux-x64 (glibc) ` +
      'or builds from source when cargo is on PATH; run `npm rebuild headway` (or ' +
      '`npm run build` in a checkout) where npm skipped the install script.',
  );
  err.code = 'MODULE_NOT_FOUND';
  throw err;
}

module.exports = load();
