-- Puts one held message back on a queue if its `unacked` entry is still
-- the one read: kombu's `restore_by_tag` (WATCH, HGET, MULTI, ZREM, HDEL,
-- push) as a compare-and-swap.
--
-- KEYS: unacked, unacked_index, the queue key. ARGV: tag, the entry as
-- read, the envelope to push, "l" (LPUSH: the back, for reject-requeue)
-- or "r" (RPUSH: consumed next, for restores).
if not unhold(KEYS[1], KEYS[2], ARGV[1], ARGV[2]) then return 0 end
if ARGV[4] == 'l' then
  redis.call('LPUSH', KEYS[3], ARGV[3])
else
  redis.call('RPUSH', KEYS[3], ARGV[3])
end
return 1
