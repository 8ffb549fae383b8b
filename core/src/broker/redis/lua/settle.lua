-- settle: ARGV consumer, held element, mode, now, then for mode 'retry' the
-- next attempt's (step, eta, payload). mode 'ack' drops the claim; 'requeue'
-- puts it back at the head of its step, marked redelivered; 'drop' discards;
-- 'retry' publishes the next attempt in the claim's place. Fenced: if the
-- exact element (its token) is no longer held — it was recovered — nothing
-- happens and the answer is 0.
local held = base .. 'held:' .. ARGV[1]
local el = ARGV[2]
local mode = ARGV[3]
-- From the tail, where the oldest claims are (elements are unique).
if redis.call('LREM', held, -1, el) == 0 then return 0 end
if mode == 'requeue' then
  local s, p = unheld(el)
  if p ~= MARK then redis.call('RPUSH', base .. 'ready:' .. s, (marked(p, 0))) end
elseif mode == 'retry' then
  if put(clock(ARGV[4]), ARGV[5], ARGV[6], ARGV[7]) > 0 then ring() end
end
return 1
