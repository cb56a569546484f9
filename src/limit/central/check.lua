-- tollgate central check: every central key of one request, decided and spent atomically.
--
-- Redis runs a script atomically, so "decide all, then spend all or nothing" needs no locks
-- and one round trip. Time comes from Redis TIME (microseconds), never from a gateway, so
-- nodes with skewed clocks agree. Every key written gets PX just past the moment its state
-- is full again: idle keys vanish by themselves (never INCR then EXPIRE as two calls).
--
-- KEYS: the request's keys. ARGV[1]: op ("check" | "refund" | "release"). Then 7 numbers
-- per key: algorithm (1 gcra, 2 token_bucket, 3 sliding_window, 4 leaky_bucket,
-- 5 concurrency), limit, period_us, burst, cost, max_delay_us, mode (1 enforce, 2 shadow).
-- Reply: 5 integers per key: admitted, committed, remaining, reset_after_us, wait_us
-- (retry_after when denied, the leaky-bucket delay when admitted), then now_us.
--
-- Numbers are doubles: microsecond timestamps stay exact far past year 2200. EPS absorbs
-- float error in sums of fractional intervals; it is 1 ns, far below any reply's unit.

local EPS = 0.001
local CONCURRENCY_HOLD_MS = 300000 -- a crashed node strands in-flight slots at most this long
local CONCURRENCY_RETRY_US = 1000000

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local op = ARGV[1]
local n = #KEYS

local function num(s, default)
  if s then return tonumber(s) end
  return default
end

