-- Dead letters, as both layouts keep them: a list, newest at the head, of
-- "<header JSON>\n<bytes>". The header opens with `{"at":` (how a letter
-- with one is told from a letter kept before headers were) and may name
-- the message's `id`, its `step`, and its `size` on the queue: a letter
-- whose bytes are fewer than its size kept only a prefix, and is not a
-- message any more.

-- A letter's (header, bytes); a letter without a header is an empty
-- header and the bytes.
local function dead_split(el)
  if string.sub(el, 1, 6) == '{"at":' then
    local nl = string.find(el, '\n', 1, true)
    if nl then
      local ok, h = pcall(cjson.decode, string.sub(el, 1, nl - 1))
      if ok and type(h) == 'table' then return h, string.sub(el, nl + 1) end
    end
  end
  return {}, el
end

-- Drops every letter of `dead`; answers how many there were.
local function dead_purge(dead)
  local n = redis.call('LLEN', dead)
  redis.call('DEL', dead)
  return n
end

-- The ids ARGV lists from `first` on, as a set; nil (every letter) when it
-- lists none.
local function dead_wanted(first)
  if #ARGV < first then return nil end
  local want = {}
  for i = first, #ARGV do want[ARGV[i]] = true end
  return want
end

-- Takes letters out of `dead`, oldest first, at most `limit` — only those
-- whose header names an id in `want`, unless `want` is nil — and hands
-- each to `push(header, bytes)`, which puts it back where the layout says.
-- A letter that kept only a prefix stays: pushing part of a message would
-- queue junk. Answers how many were taken.
--
-- The list is read a hundred letters at a time from its oldest end, never
-- whole: a letter is up to a 64 KiB prefix (or a whole message) and a list
-- keeps 10 000. Headers are read with cjson, so an id with `"` or `\` in it
-- matches.
local function dead_requeue(dead, limit, want, push)
  local n = 0
  -- Letters seen from the oldest end and left: the next unseen one is
  -- always at index -(left + 1), whatever was taken before it.
  local left = 0
  while n < limit do
    local els = redis.call('LRANGE', dead, -(left + 100), -(left + 1))
    if #els == 0 then break end
    for i = #els, 1, -1 do
      local el = els[i]
      local h, raw = dead_split(el)
      local id = type(h.id) == 'string' and h.id or nil
      local whole = not (tonumber(h.size) and tonumber(h.size) > #raw)
      if n < limit and whole and (want == nil or (id and want[id])) then
        redis.call('LREM', dead, -1, el)
        push(h, raw)
        n = n + 1
      else
        left = left + 1
      end
    end
    if #els < 100 then break end
  end
  return n
end
