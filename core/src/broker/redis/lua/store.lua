-- store: KEYS the result keys, one per outcome, then the seven count
-- indexes P:count:<STATE> in State::ALL order (PENDING RECEIVED STARTED
-- RETRY SUCCESS FAILURE REVOKED); ARGV ttl ms, notify cap (bytes), then for
-- each result key "<STATE>|<json>" and final (1/0).
-- One call stores a whole round's results: a script call costs Redis more
-- than the few commands inside it, so one per result was the largest cost
-- of a drain (docs/redis-layout.md).
-- A stored final state (its first 8 bytes SUCCESS|, FAILURE| or REVOKED|)
-- is never overwritten. A final write publishes on the key's own channel:
-- the value itself when it is at most the cap (a waiter needs no GET), else
-- `1` (a wake-up: the waiter GETs). A refused store publishes nothing, so a
-- published value is always the one the key holds. Answers one flag per
-- key: 1 written, 0 refused.
-- Each written key is also kept in its state's count index (a sorted set
-- scored by when the result expires) and taken out of the index of the
-- state it replaces, so counting stored outcomes per state is seven ZCOUNTs
-- rather than a walk of every result; entries past their expiry are
-- trimmed here, for the states this call touched.
local states = {'PENDING', 'RECEIVED', 'STARTED', 'RETRY', 'SUCCESS', 'FAILURE', 'REVOKED'}
local index = {}
local n = #KEYS - #states
for i, s in ipairs(states) do
  index[s] = KEYS[n + i]
end
local ttl = ARGV[1]
local cap = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expires = now + tonumber(ttl)
local touched = {}
local out = {}
for i = 1, n do
  local key = KEYS[i]
  local value = ARGV[2 * i + 1]
  local head = redis.call('GETRANGE', key, 0, 7)
  if head == 'SUCCESS|' or head == 'FAILURE|' or head == 'REVOKED|' then
    out[i] = 0
  else
    redis.call('SET', key, value, 'PX', ttl)
    local was = string.match(head, '^(%u+)|')
    if was and index[was] then
      redis.call('ZREM', index[was], key)
    end
    local state = string.match(value, '^(%u+)|')
    if state and index[state] then
      redis.call('ZADD', index[state], expires, key)
      touched[state] = true
    end
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
for s in pairs(touched) do
  redis.call('ZREMRANGEBYSCORE', index[s], '-inf', now)
end
return out
