'use strict';
// The name of this machine's prebuilt addon, in napi-rs's naming:
// `<platform>-<arch>[-<abi>]`, e.g. `linux-x64-gnu`. Shared by addon.js
// (which file to load) and build.js (which file to build and look for).

function linuxLibc() {
  // glibc reports its version in the process report; musl leaves it out.
  const report = typeof process.report?.getReport === 'function' ? process.report.getReport() : undefined;
  return report && report.header && report.header.glibcVersionRuntime ? 'gnu' : 'musl';
}

function platformName() {
  const { platform, arch } = process;
  if (platform === 'linux') return `linux-${arch}-${linuxLibc()}`;
  if (platform === 'darwin' || platform === 'win32' || platform === 'freebsd') return `${platform}-${arch}`;
  return undefined;
}

module.exports = { platformName };
