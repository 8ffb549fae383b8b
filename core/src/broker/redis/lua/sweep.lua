-- sweep: ARGV[1] consumer. Hands back what a cancelled BLMOVE left in the
-- consumer's own held list unstamped (a bare payload): the claim that would
-- have stamped it finds it gone, so it is never delivered twice.
local held = base .. 'held:' .. ARGV[1]
local els = redis.call('LRANGE', held, 0, -1)
local moved = 0
for i = 1, #els do
  if not string.match(els[i], '^%d+:%d:') then
    redis.call('LREM', held, 1, els[i])
    if els[i] ~= MARK then
      redis.call('RPUSH', base .. 'ready:0', els[i])
      moved = moved + 1
    end
  end
end
return moved
