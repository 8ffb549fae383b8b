-- store: KEYS the result keys, one per outcome, then (when indexed) the
-- seven count indexes P:count:<STATE> in State::ALL order (PENDING RECEIVED
-- STARTED RETRY SUCCESS FAILURE REVOKED) and the three tallies
-- P:tally:<STATE> of the final states (SUCCESS FAILURE REVOKED); ARGV ttl
-- ms, notify cap (bytes), indexed (1/0: on a Cluster each call stores one
-- key, its slot's, with no index and no late ack), then for each result key
-- "<STATE>|<json>", final (1/0), and its run's late ack: the held list and
-- the exact held element ('' '' for none).
-- One call stores a whole round's results: a script call costs Redis more
-- than the few commands inside it, so one per result was the largest cost
-- of a drain (docs/redis-layout.md).
-- Write-once: a key that holds a final state (SUCCESS/FAILURE/REVOKED)
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
-- Counting stored outcomes per state must not walk every result. A key in
-- a state it may leave (PENDING RECEIVED STARTED RETRY) is kept in its
-- state's count index (a sorted set scored by when the result expires) and
-- taken out when it moves on; entries past their expiry are trimmed here,
-- for the states this call touched. A final state is never left, so its
-- keys need not be named: each call adds how many it wrote to its state's
-- tally (a sorted set: member the end of an expiry bucket, a 1024th of the
-- ttl wide, score how many results expire within it; ZADD INCR, which the
-- documented minimal ACL allows), and a count sums the buckets not yet
-- ended — one member per bucket instead of one per result (a ZADD member
-- per result was a tenth of Redis's CPU per task in a drain). A call that
-- opens a bucket drops the ended ones.
-- Answers one flag per result key: 1 written, 0 refused (final already), or
-- the error Redis gave for that key (a string: not stored, not acked).
-- Unindexed (one key): its flag and the state the key held before.
local states = {'PENDING', 'RECEIVED', 'STARTED', 'RETRY', 'SUCCESS', 'FAILURE', 'REVOKED'}
local finals = {'SUCCESS', 'FAILURE', 'REVOKED'}
local index = {}
local tally = {}
local n = #KEYS
if ARGV[3] == '1' then
  n = #KEYS - #states - #finals
  for i, s in ipairs(states) do
    index[s] = KEYS[n + i]
  end
  for i, s in ipairs(finals) do
    tally[s] = KEYS[n + #states + i]
  end
end
local ttl = ARGV[1]
local cap = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Formatted once: a number passed to redis.call is formatted each time.
local expires = string.format('%d', now + tonumber(ttl))
local touched = {}
local out = {}
-- The state each key held before a write (unindexed calls answer it, so
-- the caller keeps the indexes: on a Cluster they are in another slot).
local before = {}
local function failed(r)
  return type(r) == 'table' and r.err
end
-- Count index entries to add, per state, all scored `expires`: one ZADD
-- per state a call touches rather than one per key. Added before any ZREM
-- (a key written twice in one call must leave the first state's index).
local adds = {}
-- Results written per final state (all expiring at `expires`).
local tallied = {}
local function flush()
  for s, members in pairs(adds) do
    for k = 1, #members, 500 do
      local args = {}
      for m = k, math.min(k + 499, #members) do
        args[#args + 1] = expires
        args[#args + 1] = members[m]
      end
      redis.call('ZADD', index[s], unpack(args))
    end
  end
  adds = {}
end
local function written(i, key, value, was)
  before[i] = was or ''
  if was and index[was] then
    flush()
    redis.call('ZREM', index[was], key)
  end
  local state = string.match(value, '^(%u+)|')
  if state and tally[state] then
    tallied[state] = (tallied[state] or 0) + 1
  elseif state and index[state] then
    local m = adds[state]
    if not m then
      m = {}
      adds[state] = m
    end
    m[#m + 1] = key
    touched[state] = true
  end
  if ARGV[4 * i + 1] == '1' then
    if #value <= cap then
      redis.call('PUBLISH', key, value)
    else
      redis.call('PUBLISH', key, '1')
    end
  end
  out[i] = 1
end
for i = 1, n do
  local key = KEYS[i]
  local j = 4 * i
  local value = ARGV[j]
  -- The common case, a key not there yet, in one call; a key that is
  -- there (any type) is looked at first.
  local fresh = redis.pcall('SET', key, value, 'PX', ttl, 'NX')
  if type(fresh) == 'table' and fresh.ok then
    written(i, key, value, nil)
  else
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
        written(i, key, value, string.match(head, '^(%u+)|'))
      end
    end
  end
  if out[i] == 0 or out[i] == 1 then
    local held = ARGV[j + 2]
    if held ~= '' then redis.pcall('LREM', held, -1, ARGV[j + 3]) end
  end
end
flush()
for s in pairs(touched) do
  redis.call('ZREMRANGEBYSCORE', index[s], '-inf', now)
end
-- The bucket `expires` falls in, named by its end.
local width = math.max(1, math.ceil(tonumber(ttl) / 1024))
local bucket = string.format('%d', math.ceil((now + tonumber(ttl)) / width) * width)
for s, k in pairs(tallied) do
  if tonumber(redis.call('ZADD', tally[s], 'INCR', k, bucket)) == k then
    -- What an older headway indexed per key in this final state's index.
    redis.call('ZREMRANGEBYSCORE', index[s], '-inf', now)
    local ended = {}
    for _, b in ipairs(redis.call('ZRANGE', tally[s], 0, -1)) do
      if tonumber(b) and tonumber(b) <= now then ended[#ended + 1] = b end
    end
    for j = 1, #ended, 1000 do
      redis.call('ZREM', tally[s], unpack(ended, j, math.min(j + 999, #ended)))
    end
  end
end
if ARGV[3] ~= '1' then
  -- One key: its flag, and the state it held before ('' when none, or
  -- when not written).
  return {out[1], before[1] or ''}
end
return out
