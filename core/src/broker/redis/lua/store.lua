-- store: KEYS[1] the result key; ARGV "<STATE>|<json>", final (1/0), ttl ms,
-- notify cap (bytes).
-- A stored final state (its first 8 bytes SUCCESS|, FAILURE| or REVOKED|)
-- is never overwritten. A final write publishes on the key's own channel:
-- the value itself when it is at most the cap (a waiter needs no GET), else
-- `1` (a wake-up: the waiter GETs). A refused store publishes nothing, so a
-- published value is always the one the key holds. Answers 1 when written.
local head = redis.call('GETRANGE', KEYS[1], 0, 7)
if head == 'SUCCESS|' or head == 'FAILURE|' or head == 'REVOKED|' then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
if ARGV[2] == '1' then
  if #ARGV[1] <= tonumber(ARGV[4]) then
    redis.call('PUBLISH', KEYS[1], ARGV[1])
  else
    redis.call('PUBLISH', KEYS[1], '1')
  end
end
return 1
