-- renew.lua: extend a live lease held by this owner and token.
-- KEYS[1] lease hash; ARGV[1] owner, ARGV[2] token, ARGV[3] ttl ns, ARGV[4] ttl ms.
-- Reply: 1 renewed, 0 not held (nothing changed).
local function renew(KEYS, ARGV)
  local cur = redis.call('HMGET', KEYS[1], 'owner', 'token')
  if cur[1] == ARGV[1] and cur[2] == ARGV[2] then
    redis.call('HSET', KEYS[1], 'ttl', ARGV[3])
    redis.call('PEXPIRE', KEYS[1], ARGV[4])
    return 1
  end
  return 0
end
