-- epoch.lua: compare the server's run id with the store's marker and, if
-- the server restarted (or failed over) since the marker was written,
-- write a new one. Atomic, so concurrent clients agree on one marker.
-- KEYS[1] marker hash
-- ARGV[1] the server's run_id, ARGV[2] its uptime in seconds,
-- ARGV[3] the caller's hold-back in ms (recorded for operators only; each
-- client holds back by its own setting from since_ms).
-- Reply: {since_ms, holdback_until_ms, floor_us, now_ms, written}
--   since_ms: when the server may have lost data (server ms): its start if
--             the marker was missing, else when the new run id was noticed
--   floor_us: every token granted from now on is at least this
local function epoch(KEYS, ARGV)
  local t = redis.call('TIME')
  local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local now_ms = math.floor(now_us / 1000)
  local m = redis.call('HMGET', KEYS[1], 'run_id', 'since_ms', 'holdback_until_ms', 'floor_us')
  if m[1] == ARGV[1] then
    return {m[2], m[3], m[4], now_ms, 0}
  end
  local since = now_ms
  if not m[1] then
    -- No marker: a first use, or a restart that lost everything. Data can
    -- only have been lost when the server started; on a server up for long
    -- this hold-back is over already. uptime_in_seconds is the difference of
    -- two whole-second clock readings, so it overstates the time since the
    -- start by up to a second (a server started at x.9 s reports 1 at
    -- x+1.0 s): the start is before (now's whole second - uptime + 1),
    -- never after. Taking now - uptime would end the hold-back up to a
    -- second early.
    since = math.min(now_ms, (tonumber(t[1]) - tonumber(ARGV[2]) + 1) * 1000)
  end
  -- A different run id: a restart or a failover, at an unknown moment before
  -- now.
  local s_since = string.format('%.0f', since)
  local s_until = string.format('%.0f', since + tonumber(ARGV[3]))
  local s_floor = string.format('%.0f', now_us)
  redis.call('HSET', KEYS[1], 'run_id', ARGV[1], 'since_ms', s_since, 'holdback_until_ms', s_until,
    'floor_us', s_floor, 'prev_run_id', m[1] or '')
  return {s_since, s_until, s_floor, now_ms, 1}
end
