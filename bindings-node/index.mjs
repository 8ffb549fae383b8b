// ESM entry: the same objects as the CommonJS entry (one addon, one state).
import headway from './index.js';

export const { Limits, Pool, Ward, Breaker, pick, Backoff, Bucket, Window, Gate, retry, Pooled, version } = headway;
export const {
  App,
  Task,
  Handle,
  Worker,
  Beat,
  Signature,
  Context,
  RedisBroker,
  chain,
  group,
  chord,
  Fixed,
  Exponential,
  Every,
  Cron,
  At,
  Scheduler,
  schedule,
  testing,
  admin,
} = headway;
export default headway;
