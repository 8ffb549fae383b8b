-- Sends a chord's callback and closes the chord in one step, only if the
-- chord is still open (`.s` exists): the first of two racing finishers
-- sends it, and one that crashed before this step leaves the chord open
-- for a redelivered part to finish.
--
-- KEYS: .j, .t, .s, the callback's queue key. ARGV: the envelope.
if redis.call('EXISTS', KEYS[3]) == 0 then return 0 end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
redis.call('LPUSH', KEYS[4], ARGV[1])
return 1
