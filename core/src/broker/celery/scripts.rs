//! The Lua scripts of the Celery layout. Each runs as one atomic step on the
//! server, where kombu uses a MULTI pipeline or a WATCH transaction.

/// Puts one held message back on a queue if its `unacked` entry is still
/// the one read: kombu's `restore_by_tag` (WATCH, HGET, MULTI, ZREM, HDEL,
/// push) as a compare-and-swap.
///
/// KEYS: unacked, unacked_index, the queue key. ARGV: tag, the entry as
/// read, the envelope to push, "l" (LPUSH: the back, for reject-requeue)
/// or "r" (RPUSH: consumed next, for restores).
pub const RESTORE: &str = r#"
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[1], ARGV[1])
if ARGV[4] == 'l' then
  redis.call('LPUSH', KEYS[3], ARGV[3])
else
  redis.call('RPUSH', KEYS[3], ARGV[3])
end
return 1
"#;

/// Re-scores the `unacked_index` entries a live consumer holds, so no
/// `restore_visible` (Celery's or headway's) takes them while it lives.
///
/// KEYS: unacked_index. ARGV: now, then tags. Returns the tags that were
/// gone (restored by someone else, or acked).
pub const RESCORE: &str = r#"
local gone = {}
for i = 2, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    redis.call('ZADD', KEYS[1], 'XX', ARGV[1], ARGV[i])
  else
    gone[#gone + 1] = ARGV[i]
  end
end
return gone
"#;

/// Releases the `unacked_mutex` only if this caller still owns it (what
/// redis-py's `Lock.release` does).
///
/// KEYS: unacked_mutex. ARGV: token.
pub const UNLOCK: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"#;

/// Stores results unless a final one is stored, and publishes each on its
/// key's own channel (Celery's `_store_result` + `_set`: GET, then SETEX +
/// PUBLISH). Celery protects only SUCCESS; headway protects every final
/// state (SUCCESS, FAILURE, REVOKED), which is a subset of what Celery
/// would write. One call stores a whole round's results: a script call
/// costs Redis more than the three commands inside it (a drain of 20 000
/// spent ~16 µs of Redis CPU per result with one call each).
///
/// KEYS: the meta keys. ARGV: expiry seconds (0: none), then one meta per
/// key. Returns how many were stored.
pub const STORE: &str = r#"
local ex = tonumber(ARGV[1])
local stored = 0
for i = 1, #KEYS do
  local key, meta = KEYS[i], ARGV[i + 1]
  local final = false
  local cur = redis.call('GET', key)
  if cur then
    local ok, d = pcall(cjson.decode, cur)
    if ok and type(d) == 'table' then
      local s = d['status']
      final = s == 'SUCCESS' or s == 'FAILURE' or s == 'REVOKED'
    end
  end
  if not final then
    if ex > 0 then
      redis.call('SETEX', key, ex, meta)
    else
      redis.call('SET', key, meta)
    end
    redis.call('PUBLISH', key, meta)
    stored = stored + 1
  end
end
return stored
"#;

/// A chord part's arrival: Celery's `on_chord_part_return` pipeline (ZADD
/// the member at its group index, ZCOUNT, GET `.t`, GET `.s`, EXPIRE all
/// three) in one step. Answers `{fresh, count, total}` and, when this fresh
/// member completed the count, every member in group-index order after them.
///
/// KEYS: .j, .t, .s. ARGV: member, score, expiry seconds (0: none).
pub const ARRIVE: &str = r#"
local fresh = redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
local count = redis.call('ZCOUNT', KEYS[1], '-inf', '+inf')
local t = redis.call('GET', KEYS[2])
local s = redis.call('GET', KEYS[3])
local ex = tonumber(ARGV[3])
if ex > 0 then
  redis.call('EXPIRE', KEYS[1], ex)
  redis.call('EXPIRE', KEYS[2], ex)
  redis.call('EXPIRE', KEYS[3], ex)
end
if not s then return {fresh, count, -1} end
local total = tonumber(s) + tonumber(t or '0')
local out = {fresh, count, total}
if fresh == 1 and count == total then
  local members = redis.call('ZRANGE', KEYS[1], 0, -1)
  for i = 1, #members do out[#out + 1] = members[i] end
end
return out
"#;

/// Sends a chord's callback and closes the chord in one step, only if the
/// chord is still open (`.s` exists): the first of two racing finishers
/// sends it, and one that crashed before this step leaves the chord open
/// for a redelivered part to finish.
///
/// KEYS: .j, .t, .s, the callback's queue key. ARGV: the envelope.
pub const FIRE: &str = r#"
if redis.call('EXISTS', KEYS[3]) == 0 then return 0 end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
redis.call('LPUSH', KEYS[4], ARGV[1])
return 1
"#;

/// Moves one message to a dead-letter list: quarantine and poison pills.
/// With a tag, only if its `unacked` entry is still there (and, when
/// given, still the one read: a compare-and-swap like [`RESTORE`]), taking
/// it out of `unacked` and the index in the same step; without one (bytes
/// that never reached `unacked`), just the push.
///
/// KEYS: unacked, unacked_index, the dead-letter list. ARGV: tag ("" for
/// none), the entry as read ("" to check presence only), the dead letter,
/// how many the list keeps. Returns 1 when moved.
pub const BURY: &str = r#"
if ARGV[1] ~= '' then
  if ARGV[2] ~= '' and redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
  if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
  redis.call('ZREM', KEYS[2], ARGV[1])
end
redis.call('LPUSH', KEYS[3], ARGV[3])
redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[4]) - 1)
return 1
"#;

/// Beat single-fire, the scheme of headway's own layout (`beat.lua`): one
/// beat leads at a time, holding a lease that is only ever renewed or
/// released by its owner (a beat paused past its lease that comes back
/// cannot renew or use a lease another beat took, as RedBeat's could), and a hash
/// keeps the latest due fired per entry, so a slot at or before it is
/// refused whoever asks.
///
/// KEYS: the lease, the fired hash. ARGV: owner, entry, due, lease ms, mode.
/// Mode `claim`: 1 granted (this beat leads and nothing at or after due was
/// fired), 0 refused for good (fired already), 2 another beat leads (ask
/// again until it fires the slot or its lease lapses). `renew` / `release`:
/// 1 when this beat held the lease.
pub const BEAT: &str = r#"
local owner = ARGV[1]
local mode = ARGV[5]
local cur = redis.call('GET', KEYS[1])
if mode == 'renew' then
  if cur == owner then
    redis.call('PEXPIRE', KEYS[1], ARGV[4])
    return 1
  end
  return 0
elseif mode == 'release' then
  if cur == owner then
    redis.call('DEL', KEYS[1])
    return 1
  end
  return 0
end
local last = redis.call('HGET', KEYS[2], ARGV[2])
if last and tonumber(last) >= tonumber(ARGV[3]) then return 0 end
if cur and cur ~= owner then return 2 end
redis.call('SET', KEYS[1], owner, 'PX', ARGV[4])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
return 1
"#;
