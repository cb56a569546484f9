-- tollgate membership: which gateways share the limits (N of the L/N split).
--
-- KEYS[1]: the members sorted set (member: "node id#instance", score: expiry in ms of
-- Redis TIME). ARGV[1]: "membership" (every tollgate script gets its metrics label first),
-- ARGV[2]: op ("join" renews this node, "leave" removes it), ARGV[3]: member, ARGV[4]: time
-- to live in ms (three heartbeats).
-- Reply: {members after the call, other live members with this member's node id}.
-- Expired members are dropped on every call, so a dead node disappears within one TTL of
-- its last beat without anyone noticing it died. Two processes that share a node id (one
-- config file copied to every node) are two members, so N stays right; the second count
-- lets each of them warn.

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
local me = ARGV[3]
local id = string.sub(me, 1, (string.find(me, '#', 1, true) or (#me + 1)) - 1)
local twins = 0
if ARGV[2] ~= 'leave' then
  for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    if m ~= me and string.sub(m, 1, #id + 1) == id .. '#' then twins = twins + 1 end
  end
end
return {redis.call('ZCARD', KEYS[1]), twins}
