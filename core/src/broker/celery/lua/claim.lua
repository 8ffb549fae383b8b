-- Claims up to `max` envelopes, each moved from its queue list into kombu's
-- `unacked` hash and `unacked_index` sorted set in the same step — kombu
-- does the pop and the hold in two round trips, and a crash between them
-- loses the message; here there is no such gap.
--
-- Nothing after a pop can fail: Redis does not roll a script back, so an
-- error after an RPOP would lose what it popped. (Nor can maxmemory stop
-- the holds: once a script has written, Redis lets its later writes through
-- even when over the limit.) Every envelope is held
-- under a tag made here from the caller's nonce and a counter, never under
-- its own `delivery_tag` — some producers send none, and two envelopes
-- sharing one must not share one `unacked` entry (the second would
-- overwrite the first, and one ack would settle both). The entry is the
-- shared `unacked_entry`: the envelope's bytes as they came.
--
-- An envelope over the size cap is never parsed nor sent to the consumer:
-- it goes to its queue's dead letters ("too large") in the same step, as a
-- prefix of at most `prefix` bytes with its size — never the whole payload
-- — and counts towards `max` as any message taken does.
--
-- KEYS: unacked, unacked_index, then K queue keys in polling order, then
-- the K dead-letter lists they go to (one per queue key).
-- ARGV: max, now (whole Unix seconds, rounded up: the index score; see
-- `index_score` in mod.rs),
-- now (ms, for dead letters), the size cap (bytes), how many dead letters a
-- list keeps, K, K routing keys (one per queue key, used when an envelope
-- lacks `delivery_info.routing_key`), K priority steps (one per queue key),
-- the tag nonce (unique per call), the dead-letter prefix length.
-- Returns a flat list: how many went to the dead letters, then key, tag
-- ("" when the envelope could not be read and was left out of `unacked`),
-- raw — three per message.
local max = tonumber(ARGV[1])
local now = ARGV[2]
local now_ms = ARGV[3]
local cap = tonumber(ARGV[4])
local kept = tonumber(ARGV[5])
local k = tonumber(ARGV[6])
local nonce = ARGV[7 + 2 * k]
local prefix = tonumber(ARGV[8 + 2 * k])
local out = {'0'}
local buried = 0
local n = 0
-- The holds are written together at the end, a command per thousand: a
-- call from Lua costs Redis more than the work of one more member.
local scores, fields = {}, {}
-- Past the first list, one EXISTS says whether any other holds anything
-- (an empty list does not exist) rather than an RPOP each that finds
-- nothing, and an RPOP that answers fewer than it asked for has emptied
-- its list: a call from Lua costs more than a short command.
for i = 1, k do
  if n >= max then break end
  if i == 2 and k > 2 and redis.call('EXISTS', unpack(KEYS, 4, 2 + k)) == 0 then break end
  local key = KEYS[2 + i]
  while n < max do
    local want = max - n
    local raws = redis.call('RPOP', key, want)
    if not raws then break end
    for j = 1, #raws do
      local raw = raws[j]
      n = n + 1
      if #raw > cap then
        local dead = KEYS[2 + k + i]
        redis.call('LPUSH', dead, '{"at":' .. now_ms .. ',"reason":"too large: ' .. #raw ..
          ' bytes (the cap is ' .. cap .. ' bytes)","step":' .. ARGV[6 + k + i] ..
          ',"size":' .. #raw .. '}\n' .. string.sub(raw, 1, prefix))
        redis.call('LTRIM', dead, 0, kept - 1)
        buried = buried + 1
      else
        local tag = ''
        local entry = unacked_entry(raw, ARGV[6 + i])
        if entry then
          tag = nonce .. '.' .. n
          scores[#scores + 1] = now
          scores[#scores + 1] = tag
          fields[#fields + 1] = tag
          fields[#fields + 1] = entry
        end
        out[#out + 1] = key
        out[#out + 1] = tag
        out[#out + 1] = raw
      end
    end
    if #raws < want then break end
  end
end
for i = 1, #scores, 2000 do
  local last = math.min(i + 1999, #scores)
  redis.call('ZADD', KEYS[2], unpack(scores, i, last))
  redis.call('HSET', KEYS[1], unpack(fields, i, last))
end
out[1] = tostring(buried)
return out
