-- recover: ARGV max deliveries, now ('' = TIME), the caller's own consumer
-- name (never recovered: it is alive, it is running this). Every other
-- consumer of the queue whose lease key has expired, in name order, has its
-- held list moved back
-- to the head of the steps, oldest claim first, marked redelivered with one
-- more lost consumer, and is forgotten. A message lost with its consumer
-- `max deliveries` times goes to the dead letters instead ("worker lost ×N"):
-- a poison pill that kills every worker that runs it does not loop for ever.
-- Answers how many messages went back (not counting the dead).
local max = tonumber(ARGV[1]) or 3
local now = nil
local cs = redis.call('SMEMBERS', base .. 'consumers')
table.sort(cs)
local moved = 0
for _, c in ipairs(cs) do
  if c ~= ARGV[3] and redis.call('EXISTS', base .. 'lease:' .. c) == 0 then
    local held = base .. 'held:' .. c
    local els = redis.call('LRANGE', held, 0, -1)
    for i = 1, #els do
      local s, p = unheld(els[i])
      if p ~= MARK then
        local m, n = marked(p, 1)
        if n >= max then
          now = now or clock(ARGV[2])
          local _, body = unmark(p)
          bury(now, s, body, 'worker lost \195\151' .. n, peek_id(body), true)
        else
          redis.call('RPUSH', base .. 'ready:' .. s, m)
          moved = moved + 1
        end
      end
    end
    redis.call('DEL', held)
    redis.call('SREM', base .. 'consumers', c)
  end
end
return moved
