-- stats: answers {ready count of steps 0..9, delayed, unacked} for a queue.
local out = {}
for s = 0, 9 do
  local key = base .. 'ready:' .. s
  local n = redis.call('LLEN', key)
  if s == 0 and n > 0 then
    n = n - #redis.call('LPOS', key, MARK, 'COUNT', 0)
  end
  out[#out + 1] = n
end
out[#out + 1] = redis.call('ZCARD', base .. 'delayed')
local unacked = 0
for _, c in ipairs(redis.call('SMEMBERS', base .. 'consumers')) do
  unacked = unacked + redis.call('LLEN', base .. 'held:' .. c)
end
out[#out + 1] = unacked
return out
