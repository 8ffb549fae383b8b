-- sweep: ARGV[1] consumer, then the tokens it still has out (delivered, not
-- settled). Hands back what is in the consumer's own held list that no one
-- in its process holds: a bare payload a cancelled BLMOVE moved in, or a
-- stamped claim whose reply was lost with the connection (the script ran,
-- the answer never came back). The Rust side runs it with no claim of its
-- own in flight, so every claim it got an answer for is listed. A claim
-- handed back here cannot be settled by its stale token: fenced.
local held = base .. 'held:' .. ARGV[1]
local keep = {}
for i = 2, #ARGV do keep[ARGV[i]] = true end
local els = redis.call('LRANGE', held, 0, -1)
local moved = 0
for i = #els, 1, -1 do
  local el = els[i]
  local t, s, p = string.match(el, '^(%d+):(%d):(.*)$')
  if not t then
    redis.call('LREM', held, 1, el)
    if el ~= MARK then
      redis.call('RPUSH', base .. 'ready:0', el)
      moved = moved + 1
    end
  elseif not keep[t] then
    redis.call('LREM', held, 1, el)
    if p ~= MARK then
      redis.call('RPUSH', base .. 'ready:' .. s, (marked(p, 0)))
      moved = moved + 1
    end
  end
end
return moved
