-- renew.lua: extend a live lease held by this owner and token.
-- KEYS[1] lease hash, KEYS[2] fence hash; ARGV[1] owner, ARGV[2] token,
-- ARGV[3] ttl ns, ARGV[4] ttl ms, ARGV[5] the call's own id ('' or
-- absent: none).
-- Reply: 1 renewed, 0 not held (nothing changed), 2 not held now, but
-- this call renewed it before (a send whose reply was lost).
-- A renewal records its call's id in the fence, in one of ten fields
-- chosen by the token's last decimal digit (w0 .. w9), so that the same
-- call sent again by go-redis (its connection broke before the reply)
-- after the lease has ended is not answered "not held, nothing changed":
-- it did extend the lease, and others may have seen it held longer. A
-- field keeps the ids of the last four renewals of tokens with its digit
-- (newest first, a space between), so that a later renewal of the same
-- grant, run before the resend, does not hide it.
local function renew(KEYS, ARGV)
  local cur = redis.call('HMGET', KEYS[1], 'owner', 'token')
  local cid = ARGV[5] or ''
  local field = 'w' .. string.sub(ARGV[2], -1)
  if cur[1] == ARGV[1] and cur[2] == ARGV[2] then
    redis.call('HSET', KEYS[1], 'ttl', ARGV[3])
    redis.call('PEXPIRE', KEYS[1], ARGV[4])
    if cid ~= '' and KEYS[2] then
      local ids = redis.call('HGET', KEYS[2], field)
      if ids then
        ids = string.sub(cid .. ' ' .. ids, 1, 4 * (#cid + 1) - 1)
      else
        ids = cid
      end
      redis.call('HSET', KEYS[2], field, ids)
    end
    return 1
  end
  if cid ~= '' and KEYS[2] then
    local ids = redis.call('HGET', KEYS[2], field)
    if ids and string.find(' ' .. ids .. ' ', ' ' .. cid .. ' ', 1, true) then
      return 2
    end
  end
  return 0
end
