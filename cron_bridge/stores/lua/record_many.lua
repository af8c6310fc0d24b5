-- Write a batch of run records: push each onto its job's list, then trim each list once; and
-- raise the jobs' run summaries (run_summary.py) where the batch's are newer.
-- KEYS[1 .. n]: the list of each record, in order (runs:<job>, a job's list given once per
--   record); KEYS[n + 1], KEYS[n + 2]: the hashes controls:latest-run and controls:latest-end
-- ARGV[1]: how many records a list keeps; ARGV[2]: n; ARGV[3 .. n + 2]: the records (JSON),
--   one per key; then the ceiling (epoch ms: an entry scheduled after it is replaced), the
--   outcomes an entry names (a JSON list) and an entry's longest length, then for each of
--   the two hashes the number of its entries and the entries, job then entry
-- Returns each key that holds no list (or no hash), then the type it holds: its records (its
-- entries) are not written (a key of the wrong type is left as it is), the others are. The
-- types are read before any write, so a batch never stops half way.
-- One command for the batch instead of a push and a trim each: a burst writes a record per
-- occurrence it enqueued.
local usable = {}
local skipped = {}
local keep = tonumber(ARGV[1])
local n = tonumber(ARGV[2])
local function check(key, wanted)
    if usable[key] == nil then
        local kind = redis.call("TYPE", key)["ok"]
        usable[key] = kind == wanted or kind == "none"
        if not usable[key] then
            skipped[#skipped + 1] = key
            skipped[#skipped + 1] = kind
        end
    end
end
for i = 1, n do
    check(KEYS[i], "list")
end
check(KEYS[n + 1], "hash")
check(KEYS[n + 2], "hash")
for i = 1, n do
    if usable[KEYS[i]] then
        redis.call("LPUSH", KEYS[i], ARGV[i + 2])
    end
end
for i = 1, n do
    local key = KEYS[i]
    if usable[key] then
        redis.call("LTRIM", key, 0, keep - 1)
        usable[key] = false -- trimmed once
    end
end
-- An entry's place (run_summary.order): scheduled, rank, attempt; nil for another shape
-- (its length read first: a huge value is not copied into the script).
local shape = "^" .. string.rep("%d", 15) .. " [1-4] %d%d%d%d%d "
local outcomes = {}
for _, outcome in ipairs(cjson.decode(ARGV[n + 4])) do
    outcomes[outcome] = true
end
local function place(entry)
    if not entry or not string.find(entry, shape) or not outcomes[string.sub(entry, 25)] then
        return nil
    end
    return tonumber(string.sub(entry, 1, 15)), tonumber(string.sub(entry, 17, 17)),
        tonumber(string.sub(entry, 19, 23))
end
local longest = tonumber(ARGV[n + 5])
local function held(hash, job)
    if redis.call("HSTRLEN", hash, job) > longest then
        return nil
    end
    return redis.call("HGET", hash, job)
end
local ceiling = tonumber(ARGV[n + 3])
local at = n + 6
for h = 1, 2 do
    local hash = KEYS[n + h]
    local count = tonumber(ARGV[at])
    for j = 1, count do
        local job, entry = ARGV[at + 2 * j - 1], ARGV[at + 2 * j]
        if usable[hash] then
            local ms, rank, attempt = place(held(hash, job))
            local new_ms, new_rank, new_attempt = place(entry)
            local later = ms == nil or ms > ceiling or ms < new_ms
                or (ms == new_ms and (rank < new_rank
                    or (rank == new_rank and attempt < new_attempt)))
            if later then
                redis.call("HSET", hash, job, entry)
            end
        end
    end
    at = at + 2 * count + 1
end
return skipped
