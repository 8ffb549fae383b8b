-- The clock every shared limit reads: Redis's own TIME, in whole
-- microseconds (its resolution), so processes whose clocks disagree still
-- agree on one limit. A test passes an explicit `now` (microseconds) in
-- `arg` instead, which also leaves the key without an expiry: a test's
-- virtual time is not Redis's.
--
-- Microseconds since the epoch (about 1.7e15) are exact in a Lua number
-- (a double, exact to 2^53); nanoseconds would not be.
local function limit_now(arg)
  if arg ~= nil and arg ~= '' then return tonumber(arg), false end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2]), true
end

-- A number as text that reads back as the same double (HSET would keep
-- only 14 digits).
local function limit_exact(x)
  return string.format('%.17g', x)
end
