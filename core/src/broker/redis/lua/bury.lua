-- bury: ARGV consumer, then (held element, dead letter) pairs. Moves claims
-- that did not decode from the consumer's held list to the dead letters, in
-- one step; fenced like a settle: an element no longer held (recovered) is
-- left alone. Answers how many were moved.
local held = base .. 'held:' .. ARGV[1]
local dead = base .. 'dead'
local n = 0
for i = 2, #ARGV, 2 do
  if redis.call('LREM', held, 1, ARGV[i]) == 1 then
    redis.call('LPUSH', dead, ARGV[i + 1])
    n = n + 1
  end
end
if n > 0 then redis.call('LTRIM', dead, 0, DEAD_KEPT - 1) end
return n
