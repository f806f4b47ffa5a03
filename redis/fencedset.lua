-- fencedset.lua: store a value written under a lease unless a write with a
-- greater fencing token was stored already.
-- KEYS[1] the protected hash (fields value, token)
-- ARGV[1] value, ARGV[2] token (decimal, no leading zeros)
-- Reply: {1, token} stored, {0, current_token} refused.
-- Tokens are compared as decimal strings, so any uint64 compares exactly.
local function less(a, b)
  if #a ~= #b then
    return #a < #b
  end
  return a < b
end
local cur = redis.call('HGET', KEYS[1], 'token')
if cur and less(ARGV[2], cur) then
  return {0, cur}
end
redis.call('HSET', KEYS[1], 'value', ARGV[1], 'token', ARGV[2])
return {1, ARGV[2]}
