-- records_delete.lua: delete a record if its version is the expected one.
-- KEYS[1] the record; ARGV[1] expected version.
-- Replies: {1} deleted; {0, actual version}; {2} absent.
local function records_delete(KEYS, ARGV)
  rec_begin()
  local cur = redis.call('HGET', KEYS[1], 'n')
  if not cur then
    return {2}
  end
  if cur ~= ARGV[1] then
    return {0, cur}
  end
  redis.call('DEL', KEYS[1])
  return {1}
end
