-- dead: ARGV mode, limit, then ids. mode 'purge' drops every dead letter
-- and answers how many. mode 'requeue' puts dead letters back on their step,
-- oldest first, at most limit — only those whose id is listed, when ids are
-- given — each marked redelivered with its lost count reset ("!0!"), at the
-- tail like a publish. A letter that kept only a prefix of its message (its
-- header's size is larger than its bytes) is not a message: it stays.
-- Answers how many went back. The walk over the list is the shared
-- dead-letter piece's (`dead_requeue`), prepended by the Rust side.
local dead = base .. 'dead'
if ARGV[1] == 'purge' then return dead_purge(dead) end
local rang = false
local n = dead_requeue(dead, tonumber(ARGV[2]), dead_wanted(3), function(h, raw)
  local s = string.match(tostring(h.step or 0), '^%d$') or '0'
  redis.call('LPUSH', base .. 'ready:' .. s, '!0!' .. raw)
  if s ~= '0' then rang = true end
end)
if rang then ring() end
return n
