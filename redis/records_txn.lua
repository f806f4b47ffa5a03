-- records_txn.lua: check every condition, then apply every write.
-- KEYS: the distinct keys of the transaction.
-- ARGV: ncond, then (key index, version) per condition ('0': absent),
--       nwrite, then (key index, kind, arg) per write; kind 's' sets the
--       value arg, 'd' deletes, 'a' adds the decimal arg to a counter.
-- Replies: {1, version per write ('0' for a delete)};
--          {0, condition index, actual version} a condition failed;
--          {2, write index, value} not a counter; {3, write index, value}
--          overflow. Nothing is changed unless the reply is {1, ...}.
local function records_txn(KEYS, ARGV)
  rec_begin()
  local i = 1
  local nc = tonumber(ARGV[i]); i = i + 1
  for c = 1, nc do
    local cur = redis.call('HGET', KEYS[tonumber(ARGV[i])], 'n') or '0'
    if cur ~= ARGV[i + 1] then
      return {0, c, cur}
    end
    i = i + 2
  end
  local nw = tonumber(ARGV[i]); i = i + 1
  local writes = {}
  for w = 1, nw do
    writes[w] = {KEYS[tonumber(ARGV[i])], ARGV[i + 1], ARGV[i + 2]}
    i = i + 3
  end
  -- The adds go first: they are the only writes that can fail, and a
  -- failure undoes the adds made before it.
  local old = {}
  local done = {}
  for w = 1, nw do
    local k, kind = writes[w][1], writes[w][2]
    if kind == 'a' then
      old[w] = redis.call('HGET', k, 'n') or false
      local before = redis.call('HGET', k, 'v') or false
      local v, code, found = add_counter(k, writes[w][3])
      if not v then
        for j = #done, 1, -1 do
          local u = done[j]
          if u[2] then redis.call('HSET', u[1], 'v', u[2]) else redis.call('DEL', u[1]) end
        end
        return {code, w, found}
      end
      done[#done + 1] = {k, before}
    end
  end
  local out = {1}
  for w = 1, nw do
    local k, kind, arg = writes[w][1], writes[w][2], writes[w][3]
    if kind == 'a' then
      local ver = next_version(old[w])
      redis.call('HSET', k, 'n', ver)
      out[w + 1] = ver
    elseif kind == 's' then
      local ver = next_version(redis.call('HGET', k, 'n'))
      redis.call('HSET', k, 'v', arg, 'n', ver)
      out[w + 1] = ver
    else
      redis.call('DEL', k)
      out[w + 1] = '0'
    end
  end
  return out
end
