-- store: KEYS the result keys, one per outcome; ARGV ttl ms, notify cap
-- (bytes), then for each key "<STATE>|<json>" and final (1/0).
-- One call stores a whole round's results: a script call costs Redis more
-- than the few commands inside it, so one per result was the largest cost
-- of a drain (docs/redis-layout.md).
-- A stored final state (its first 8 bytes SUCCESS|, FAILURE| or REVOKED|)
-- is never overwritten. A final write publishes on the key's own channel:
-- the value itself when it is at most the cap (a waiter needs no GET), else
-- `1` (a wake-up: the waiter GETs). A refused store publishes nothing, so a
-- published value is always the one the key holds. Answers one flag per
-- key: 1 written, 0 refused.
local ttl = ARGV[1]
local cap = tonumber(ARGV[2])
local out = {}
for i = 1, #KEYS do
  local key = KEYS[i]
  local value = ARGV[2 * i + 1]
  local head = redis.call('GETRANGE', key, 0, 7)
  if head == 'SUCCESS|' or head == 'FAILURE|' or head == 'REVOKED|' then
    out[i] = 0
  else
    redis.call('SET', key, value, 'PX', ttl)
    if ARGV[2 * i + 2] == '1' then
      if #value <= cap then
        redis.call('PUBLISH', key, value)
      else
        redis.call('PUBLISH', key, '1')
      end
    end
    out[i] = 1
  end
end
return out
