-- Leave claims pending their send, leased to their claimer.
-- KEYS[1]: the sorted set of pending sends: each member a claim key (no prefix), scored with
-- the end of its lease (epoch ms, the server's clock), or, once settled, with minus the end of
-- its marker's life; KEYS[2]: the hash of claim key -> its owner (the claimer, the replica
-- that took it over, or the one that settled it). Both in one Cluster slot (redis.py).
-- ARGV[1]: the owner; ARGV[2]: the lease (ms); ARGV[3 ..]: the claim keys (no prefix).
-- Returns the types the keys hold: a key of another type is left as it is (nothing pending).
local kind = redis.call("TYPE", KEYS[1])["ok"]
local owners_kind = redis.call("TYPE", KEYS[2])["ok"]
if (kind ~= "zset" and kind ~= "none") or (owners_kind ~= "hash" and owners_kind ~= "none") then
    return {kind, owners_kind}
end
local now = redis.call("TIME")
local until_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) + tonumber(ARGV[2])
for i = 3, #ARGV, 2000 do
    local scored, owned = {}, {}
    for j = i, math.min(i + 1999, #ARGV) do
        scored[#scored + 1] = until_ms
        scored[#scored + 1] = ARGV[j]
        owned[#owned + 1] = ARGV[j]
        owned[#owned + 1] = ARGV[1]
    end
    redis.call("ZADD", KEYS[1], unpack(scored))
    redis.call("HSET", KEYS[2], unpack(owned))
end
return {kind, owners_kind}
