-- Take over the pending sends whose lease ran out, oldest first, each leased to the taker;
-- drop the settled markers whose life ended.
-- KEYS[1], KEYS[2]: the sorted set and the hash of pending_add.lua.
-- ARGV[1]: the taker; ARGV[2]: its lease (ms); ARGV[3]: how many at most.
-- Returns the claim key and previous owner of each, flat (an owner the hash does not hold is
-- "" : taken over all the same, the key says what to send).
local kind = redis.call("TYPE", KEYS[1])["ok"]
local owners_kind = redis.call("TYPE", KEYS[2])["ok"]
if kind ~= "zset" or (owners_kind ~= "hash" and owners_kind ~= "none") then
    return {}
end
local now = redis.call("TIME")
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local most = tonumber(ARGV[3])
for _, key in ipairs(redis.call("ZRANGEBYSCORE", KEYS[1], -now_ms, "(0", "LIMIT", 0, most)) do
    redis.call("ZREM", KEYS[1], key)
    redis.call("HDEL", KEYS[2], key)
end
local taken = {}
for _, key in ipairs(redis.call("ZRANGEBYSCORE", KEYS[1], "(0", now_ms, "LIMIT", 0, most)) do
    local before = redis.call("HGET", KEYS[2], key)
    redis.call("ZADD", KEYS[1], now_ms + tonumber(ARGV[2]), key)
    redis.call("HSET", KEYS[2], key, ARGV[1])
    taken[#taken + 1] = key
    taken[#taken + 1] = before or ""
end
return taken
