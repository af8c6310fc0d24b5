-- Move each job's last claimed occurrence forward, never back.
-- KEYS[1]: the hash of job name -> last claimed occurrence (epoch ms)
-- ARGV: job, epoch ms, job, epoch ms, ...
-- Returns the number of jobs moved forward, or the type KEYS[1] holds when it is no hash
-- (nothing is written: a key of the wrong type is left as it is).
local kind = redis.call("TYPE", KEYS[1])["ok"]
if kind ~= "hash" and kind ~= "none" then
    return kind
end
local moved = 0
for i = 1, #ARGV, 2 do
    local current = tonumber(redis.call("HGET", KEYS[1], ARGV[i]))
    local candidate = tonumber(ARGV[i + 1])
    if current == nil or candidate > current then
        redis.call("HSET", KEYS[1], ARGV[i], ARGV[i + 1])
        moved = moved + 1
    end
end
return moved
