-- A concurrency gate (flow::Gate's rules) whose room is held by leases:
-- the sorted set KEYS[1] holds one member per permit, scored by the
-- instant (microseconds) its lease ends. A permit past its end is not
-- held: a crashed holder's room comes back when its lease runs out.
--
-- ARGV: op, limit, lease (microseconds), permit, now (microseconds; ''
-- reads Redis TIME).
-- - 'take':    {1, held} and the permit is in, or {0, held}.
-- - 'release': {1, held} when the permit was held (it no longer is), else
--              {0, held}. Releasing twice gives back nothing the second time.
-- - 'renew':   {1, held} and the permit's lease starts again, when it was
--              still held; else {0, held}.
-- - 'held':    {0, held}.
-- Every answer also carries `soonest`: the microseconds until the earliest
-- lease ends (-1: none held), what a full gate's caller may wait.
local key = KEYS[1]
local op = ARGV[1]
local limit = tonumber(ARGV[2])
local lease = tonumber(ARGV[3])
local permit = ARGV[4]
local now, real = limit_now(ARGV[5])

-- Leases that ended are gone, whatever the op.
redis.call('ZREMRANGEBYSCORE', key, '-inf', limit_exact(now))

local function extend()
  if real then
    local ms = math.min(math.ceil(lease / 1000) + 1000, 1e12)
    if redis.call('PTTL', key) < ms then redis.call('PEXPIRE', key, ms) end
  end
end

local ok = 0
if op == 'take' then
  if redis.call('ZCARD', key) < limit then
    redis.call('ZADD', key, limit_exact(now + lease), permit)
    extend()
    ok = 1
  end
elseif op == 'release' then
  ok = redis.call('ZREM', key, permit)
elseif op == 'renew' then
  if redis.call('ZSCORE', key, permit) then
    redis.call('ZADD', key, 'XX', limit_exact(now + lease), permit)
    extend()
    ok = 1
  end
end

local held = redis.call('ZCARD', key)
local soonest = -1
if held > 0 then
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  soonest = tonumber(first[2]) - now
end
return {ok, held, soonest}
