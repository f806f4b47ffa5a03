-- epoch.lua: compare the server's run id with the store's marker and, if
-- the server restarted (or failed over) since the marker was written,
-- write a new one. Atomic, so concurrent clients agree on one marker.
-- KEYS[1] marker hash
-- ARGV[1] the server's run_id, ARGV[2] its uptime in seconds,
-- ARGV[3] the caller's hold-back in ms, ARGV[4] the server's master_replid
-- (new at every promotion of a replica, also of a process that was the
-- primary before and keeps its run_id; '' if unknown), ARGV[5] '1' if the
-- caller sees replication (the server has replicas, was promoted, or is
-- reached through Sentinel): the marker then records it for good, ARGV[6]
-- '1' if the caller takes the server for durable (appendfsync always, a
-- master never promoted, reached directly, no replicas, and declared by
-- its user a single node never replicated: WithNeverReplicated).
-- Reply: {since_ms, holdback_until_ms, floor_us, now_ms, written, replicated, cause}
--   since_ms: when the server may have lost data (server ms): its start if
--             the marker was missing, else when the new run id was noticed
--   holdback_until_ms: no grant before it (the latest end any client
--             recorded: a new marker never shortens a recorded hold-back)
--   floor_us: every token granted from now on is at least this
--   replicated: '1' if the marker's data has ever been seen replicated, so
--             a restart cannot prove it is the node that made the grants
--   cause:    why the marker was last written: 'none' (no marker: a first
--             use, or a data set lost), 'repl' (same run id, new
--             replication id), 'restart' (a new run id), or '' (a marker
--             of a version that did not record it)
local function epoch(KEYS, ARGV)
  local t = redis.call('TIME')
  local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local now_ms = math.floor(now_us / 1000)
  local m = redis.call('HMGET', KEYS[1], 'run_id', 'since_ms', 'holdback_until_ms', 'floor_us', 'repl_id', 'replicated', 'cause')
  local repl = ARGV[4] or ''
  local replicated = m[6] or '0'
  if ARGV[5] == '1' and replicated ~= '1' then
    replicated = '1'
    if m[1] then redis.call('HSET', KEYS[1], 'replicated', '1') end
  end
  if m[1] == ARGV[1] and (not m[5] or m[5] == repl) then
    if not m[5] and repl ~= '' then
      -- A marker of a version that did not record the replication id.
      redis.call('HSET', KEYS[1], 'repl_id', repl)
    end
    return {m[2], m[3], m[4], now_ms, 0, replicated, m[7] or ''}
  end
  local since = now_ms
  local cause = 'restart'
  if m[1] == ARGV[1] then cause = 'repl' end
  if not m[1] then
    cause = 'none'
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
  -- A different run id or replication id: a restart or a failover, at an
  -- unknown moment before now. A durable server skips the hold-back only
  -- when its data was never seen replicated: a replica promoted and then
  -- restarted from its own disk also reports a durable master that was
  -- never promoted, and its data may lack grants the old primary made.
  -- Nor when the marker is missing: a durable server whose data set was
  -- lost (its AOF removed, or AOF turned on only at the restart) looks
  -- like a first use; the hold-back then runs from the server's start.
  local hb = tonumber(ARGV[3])
  if ARGV[6] == '1' and replicated ~= '1' and m[1] then hb = 0 end
  -- Never shorten a hold-back already recorded (another client noticed a
  -- promotion or a restart before this one), nor lower the floor.
  local untl = math.max(since + hb, tonumber(m[3] or '0') or 0)
  -- The floor is also the marker's identity for the lease functions
  -- (marker_ok): it must change.
  local fl = math.max(now_us, (tonumber(m[4] or '0') or 0) + 1)
  local s_since = string.format('%.0f', since)
  local s_until = string.format('%.0f', untl)
  local s_floor = string.format('%.0f', fl)
  redis.call('HSET', KEYS[1], 'run_id', ARGV[1], 'since_ms', s_since, 'holdback_until_ms', s_until,
    'floor_us', s_floor, 'prev_run_id', m[1] or '', 'repl_id', repl, 'replicated', replicated, 'cause', cause)
  return {s_since, s_until, s_floor, now_ms, 1, replicated, cause}
end
