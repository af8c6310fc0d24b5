-- Take a run's overlap lock with its fencing token, unless its occurrence completed or
-- another copy of its message began; with a began mark asked for, write it with the lock.
-- All the keys are in one Redis Cluster slot (the caller checks).
-- KEYS[1]: the lock key
-- KEYS[2]: its fencing counter, never expiring
-- KEYS[3]: the occurrence's completion mark (read when ARGV[3] is "1")
-- KEYS[4]: the occurrence's began mark (read and written when ARGV[4] is not "")
-- ARGV[1]: the owner
-- ARGV[2]: the lock's lifetime in milliseconds
-- ARGV[3]: "1" to refuse when the completion mark is there, else "0"
-- ARGV[4]: the began mark's value, "<copy>|<nonce>", or "" when no mark is asked for
-- ARGV[5]: the copy ("<copy>" of that value): a mark of its own earlier try is left as it is
-- ARGV[6]: the began mark's lifetime in milliseconds
-- Returns {"completed"}; {"held", holder or "", the lock key's type}; {"began", its value or
-- "", the mark key's type}; {"taken", token, 1 when the began mark was written else 0}; or
-- -1 when the counter holds what no token can follow. A refusal writes nothing.
if ARGV[3] == "1" and redis.call("EXISTS", KEYS[3]) == 1 then
    return {"completed"}
end
local kind = redis.call("TYPE", KEYS[1])["ok"]
if kind ~= "none" then
    local holder = ""
    if kind == "string" then
        holder = redis.call("GET", KEYS[1])
    end
    return {"held", holder, kind}
end
local mark = false
if ARGV[4] ~= "" then
    local marked = redis.call("TYPE", KEYS[4])["ok"]
    if marked == "none" then
        mark = true
    else
        local first = ""
        if marked == "string" then
            first = redis.call("GET", KEYS[4])
        end
        local bar = string.find(first, "|", 1, true)
        local copy = first
        if bar ~= nil then
            copy = string.sub(first, 1, bar - 1)
        end
        -- An earlier try of the same copy wrote it (its redelivery, its retry): left as it is.
        if marked ~= "string" or copy ~= ARGV[5] then
            return {"began", first, marked}
        end
    end
end
-- The counter, as acquire_fenced.lua reads and increases it.
local counter = redis.call("TYPE", KEYS[2])["ok"]
if counter ~= "none" and counter ~= "string" then
    return -1
end
if counter == "string" then
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
if mark then
    redis.call("SET", KEYS[4], ARGV[4], "PX", ARGV[6])
    return {"taken", token, 1}
end
return {"taken", token, 0}
