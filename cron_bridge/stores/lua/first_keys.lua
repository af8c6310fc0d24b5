-- The first keys of a control group in byte order (a listing's first page), from the ordered
-- index kept beside it (write_group.lua): what the page shows, not the whole group. An index
-- that is not the group's (missing, of another type, of another size, with a score but 0 that
-- leaves its order unspecified, or naming a key the group lacks among the keys read: written
-- past by a writer of an older release, or a hand-made change) is made again from the hash
-- first, when the hash holds at most ARGV[3] fields.
-- KEYS[1]: the hash of the group, KEYS[2]: its index
-- ARGV[1]: how many keys, ARGV[2]: the most bytes of one key, ARGV[3]: the most fields of a
-- hash whose index is made again here
-- Returns {-1} when the index could not be used (the caller reads the group whole), else the
-- number of fields the hash holds, the byte length of each key given (decimal,
-- comma-separated), then those keys, one after another (as control_keys.lua packs them).
local count, name_max, most = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local total = redis.call("HLEN", KEYS[1])

local function made_again()
    if total > most then
        return false
    end
    redis.call("UNLINK", KEYS[2]) -- a large index is freed beside the server, not in it
    local fields = redis.call("HKEYS", KEYS[1])
    for i = 1, #fields, 1000 do
        local members = {}
        for j = i, math.min(i + 999, #fields) do
            members[#members + 1] = 0
            members[#members + 1] = fields[j]
        end
        redis.call("ZADD", KEYS[2], unpack(members))
    end
    return true
end

-- The first count keys of the index, or nil when one of them is not in the hash.
local function first()
    if count <= 0 then
        return {}
    end
    local found = redis.call("ZRANGEBYLEX", KEYS[2], "-", "+", "LIMIT", 0, count)
    for _, name in ipairs(found) do
        if redis.call("HEXISTS", KEYS[1], name) == 0 then
            return nil
        end
    end
    return found
end

local kind = redis.call("TYPE", KEYS[2])["ok"]
local made = false
if
    kind ~= "zset"
    or redis.call("ZCARD", KEYS[2]) ~= total
    or redis.call("ZCOUNT", KEYS[2], 0, 0) ~= total
then
    if not made_again() then
        return {-1}
    end
    made = true
end
local found = first()
if found == nil then
    if made or not made_again() then
        return {-1}
    end
    found = first()
    if found == nil then
        return {-1}
    end
end
local lengths, names = {}, {}
-- Keys too long to be read are left out after the read: a page of them is short, never
-- wrong (each such key was refused when it was written through this store).
for _, name in ipairs(found) do
    if #name <= name_max then
        names[#names + 1] = name
        lengths[#lengths + 1] = #name
    end
end
return {total, table.concat(lengths, ","), table.concat(names)}
