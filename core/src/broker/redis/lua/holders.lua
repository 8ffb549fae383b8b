-- holders: the inspector's consumers of a queue, in name order: {name, lease
-- PTTL (ms, negative when gone), ids held oldest claim first}. An element
-- whose JSON does not open with its id is left out of the ids.
local out = {}
local cs = redis.call('SMEMBERS', base .. 'consumers')
table.sort(cs)
for _, c in ipairs(cs) do
  local held = base .. 'held:' .. c
  local ids = {}
  -- A page of 100 at a time, oldest (the tail) first: a long held list of
  -- big payloads is never all in Lua's memory at once.
  local hi = redis.call('LLEN', held) - 1
  while hi >= 0 do
    local lo = math.max(0, hi - 99)
    local els = redis.call('LRANGE', held, lo, hi)
    for i = #els, 1, -1 do
      local _, p = unheld(els[i])
      local _, body = unmark(p)
      local id = peek_id(body)
      if id then ids[#ids + 1] = id end
    end
    hi = lo - 1
  end
  out[#out + 1] = {c, redis.call('PTTL', base .. 'lease:' .. c), ids}
end
return out
