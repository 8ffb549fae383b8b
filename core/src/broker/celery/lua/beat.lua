-- Beat single-fire, the scheme of headway's own layout (its beat.lua): one
-- beat leads at a time, holding a lease that is only ever renewed or
-- released by its owner (a beat paused past its lease that comes back
-- cannot renew or use a lease another beat took), and a hash keeps the
-- latest due fired per entry, so a slot at or before it is refused
-- whoever asks.
--
-- KEYS: the lease, the fired hash. ARGV: owner, entry, due, lease ms, mode.
-- Mode `claim`: 1 granted (this beat leads and nothing at or after due was
-- fired), 0 refused for good (fired already), 2 another beat leads (ask
-- again until it fires the slot or its lease lapses). `renew` / `release`:
-- 1 when this beat held the lease.
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
