-- A sliding window (flow::Window's rules) kept in the sorted set KEYS[1]:
-- one member per event inside the window, scored by its stamp
-- (microseconds). Members are `<stamp>.<k>`, k counting the events already
-- at that stamp: events at one stamp are trimmed together, so a name is
-- never reused while its namesake is kept.
--
-- ARGV: allow, window (microseconds), take ('1' counts an event, '0' only
-- looks), now (microseconds; '' reads Redis TIME).
-- Answers {taken (0/1), wait, left}: `wait` the microseconds until there
-- is room after this call (-1: never), `left` how many events remain.
-- Every number sent to Redis goes as limit_exact text: a Lua number is
-- sent with 14 digits, and a stamp has 16.
local key = KEYS[1]
local allow = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local take = ARGV[3] == '1'
local now, real = limit_now(ARGV[4])
local horizon = now - window

local taken = 0
local total, inside
if take then
  redis.call('ZREMRANGEBYSCORE', key, '-inf', limit_exact(horizon))
  -- Trimmed at the horizon: every event kept is inside.
  local card = redis.call('ZCARD', key)
  if card < allow then
    -- A clock that runs backwards stamps at the newest kept stamp, so the
    -- set stays in order.
    local stamp = now
    local k = 0
    local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    if last[2] ~= nil then
      local newest = tonumber(last[2])
      if newest > now then stamp = newest end
      if newest == stamp then k = -1 end
    end
    local at = limit_exact(stamp)
    -- Events already at this stamp (only when the newest one is).
    if k < 0 then k = redis.call('ZCOUNT', key, at, at) end
    redis.call('ZADD', key, at, at .. '.' .. k)
    card = card + 1
    taken = 1
  end
  if real then
    -- Once the newest event has left, a missing key is the same window.
    redis.call('PEXPIRE', key, math.min(math.ceil(window / 1000) + 1000, 1e12))
  end
  total, inside = card, card
else
  -- A look trims nothing (as the in-process window's): the events inside
  -- (horizon, +inf) are counted where they are.
  total = redis.call('ZCARD', key)
  inside = redis.call('ZCOUNT', key, '(' .. limit_exact(horizon), '+inf')
end

-- When the oldest event that must leave for there to be room does.
local left = allow - math.min(inside, allow)
local wait
if inside < allow then
  wait = 0
elseif allow == 0 then
  wait = -1
else
  local oldest = redis.call('ZRANGE', key, total - allow, total - allow, 'WITHSCORES')
  wait = tonumber(oldest[2]) + window - now
end
return {taken, wait, left}
