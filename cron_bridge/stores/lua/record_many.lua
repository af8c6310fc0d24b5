-- Write a batch of run records: push each onto its job's list, then trim each list once.
-- KEYS: the list of each record, in order (runs:<job>, a job's list given once per record)
-- ARGV[1]: how many records a list keeps; ARGV[2 ..]: the records (JSON), one per key
-- Returns the number of records written.
-- One command for the batch instead of a push and a trim each: a burst writes a record per
-- occurrence it enqueued.
local trimmed = {}
local keep = tonumber(ARGV[1])
for i = 1, #KEYS do
    redis.call("LPUSH", KEYS[i], ARGV[i + 1])
end
for i = 1, #KEYS do
    if not trimmed[KEYS[i]] then
        trimmed[KEYS[i]] = true
        redis.call("LTRIM", KEYS[i], 0, keep - 1)
    end
end
return #KEYS
