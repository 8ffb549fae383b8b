-- Re-queues or purges a queue's dead letters in one step. Mode `purge`
-- drops them all and answers how many. Mode `requeue` puts them back,
-- oldest first, at most `limit` — only those whose header names one of the
-- ids, when ids are given — each pushed as its bytes (LPUSH: the back, like
-- a publish) onto the step key its header names (the largest step not
-- above it). A letter kept as a prefix only (its header's `size` is more
-- than the bytes kept) stays: pushing part of a message would queue junk.
-- Answers how many went back.
--
-- The list is read from its oldest end a hundred letters at a time, never
-- whole: a letter is up to a 64 KiB prefix and a list keeps 10 000.
-- Headers are read with cjson, so an id with `"` or `\` in it matches.
--
-- KEYS: the dead-letter list, then the queue's step keys in step order.
-- ARGV: mode, limit, S (the number of steps), S steps, then ids.
local dead = KEYS[1]
if ARGV[1] == 'purge' then
  local n = redis.call('LLEN', dead)
  redis.call('DEL', dead)
  return n
end
local limit = tonumber(ARGV[2])
local ns = tonumber(ARGV[3])
local function key_of(step)
  local k = KEYS[2]
  for j = 1, ns do
    if tonumber(ARGV[3 + j]) <= step then k = KEYS[1 + j] end
  end
  return k
end
-- "<header>\n<bytes>" gives (header, bytes); anything else is bytes alone.
local function split(el)
  if string.sub(el, 1, 6) == '{"at":' then
    local nl = string.find(el, '\n', 1, true)
    if nl then
      local ok, h = pcall(cjson.decode, string.sub(el, 1, nl - 1))
      if ok and type(h) == 'table' then return h, string.sub(el, nl + 1) end
    end
  end
  return nil, el
end
local want = nil
if #ARGV > 3 + ns then
  want = {}
  for i = 4 + ns, #ARGV do want[ARGV[i]] = true end
end
local n = 0
-- `kept`: letters seen from the oldest end and left; the next unseen one is
-- always at index -(kept + 1), whatever was taken before it.
local kept = 0
while n < limit do
  local els = redis.call('LRANGE', dead, -(kept + 100), -(kept + 1))
  if #els == 0 then break end
  for i = #els, 1, -1 do
    local el = els[i]
    local h, raw = split(el)
    local whole = not (h and type(h['size']) == 'number' and h['size'] > #raw)
    local id = h and h['id']
    local match = want == nil or (type(id) == 'string' and want[id])
    if n < limit and whole and match then
      redis.call('LREM', dead, -1, el)
      local s = h and tonumber(h['step']) or 0
      redis.call('LPUSH', key_of(s), raw)
      n = n + 1
    else
      kept = kept + 1
    end
  end
  if #els < 100 then break end
end
return n
