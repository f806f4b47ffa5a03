-- records_put.lua: write a record if its version is the expected one.
-- KEYS[1] the record; ARGV[1] value, ARGV[2] expected version ('0': absent).
-- Replies: {1, version} written; {0, actual version ('0': absent)}.
local function records_put(KEYS, ARGV)
  rec_begin()
  local cur = redis.call('HGET', KEYS[1], 'n')
  if (cur or '0') ~= ARGV[2] then
    return {0, cur or '0'}
  end
  local ver = next_version(cur)
  redis.call('HSET', KEYS[1], 'v', ARGV[1], 'n', ver)
  return {1, ver}
end
