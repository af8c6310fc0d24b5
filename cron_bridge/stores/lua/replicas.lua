-- The replicas still alive by the server's clock, and no entry promising life past now + the
-- longest lifetime a heartbeat may have.
-- KEYS[1]: the sorted set of replica id -> alive-until (epoch ms)
-- ARGV[1]: the longest lifetime a heartbeat may have, in milliseconds
-- Returns now (epoch ms), then id, alive-until, id, alive-until, ...
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local found = redis.call("ZRANGEBYSCORE", KEYS[1], "(" .. now, now + tonumber(ARGV[1]),
  "WITHSCORES")
table.insert(found, 1, tostring(now))
return found
