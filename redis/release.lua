-- release.lua: free the lease if this owner and token hold its latest grant,
-- and hand it to the live head of the queue (with lease_lib.lua).
-- ARGV[6] owner, ARGV[7] token.
-- Reply: 1 released, 3 released but the restart marker changed (no grant
-- was made; the caller re-checks), 2 already released or expired and not
-- retaken (a repeat of one's own release), 0 not held (nothing changed).
local function release(KEYS, ARGV)
  begin(KEYS, ARGV)
  local cur = redis.call('HMGET', K_LEASE, 'owner', 'token')
  if cur[1] then
    if cur[1] == ARGV[6] and cur[2] == ARGV[7] then
      redis.call('DEL', K_LEASE)
      freed()
      if marker_state == false then return 3 end
      return 1
    end
    return 0
  end
  local f = redis.call('HMGET', K_FENCE, 'n', 'o')
  if f[1] == ARGV[7] and f[2] == ARGV[6] then
    -- Expired: a queued waiter may not have been handed the lease yet.
    if redis.call('EXISTS', K_QUEUE) == 1 then handover(nil) end
    return 2
  end
  return 0
end
