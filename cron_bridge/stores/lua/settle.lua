-- Settle the pending sends an owner holds (a marker of who settled it, kept ARGV[3] ms), or
-- renew its lease of them (ARGV[2] ms).
-- KEYS[1], KEYS[2]: the sorted set and the hash of pending_add.lua.
-- ARGV[1]: the owner; ARGV[2]: 0 to settle, else the lease (ms) to keep them for from now;
-- ARGV[3]: the marker's life (ms); ARGV[4 ..]: the claim keys (no prefix).
-- Returns one character per claim key, in order: "0" another replica holds it (took it over:
-- pending, or settled by it), "1" not (settled or renewed now, settled by this owner before,
-- or never pending); "" when a key is of another type (nothing is pending there).
local kind = redis.call("TYPE", KEYS[1])["ok"]
local owners_kind = redis.call("TYPE", KEYS[2])["ok"]
if (kind ~= "zset" and kind ~= "none") or (owners_kind ~= "hash" and owners_kind ~= "none") then
    return ""
end
local keep = tonumber(ARGV[2])
local now = redis.call("TIME")
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local answers = {}
for i = 4, #ARGV do
    local owner = redis.call("HGET", KEYS[2], ARGV[i])
    local score = tonumber(redis.call("ZSCORE", KEYS[1], ARGV[i]))
    if owner and owner ~= ARGV[1] then
        answers[i - 3] = "0"
    else
        if owner and score and score > 0 then
            if keep == 0 then
                redis.call("ZADD", KEYS[1], -(now_ms + tonumber(ARGV[3])), ARGV[i])
            else
                redis.call("ZADD", KEYS[1], now_ms + keep, ARGV[i])
            end
        end
        answers[i - 3] = "1"
    end
end
return table.concat(answers)
