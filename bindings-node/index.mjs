// ESM entry: the same objects as the CommonJS entry (one addon, one state).
import headway from './index.js';

export const { Limits, Pool, Ward, Breaker, pick, Backoff, Bucket, Window, Gate, retry, Pooled, version } = headway;
export default headway;
