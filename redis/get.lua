-- get.lua: read a live lease and its remaining time in one step.
-- KEYS[1] lease hash. Reply: nil if there is no live lease, else
-- {owner, token, data, ttl_ns, acquired_us, pttl_ms}.
local function get(KEYS, ARGV)
  local cur = redis.call('HMGET', KEYS[1], 'owner', 'token', 'data', 'ttl', 'acq')
  if not cur[1] then
    return false
  end
  return {cur[1], cur[2], cur[3], cur[4], cur[5], redis.call('PTTL', KEYS[1])}
end
