-- Shared prologue (prepended to every queue script by the Rust side).
-- KEYS[1] is the queue's base, "<prefix>{<queue>}:", so every key a script
-- touches shares the queue's Cluster slot. `now` is ms since the epoch: the
-- app's virtual time when one is passed, else Redis TIME, so no worker's
-- clock decides when a delayed message is due.
local base = KEYS[1]
local function clock(arg)
  local n = tonumber(arg)
  if n then return n end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local MARK = '~'
-- Pushes one payload onto its step (LPUSH: the tail; claims pop the head,
-- RPOP) or into the delayed set when its eta is later than now. Returns 1
-- when it went to the delayed set or a lower step, so the caller rings.
local function put(now, step, eta, payload)
  local e = tonumber(eta)
  if e and e > now then
    -- Zero-padded, so members due at the same time sort in publish order.
    local n = string.format('%015d', redis.call('INCR', base .. 'seq'))
    redis.call('ZADD', base .. 'delayed', e, step .. ':' .. n .. ':' .. payload)
    return 1
  end
  redis.call('LPUSH', base .. 'ready:' .. step, payload)
  if step ~= '0' then return 1 end
  return 0
end
-- A consumer blocked in BLMOVE waits on step 0 only: a marker there wakes it
-- for work on another step or a new eta. One is enough, and only on an
-- empty list (a consumer blocks only when step 0 is empty).
local function ring()
  local r0 = base .. 'ready:0'
  if redis.call('LLEN', r0) == 0 then redis.call('RPUSH', r0, MARK) end
end
-- A held element is "<token>:<step>:<payload>"; one BLMOVE moved in and not
-- yet stamped is the bare payload (step 0). Answers step, payload.
local function unheld(el)
  local s, p = string.match(el, '^%d+:(%d):(.*)$')
  if s then return s, p end
  return '0', el
end
-- A payload handed out before (requeued, recovered) is marked "!<n>!"
-- before its bytes, n the times a consumer was lost holding it. Answers n
-- (0 when unmarked) and the bytes.
local function unmark(p)
  local n, rest = string.match(p, '^!(%d+)!(.*)$')
  if n then return tonumber(n), rest end
  -- "!{" is the mark as it was before the count (0 lost).
  if string.sub(p, 1, 2) == '!{' then return 0, string.sub(p, 2) end
  return 0, p
end
-- The redelivered form of a payload, with `add` more lost consumers.
-- Answers the marked payload and its new count.
local function marked(p, add)
  local n, rest = unmark(p)
  n = n + add
  return '!' .. n .. '!' .. rest, n
end
-- The id headway's own JSON opens with, when it is there (an id with a quote
-- or a backslash is not read: the dead letter then has none).
local function peek_id(p)
  return string.match(p, '^{"id":"([^"\\]*)"')
end
-- Dead letters: "<header JSON>\n<bytes>", newest at the head, capped. The
-- reason is written by headway's scripts only (no quote or backslash in it).
local DEAD_KEPT = 10000
local function bury(now, step, raw, reason, id)
  local head = '{"at":' .. now .. ',"reason":"' .. reason .. '","step":' .. step
  if id then head = head .. ',"id":"' .. id .. '"' end
  local dead = base .. 'dead'
  redis.call('LPUSH', dead, head .. '}\n' .. raw)
  redis.call('LTRIM', dead, 0, DEAD_KEPT - 1)
end
