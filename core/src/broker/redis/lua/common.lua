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
-- The id headway's own JSON opens with, when it is there. The common id
-- (no quote, no backslash) is read by one pattern; one with escapes is
-- scanned (its first 1 KiB only) and decoded by cjson, so `"` and `\` in an
-- id come out as they went in.
local function peek_id(p)
  local id = string.match(p, '^{"id":"([^"\\]*)"')
  if id or string.sub(p, 1, 7) ~= '{"id":"' then return id end
  local i, n = 8, math.min(#p, 1031)
  while i <= n do
    local c = string.byte(p, i)
    if c == 92 then
      i = i + 2
    elseif c == 34 then
      local ok, v = pcall(cjson.decode, string.sub(p, 7, i))
      if ok and type(v) == 'string' then return v end
      return nil
    else
      i = i + 1
    end
  end
  return nil
end
-- Dead letters: "<header JSON>\n<bytes>", newest at the head, capped. The
-- header opens with `{"at":` (how a letter with a header is told from one
-- kept before headers were); its strings (reason, id) are cjson-encoded,
-- never pasted in. A quarantined message (not `whole`) keeps only its first
-- DEAD_PREFIX bytes (the Rust DEAD_PREFIX_BYTES) and its size: a 50 MB
-- message refused for its size must not stay 50 MB in Redis. A poison pill
-- (`whole`, a message within the cap) is kept whole, to be re-queued.
local DEAD_KEPT = 10000
local DEAD_PREFIX = 65536
local function bury(now, step, raw, reason, id, whole)
  local size = #raw
  local head = '{"at":' .. now .. ',"reason":' .. cjson.encode(reason)
    .. ',"step":' .. step .. ',"size":' .. size
  if id then head = head .. ',"id":' .. cjson.encode(id) end
  if not whole and size > DEAD_PREFIX then raw = string.sub(raw, 1, DEAD_PREFIX) end
  local dead = base .. 'dead'
  redis.call('LPUSH', dead, head .. '}\n' .. raw)
  redis.call('LTRIM', dead, 0, DEAD_KEPT - 1)
end
