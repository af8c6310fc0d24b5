-- Release a lock only for its owner.
-- KEYS[1]: the lock key
-- ARGV[1]: the owner that must hold it
-- Returns 1 when released, 0 when the key is missing or held by someone else.
if redis.call("GET", KEYS[1]) == ARGV[1] then
    return redis.call("DEL", KEYS[1])
end
return 0
