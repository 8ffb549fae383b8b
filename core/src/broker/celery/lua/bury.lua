-- Moves one message to a dead-letter list: quarantine and poison pills.
-- With a tag, only if its `unacked` entry is still there (and, when
-- given, still the one read: a compare-and-swap like restore.lua), taking
-- it out of `unacked` and the index in the same step; without one (bytes
-- that never reached `unacked`), just the push.
--
-- KEYS: unacked, unacked_index, the dead-letter list. ARGV: tag ("" for
-- none), the entry as read ("" to check presence only), the dead letter,
-- how many the list keeps. Returns 1 when moved.
if ARGV[1] ~= '' and not unhold(KEYS[1], KEYS[2], ARGV[1], ARGV[2]) then return 0 end
redis.call('LPUSH', KEYS[3], ARGV[3])
redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[4]) - 1)
return 1
