//! The Lua scripts of the Celery layout. Each runs as one atomic step on the
//! server, where kombu uses a MULTI pipeline or a WATCH transaction.

/// Claims up to `max` envelopes, each moved from its queue list into kombu's
/// `unacked` hash and `unacked_index` sorted set in the same step — kombu
/// does the pop and the hold in two round trips, and a crash between them
/// loses the message; here there is no such gap.
///
/// KEYS: unacked, unacked_index, then the queue keys in polling order.
/// ARGV: max, now (float Unix seconds: the index score, as kombu's
/// `time()`), K (the number of queue keys), K routing keys (one per queue
/// key, used when an envelope lacks `delivery_info.routing_key`), then spare
/// delivery tags for envelopes without one.
/// Returns a flat list: key, tag ("" when the envelope could not be read
/// and was left out of `unacked`), raw — three per message.
pub const CLAIM: &str = r#"
local max = tonumber(ARGV[1])
local now = ARGV[2]
local k = tonumber(ARGV[3])
local spare = 4 + k
local out = {}
local n = 0
for i = 3, #KEYS do
  while n < max do
    local raw = redis.call('RPOP', KEYS[i])
    if not raw then break end
    n = n + 1
    local tag = ''
    local ok, env = pcall(cjson.decode, raw)
    if ok and type(env) == 'table' then
      local ex, rk = '', ARGV[3 + i - 2]
      local p = env['properties']
      if type(p) == 'table' then
        if type(p['delivery_tag']) == 'string' then tag = p['delivery_tag'] end
        local di = p['delivery_info']
        if type(di) == 'table' then
          if type(di['exchange']) == 'string' then ex = di['exchange'] end
          if type(di['routing_key']) == 'string' then rk = di['routing_key'] end
        end
      end
      if tag == '' then
        tag = ARGV[spare]
        spare = spare + 1
      end
      redis.call('ZADD', KEYS[2], now, tag)
      redis.call('HSET', KEYS[1], tag, '[' .. raw .. ', ' .. cjson.encode(ex) .. ', ' .. cjson.encode(rk) .. ']')
    end
    out[#out + 1] = KEYS[i]
    out[#out + 1] = tag
    out[#out + 1] = raw
  end
end
return out
"#;

/// Holds one envelope a BRPOP returned: kombu's `QoS.append`.
///
/// KEYS: unacked, unacked_index. ARGV: now, raw, spare tag, routing key.
/// Returns the tag, or "" when the envelope could not be read.
pub const HOLD: &str = r#"
local ok, env = pcall(cjson.decode, ARGV[2])
if not ok or type(env) ~= 'table' then return '' end
local tag, ex, rk = ARGV[3], '', ARGV[4]
local p = env['properties']
if type(p) == 'table' then
  if type(p['delivery_tag']) == 'string' then tag = p['delivery_tag'] end
  local di = p['delivery_info']
  if type(di) == 'table' then
    if type(di['exchange']) == 'string' then ex = di['exchange'] end
    if type(di['routing_key']) == 'string' then rk = di['routing_key'] end
  end
end
redis.call('ZADD', KEYS[2], ARGV[1], tag)
redis.call('HSET', KEYS[1], tag, '[' .. ARGV[2] .. ', ' .. cjson.encode(ex) .. ', ' .. cjson.encode(rk) .. ']')
return tag
"#;

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

/// Stores a result unless a final one is stored, and publishes it on the
/// key's own channel (Celery's `_store_result` + `_set`: GET, then SETEX +
/// PUBLISH). Celery protects only SUCCESS; headway protects every final
/// state (SUCCESS, FAILURE, REVOKED), which is a subset of what Celery
/// would write.
///
/// KEYS: the meta key. ARGV: the meta, expiry seconds (0: none).
/// Returns 1 when stored.
pub const STORE: &str = r#"
local cur = redis.call('GET', KEYS[1])
if cur then
  local ok, d = pcall(cjson.decode, cur)
  if ok and type(d) == 'table' then
    local s = d['status']
    if s == 'SUCCESS' or s == 'FAILURE' or s == 'REVOKED' then return 0 end
  end
end
local ex = tonumber(ARGV[2])
if ex > 0 then
  redis.call('SETEX', KEYS[1], ex, ARGV[1])
else
  redis.call('SET', KEYS[1], ARGV[1])
end
redis.call('PUBLISH', KEYS[1], ARGV[1])
return 1
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
