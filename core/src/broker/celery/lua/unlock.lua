-- Releases the `unacked_mutex` only if this caller still owns it (what
-- redis-py's `Lock.release` does).
--
-- KEYS: unacked_mutex. ARGV: token.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
