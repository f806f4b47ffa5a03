-- wait.lua: one step of AcquireWait (with lease_lib.lua): enqueue the
-- waiter (or refresh its liveness deadline), and grant it the lease if it
-- is free and the waiter is the live head (or the queue is empty).
-- ARGV[6] owner, ARGV[7] request id, ARGV[8] data, ARGV[9] ttl in ns,
-- ARGV[10] waiter id, ARGV[11] liveness window in ms.
-- Replies:
--   {0, token, acquired_us, now_ms}   granted
--   {3, token, acquired_us, now_ms}   this request was granted already (its
--                                     grant message was lost, or a retry): fresh expiry
--   {1, rank, pttl_ms, holdback_ms, now_us}
--                                     queued (rank 0 = the live head); pttl of the
--                                     holder (negative: free); hold-back left;
--                                     the server time of this step (a grant
--                                     message made before it is stale: this
--                                     request no longer holds that grant)
--   {4}                               the marker changed: check again
local function wait(KEYS, ARGV)
  begin(KEYS, ARGV)
  if not marker_ok() then
    return {4}
  end
  clock()
  local owner, req, id = ARGV[6], ARGV[7], ARGV[10]
  local live = tonumber(ARGV[11])
  local cur = redis.call('HMGET', K_LEASE, 'owner', 'token', 'req', 'acq')
  if cur[1] and req ~= '' and cur[1] == owner and cur[3] == req and tonumber(cur[2]) >= floor then
    redis.call('HSET', K_LEASE, 'data', ARGV[8], 'ttl', ARGV[9])
    redis.call('PEXPIRE', K_LEASE, fmt(math.floor(tonumber(ARGV[9]) / 1000000)))
    drop(id)
    return {3, cur[2], cur[4], now_ms}
  end
  -- A free lease and a queue the fence knows to be empty (read_fence): grant
  -- at once, without looking at the queue.
  local f
  if not cur[1] and now_ms >= hold then
    f = read_fence()
    if f.quiet then
      local tok, acq = grant(owner, req, ARGV[8], ARGV[9], f)
      return {0, tok, acq, now_ms}
    end
  end
  if not redis.call('ZSCORE', K_QUEUE, id) then
    if f and redis.call('EXISTS', K_QUEUE) == 0 then
      local tok, acq = grant(owner, req, ARGV[8], ARGV[9], f)
      return {0, tok, acq, now_ms}
    end
    -- Arrival order: the moment this script runs.
    redis.call('ZADD', K_QUEUE, redis.call('HINCRBY', K_FENCE, 'q', 1), id)
    redis.call('HSET', K_WAIT, 'r:' .. id, ARGV[9] .. '\0' .. owner .. '\0' .. req .. '\0' .. ARGV[8])
  end
  redis.call('HSET', K_WAIT, 'd:' .. id, fmt(now_ms + live))
  -- The queue's keys outlive their latest live entry by nothing: a queue
  -- whose waiters all vanished disappears by itself.
  for _, k in ipairs({K_QUEUE, K_WAIT}) do
    if redis.call('PTTL', k) < live then redis.call('PEXPIRE', k, live) end
  end
  if not cur[1] then
    local h = handover(id)
    if h and h[1] == id and h[2] then
      return {0, h[4], h[5], now_ms}
    end
  end
  -- The head is the first live entry (lapsed ones before it are dropped).
  local rank = 0
  if first_live() ~= id then rank = redis.call('ZRANK', K_QUEUE, id) or 0 end
  return {1, rank, redis.call('PTTL', K_LEASE), math.max(hold - now_ms, 0), fmt(now_us)}
end
