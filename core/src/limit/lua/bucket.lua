-- A token bucket (flow::Bucket's rules) kept in the string KEYS[1]: three
-- little-endian doubles, `t` tokens as of `a` (microseconds) and `e`, when
-- the key's expiry was last set to end (microseconds; 0 for none). A
-- missing key — or one that is not 24 bytes, or not a string (a bucket an
-- older headway kept as a hash) — is a full bucket.
--
-- ARGV: per_ns (tokens per nanosecond), burst, n, take ('1' takes, '0'
-- only looks), now (microseconds; '' reads Redis TIME).
-- Answers {taken (0/1), wait, level}: `wait` the nanoseconds until `n`
-- tokens are there after this call (as text; 'inf' never), `level` the
-- tokens there after it (a little-endian double).
--
-- Why doubles packed and not text: exact text of a double is a printf
-- of 17 digits, and a read is a parse; packed, a take is one GET and one
-- SET with no number written out. With the expiry set only when it must
-- move (below), Redis spends about 5.4 µs on a take against 7.4 µs for
-- the hash of decimal texts this replaced (`INFO commandstats`, pipelined
-- takes on one key).
--
-- Every float step is the in-process bucket's, in its order, on
-- nanosecond spans: (now - at) * 1000 is exact, so a shared bucket and an
-- in-process one told the same times give the same answers to the bit.
local key = KEYS[1]
local per_ns = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local take = ARGV[4] == '1'
local now, real = limit_now(ARGV[5])

local tokens, at, till
local kept = redis.pcall('GET', key)
if type(kept) == 'string' and #kept == 24 then
  tokens, at, till = struct.unpack('<ddd', kept)
end
if tokens == nil then
  tokens, at, till = burst, now, 0
end

-- The level at `now` (written out rather than as a function: a function
-- is made again on every call, and this script runs on every take).
local level = tokens
if now > at then
  level = tokens + ((now - at) * 1000) * per_ns
  if level > burst then level = burst end
end

local taken = 0
if take then
  if now > at then
    tokens = level
    at = now
  end
  if level >= n then
    tokens = level - n
    level = tokens
    taken = 1
  end
  if real and per_ns > 0 then
    -- Once full the key says nothing a missing key does not: it goes one
    -- to two seconds after it would be full. The expiry is moved only
    -- when it would come less than a second after that, so most takes
    -- keep it (KEEPTTL) rather than set it again.
    local full = math.ceil((burst - tokens) / per_ns / 1000)
    if till >= now + full + 1000000 then
      redis.call('SET', key, struct.pack('<ddd', tokens, at, till), 'KEEPTTL')
    else
      local ms = math.min(math.ceil(full / 1000) + 2000, 1e12)
      redis.call('SET', key, struct.pack('<ddd', tokens, at, now + ms * 1000), 'PX', ms)
    end
  else
    -- A zero rate is never full again, and a test's own clock is not
    -- Redis's: no expiry.
    redis.call('SET', key, struct.pack('<ddd', tokens, at, 0))
  end
end

local wait
if level >= n then
  wait = '0'
elseif n > burst or per_ns <= 0 then
  wait = 'inf'
else
  -- Rounded up, so that sleeping exactly this long is enough.
  wait = limit_exact(math.ceil((n - level) / per_ns))
end
return {taken, wait, struct.pack('<d', level)}
