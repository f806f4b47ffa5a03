-- records_lib.lua: helpers shared by the record functions (records_*.lua),
-- in the one library with them or prepended to each as a script (lua.go).
-- A record is a hash: v = value, n = version.

-- The server clock, read at most once a call; rec_begin forgets it at the
-- start of each call (a function library keeps it between calls).
local rec_now_us

local function rec_begin()
  rec_now_us = nil
end

-- next_version returns the version of the next write of a record whose
-- version is cur (false: absent): above cur and at least the server clock
-- in microseconds, so a record deleted and created again (or lost in a
-- restart) never gets a version it had before.
local function next_version(cur)
  if not rec_now_us then
    local t = redis.call('TIME')
    rec_now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  local n = tonumber(cur or '0') or 0
  return string.format('%.0f', math.max(n + 1, rec_now_us))
end

-- canon returns the canonical decimal form of s if Go's
-- strconv.ParseInt(s, 10, 64) accepts it ('+7' and '007' give '7'), else nil.
local function canon(s)
  local sign, digits = string.match(s, '^([+-]?)([0-9]+)$')
  if not digits then return nil end
  digits = string.gsub(digits, '^0+', '')
  if digits == '' then return '0' end
  local limit = '9223372036854775807'
  if sign == '-' then limit = '9223372036854775808' end
  if #digits > 19 or (#digits == 19 and digits > limit) then return nil end
  if sign == '-' then return '-' .. digits end
  return digits
end

-- add_counter adds delta (a decimal int64) to the counter in key's field
-- v (0 when absent) with HINCRBY, which is exact and refuses overflow. It
-- returns the new value, or nil, an error code (2: not a counter, 3:
-- overflow) and the value found; on error nothing is left changed.
local function add_counter(key, delta)
  local v = redis.call('HGET', key, 'v')
  if v then
    local c = canon(v)
    if not c then return nil, 2, v end
    if c ~= v then redis.call('HSET', key, 'v', c) end
  end
  local r = redis.pcall('HINCRBY', key, 'v', delta)
  if type(r) == 'table' and r.err then
    if v then redis.call('HSET', key, 'v', v) else redis.call('DEL', key) end
    return nil, 3, v or '0'
  end
  return redis.call('HGET', key, 'v')
end
