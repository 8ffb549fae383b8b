-- Re-queues or purges a queue's dead letters in one step. Mode `purge`
-- drops them all and answers how many. Mode `requeue` puts them back,
-- oldest first, at most `limit` — only those whose header names one of the
-- ids, when ids are given — each pushed as its bytes (LPUSH: the back, like
-- a publish) onto the step key its header names (the largest step not
-- above it). A letter kept as a prefix only stays. Answers how many went
-- back. The walk over the list is the shared dead-letter piece's
-- (`dead_requeue`).
--
-- KEYS: the dead-letter list, then the queue's step keys in step order.
-- ARGV: mode, limit, S (the number of steps), S steps, then ids.
local dead = KEYS[1]
if ARGV[1] == 'purge' then return dead_purge(dead) end
local ns = tonumber(ARGV[3])
local function key_of(step)
  local k = KEYS[2]
  for j = 1, ns do
    if tonumber(ARGV[3 + j]) <= step then k = KEYS[1 + j] end
  end
  return k
end
return dead_requeue(dead, tonumber(ARGV[2]), dead_wanted(4 + ns), function(h, raw)
  redis.call('LPUSH', key_of(tonumber(h.step) or 0), raw)
end)
