-- A control group read within a reader's bounds (HSCAN, so a hash of any size costs the reply
-- what the bounds allow): up to ARGV[1] fields, names of at most ARGV[4] bytes; each value
-- while the values stay within ARGV[2] bytes and it within ARGV[3], else a nil in its place
-- (the field is still named, so a pause that cannot be read still pauses).
-- KEYS[1]: the hash of the group
-- ARGV[1]: the most fields, ARGV[2]: the most bytes of values, ARGV[3]: the most bytes of
-- one value, ARGV[4]: the most bytes of one field name
-- Returns the number of fields the hash holds, then name, value, name, value, ...
local most, budget = tonumber(ARGV[1]), tonumber(ARGV[2])
local one, name_max = tonumber(ARGV[3]), tonumber(ARGV[4])
local found = {redis.call("HLEN", KEYS[1])}
local taken, used, cursor = 0, 0, "0"
repeat
    local page = redis.call("HSCAN", KEYS[1], cursor, "COUNT", 200)
    cursor = page[1]
    local items = page[2]
    for i = 1, #items, 2 do
        local name, value = items[i], items[i + 1]
        if #name <= name_max then
            if taken >= most then
                return found
            end
            if #value > one or used + #value > budget then
                value = false -- a nil reply, which does not end the array as a Lua nil would
            else
                used = used + #value
            end
            taken = taken + 1
            found[#found + 1] = name
            found[#found + 1] = value
        end
    end
until cursor == "0"
return found
