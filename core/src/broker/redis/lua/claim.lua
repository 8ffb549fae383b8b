-- claim: ARGV consumer, max, lease ms, now ('' = TIME), adopt ('' = none),
-- size cap (bytes), revoked key prefix ('' = do not look), the revokes key.
-- Refreshes the consumer's lease, moves due delayed messages to their steps,
-- stamps the element a BLMOVE brought in (adopt) and claims up to max more,
-- step 0 first, each stamped with a fresh fencing token. A payload over the
-- size cap is never handed out: it goes to the dead letters ("too large")
-- and counts towards max, as any message taken is.
-- The receipt's revoked check is done in the same step: each claim's
-- revoked mark is read (a payload whose JSON does not open with its id is
-- left to the worker), but only while a revoke can be in force: every revoke
-- raises the one score of the revokes key (`P:revokes`, member `latest`) to
-- its end (ZADD GT) before it writes its marks, so when that score is past,
-- or was never set, no mark is live and none is read (a mark's read and the
-- Lua around it were a quarter of this script's cost per message).
-- The marks live outside the queue's slot: this one
-- script reads keys it does not declare, which a standalone Redis allows
-- (see docs/redis-layout.md). Nothing is acked here: an early ack is the
-- worker's, after the answer reached it, so a claim whose answer is lost
-- with the connection is still held, and swept back.
-- Answers {claimed elements, next eta or -1, now, how many went to the dead
-- letters, one flag per element: 0 not revoked, 1 revoked, 3 not looked at}.
local c = ARGV[1]
local max = tonumber(ARGV[2])
local now = clock(ARGV[4])
local adopt = ARGV[5]
local cap = tonumber(ARGV[6])
local held = base .. 'held:' .. c
local seq = base .. 'seq'
redis.call('SET', base .. 'lease:' .. c, '1', 'PX', ARGV[3])
redis.call('SADD', base .. 'consumers', c)
local delayed = base .. 'delayed'
local due = redis.call('ZRANGEBYSCORE', delayed, '-inf', now, 'LIMIT', 0, 1000)
for i = 1, #due do
  local s, p = string.match(due[i], '^(%d):%d+:(.*)$')
  redis.call('ZREM', delayed, due[i])
  if s then redis.call('LPUSH', base .. 'ready:' .. s, p) end
end
-- Answers whether payload p (from step s) is over the cap, burying it if so.
local bad = 0
local function oversize(s, p)
  -- Within the cap with its mark: no need to look for one.
  if not cap or #p <= cap then return false end
  local size = #p
  local mark = string.match(p, '^!%d+!')
  if mark then size = size - #mark end
  if size <= cap then return false end
  local _, body = unmark(p)
  bury(now, s, body, 'too large: ' .. size .. ' bytes (the cap is ' .. cap .. ' bytes)')
  bad = bad + 1
  return true
end
local rprefix = ARGV[7] or ''
local live = rprefix ~= ''
if live and ARGV[8] then
  local latest = tonumber(redis.call('ZSCORE', ARGV[8], 'latest'))
  live = latest ~= nil and latest > now
end
-- The flag of payload p (see above).
local function check(p)
  if rprefix == '' then return 3 end
  if not live then return 0 end
  local _, body = unmark(p)
  local id = peek_id(body)
  if not id then return 3 end
  local u = tonumber(redis.call('GET', rprefix .. id))
  if u and u > now then return 1 end
  return 0
end
local out = {}
local flags = {}
if adopt ~= '' then
  if redis.call('LREM', held, 1, adopt) == 1 and adopt ~= MARK
    and not oversize('0', adopt) then
    local el = redis.call('INCR', seq) .. ':0:' .. adopt
    redis.call('LPUSH', held, el)
    out[#out + 1] = el
    flags[#flags + 1] = check(adopt)
  end
end
-- A redis.call costs Redis more than a short command does (bench/README:
-- 1.8 µs a call beyond its command on a 2-core VM), and a claim that runs
-- step 0 dry used to ask each of the nine other steps with an RPOP that
-- found nothing (ten RPOPs a claim for an idle worker, two claims a round
-- trip). An RPOP that answers fewer than it asked for has emptied its
-- list, and one EXISTS says whether steps 1-9 hold anything at all (an
-- empty list does not exist): only priorities use them.
for s = 0, 9 do
  if #out + bad >= max then break end
  if s == 1 then
    local rest = {}
    for r = 1, 9 do rest[r] = base .. 'ready:' .. r end
    if redis.call('EXISTS', unpack(rest)) == 0 then break end
  end
  local key = base .. 'ready:' .. s
  local step, mid = tostring(s), ':' .. s .. ':'
  while #out + bad < max do
    local want = max - #out - bad
    local ps = redis.call('RPOP', key, want)
    if not ps then break end
    local t = redis.call('INCRBY', seq, #ps) - #ps
    local els = {}
    for i = 1, #ps do
      if ps[i] ~= MARK and not oversize(step, ps[i]) then
        t = t + 1
        local el = t .. mid .. ps[i]
        els[#els + 1] = el
        out[#out + 1] = el
        flags[#flags + 1] = check(ps[i])
      end
    end
    for i = 1, #els, 1000 do
      redis.call('LPUSH', held, unpack(els, i, math.min(i + 999, #els)))
    end
    if #ps < want then break end
  end
end
local nxt = redis.call('ZRANGE', delayed, 0, 0, 'WITHSCORES')
return {out, nxt[2] or '-1', tostring(now), bad, flags}
