-- Move each job's last claimed occurrence forward, never back.
-- KEYS[1]: the hash of job name -> last claimed occurrence (epoch ms)
-- ARGV: job, epoch ms, job, epoch ms, ...
-- Returns the number of jobs moved forward.
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
