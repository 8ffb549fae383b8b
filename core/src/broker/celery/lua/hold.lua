-- Holds one envelope a BRPOP returned: kombu's `QoS.append`, under the tag
-- the caller made (never the envelope's own `delivery_tag`: it may be
-- missing or shared; see claim.lua). The entry keeps the envelope's bytes.
--
-- KEYS: unacked, unacked_index. ARGV: now, raw, tag, routing key.
-- Returns the tag, or "" when the envelope could not be read.
local ok, env = pcall(cjson.decode, ARGV[2])
if not ok or type(env) ~= 'table' then return '' end
local ex, rk = '', ARGV[4]
local p = env['properties']
if type(p) == 'table' then
  local di = p['delivery_info']
  if type(di) == 'table' then
    if type(di['exchange']) == 'string' then ex = di['exchange'] end
    if type(di['routing_key']) == 'string' then rk = di['routing_key'] end
  end
end
redis.call('ZADD', KEYS[2], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[1], ARGV[3], '[' .. ARGV[2] .. ', ' .. cjson.encode(ex) .. ', ' .. cjson.encode(rk) .. ']')
return ARGV[3]
