-- Closes a chord whose callback is sent by another transport (RabbitMQ),
-- only if the chord is still open (`.s` exists): answers 1 to the one
-- finisher that closed it, which then sends the callback; 0 to any other.
--
-- KEYS: .j, .t, .s.
if redis.call('EXISTS', KEYS[3]) == 0 then return 0 end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return 1
