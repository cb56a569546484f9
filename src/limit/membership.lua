-- tollgate membership: which gateways share the limits (N of the L/N split).
--
-- KEYS[1]: the members sorted set (member: node id, score: expiry in ms of Redis TIME).
-- ARGV[1]: "membership" (every tollgate script gets its metrics label first), ARGV[2]: op
-- ("join" renews this node, "leave" removes it), ARGV[3]: node id, ARGV[4]: time to live
-- in ms (three heartbeats).
-- Reply: {members after the call}. Expired members are dropped on every call, so a dead
-- node disappears within one TTL of its last beat without anyone noticing it died.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[4])
if ARGV[2] == 'leave' then
  redis.call('ZREM', KEYS[1], ARGV[3])
else
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[3])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
-- The set lives as long as its longest-lived member (nodes may beat at different rates).
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if last[2] then redis.call('PEXPIREAT', KEYS[1], math.floor(tonumber(last[2])) + 1) end
return {redis.call('ZCARD', KEYS[1])}
