//! The Lua scripts of the Celery layout. Each runs as one atomic step on the
//! server, where kombu uses a MULTI pipeline or a WATCH transaction.

/// Claims up to `max` envelopes, each moved from its queue list into kombu's
/// `unacked` hash and `unacked_index` sorted set in the same step — kombu
/// does the pop and the hold in two round trips, and a crash between them
/// loses the message; here there is no such gap. An envelope over the size
/// cap is never parsed nor sent to the consumer: it goes to its queue's dead
/// letters ("too large") in the same step, and counts towards `max` as any
/// message taken does.
///
/// KEYS: unacked, unacked_index, then K queue keys in polling order, then
/// the K dead-letter lists they go to (one per queue key).
/// ARGV: max, now (float Unix seconds: the index score, as kombu's
/// `time()`), now (ms, for dead letters), the size cap (bytes), how many
/// dead letters a list keeps, K, K routing keys (one per queue key, used
/// when an envelope lacks `delivery_info.routing_key`), K priority steps
/// (one per queue key), then spare delivery tags for envelopes without one.
/// Returns a flat list: how many went to the dead letters, then key, tag
/// ("" when the envelope could not be read and was left out of `unacked`),
/// raw — three per message.
pub const CLAIM: &str = r#"
local max = tonumber(ARGV[1])
local now = ARGV[2]
local now_ms = ARGV[3]
local cap = tonumber(ARGV[4])
local kept = tonumber(ARGV[5])
local k = tonumber(ARGV[6])
local spare = 7 + 2 * k
local out = {'0'}
local buried = 0
local n = 0
-- The holds are written together at the end, a command per thousand: a
-- call from Lua costs Redis more than the work of one more member.
local scores, fields = {}, {}
for i = 1, k do
  local key = KEYS[2 + i]
  while n < max do
    local raws = redis.call('RPOP', key, max - n)
    if not raws then break end
    for j = 1, #raws do
      local raw = raws[j]
      n = n + 1
      if #raw > cap then
        local dead = KEYS[2 + k + i]
        redis.call('LPUSH', dead, '{"at":' .. now_ms .. ',"reason":"too large: ' .. #raw ..
          ' bytes (the cap is ' .. cap .. ' bytes)","step":' .. ARGV[6 + k + i] .. '}\n' .. raw)
        redis.call('LTRIM', dead, 0, kept - 1)
        buried = buried + 1
      else
        local tag = ''
        local ok, env = pcall(cjson.decode, raw)
        if ok and type(env) == 'table' then
          local ex, rk = '', ARGV[6 + i]
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
            -- The client sends at most 64 fresh tags; past them, the first
            -- with a suffix (nil would drop the message from the reply).
            tag = ARGV[spare] or (ARGV[7 + 2 * k] .. '.' .. spare)
            spare = spare + 1
          end
          scores[#scores + 1] = now
          scores[#scores + 1] = tag
          fields[#fields + 1] = tag
          fields[#fields + 1] = '[' .. raw .. ', ' .. cjson.encode(ex) .. ', ' .. cjson.encode(rk) .. ']'
        end
        out[#out + 1] = key
        out[#out + 1] = tag
        out[#out + 1] = raw
      end
    end
  end
end
for i = 1, #scores, 2000 do
  local last = math.min(i + 1999, #scores)
  redis.call('ZADD', KEYS[2], unpack(scores, i, last))
  redis.call('HSET', KEYS[1], unpack(fields, i, last))
end
out[1] = tostring(buried)
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

/// Re-queues or purges a queue's dead letters in one step. Mode `purge`
/// drops them all and answers how many. Mode `requeue` puts them back,
/// oldest first, at most `limit` — only those whose header names one of the
/// ids, when ids are given — each pushed as its bytes (LPUSH: the back, like
/// a publish) onto the step key its header names (the largest step not
/// above it). Answers how many went back.
///
/// KEYS: the dead-letter list, then the queue's step keys in step order.
/// ARGV: mode, limit, S (the number of steps), S steps, then ids.
pub const DEAD: &str = r#"
local dead = KEYS[1]
if ARGV[1] == 'purge' then
  local n = redis.call('LLEN', dead)
  redis.call('DEL', dead)
  return n
end
local limit = tonumber(ARGV[2])
local ns = tonumber(ARGV[3])
local function key_of(step)
  local k = KEYS[2]
  for j = 1, ns do
    if tonumber(ARGV[3 + j]) <= step then k = KEYS[1 + j] end
  end
  return k
end
-- "<header>\n<bytes>"; anything else is bytes alone.
local function split(el)
  if string.sub(el, 1, 6) == '{"at":' then
    local nl = string.find(el, '\n', 1, true)
    if nl then return string.sub(el, 1, nl - 1), string.sub(el, nl + 1) end
  end
  return '', el
end
local function back(el)
  local head, raw = split(el)
  local s = tonumber(string.match(head, '"step":(%d+)') or '0')
  redis.call('LPUSH', key_of(s), raw)
end
local n = 0
if #ARGV <= 3 + ns then
  while n < limit do
    local el = redis.call('RPOP', dead)
    if not el then break end
    back(el)
    n = n + 1
  end
else
  local want = {}
  for i = 4 + ns, #ARGV do want[ARGV[i]] = true end
  local els = redis.call('LRANGE', dead, 0, -1)
  local keep = {}
  for i = #els, 1, -1 do
    local head = split(els[i])
    local id = string.match(head, '"id":"([^"\\]*)"')
    if n < limit and id and want[id] then
      back(els[i])
      n = n + 1
    else
      keep[#keep + 1] = els[i]
    end
  end
  if n > 0 then
    redis.call('DEL', dead)
    for i = 1, #keep, 1000 do
      redis.call('LPUSH', dead, unpack(keep, i, math.min(i + 999, #keep)))
    end
  end
end
return n
"#;

/// Beat single-fire, the scheme of headway's own layout (`beat.lua`): one
/// beat leads at a time, holding a lease that is only ever renewed or
/// released by its owner (a beat paused past its lease that comes back
/// cannot renew or use a lease another beat took — redbeat#127), and a hash
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
