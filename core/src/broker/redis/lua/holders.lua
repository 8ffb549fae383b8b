-- holders: the inspector's consumers of a queue, in name order: {name, lease
-- PTTL (ms, negative when gone), ids held oldest claim first}. An element
-- whose JSON does not open with its id is left out of the ids.
local out = {}
local cs = redis.call('SMEMBERS', base .. 'consumers')
table.sort(cs)
for _, c in ipairs(cs) do
  local els = redis.call('LRANGE', base .. 'held:' .. c, 0, -1)
  local ids = {}
  for i = #els, 1, -1 do
    local _, p = unheld(els[i])
    local id = string.match(p, '^!%d+!{"id":"([^"\\]*)"') or peek_id(p)
    if id then ids[#ids + 1] = id end
  end
  out[#out + 1] = {c, redis.call('PTTL', base .. 'lease:' .. c), ids}
end
return out
