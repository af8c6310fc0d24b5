-- Extend a lock only for its owner.
-- KEYS[1]: the lock key
-- ARGV[1]: the owner that must hold it
-- ARGV[2]: the new lifetime in milliseconds, from now
-- Returns 1 when extended, 0 when the key is missing or held by someone else.
if redis.call("GET", KEYS[1]) == ARGV[1] then
    return redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
return 0
