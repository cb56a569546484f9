-- tollgate lease grant: the coordinator's side of `site = "lease"` (see grant.rs for the
-- rule and the bound). The key's state is the GCRA theoretical arrival time in
-- microseconds, the same format check.lua keeps for a central GCRA key.
--
-- KEYS[1]: the key. KEYS[2]: its grant-rate average ("count:at_us", in KEYS[1]'s slot).
-- ARGV[1]: op ("lease"), then interval_us (T), tolerance_us (burst * T), lead_us (how far
-- ahead granted cells may conform: the horizon, or 0 for a slow node), want, span_us (the
-- grant-rate time constant).
-- Reply: granted, frontier_us (tat - tolerance - now after the grant, rounded up: the
-- conform time of the last cell granted, relative to now), now_us, busy (cells granted
-- over the last span, decayed, this grant included, per mille of what the rate allows:
-- grant.rs `busy`; a key with no average starts at 1000; without KEYS[2], always 1000).
--
-- Time is Redis TIME, so nodes with skewed clocks agree; each node maps the frontier onto
-- its own clock from the moment the reply arrived, which can only make a cell conform later.

local EPS = 0.001
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local T = tonumber(ARGV[2])
local tau = tonumber(ARGV[3])
local lead = tonumber(ARGV[4])
local want = tonumber(ARGV[5])

local raw = redis.call('GET', KEYS[1])
local tat = now
-- A value that is not a number (the key held a token bucket's central state before the
-- policy moved to leases) counts as a full key rather than failing every call.
local old = raw and tonumber(raw)
if old then tat = math.max(old, now) end
local fits = math.floor((now + lead + tau - tat + EPS) / T)
local granted = math.max(0, math.min(want, fits))
tat = tat + granted * T
if granted > 0 then
  redis.call('SET', KEYS[1], string.format('%.3f', tat), 'PX', math.floor((tat - now) / 1000) + 2)
end

-- The grant rate: stored only with a grant (decay needs no write), forgotten after four
-- spans (then it starts at the full rate again). A call without KEYS[2] or span gets 1000
-- and touches nothing more (a caller that does not read it: never calm).
local busy = 1000
local span = tonumber(ARGV[6])
if KEYS[2] and span and span > 0 then
  local count, at = span / T, now
  local rate = redis.call('GET', KEYS[2])
  if rate then
    local c, a = string.match(rate, '^([^:]+):([^:]+)$')
    if c and tonumber(c) and tonumber(a) then count, at = tonumber(c), tonumber(a) end
  end
  count = count * math.exp(-math.max(0, now - at) / span) + granted
  if granted > 0 then
    redis.call('SET', KEYS[2], string.format('%.4f:%d', count, now), 'PX', math.floor(4 * span / 1000) + 1)
  end
  busy = math.floor(count * T / span * 1000 + 0.5)
end
return {granted, math.ceil(tat - tau - now - EPS), now, busy}
