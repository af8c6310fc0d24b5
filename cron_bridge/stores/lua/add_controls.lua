-- Create control records of one group, all or none: when any of the fields exists, nothing
-- is written and the fields that exist are named.
-- KEYS[1]: the hash of the group
-- ARGV: field, value, field, value, ...
-- Returns {0, kind} when the key holds another type than a hash (nothing written), else
-- {1, field, field, ...}: the fields that existed (none: every record was written).
local kind = redis.call("TYPE", KEYS[1])["ok"]
if kind ~= "hash" and kind ~= "none" then
    return {0, kind}
end
local found = {1}
for i = 1, #ARGV, 2 do
    if redis.call("HEXISTS", KEYS[1], ARGV[i]) == 1 then
        found[#found + 1] = ARGV[i]
    end
end
if #found > 1 then
    return found
end
for i = 1, #ARGV, 2000 do
    redis.call("HSET", KEYS[1], unpack(ARGV, i, math.min(i + 1999, #ARGV)))
end
return found
