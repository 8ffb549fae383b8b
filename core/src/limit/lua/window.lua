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
if take then
  redis.call('ZREMRANGEBYSCORE', key, '-inf', limit_exact(horizon))
  if redis.call('ZCARD', key) < allow then
    -- A clock that runs backwards stamps at the newest kept stamp, so the
    -- set stays in order.
    local stamp = now
    local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
    if last[2] ~= nil and tonumber(last[2]) > now then stamp = tonumber(last[2]) end
    local at = limit_exact(stamp)
    local k = redis.call('ZCOUNT', key, at, at)
    redis.call('ZADD', key, at, at .. '.' .. k)
    taken = 1
  end
  if real then
    -- Once the newest event has left, a missing key is the same window.
    redis.call('PEXPIRE', key, math.min(math.ceil(window / 1000) + 1000, 1e12))
  end
end

-- What the in-process window answers without trimming: the events inside
-- (horizon, +inf), and when the oldest one that must leave does.
local total = redis.call('ZCARD', key)
local inside = redis.call('ZCOUNT', key, '(' .. limit_exact(horizon), '+inf')
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
