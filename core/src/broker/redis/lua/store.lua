-- store: KEYS[1] the result key; ARGV "<STATE>|<json>", final (1/0), ttl ms.
-- A stored final state (its first 8 bytes SUCCESS|, FAILURE| or REVOKED|)
-- is never overwritten. A final store publishes on the key's own channel,
-- waking waiters. Answers 1 when written.
local head = redis.call('GETRANGE', KEYS[1], 0, 7)
if head == 'SUCCESS|' or head == 'FAILURE|' or head == 'REVOKED|' then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
if ARGV[2] == '1' then redis.call('PUBLISH', KEYS[1], '1') end
return 1
