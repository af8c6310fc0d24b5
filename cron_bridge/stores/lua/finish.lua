-- Mark an occurrence completed, then free its run's lock, only for its owner.
-- KEYS[1]: the completion mark (kept if it is there already, of whatever type)
-- KEYS[2]: the lock key (in the mark's Redis Cluster slot: the caller checks)
-- ARGV[1]: the mark's lifetime in milliseconds
-- ARGV[2]: the lock's owner
-- Returns 1 when the lock was freed, else 0.
redis.call("SET", KEYS[1], "completed", "NX", "PX", ARGV[1])
if redis.call("TYPE", KEYS[2])["ok"] == "string" and redis.call("GET", KEYS[2]) == ARGV[2] then
    return redis.call("DEL", KEYS[2])
end
return 0
