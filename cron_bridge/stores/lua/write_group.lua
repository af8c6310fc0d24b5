-- Write control records of one group, and of its ordered index when it keeps one (a sorted
-- set, every score 0, so ZRANGEBYLEX gives the keys in byte order: a listing's first page
-- without reading the rest). The hash and its index change together.
-- KEYS[1]: the hash of the group; KEYS[2], when given: its index
-- ARGV[1]: "put" (set and delete), "add" (create all or none: when any of the fields exists,
-- nothing is written and the fields that exist are named) or "replace" (replace all or none:
-- when any of the fields does not exist, nothing is written and those fields are named);
-- ARGV[2]: how many fields to set, n; then n field, value pairs; then the fields to delete
-- Returns {0, kind} when KEYS[1] holds another type than a hash (nothing written), else
-- {1, field, field, ...}: for "add" the fields that existed, for "replace" those that did
-- not (none: every one was written).
local kind = redis.call("TYPE", KEYS[1])["ok"]
if kind ~= "hash" and kind ~= "none" then
    return {0, kind}
end
local sets = tonumber(ARGV[2])
local last_set = 2 + 2 * sets
local found = {1}
if ARGV[1] == "add" or ARGV[1] == "replace" then
    local wanted = ARGV[1] == "add" and 1 or 0
    for i = 3, last_set, 2 do
        if redis.call("HEXISTS", KEYS[1], ARGV[i]) == wanted then
            found[#found + 1] = ARGV[i]
        end
    end
    if #found > 1 then
        return found
    end
end
local indexed = #KEYS > 1
-- The index is ours and made again whole by a reader that finds it disagreeing with the hash:
-- one of another type is dropped rather than refusing the records.
if indexed then
    local index = redis.call("TYPE", KEYS[2])["ok"]
    if index ~= "zset" and index ~= "none" then
        redis.call("DEL", KEYS[2])
    end
end
for i = 3, last_set, 2000 do
    local upto = math.min(i + 1999, last_set)
    redis.call("HSET", KEYS[1], unpack(ARGV, i, upto))
    if indexed then
        local members = {}
        for j = i, upto, 2 do
            members[#members + 1] = 0
            members[#members + 1] = ARGV[j]
        end
        redis.call("ZADD", KEYS[2], unpack(members))
    end
end
for i = last_set + 1, #ARGV, 1000 do
    local upto = math.min(i + 999, #ARGV)
    redis.call("HDEL", KEYS[1], unpack(ARGV, i, upto))
    if indexed then
        redis.call("ZREM", KEYS[2], unpack(ARGV, i, upto))
    end
end
return found
