-- A token bucket (flow::Bucket's rules) kept in the hash KEYS[1]:
-- `t` tokens as of `a` (microseconds). A missing key is a full bucket.
--
-- ARGV: per_ns (tokens per nanosecond), burst, n, take ('1' takes, '0'
-- only looks), now (microseconds; '' reads Redis TIME).
-- Answers {taken (0/1), wait, level}: `wait` the nanoseconds until `n`
-- tokens are there after this call (as text; 'inf' never), `level` the
-- tokens there after it (as text).
--
-- `a` is whole microseconds (Redis TIME, or a test's `now`), written as
-- an integer: cheaper than the exact float text `t` needs.
--
-- Every float step is the in-process bucket's, in its order, on
-- nanosecond spans: (now - at) * 1000 is exact, so a shared bucket and an
-- in-process one told the same times give the same answers to the bit.
local key = KEYS[1]
local per_ns = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local take = ARGV[4] == '1'
local now, real = limit_now(ARGV[5])

local kept = redis.call('HMGET', key, 't', 'a')
local tokens, at = tonumber(kept[1]), tonumber(kept[2])
if tokens == nil or at == nil then
  tokens, at = burst, now
end

-- The level at `now` (written out rather than as a function: a function
-- is made again on every call, and this script runs on every take).
local level = tokens
if now > at then
  level = tokens + ((now - at) * 1000) * per_ns
  if level > burst then level = burst end
end
local taken = 0
if take then
  if now > at then
    tokens = level
    at = now
  end
  if level >= n then
    tokens = level - n
    level = tokens
    taken = 1
  end
  redis.call('HSET', key, 't', limit_exact(tokens), 'a', string.format('%d', at))
  if real then
    if per_ns > 0 then
      -- Once full the key says nothing a missing key does not: let it go
      -- a second after it would be full.
      local full_ms = math.ceil((burst - tokens) / per_ns / 1000000)
      redis.call('PEXPIRE', key, math.min(full_ms + 1000, 1e12))
    else
      redis.call('PERSIST', key)
    end
  end
end

local wait
if level >= n then
  wait = '0'
elseif n > burst or per_ns <= 0 then
  wait = 'inf'
else
  -- Rounded up, so that sleeping exactly this long is enough.
  wait = limit_exact(math.ceil((n - level) / per_ns))
end
return {taken, wait, limit_exact(level)}
