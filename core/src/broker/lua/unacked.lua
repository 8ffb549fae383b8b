-- kombu's holds (the Celery layout): the `unacked` hash, tag → entry, and
-- the `unacked_index` sorted set, tag → claim time.

-- The `unacked` entry for an envelope as kombu's `QoS.append` writes it:
-- `[<envelope>, <exchange>, <routing key>]`, the envelope's bytes as they
-- came (so whoever restores it, a Celery worker's `restore_visible`
-- included, pushes back what was sent). Exchange and routing key come from
-- its `delivery_info`, the routing key `rk` when it names none. nil when
-- the envelope is not a JSON object Redis's cjson reads: it is not held.
--
-- The common envelope is read without decoding it (cjson's decode of a 1 KB
-- envelope cost Redis ~3.3 µs, these finds ~0.5 µs): an object whose
-- `delivery_info` is exactly an exchange and a routing key, both plain
-- strings (no escapes), and which names `delivery_info` once. A
-- `"delivery_info":` found in JSON is a key, since a quote inside a string
-- is escaped; anything else is decoded as below.
local function fast_info(raw)
  if string.sub(raw, 1, 1) ~= '{' then return nil end
  local at = string.find(raw, '"delivery_info":', 1, true)
  if not at then return nil end
  local _, e, ex, rk = string.find(raw,
    '^"delivery_info":%s*{%s*"exchange":%s*"([^"\\]*)"%s*,%s*"routing_key":%s*"([^"\\]*)"%s*}', at)
  if not e or string.find(raw, '"delivery_info"', e + 1, true) then return nil end
  return ex, rk
end

local function unacked_entry(raw, rk)
  local fex, frk = fast_info(raw)
  if fex then
    return '[' .. raw .. ', ' .. cjson.encode(fex) .. ', ' .. cjson.encode(frk) .. ']'
  end
  local ok, env = pcall(cjson.decode, raw)
  if not ok or type(env) ~= 'table' then return nil end
  local ex = ''
  local p = env['properties']
  if type(p) == 'table' then
    local di = p['delivery_info']
    if type(di) == 'table' then
      if type(di['exchange']) == 'string' then ex = di['exchange'] end
      if type(di['routing_key']) == 'string' then rk = di['routing_key'] end
    end
  end
  return '[' .. raw .. ', ' .. cjson.encode(ex) .. ', ' .. cjson.encode(rk) .. ']'
end

-- Takes `tag` out of `unacked` and `index`, only if its entry is still
-- `entry` (a compare-and-swap against what the caller read; '' checks
-- presence only). Answers whether it did.
local function unhold(unacked, index, tag, entry)
  if entry ~= '' and redis.call('HGET', unacked, tag) ~= entry then return false end
  if redis.call('HDEL', unacked, tag) == 0 then return false end
  redis.call('ZREM', index, tag)
  return true
end
