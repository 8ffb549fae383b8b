-- Holds one envelope a BRPOP returned: kombu's `QoS.append`, under the tag
-- the caller made (never the envelope's own `delivery_tag`: it may be
-- missing or shared; see claim.lua). The entry is the shared
-- `unacked_entry`: the envelope's bytes as they came.
--
-- KEYS: unacked, unacked_index. ARGV: now, raw, tag, routing key.
-- Returns the tag, or "" when the envelope could not be read.
local entry = unacked_entry(ARGV[2], ARGV[4])
if not entry then return '' end
redis.call('ZADD', KEYS[2], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[1], ARGV[3], entry)
return ARGV[3]
