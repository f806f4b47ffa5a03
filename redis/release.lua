-- release.lua: free the lease if this owner and token hold its latest grant,
-- and hand it to the live head of the queue (with lease_lib.lua).
-- ARGV[6] owner, ARGV[7] token, ARGV[8] the call's own id ('' or absent:
-- none).
-- Reply: 1 released, 3 released but the restart marker changed (no grant
-- was made; the caller re-checks), 2 already released or expired and not
-- retaken (a repeat of one's own release), 0 not held (nothing changed).
-- A release records its call's id in the fence, in one of ten fields
-- chosen by its token's last decimal digit (r0 .. r9), so that the same
-- call sent again is answered 2 also once the lease has been granted (and
-- released) again: go-redis sends a script again when its connection broke
-- before the reply, and other clients may take the lease in between (such
-- a resend found another holder and answered 0, "not held", for a call
-- that had ended its grant). A field is overwritten only by the release of
-- a later token with the same last digit. A new call after another grant
-- is still 0.

-- resent: 2 if this call (its id rid) released the token, else 0.
local function resent(token, rid)
  if rid and rid ~= '' and redis.call('HGET', K_FENCE, 'r' .. string.sub(token, -1)) == rid then return 2 end
  return 0
end

local function release(KEYS, ARGV)
  begin(KEYS, ARGV)
  local cur = redis.call('HMGET', K_LEASE, 'owner', 'token')
  if cur[1] then
    if cur[1] == ARGV[6] and cur[2] == ARGV[7] then
      redis.call('DEL', K_LEASE)
      if ARGV[8] and ARGV[8] ~= '' then redis.call('HSET', K_FENCE, 'r' .. string.sub(ARGV[7], -1), ARGV[8]) end
      freed()
      if marker_state == false then return 3 end
      return 1
    end
    return resent(ARGV[7], ARGV[8])
  end
  local f = redis.call('HMGET', K_FENCE, 'n', 'o')
  if f[1] == ARGV[7] and f[2] == ARGV[6] then
    -- Expired: a queued waiter may not have been handed the lease yet.
    if redis.call('EXISTS', K_QUEUE) == 1 then handover(nil) end
    return 2
  end
  return resent(ARGV[7], ARGV[8])
end
