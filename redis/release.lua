-- release.lua: free the lease if this owner and token hold its latest grant.
-- KEYS[1] lease hash, KEYS[2] fence hash
-- ARGV[1] owner, ARGV[2] token, ARGV[3] release channel, ARGV[4] lease name
-- Reply: 1 released (and published), 2 already released or expired and not
-- retaken (a repeat of one's own release), 0 not held (nothing changed).
local cur = redis.call('HMGET', KEYS[1], 'owner', 'token')
if cur[1] then
  if cur[1] == ARGV[1] and cur[2] == ARGV[2] then
    redis.call('DEL', KEYS[1])
    redis.call('PUBLISH', ARGV[3], ARGV[4])
    return 1
  end
  return 0
end
local f = redis.call('HMGET', KEYS[2], 'n', 'o')
if f[1] == ARGV[2] and f[2] == ARGV[1] then
  return 2
end
return 0
