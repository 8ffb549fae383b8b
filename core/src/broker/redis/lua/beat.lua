-- beat: KEYS[1] is "<prefix>{beat}:beat:". ARGV owner, entry, due, lease ms,
-- mode. One beat at a time leads (the lease, always owner-checked: a beat
-- that was paused past its lease and comes back cannot renew or use a lease
-- another beat took, as RedBeat's could), and each entry's slots fire once and in
-- order (`fired` holds the latest due fired per entry: a slot at or before
-- it was fired already, by this beat or another).
-- mode 'claim': 1 granted (this beat leads and fired nothing at or after
-- due), 0 refused for good (fired already), 2 another beat leads (ask again
-- until it fires the slot or its lease lapses). 'renew' / 'release': 1 when
-- this beat held the lease.
local lease = base .. 'lease'
local owner = ARGV[1]
local mode = ARGV[5]
local cur = redis.call('GET', lease)
if mode == 'renew' then
  if cur == owner then
    redis.call('PEXPIRE', lease, ARGV[4])
    return 1
  end
  return 0
elseif mode == 'release' then
  if cur == owner then
    redis.call('DEL', lease)
    return 1
  end
  return 0
end
local fired = base .. 'fired'
local last = redis.call('HGET', fired, ARGV[2])
if last and tonumber(last) >= tonumber(ARGV[3]) then return 0 end
if cur and cur ~= owner then return 2 end
redis.call('SET', lease, owner, 'PX', ARGV[4])
redis.call('HSET', fired, ARGV[2], ARGV[3])
return 1
