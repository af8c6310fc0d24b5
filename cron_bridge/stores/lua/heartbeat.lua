-- Record a replica as alive until now + ttl, by the server's clock, and forget replicas
-- silent for more than an hour, and any entry promising life past now + the longest lifetime
-- a beat asks for (not written by a beat: it would never age out).
-- KEYS[1]: the sorted set of replica id -> alive-until (epoch ms)
-- ARGV[1]: the replica id
-- ARGV[2]: the lifetime in milliseconds
-- ARGV[3]: the longest lifetime a heartbeat may have, in milliseconds
-- Returns the alive-until time in epoch ms.
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expires = now + tonumber(ARGV[2])
redis.call("ZADD", KEYS[1], expires, ARGV[1])
redis.call("ZREMRANGEBYSCORE", KEYS[1], "-inf", now - 3600000)
redis.call("ZREMRANGEBYSCORE", KEYS[1], "(" .. (now + tonumber(ARGV[3])), "+inf")
return expires
