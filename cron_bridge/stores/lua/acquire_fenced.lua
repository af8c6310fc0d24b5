-- Take a lock that nobody holds, with its fencing token.
-- KEYS[1]: the lock key
-- KEYS[2]: its fencing counter (in the lock's hash slot), never expiring
-- ARGV[1]: the owner
-- ARGV[2]: the lifetime in milliseconds
-- Returns the token (one more than the last taking's), false when the lock key exists (held,
-- or another program's key of any type: as SET NX would), or -1 when the counter holds what
-- no token can follow (another type, not a whole number, below 1, at its end). The counter
-- is increased before the lock is written, so a counter that cannot be leaves it untaken.
if redis.call("EXISTS", KEYS[1]) == 1 then
    return false
end
local kind = redis.call("TYPE", KEYS[2])["ok"]
if kind ~= "none" and kind ~= "string" then
    return -1
end
-- Read before it is increased: an INCR of a value below 0 would be written, and would count
-- up to tokens already handed out.
if kind == "string" then
    local held = redis.call("GET", KEYS[2])
    if not string.match(held, "^[1-9][0-9]*$") or string.len(held) > 19 then
        return -1
    end
end
local token = redis.pcall("INCR", KEYS[2])
if type(token) ~= "number" or token < 1 then
    return -1
end
redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
return token
