-- leave.lua: a waiter gives up (with lease_lib.lua): remove its entry, or,
-- if it was granted the lease meanwhile, release that grant (handing the
-- lease to the next live waiter).
-- ARGV[6] owner, ARGV[7] request id, ARGV[8] waiter id.
-- Reply: 1 entry removed, 2 a grant to it released, 0 nothing found.
local function leave(KEYS, ARGV)
  begin(KEYS, ARGV)
  local id = ARGV[8]
  if redis.call('ZSCORE', K_QUEUE, id) then
    local was_head = first_live() == id
    drop(id)
    if redis.call('EXISTS', K_LEASE) == 0 then
      -- It may have been the head of a free lease (held back, or not yet
      -- handed over): the next one is now.
      if redis.call('EXISTS', K_QUEUE) == 1 then handover(nil) end
    elseif was_head then
      -- The next live waiter is the head now: tell it, so that it times
      -- its next step by the holder's expiry rather than its refresh.
      wake_head(redis.call('PTTL', K_LEASE))
    end
    return 1
  end
  redis.call('HDEL', K_WAIT, 'd:' .. id, 'r:' .. id)
  local cur = redis.call('HMGET', K_LEASE, 'owner', 'req')
  if ARGV[7] ~= '' and cur[1] == ARGV[6] and cur[2] == ARGV[7] then
    redis.call('DEL', K_LEASE)
    freed()
    return 2
  end
  return 0
end
