-- acquire.lua: one TryAcquire, atomically (with lease_lib.lua).
-- ARGV[6] owner, ARGV[7] request id ('' = none), ARGV[8] data, ARGV[9] ttl in ns,
-- ARGV[10] the call's own id ('' or absent: none).
-- Replies:
--   {0, token, acquired_us, now_ms}          a new grant
--   {3, token, acquired_us, now_ms}          a retried acquire: same grant, fresh expiry
--   {1, owner, token, pttl_ms, acquired_us, request_id}  held by someone else
--                                           (or by this request's own grant below the floor)
--   {5, head owner, retry_ms}                free, but a waiter queued first (no grant now)
--   {2, remaining_ms}                        holding back after a restart
--   {4}                                      the marker changed: check again
--   {6}                                      this call was granted the lease
--                                           before (a send whose reply was
--                                           lost) and that grant has ended
--
-- A grant records its call's id in the fence (lease_lib.lua's grant), so
-- that the same call sent again by go-redis (its connection broke before
-- the reply) is not told the lease is held by the one who took it after
-- the call's own grant ended, nor granted it a second time: either answer
-- would hide a grant others may have seen.
local function acquire(KEYS, ARGV)
  begin(KEYS, ARGV)
  if not marker_ok() then
    return {4}
  end
  clock()
  if now_ms < hold then
    return {2, hold - now_ms}
  end
  local owner, req, cid = ARGV[6], ARGV[7], ARGV[10] or ''
  local cur = redis.call('HMGET', K_LEASE, 'owner', 'token', 'req', 'acq')
  if cur[1] then
    -- A retry gets its grant back only if that grant was made since the
    -- latest restart was noticed (token >= floor).
    if req ~= '' and cur[1] == owner and cur[3] == req and tonumber(cur[2]) >= floor then
      redis.call('HSET', K_LEASE, 'data', ARGV[8], 'ttl', ARGV[9])
      redis.call('PEXPIRE', K_LEASE, fmt(math.floor(tonumber(ARGV[9]) / 1000000)))
      return {3, cur[2], cur[4], now_ms}
    end
    if granted_before(cid) then
      return {6}
    end
    return {1, cur[1], cur[2], redis.call('PTTL', K_LEASE), cur[4], cur[3] or ''}
  end
  -- Free. Queued waiters come first: the live head gets the lease now. The
  -- fence tells when no one can be queued (read_fence); else the queue is
  -- looked at. The same read tells whether this call was granted before.
  local f = read_fence(cid)
  if f.granted then
    return {6}
  end
  if not f.quiet and redis.call('EXISTS', K_QUEUE) == 1 then
    local h = handover(nil)
    if h then
      if not h[2] then
        local r = redis.call('HGET', K_WAIT, 'r:' .. h[1])
        local _, hown = parse(r)
        return {5, hown, 10}
      end
      if req ~= '' and h[2] == owner and h[3] == req then
        return {3, h[4], h[5], now_ms}
      end
      return {1, h[2], h[4], math.floor(tonumber(h[6]) / 1000000), h[5], h[3]}
    end
    -- No live waiter: handover emptied the queue (the fence is unchanged).
  end
  local tok, acq = grant(owner, req, ARGV[8], ARGV[9], f, cid)
  return {0, tok, acq, now_ms}
end
