-- acquire.lua: one TryAcquire, atomically.
-- KEYS[1] lease hash (expires with the lease), KEYS[2] fence hash (never expires),
-- KEYS[3] the restart marker (not on a cluster, where it is in another slot)
-- ARGV[1] owner, ARGV[2] request id ('' = none), ARGV[3] data,
-- ARGV[4] ttl in ns (recorded), ARGV[5] ttl in ms (PEXPIRE),
-- ARGV[6] hold-back end in server ms (0 = none), ARGV[7] token floor,
-- ARGV[8] the floor_us of the marker the caller checked.
-- Replies:
--   {0, token, acquired_us, now_ms}          a new grant
--   {3, token, acquired_us, now_ms}          a retried acquire: same grant, fresh expiry
--   {1, owner, token, pttl_ms, acquired_us, request_id}  held by someone else
--                                           (or by this request's own grant below the floor)
--   {2, remaining_ms}                        holding back after a restart
--   {4}                                      the marker changed: check again
if KEYS[3] and redis.call('HGET', KEYS[3], 'floor_us') ~= ARGV[8] then
  return {4}
end
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now_ms = math.floor(now_us / 1000)
local hold = tonumber(ARGV[6])
if now_ms < hold then
  return {2, hold - now_ms}
end
local floor = tonumber(ARGV[7])
local cur = redis.call('HMGET', KEYS[1], 'owner', 'token', 'req', 'acq')
if cur[1] then
  -- A retry gets its grant back only if that grant was made since the
  -- latest restart was noticed (token >= floor).
  if ARGV[2] ~= '' and cur[1] == ARGV[1] and cur[3] == ARGV[2] and tonumber(cur[2]) >= floor then
    redis.call('HSET', KEYS[1], 'data', ARGV[3], 'ttl', ARGV[4])
    redis.call('PEXPIRE', KEYS[1], ARGV[5])
    return {3, cur[2], cur[4], now_ms}
  end
  return {1, cur[1], cur[2], redis.call('PTTL', KEYS[1]), cur[4], cur[3] or ''}
end
-- Free: the next token is above the fence and the floor. A missing fence
-- (first use, or lost) starts at the server clock in microseconds, which
-- exceeds every token granted before.
local n = tonumber(redis.call('HGET', KEYS[2], 'n'))
local token
if n then
  token = math.max(n + 1, floor)
else
  token = math.max(now_us, floor, 1)
end
local tok = string.format('%.0f', token)
local acq = string.format('%.0f', now_us)
redis.call('HSET', KEYS[2], 'n', tok, 'o', ARGV[1])
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', tok, 'req', ARGV[2], 'data', ARGV[3], 'ttl', ARGV[4], 'acq', acq)
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return {0, tok, acq, now_ms}
