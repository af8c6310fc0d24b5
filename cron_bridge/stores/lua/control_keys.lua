-- The names of a control group, without its values, within a reader's bounds: up to ARGV[1]
-- names of at most ARGV[2] bytes each. HKEYS when the group is within the bound (its values
-- are never copied), else HSCAN until the bound, so a hash of any size costs what the
-- bounds allow. Packed in two strings rather than one reply per name, so 100,000 names
-- cost the client one parse, not 100,000.
-- KEYS[1]: the hash of the group
-- ARGV[1]: the most names, ARGV[2]: the most bytes of one name
-- Returns the number of fields the hash holds, the byte length of each name taken
-- (decimal, comma-separated), then the names taken, one after another.
local most, name_max = tonumber(ARGV[1]), tonumber(ARGV[2])
local total = redis.call("HLEN", KEYS[1])
local lengths, names = {}, {}
local function take(name)
    if #name <= name_max then
        names[#names + 1] = name
        lengths[#lengths + 1] = #name
    end
    return #names < most
end
if total <= most then
    for _, name in ipairs(redis.call("HKEYS", KEYS[1])) do
        take(name)
    end
else
    local cursor, going = "0", true
    repeat
        local page = redis.call("HSCAN", KEYS[1], cursor, "COUNT", 1000)
        cursor = page[1]
        local items = page[2]
        for i = 1, #items, 2 do
            going = take(items[i])
            if not going then
                break
            end
        end
    until cursor == "0" or not going
end
return {total, table.concat(lengths, ","), table.concat(names)}
