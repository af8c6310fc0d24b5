-- The replicas still alive by the server's clock.
-- KEYS[1]: the sorted set of replica id -> alive-until (epoch ms)
-- Returns id, alive-until, id, alive-until, ...
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call("ZRANGEBYSCORE", KEYS[1], "(" .. now, "+inf", "WITHSCORES")
