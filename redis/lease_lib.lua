-- lease_lib.lua: the helpers of the lease functions that grant or free a
-- lease (acquire.lua, release.lua, wait.lua, leave.lua). The store loads it
-- with every lease and record file as one Redis Function library, or, where
-- the server has no functions, prepends it to each file as a script (see
-- lua.go). Every key of a name is in one hash slot (the name's hash tag),
-- and every call declares them all: KEYS[1] lease hash (expires with the
-- lease), KEYS[2] fence hash (n = latest token, o = its owner, q = the
-- queue's arrival counter, qd = the value of q when the queue was last seen
-- empty; never expires), KEYS[3] queue (sorted set: waiter id -> arrival
-- number), KEYS[4] waiters (hash: d:<id> = liveness deadline in server ms,
-- r:<id> = the waiter's request), KEYS[5] Watch interest marker (a string
-- with PX), KEYS[6] the restart marker (not on a cluster, where it is in
-- another slot). ARGV[1] hold-back end in server ms (0 = none), ARGV[2]
-- token floor, ARGV[3] the floor_us of the marker the caller checked,
-- ARGV[4] the store's channel, ARGV[5] the lease name; the call's own from
-- ARGV[6].
--
-- A function library keeps its top-level locals from one call to the next:
-- begin sets every one of them at the start of each call.
local K_LEASE, K_FENCE, K_QUEUE, K_WAIT, K_INTEREST, K_MARK
local hold, floor, mark_floor, channel, name
-- The server clock and the marker check are read when first needed (a
-- release with no one queued needs neither).
local now_us, now_ms, marker_state

local function begin(keys, argv)
  K_LEASE, K_FENCE, K_QUEUE, K_WAIT, K_INTEREST, K_MARK = keys[1], keys[2], keys[3], keys[4], keys[5], keys[6]
  hold, floor = tonumber(argv[1]), tonumber(argv[2])
  mark_floor, channel, name = argv[3], argv[4], argv[5]
  now_us, now_ms, marker_state = nil, nil, nil
end

local function clock()
  if not now_us then
    local t = redis.call('TIME')
    now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
    now_ms = math.floor(now_us / 1000)
  end
end
-- marker_ok is false if the marker is not the one the caller checked: lost
-- in a restart, or rewritten by a client that noticed one. No grant is
-- made on stale facts.
local function marker_ok()
  if marker_state == nil then
    marker_state = (not K_MARK) or redis.call('HGET', K_MARK, 'floor_us') == mark_floor
  end
  return marker_state
end

local function fmt(x) return string.format('%.0f', x) end

-- CID_FIELDS are the fence's fields of grants' call ids (grant).
local CID_FIELDS = {'c0', 'c1', 'c2', 'c3', 'c4', 'c5', 'c6', 'c7', 'c8', 'c9'}

-- holds_cid reports whether one of vals[from], vals[from + 1], ... (the
-- fence's c0 .. c9 as HMGET read them) is the call id cid.
local function holds_cid(vals, from, cid)
  for i = from, #vals do
    if vals[i] == cid then
      return true
    end
  end
  return false
end

-- read_fence reads the fence before a grant of a free lease: the latest
-- token (n), the queue's arrival counter (q, '0' if none) and whether the
-- queue is known to be empty without looking at it (quiet). It is when qd,
-- written by a grant that found the queue empty, still equals q: every
-- enqueue (wait.lua, in every version that has queues) increments q in the
-- same step, and qd goes with the hash if the fence is lost. Given an
-- acquire call's id (cid), the same read also tells whether that call was
-- granted the lease before (granted; see granted_before).
local function read_fence(cid)
  local f
  local with_cid = cid and cid ~= ''
  if with_cid then
    f = redis.call('HMGET', K_FENCE, 'n', 'q', 'qd', unpack(CID_FIELDS))
  else
    f = redis.call('HMGET', K_FENCE, 'n', 'q', 'qd')
  end
  local q = f[2] or '0'
  return {n = f[1], q = q, quiet = f[3] == q, granted = with_cid and holds_cid(f, 4, cid)}
end

-- grant makes a new grant of the free lease: the next token is above the
-- fence and the floor. A missing fence (first use, or lost) starts at the
-- server clock in microseconds, which exceeds every token granted before.
-- f is read_fence's answer when the caller read it and found the queue
-- empty (the grant then records qd); nil otherwise (a handover). cid, the
-- acquire call's own id ('' or nil: none), is recorded in the fence, in
-- one of ten fields chosen by the token's last decimal digit (c0 .. c9),
-- for granted_before.
local function grant(owner, req, data, ttl_ns, f, cid)
  clock()
  local n
  if f then n = tonumber(f.n) else n = tonumber(redis.call('HGET', K_FENCE, 'n')) end
  local token
  if n then
    token = math.max(n + 1, floor)
  else
    token = math.max(now_us, floor, 1)
  end
  local tok, acq = fmt(token), fmt(now_us)
  local fence = {'n', tok, 'o', owner}
  if f then
    fence[#fence + 1], fence[#fence + 2] = 'qd', f.q
  end
  if cid and cid ~= '' then
    fence[#fence + 1], fence[#fence + 2] = 'c' .. string.sub(tok, -1), cid
  end
  redis.call('HSET', K_FENCE, unpack(fence))
  redis.call('HSET', K_LEASE, 'owner', owner, 'token', tok, 'req', req, 'data', data, 'ttl', ttl_ns, 'acq', acq)
  redis.call('PEXPIRE', K_LEASE, fmt(math.floor(tonumber(ttl_ns) / 1000000)))
  return tok, acq
end

-- granted_before reports whether the acquire call with id cid was granted
-- the lease before: a field c0 .. c9 of the fence holds it until a later
-- grant's token with the same last digit replaces it (ten grants at
-- least, a token floor's jump aside).
local function granted_before(cid)
  return cid ~= '' and holds_cid(redis.call('HMGET', K_FENCE, unpack(CID_FIELDS)), 1, cid)
end

-- drop removes a waiter's entry.
local function drop(id)
  redis.call('ZREM', K_QUEUE, id)
  redis.call('HDEL', K_WAIT, 'd:' .. id, 'r:' .. id)
end

-- A waiter's request: ttl_ns NUL owner NUL request id NUL data (owners
-- and request ids have no control characters; data comes last and may).
local function parse(r)
  local a = string.find(r, '\0', 1, true)
  local b = string.find(r, '\0', a + 1, true)
  local c = string.find(r, '\0', b + 1, true)
  return string.sub(r, 1, a - 1), string.sub(r, a + 1, b - 1), string.sub(r, b + 1, c - 1), string.sub(r, c + 1)
end

-- first_live returns the id of the first live entry of the queue (the
-- head) and its liveness deadline, dropping the entries before it whose
-- waiters stopped refreshing them; nil if no live waiter is queued.
local function first_live()
  clock()
  while true do
    local id = redis.call('ZRANGE', K_QUEUE, 0, 0)[1]
    if not id then
      return nil
    end
    local w = redis.call('HMGET', K_WAIT, 'd:' .. id, 'r:' .. id)
    if w[1] and w[2] and tonumber(w[1]) > now_ms then
      return id, tonumber(w[1])
    end
    drop(id)
  end
end

-- wake_head tells the live head of the queue, if any, that it is the head
-- now and that the lease is held for wait_ms more (name NUL id NUL
-- wait_ms): it times its next step by that expiry, not by its refresh.
-- With if_sooner, only if the lease may be free before the head's liveness
-- deadline (else the head refreshes its entry before then anyway, and that
-- step tells it that it is the head).
local function wake_head(wait_ms, if_sooner)
  local id, d = first_live()
  if id and not (if_sooner and now_ms + wait_ms >= d) then
    redis.call('PUBLISH', channel, name .. '\0' .. id .. '\0' .. fmt(math.max(wait_ms, 0)))
  end
end

-- handover gives the free lease to the live head of the queue, dropping
-- the entries whose waiters stopped refreshing them, and sends the grant
-- to that waiter alone (not when the head is self, the caller); the next
-- live waiter, head now, is told so in the same step if the new grant may
-- expire before that waiter's next refresh. Returns nil when no
-- live waiter is queued; {id} when the head is live but no grant may be
-- made now (holding back after a restart, or a stale marker: then the head
-- is woken to try with facts of its own); else {id, owner, request id,
-- token, acquired_us, ttl_ns}.
local function handover(self)
  local id = first_live()
  if not id then
    return nil
  end
  if not marker_ok() then
    if id ~= self then redis.call('PUBLISH', channel, name .. '\0' .. id) end
    return {id}
  end
  if now_ms < hold then
    return {id}
  end
  local ttl, owner, req, data = parse(redis.call('HGET', K_WAIT, 'r:' .. id))
  local tok, acq = grant(owner, req, data, ttl)
  drop(id)
  if id ~= self then
    redis.call('PUBLISH', channel, name .. '\0' .. id .. '\0' .. tok .. '\0' .. acq .. '\0' .. fmt(now_ms))
  end
  wake_head(math.floor(tonumber(ttl) / 1000000), true)
  return {id, owner, req, tok, acq, ttl}
end

-- freed tells whoever waits that the lease is free: the live head of the
-- queue gets it; failing that, Watch subscribers hear of it, but only if
-- one registered interest. No one waits: nothing is published, and one
-- EXISTS of both keys tells so.
local function freed()
  local n = redis.call('EXISTS', K_QUEUE, K_INTEREST)
  if n == 0 then
    return
  end
  local queued = n == 2 or redis.call('EXISTS', K_QUEUE) == 1
  if queued then
    local h = handover(nil)
    if h and h[2] then
      return
    end
  end
  -- The interest marker exists if EXISTS counted it: both keys were
  -- there, or one that is not the queue (handover leaves the marker be).
  if n == 2 or not queued then
    redis.call('PUBLISH', channel, name)
  end
end
