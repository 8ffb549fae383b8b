// ESM entry: the same objects as the CommonJS entry (one addon, one state).
// Node reads the names from index.js's `module.exports = { ... }`.
export * from './index.js';
export { default } from './index.js';
