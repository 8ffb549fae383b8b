-- Re-scores the `unacked_index` entries a live consumer holds, so no
-- `restore_visible` (Celery's or headway's) takes them while it lives.
--
-- KEYS: unacked_index. ARGV: now, then tags. Returns the tags that were
-- gone (restored by someone else, or acked).
local gone = {}
for i = 2, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    redis.call('ZADD', KEYS[1], 'XX', ARGV[1], ARGV[i])
  else
    gone[#gone + 1] = ARGV[i]
  end
end
return gone
