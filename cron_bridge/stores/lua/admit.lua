-- Take a run's overlap lock with its fencing token, unless its occurrence completed or
-- another copy of its message began; with a began mark asked for, write it with the lock.
-- All the keys are in one Redis Cluster slot (the caller checks).
-- KEYS[1]: the lock key
-- KEYS[2]: its fencing counter, never expiring
-- KEYS[3]: the occurrence's completion mark (read when ARGV[3] is "1")
-- KEYS[4]: the occurrence's began mark (read and written when ARGV[4] is not "")
-- ARGV[1]: the owner
-- ARGV[2]: the lock's lifetime in milliseconds
-- ARGV[3]: "1" to refuse when the completion mark holds "completed", else "0"
-- ARGV[4]: the began mark's value, "<copy>|<nonce>", or "" when no mark is asked for
-- ARGV[5]: the copy: a mark "<copy>|" and 8 lowercase hex digits is an earlier try's of it,
--          left as it is (keys.began_by asks the same); any other value is another copy's
-- ARGV[6]: the began mark's lifetime in milliseconds
-- Returns {"completed"}; {"held", holder (nil when of another type), the lock key's type, D};
-- {"began", its value (nil when of another type), the mark key's type, D}; {"taken", token, 1 when the began mark was written else
-- 0, D}; or -1 when the counter holds what no token can follow. D is the completion mark's
-- type when it is asked for and of another type than a string (unreadable: it marks
-- nothing), else "". A refusal writes nothing.
local unread = ""
if ARGV[3] == "1" then
    local done = redis.call("TYPE", KEYS[3])["ok"]
    if done == "string" then
        if redis.call("GET", KEYS[3]) == "completed" then
            return {"completed"}
        end
    elseif done ~= "none" then
        unread = done
    end
end
local kind = redis.call("TYPE", KEYS[1])["ok"]
if kind ~= "none" then
    local holder = false
    if kind == "string" then
        holder = redis.call("GET", KEYS[1])
    end
    return {"held", holder, kind, unread}
end
-- The counter, as acquire_fenced.lua reads it, before the began mark: a counter no token can
-- follow fails the run whatever the mark says, as the steps one after another do.
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
local mark = false
if ARGV[4] ~= "" then
    local marked = redis.call("TYPE", KEYS[4])["ok"]
    if marked == "none" then
        mark = true
    else
        local first = false
        if marked == "string" then
            first = redis.call("GET", KEYS[4])
        end
        local copy = ARGV[5] .. "|"
        local own = marked == "string" and string.len(first) == string.len(copy) + 8
            and string.sub(first, 1, string.len(copy)) == copy
            and string.match(string.sub(first, string.len(copy) + 1), "^[0-9a-f]+$") ~= nil
        if not own then
            return {"began", first, marked, unread}
        end
    end
end
local token = redis.pcall("INCR", KEYS[2])
if type(token) ~= "number" or token < 1 then
    return -1
end
redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
if mark then
    redis.call("SET", KEYS[4], ARGV[4], "PX", ARGV[6])
    return {"taken", token, 1, unread}
end
return {"taken", token, 0, unread}
