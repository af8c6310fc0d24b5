-- Write a batch of run records: push each onto its job's list, then trim each list once.
-- KEYS: the list of each record, in order (runs:<job>, a job's list given once per record)
-- ARGV[1]: how many records a list keeps; ARGV[2 ..]: the records (JSON), one per key
-- Returns each key that holds no list, then the type it holds: its records are not written
-- (a key of the wrong type is left as it is), the others are. The types are read before any
-- write, so a batch never stops half way.
-- One command for the batch instead of a push and a trim each: a burst writes a record per
-- occurrence it enqueued.
local usable = {}
local skipped = {}
local keep = tonumber(ARGV[1])
for i = 1, #KEYS do
    if usable[KEYS[i]] == nil then
        local kind = redis.call("TYPE", KEYS[i])["ok"]
        usable[KEYS[i]] = kind == "list" or kind == "none"
        if not usable[KEYS[i]] then
            skipped[#skipped + 1] = KEYS[i]
            skipped[#skipped + 1] = kind
        end
    end
end
for i = 1, #KEYS do
    if usable[KEYS[i]] then
        redis.call("LPUSH", KEYS[i], ARGV[i + 1])
    end
end
for key, ok in pairs(usable) do
    if ok then
        redis.call("LTRIM", key, 0, keep - 1)
    end
end
return skipped
