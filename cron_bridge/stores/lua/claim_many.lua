-- Claim a batch of occurrences, and move each job's last claimed occurrence forward.
-- KEYS[1 .. #KEYS-3]: the claim keys, <prefix>occ:<job>:<epoch ms>;
-- KEYS[#KEYS-2]: the hash of job -> last claimed (epoch ms);
-- KEYS[#KEYS-1], KEYS[#KEYS]: the sorted set and the hash of pending sends (pending_add.lua)
-- ARGV[1]: the owner; ARGV[2]: the claims' lifetime (ms); ARGV[3]: the length of <prefix>;
-- ARGV[4]: one character per claim, "1" to leave it pending its send when won (or ""), and
-- ARGV[5]: the lease (ms)
-- Returns one character per claim, in order: "1" created (won), "0" already there (lost, a
-- key of any type), then the type the hash holds: one that is no hash is read as empty and
-- left as it is (checked before any write, so the claims never stop half way), then the
-- types the sorted set and the hash of pending sends hold (either of another type: both are
-- left as they are, nothing pending; "" when none was asked for).
-- One command for the whole batch, each job and time read from its key: the client packs one
-- argument per claim instead of a command each, which is most of what a replica pays for a
-- claim it loses.
local won = {}
local latest = {}
local last = KEYS[#KEYS - 2]
local kind = redis.call("TYPE", last)["ok"]
local usable = kind == "hash" or kind == "none"
local pending, owners = KEYS[#KEYS - 1], KEYS[#KEYS]
local pending_kind, owners_kind = "", ""
if ARGV[4] ~= "" then
    pending_kind = redis.call("TYPE", pending)["ok"]
    owners_kind = redis.call("TYPE", owners)["ok"]
end
local pend = (pending_kind == "zset" or pending_kind == "none")
    and (owners_kind == "hash" or owners_kind == "none") and ARGV[4] ~= ""
local until_ms = 0
if pend then
    local now = redis.call("TIME")
    until_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) + tonumber(ARGV[5])
end
local from = tonumber(ARGV[3]) + 1
local leased, owned = {}, {}
for i = 1, #KEYS - 3 do
    if redis.call("SET", KEYS[i], ARGV[1], "NX", "PX", ARGV[2]) then
        won[i] = "1"
        if pend and string.byte(ARGV[4], i) == 49 then
            leased[#leased + 1] = until_ms
            leased[#leased + 1] = string.sub(KEYS[i], from)
            owned[#owned + 1] = string.sub(KEYS[i], from)
            owned[#owned + 1] = ARGV[1]
            if #leased >= 4000 then
                redis.call("ZADD", pending, unpack(leased))
                redis.call("HSET", owners, unpack(owned))
                leased, owned = {}, {}
            end
        end
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
if #leased > 0 then
    redis.call("ZADD", pending, unpack(leased))
    redis.call("HSET", owners, unpack(owned))
end
return {table.concat(won), kind, pending_kind, owners_kind}
