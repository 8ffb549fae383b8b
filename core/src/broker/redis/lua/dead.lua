-- dead: ARGV mode, limit, then ids. mode 'purge' drops every dead letter
-- and answers how many. mode 'requeue' puts dead letters back on their step,
-- oldest first, at most limit — only those whose id is listed, when ids are
-- given — each marked redelivered with its lost count reset ("!0!"), at the
-- tail like a publish. Answers how many went back.
local dead = base .. 'dead'
if ARGV[1] == 'purge' then
  local n = redis.call('LLEN', dead)
  redis.call('DEL', dead)
  return n
end
local limit = tonumber(ARGV[2])
local rang = false
-- A dead letter is "<header>\n<bytes>"; one kept before headers existed is
-- the bytes alone.
local function split(el)
  if string.sub(el, 1, 6) == '{"at":' then
    local nl = string.find(el, '\n', 1, true)
    if nl then return string.sub(el, 1, nl - 1), string.sub(el, nl + 1) end
  end
  return '', el
end
local function back(el)
  local head, raw = split(el)
  local s = string.match(head, '"step":(%d)') or '0'
  redis.call('LPUSH', base .. 'ready:' .. s, '!0!' .. raw)
  if s ~= '0' then rang = true end
end
local n = 0
if #ARGV <= 2 then
  while n < limit do
    local el = redis.call('RPOP', dead)
    if not el then break end
    back(el)
    n = n + 1
  end
else
  local want = {}
  for i = 3, #ARGV do want[ARGV[i]] = true end
  local els = redis.call('LRANGE', dead, 0, -1)
  local keep = {}
  for i = #els, 1, -1 do
    local head = split(els[i])
    local id = string.match(head, '"id":"([^"\\]*)"')
    if n < limit and id and want[id] then
      back(els[i])
      n = n + 1
    else
      keep[#keep + 1] = els[i]
    end
  end
  if n > 0 then
    redis.call('DEL', dead)
    for i = 1, #keep, 1000 do
      redis.call('LPUSH', dead, unpack(keep, i, math.min(i + 999, #keep)))
    end
  end
end
if rang then ring() end
return n
