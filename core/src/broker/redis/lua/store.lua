-- store: KEYS the result keys, one per outcome; ARGV ttl ms, notify cap
-- (bytes), then for each key "<STATE>|<json>", final (1/0), and its run's
-- late ack: the held list and the exact held element ('' '' for none).
-- One call stores a whole round's results: a script call costs Redis more
-- than the few commands inside it, so one per result was the largest cost
-- of a drain (docs/redis-layout.md).
-- A stored final state (its first 8 bytes SUCCESS|, FAILURE| or REVOKED|)
-- is never overwritten. A final write publishes on the key's own channel:
-- the value itself when it is at most the cap (a waiter needs no GET), else
-- `1` (a wake-up: the waiter GETs). A refused store publishes nothing, so a
-- published value is always the one the key holds.
-- A late ack is made here, after its result is stored (or found final
-- already), never when the store failed: a key Redis will not write (it
-- holds another type: WRONGTYPE) leaves its run's claim held, and the other
-- keys of the round are stored and acked all the same (redis.pcall: one
-- bad key does not abort the script). The held lists are not among KEYS:
-- standalone Redis, as the claim script's revoked read.
-- Answers one flag per key: 1 written, 0 refused (final already), or the
-- error Redis gave for that key (a string: not stored, not acked).
local ttl = ARGV[1]
local cap = tonumber(ARGV[2])
local out = {}
local function failed(r)
  return type(r) == 'table' and r.err
end
for i = 1, #KEYS do
  local key = KEYS[i]
  local j = 4 * i - 1
  local value = ARGV[j]
  local head = redis.pcall('GETRANGE', key, 0, 7)
  if failed(head) then
    out[i] = head.err
  elseif head == 'SUCCESS|' or head == 'FAILURE|' or head == 'REVOKED|' then
    out[i] = 0
  else
    local set = redis.pcall('SET', key, value, 'PX', ttl)
    if failed(set) then
      out[i] = set.err
    else
      if ARGV[j + 1] == '1' then
        if #value <= cap then
          redis.call('PUBLISH', key, value)
        else
          redis.call('PUBLISH', key, '1')
        end
      end
      out[i] = 1
    end
  end
  if out[i] == 0 or out[i] == 1 then
    local held = ARGV[j + 2]
    if held ~= '' then redis.pcall('LREM', held, -1, ARGV[j + 3]) end
  end
end
return out
