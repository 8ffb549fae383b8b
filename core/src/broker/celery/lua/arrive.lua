-- A chord part's arrival: Celery's `on_chord_part_return` pipeline (ZADD
-- the member at its group index, ZCOUNT, GET `.t`, GET `.s`, EXPIRE all
-- three) in one step. Answers `{fresh, count, total}` and, when this fresh
-- member completed the count, every member in group-index order after them.
--
-- KEYS: .j, .t, .s. ARGV: member, score, expiry seconds (0: none).
local fresh = redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
local count = redis.call('ZCOUNT', KEYS[1], '-inf', '+inf')
local t = redis.call('GET', KEYS[2])
local s = redis.call('GET', KEYS[3])
local ex = tonumber(ARGV[3])
if ex > 0 then
  redis.call('EXPIRE', KEYS[1], ex)
  redis.call('EXPIRE', KEYS[2], ex)
  redis.call('EXPIRE', KEYS[3], ex)
end
if not s then return {fresh, count, -1} end
local total = tonumber(s) + tonumber(t or '0')
local out = {fresh, count, total}
if fresh == 1 and count == total then
  local members = redis.call('ZRANGE', KEYS[1], 0, -1)
  for i = 1, #members do out[#out + 1] = members[i] end
end
return out
