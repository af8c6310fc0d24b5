-- Claim a batch of occurrences, and move each job's last claimed occurrence forward.
-- KEYS[1 .. #KEYS-1]: the claim keys; KEYS[#KEYS]: the hash of job -> last claimed (epoch ms)
-- ARGV[1]: the owner; ARGV[2]: the claims' lifetime (ms); ARGV[3 ..]: job, epoch ms, ...
-- Returns one character per claim, in order: "1" created (won), "0" already there (lost).
-- One command for the whole batch: the client packs a few arguments per claim instead of a
-- command each, which is most of what a replica pays for a claim it loses.
local won = {}
local last = KEYS[#KEYS]
for i = 1, #KEYS - 1 do
    if redis.call("SET", KEYS[i], ARGV[1], "NX", "PX", ARGV[2]) then
        won[i] = "1"
    else
        won[i] = "0"
    end
end
for i = 3, #ARGV, 2 do
    local current = tonumber(redis.call("HGET", last, ARGV[i]))
    local candidate = tonumber(ARGV[i + 1])
    if current == nil or candidate > current then
        redis.call("HSET", last, ARGV[i], ARGV[i + 1])
    end
end
return table.concat(won)
