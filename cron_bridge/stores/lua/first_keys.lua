-- The first keys of a control group in byte order (a listing's first page), from the ordered
-- index kept beside it (put_ordered.lua): what the page shows, not the whole group. An index
-- that disagrees with the hash in size (missing, of another type, or written past: a writer of
-- an older release, or a hand-made change) is made again from the hash first, when the hash
-- holds at most ARGV[3] fields.
-- KEYS[1]: the hash of the group, KEYS[2]: its index
-- ARGV[1]: how many keys, ARGV[2]: the most bytes of one key, ARGV[3]: the most fields of a
-- hash whose index is made again here
-- Returns {-1} when the index could not be used (the caller reads the group whole), else the
-- number of fields the hash holds, the byte length of each key given (decimal,
-- comma-separated), then those keys, one after another (as control_keys.lua packs them).
local count, name_max, most = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local total = redis.call("HLEN", KEYS[1])
local kind = redis.call("TYPE", KEYS[2])["ok"]
if kind ~= "zset" or redis.call("ZCARD", KEYS[2]) ~= total then
    if total > most then
        return {-1}
    end
    redis.call("DEL", KEYS[2])
    local fields = redis.call("HKEYS", KEYS[1])
    for i = 1, #fields, 1000 do
        local members = {}
        for j = i, math.min(i + 999, #fields) do
            members[#members + 1] = 0
            members[#members + 1] = fields[j]
        end
        redis.call("ZADD", KEYS[2], unpack(members))
    end
end
local lengths, names = {}, {}
if count > 0 then
    -- Keys too long to be read are left out after the read: a page of them is short, never
    -- wrong (each such key was refused when it was written through this store).
    for _, name in ipairs(redis.call("ZRANGEBYLEX", KEYS[2], "-", "+", "LIMIT", 0, count)) do
        if #name <= name_max then
            names[#names + 1] = name
            lengths[#lengths + 1] = #name
        end
    end
end
return {total, table.concat(lengths, ","), table.concat(names)}