local function split(s)
  local out = {}
  for part in string.gmatch(s, '[^:]+') do out[#out + 1] = tonumber(part) end
  return out
end

-- One decision: returns admitted, new_state_string, ttl_us, remaining, reset_us, wait_us.
local function decide(key, alg, limit, period, burst, cost, max_delay)
  local raw = redis.call('GET', key)
  if alg == 1 then -- GCRA: one theoretical arrival time
    local T = period / limit
    local tau = burst * T
    local tat = math.max(num(raw, now), now)
    local new = tat + cost * T
    if new - now <= tau + EPS then
      local rem = math.floor((tau - (new - now)) / T + EPS)
      return true, string.format('%.3f', new), new - now, rem, new - now, 0
    end
    local rem = math.floor((tau - (tat - now)) / T + EPS)
    return false, nil, 0, math.max(rem, 0), tat - now, new - tau - now
  elseif alg == 2 then -- token bucket: tokens and last refill
    local rate = limit / period
    local tokens, last = burst, now
    if raw then local s = split(raw); tokens, last = s[1], s[2] end
    tokens = math.min(burst, tokens + math.max(0, now - last) * rate)
    if tokens + EPS * rate >= cost then
      local left = tokens - cost
      local full = (burst - left) / rate
      return true, string.format('%.6f:%d', left, now), full, math.floor(left + EPS * rate), full, 0
    end
    return false, nil, 0, math.floor(tokens), (burst - tokens) / rate, (cost - tokens) / rate
  elseif alg == 3 then -- sliding window: window index, previous and current counts
    local idx = math.floor(now / period)
    local prev, curr = 0, 0
    if raw then
      local s = split(raw)
      if s[1] == idx then prev, curr = s[2], s[3]
      elseif s[1] == idx - 1 then prev = s[3] end
    end
    local elapsed = now - idx * period
    local function estimate(p, c) return p * (period - elapsed) / period + c end
    local function reset(p, c)
      if c > 0 then return 2 * period - elapsed end
      if p > 0 then return period - elapsed end
      return 0
    end
    if estimate(prev, curr) + cost <= limit + EPS then
      curr = curr + cost
      local r = reset(prev, curr)
      return true, idx .. ':' .. prev .. ':' .. curr, r, math.floor(limit - estimate(prev, curr) + EPS), r, 0
    end
    local wait
    if curr + cost <= limit then
      wait = period * (1 - (limit - cost - curr) / prev) - elapsed
    else
      wait = (period - elapsed) + math.max(0, period * (1 - (limit - cost) / curr))
    end
    return false, nil, 0, math.max(0, math.floor(limit - estimate(prev, curr) + EPS)), reset(prev, curr), wait
  elseif alg == 4 then -- leaky bucket: the next free slot
    local T = period / limit
    local slot = math.max(num(raw, now), now)
    local wait = slot - now
    if wait > max_delay + EPS then
      return false, nil, 0, 0, wait, wait - max_delay
    end
    local nxt = slot + cost * T
    local rem = math.max(0, math.floor((max_delay - (nxt - now)) / T + EPS) + 1)
    return true, string.format('%.3f', nxt), nxt - now, rem, nxt - now, wait
  else -- concurrency: requests in flight
    local inflight = num(raw, 0)
    if inflight + cost <= limit then
      return true, tostring(inflight + cost), CONCURRENCY_HOLD_MS * 1000, limit - inflight - cost, 0, 0
    end
    return false, nil, 0, math.max(0, limit - inflight), 0, CONCURRENCY_RETRY_US
  end
end

-- Undo one committed spend (cluster reserve-and-refund, and releases).
local function refund(key, alg, limit, period, burst, cost)
  local raw = redis.call('GET', key)
  if not raw then return end
  local ttl = redis.call('PTTL', key)
  if ttl < 1 then ttl = 1 end
  local value
  if alg == 1 or alg == 4 then
    value = string.format('%.3f', tonumber(raw) - cost * period / limit)
  elseif alg == 2 then
    local s = split(raw)
    value = string.format('%.6f:%d', math.min(burst, s[1] + cost), s[2])
  elseif alg == 3 then
    local s = split(raw)
    local idx = math.floor(now / period)
    if s[1] ~= idx and s[1] ~= idx - 1 then return end
    value = s[1] .. ':' .. s[2] .. ':' .. math.max(0, s[3] - cost)
  else
    local left = tonumber(raw) - cost
    if left <= 0 then redis.call('DEL', key); return end
    value = tostring(left)
  end
  redis.call('SET', key, value, 'PX', ttl)
end

local function arg(i, j) return tonumber(ARGV[2 + (i - 1) * 7 + j]) end

if op == 'refund' or op == 'release' then
  for i = 1, n do refund(KEYS[i], arg(i, 0), arg(i, 1), arg(i, 2), arg(i, 3), arg(i, 4)) end
  return {now}
end

local admitted, states, ttls, rems, resets, waits = {}, {}, {}, {}, {}, {}
local enforce_ok, all_ok = true, true
for i = 1, n do
  local ok, state, ttl, rem, reset, wait = decide(KEYS[i], arg(i, 0), arg(i, 1), arg(i, 2), arg(i, 3), arg(i, 4), arg(i, 5))
  admitted[i], states[i], ttls[i], rems[i], resets[i], waits[i] = ok, state, ttl, rem, reset, wait
  if not ok then
    all_ok = false
    if arg(i, 6) == 1 then enforce_ok = false end
  end
end

local reply = {}
for i = 1, n do
  -- Spend only if every policy allows; shadow keys only when all (shadow too) allow.
  local commit = all_ok or (enforce_ok and arg(i, 6) == 1)
  if commit and admitted[i] then
    redis.call('SET', KEYS[i], states[i], 'PX', math.floor(ttls[i] / 1000) + 2)
  end
  reply[#reply + 1] = admitted[i] and 1 or 0
  reply[#reply + 1] = (commit and admitted[i]) and 1 or 0
  reply[#reply + 1] = math.max(0, rems[i])
  reply[#reply + 1] = math.ceil(math.max(0, resets[i]))
  reply[#reply + 1] = math.ceil(math.max(0, waits[i]))
end
reply[#reply + 1] = now
return reply
