-- dead: ARGV mode, limit, then ids. mode 'purge' drops every dead letter
-- and answers how many. mode 'requeue' puts dead letters back on their step,
-- oldest first, at most limit — only those whose id is listed, when ids are
-- given — each marked redelivered with its lost count reset ("!0!"), at the
-- tail like a publish. A letter that kept only a prefix of its message (its
-- header's size is larger than its bytes) is not a message: it stays.
-- Answers how many went back.
-- The list is read a page at a time from the tail (LRANGE over 100), never
-- whole: up to 10 000 letters must not all be in Lua's memory at once.
local dead = base .. 'dead'
if ARGV[1] == 'purge' then
  local n = redis.call('LLEN', dead)
  redis.call('DEL', dead)
  return n
end
local limit = tonumber(ARGV[2])
local want = nil
if #ARGV > 2 then
  want = {}
  for i = 3, #ARGV do want[ARGV[i]] = true end
end
local rang = false
-- A dead letter is "<header>\n<bytes>"; one kept before headers existed is
-- the bytes alone. Answers the decoded header (or an empty one) and bytes.
local function split(el)
  if string.sub(el, 1, 6) == '{"at":' then
    local nl = string.find(el, '\n', 1, true)
    if nl then
      local ok, h = pcall(cjson.decode, string.sub(el, 1, nl - 1))
      if ok and type(h) == 'table' then return h, string.sub(el, nl + 1) end
    end
  end
  return {}, el
end
local n = 0
-- Letters looked at and left, counted from the tail: the next page starts
-- after them (a letter moved out shifts the rest towards the tail).
local left = 0
while n < limit do
  local els = redis.call('LRANGE', dead, -(left + 100), -(left + 1))
  if #els == 0 then break end
  for i = #els, 1, -1 do
    local el = els[i]
    local h, raw = split(el)
    local id = type(h.id) == 'string' and h.id or nil
    local whole = not (tonumber(h.size) and tonumber(h.size) > #raw)
    if n < limit and whole and (want == nil or (id and want[id])) then
      redis.call('LREM', dead, -1, el)
      local s = string.match(tostring(h.step or 0), '^%d$') or '0'
      redis.call('LPUSH', base .. 'ready:' .. s, '!0!' .. raw)
      if s ~= '0' then rang = true end
      n = n + 1
    else
      left = left + 1
    end
  end
  if #els < 100 then break end
end
if rang then ring() end
return n
