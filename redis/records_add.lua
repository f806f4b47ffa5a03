-- records_add.lua: add to a counter (created at 0 when absent).
-- KEYS[1] the record; ARGV[1] delta (decimal int64).
-- Replies: {1, value, version}; {2, value} not a counter; {3, value} overflow.
local function records_add(KEYS, ARGV)
  rec_begin()
  local n = redis.call('HGET', KEYS[1], 'n')
  local v, code, found = add_counter(KEYS[1], ARGV[1])
  if not v then
    return {code, found}
  end
  local ver = next_version(n)
  redis.call('HSET', KEYS[1], 'n', ver)
  return {1, v, ver}
end
