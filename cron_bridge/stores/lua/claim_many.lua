-- Claim a batch of occurrences, and move each job's last claimed occurrence forward.
-- KEYS[1 .. #KEYS-1]: the claim keys, <prefix>occ:<job>:<epoch ms>;
-- KEYS[#KEYS]: the hash of job -> last claimed (epoch ms)
-- ARGV[1]: the owner; ARGV[2]: the claims' lifetime (ms); ARGV[3]: the length of <prefix>
-- Returns one character per claim, in order: "1" created (won), "0" already there (lost, a
-- key of any type), then the type the hash holds: one that is no hash is read as empty and
-- left as it is (checked before any write, so the claims never stop half way).
-- One command for the whole batch, each job and time read from its key: the client packs one
-- argument per claim instead of a command each, which is most of what a replica pays for a
-- claim it loses.
local won = {}
local latest = {}
local last = KEYS[#KEYS]
local kind = redis.call("TYPE", last)["ok"]
local usable = kind == "hash" or kind == "none"
local from = tonumber(ARGV[3]) + 1
for i = 1, #KEYS - 1 do
    if redis.call("SET", KEYS[i], ARGV[1], "NX", "PX", ARGV[2]) then
        won[i] = "1"
    else
        won[i] = "0"
    end
    local job, ms = string.match(KEYS[i], "^occ:(.+):(%d+)$", from)
    if latest[job] == nil or tonumber(ms) > tonumber(latest[job]) then
        latest[job] = ms
    end
end
if usable then
    for job, ms in pairs(latest) do
        local current = tonumber(redis.call("HGET", last, job))
        if current == nil or tonumber(ms) > current then
            redis.call("HSET", last, job, ms)
        end
    end
end
return {table.concat(won), kind}
