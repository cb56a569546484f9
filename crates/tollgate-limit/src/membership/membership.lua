-- tollgate membership: which gateways share the limits (N of the L/N split), and where
-- their peer endpoints are (the fleet of the owner and gossip sites when `[cluster] peers`
-- is empty).
--
-- KEYS[1]: the members sorted set (member: "node id#instance" or "node id#instance@peer
-- address", score: expiry in ms of Redis TIME). ARGV[1]: "membership" (every tollgate
-- script gets its metrics label first), ARGV[2]: op ("join" renews this node, "leave"
-- removes it), ARGV[3]: member, ARGV[4]: time to live in ms (three heartbeats), ARGV[5]
-- (optional): "peers" to be told the live members' peer addresses.
-- Reply: {members after the call, other live members with this member's node id, intact},
-- and with "peers" a fourth element: the peer addresses of the live members that have one
-- (this member's included), as strings. `intact` is 1 when this member was in the set,
-- unexpired, before the call: 0 on a node's first beat, and when the set was lost (a Redis
-- restarted without persistence) or the store stalled past the member's expiry (a
-- `CLIENT PAUSE`, a slow failover). Then the count may miss members that have not beaten
-- again yet, and the caller must not lower N on it.
-- Expired members are dropped on every call, so a dead node disappears within one TTL of
-- its last beat without anyone noticing it died. Two processes that share a node id (one
-- config file copied to every node) are two members, so N stays right; the second count
-- lets each of them warn.
-- A node id may contain '#' and '@' (config only forbids whitespace), but the instance is
-- hex and a peer address has neither: so the node id is everything before the last '#',
-- and the address is what follows an '@' after it.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[4])
local mine = redis.call('ZSCORE', KEYS[1], ARGV[3])
local intact = (mine and tonumber(mine) > now) and 1 or 0
if ARGV[2] == 'leave' then
  redis.call('ZREM', KEYS[1], ARGV[3])
else
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[3])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
-- The set lives as long as its longest-lived member (nodes may beat at different rates).
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if last[2] then redis.call('PEXPIREAT', KEYS[1], math.floor(tonumber(last[2])) + 1) end
local me = ARGV[3]
local id = string.match(me, '^(.*)#') or me
local twins = 0
local peers = {}
if ARGV[2] ~= 'leave' then
  for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    if m ~= me and string.match(m, '^(.*)#') == id then twins = twins + 1 end
    local addr = string.match(m, '#[^#@]*@([^#@]+)$')
    if addr then peers[#peers + 1] = addr end
  end
end
if ARGV[5] == 'peers' then
  return {redis.call('ZCARD', KEYS[1]), twins, intact, peers}
end
return {redis.call('ZCARD', KEYS[1]), twins, intact}
