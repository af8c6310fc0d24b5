-- Write control records of a group that keeps an ordered index of its keys (a sorted set,
-- every score 0, so ZRANGE BYLEX gives the keys in byte order: a listing's first page
-- without reading the rest). The hash and its index change together.
-- KEYS[1]: the hash of the group, KEYS[2]: its index
-- ARGV[1]: "put" (set and delete) or "add" (create all or none: when any of the fields
-- exists, nothing is written and the fields that exist are named); ARGV[2]: how many fields
-- to set, n; then n field, value pairs; then the fields to delete
-- Returns {0, kind} when KEYS[1] holds another type than a hash (nothing written), else
-- {1, field, field, ...}: for "add", the fields that existed (none: every one was written).
local kind = redis.call("TYPE", KEYS[1])["ok"]
if kind ~= "hash" and kind ~= "none" then
    return {0, kind}
end
local sets = tonumber(ARGV[2])
local last_set = 2 + 2 * sets
local found = {1}
if ARGV[1] == "add" then
    for i = 3, last_set, 2 do
        if redis.call("HEXISTS", KEYS[1], ARGV[i]) == 1 then
            found[#found + 1] = ARGV[i]
        end
    end
    if #found > 1 then
        return found
    end
end
-- The index is ours and made again whole by a reader that finds it disagreeing with the hash:
-- one of another type is dropped rather than refusing the records.
local index = redis.call("TYPE", KEYS[2])["ok"]
if index ~= "zset" and index ~= "none" then
    redis.call("DEL", KEYS[2])
end
for i = 3, last_set, 2000 do
    local upto = math.min(i + 1999, last_set)
    redis.call("HSET", KEYS[1], unpack(ARGV, i, upto))
    local members = {}
    for j = i, upto, 2 do
        members[#members + 1] = 0
        members[#members + 1] = ARGV[j]
    end
    redis.call("ZADD", KEYS[2], unpack(members))
end
for i = last_set + 1, #ARGV, 1000 do
    local upto = math.min(i + 999, #ARGV)
    redis.call("HDEL", KEYS[1], unpack(ARGV, i, upto))
    redis.call("ZREM", KEYS[2], unpack(ARGV, i, upto))
end
return found
