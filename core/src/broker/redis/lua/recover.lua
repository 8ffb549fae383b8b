-- recover: every consumer of the queue whose lease key has expired has its
-- held list moved back to the head of the steps, oldest claim first, marked
-- redelivered, and is forgotten. Answers how many messages went back.
local cs = redis.call('SMEMBERS', base .. 'consumers')
local moved = 0
for _, c in ipairs(cs) do
  if redis.call('EXISTS', base .. 'lease:' .. c) == 0 then
    local held = base .. 'held:' .. c
    local els = redis.call('LRANGE', held, 0, -1)
    for i = 1, #els do
      local s, p = unheld(els[i])
      if p ~= MARK then
        redis.call('RPUSH', base .. 'ready:' .. s, marked(p))
        moved = moved + 1
      end
    end
    redis.call('DEL', held)
    redis.call('SREM', base .. 'consumers', c)
  end
end
return moved
