-- A send's dedupe claim in the string KEYS[1]: the id of the run that
-- holds it, expiring with the claim.
--
-- ARGV: op ('claim' or 'drop'), id, ttl (milliseconds).
-- - 'claim': false and KEYS[1] holds `id` for `ttl`, when nobody held it;
--            else the id that holds it.
-- - 'drop':  lets go of KEYS[1] when `id` holds it (its send failed).
local key = KEYS[1]
local held = redis.call('GET', key)
if ARGV[1] == 'drop' then
  if held == ARGV[2] then redis.call('DEL', key) end
  return false
end
if held then return held end
redis.call('SET', key, ARGV[2], 'PX', ARGV[3])
return false
