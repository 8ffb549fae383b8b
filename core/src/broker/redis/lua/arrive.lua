-- arrive: ARGV chord key, part id, size, ttl ms, now, then the callback's
-- (step, eta, payload). KEYS[1] is the callback queue's base, so the count
-- and the queue the callback goes to share a slot. Parts are a set: a
-- redelivered part adds nothing. The arrival that completes the set
-- publishes the callback in the same step and leaves only a "sent" mark, so
-- no later arrival can send it again. Answers 2 (sent) or 0 (waiting).
local set = base .. 'chord:' .. ARGV[1]
if redis.call('SISMEMBER', set, '~sent') == 1 then return 0 end
local added = redis.call('SADD', set, ARGV[2])
redis.call('PEXPIRE', set, ARGV[4])
if added == 1 and redis.call('SCARD', set) >= tonumber(ARGV[3]) then
  redis.call('DEL', set)
  redis.call('SADD', set, '~sent')
  redis.call('PEXPIRE', set, ARGV[4])
  if put(clock(ARGV[5]), ARGV[6], ARGV[7], ARGV[8]) > 0 then ring() end
  return 2
end
return 0
