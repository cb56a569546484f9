-- tollgate central check: every central key of one request, decided and spent atomically.
--
-- Redis runs a script atomically, so "decide all, then spend all or nothing" needs no locks
-- and one round trip. Time comes from Redis TIME (microseconds), never from a gateway, so
-- nodes with skewed clocks agree. Every key written gets PX just past the moment its state
-- is full again: idle keys vanish by themselves (never INCR then EXPIRE as two calls).
--
-- KEYS: the request's keys. ARGV[1]: op ("check" | "batch" | "refund" | "release" |
-- "debit" | "reserve" | "refund_if" | "reset"). Then 8 values per key ("batch" and "refund"
-- put more before them, see below): algorithm (1 gcra, 2 token_bucket, 3 sliding_window,
-- 4 leaky_bucket, 5 concurrency), limit, period_us (concurrency: how long a slot is held,
-- 0 = 5 minutes), burst, cost, max_delay_us, mode (1 enforce, 2 shadow), slot id
-- (concurrency: unique per acquisition, chosen by the gateway so that release can name it;
-- others ignore it).
-- Reply: 6 integers per key: admitted, committed, remaining, reset_after_us, wait_us
-- (retry_after when denied, the leaky-bucket delay when admitted), next_us (until remaining
-- grows by one, 0 when full: the RateLimit `t`), then now_us; packed as little-endian
-- 64-bit words in one string (see `packed`), or as integer replies where Lua has no `struct`.
--
-- "batch" is "check" for several requests in one call (the checks a gateway connection
-- queued while its previous call was in flight): ARGV[2] is the number of requests g,
-- ARGV[3 .. 2 + g] their key counts (KEYS holds their keys one request after the other),
-- then the 8 values per key. Each request is decided and spent all-or-nothing on its own
-- keys, in order, exactly as g "check" calls in a row would; one reply of 6 integers per
-- key for all of them, then now_us.
--
-- A value this script cannot read as its algorithm's state (written by another algorithm
-- before a policy changed, or by anything else) counts as a full key, as in lease.lua:
-- raising an error would fail that key on every request until it expired. The admitted
-- spend overwrites it.
--
-- Concurrency keys are sorted sets: one member per held cell, scored with the Redis time at
-- which it expires, pruned on every call. A slot stranded by a crashed gateway so expires
-- on its own however busy the key stays (one counter with one TTL would be re-armed by
-- every acquisition and never expire).
--
-- "reserve" is "check" for one slot group of a request that spans several (Redis Cluster):
-- the last KEYS entry is then a receipt key in the same slot, set (if anything was spent)
-- to the indexes spent. "refund_if" (same KEYS and ARGV) refunds exactly what the receipt
-- names and deletes it: the undo of a reservation whose call failed, which must give back
-- nothing if the reservation never ran or spent nothing.
--
-- "refund" gives back what a "check" spent (a request another policy denied). Run twice it
-- would give back twice, an over-admission, and a call can run twice: it is sent again
-- after its connection dropped, which may have been after the script ran (by the store
-- layer, and by a Redis Cluster client on its own). So a refund names a marker key of its
-- own, unique to the call and in its keys' slot, as its last KEYS entry, and ARGV[2] is how
-- long the marker lives (ms, past any resend of the call), before the 8 values per key: the
-- script creates the marker (SET NX) and refunds only if it was not there. Reply: now_us.
-- "release" (concurrency slots, when their request ends) needs no marker: it removes the
-- members named by the acquisition's slot id, so a second run finds nothing to remove. It
-- leaves keys of the other algorithms alone.
--
-- "debit" spends each key's cost unconditionally: what a gateway admitted on its
-- `on_store_error = "local"` fallback while it could not reach the store, paid when it can.
-- A key may so end up past empty (a GCRA arrival time beyond the tolerance, negative
-- tokens, a window count past the limit): it then denies until it has drained, so the
-- fleet's admissions around an outage are all counted. Concurrency keys owe nothing (a
-- fallback slot is released when its request ends).
--
-- Numbers are doubles: microsecond timestamps stay exact far past year 2200. EPS absorbs
-- float error in sums of fractional intervals; it is 1 ns, far below any reply's unit.

local EPS = 0.001
local CONCURRENCY_HOLD_US = 300000000 -- a crashed node strands in-flight slots at most this long
local CONCURRENCY_RETRY_US = 1000000
local RECEIPT_MS = 5000 -- far past the undo, which follows its reservation on one connection
local STRIDE = 8
-- Locals, not global lookups, on every decision.
local max, min, floor, ceil, format = math.max, math.min, math.floor, math.ceil, string.format

-- A decision's reply: its integers packed as little-endian 64-bit words in one string. Redis
-- hands a table of numbers back as that many integer replies, which the gateway's client
-- parses one by one: a twelfth of what a central request cost the gateway (BENCHMARKS.md).
-- A store whose Lua lacks `struct` gets the integers (the gateway reads both); `rawget`,
-- because Redis refuses a read of an undefined global. Packed PACK_WORDS at a time:
-- `unpack` stops at Lua's C stack (8 000 values), and a request's keys have no limit.
local struct_lib = rawget(_G, 'struct')
local PACK_WORDS = 1000
local function packed(reply)
  if not struct_lib then return reply end
  local words = #reply
  if words <= PACK_WORDS then
    return struct_lib.pack('<' .. string.rep('i8', words), unpack(reply))
  end
  local parts = {}
  for i = 1, words, PACK_WORDS do
    local j = min(i + PACK_WORDS - 1, words)
    parts[#parts + 1] = struct_lib.pack('<' .. string.rep('i8', j - i + 1), unpack(reply, i, j))
  end
  return table.concat(parts)
end

-- A timestamp (>= 0, µs) as '%.3f' writes it, rounded up to the next ns instead of to the
-- nearest (a state never runs early), without printf's floating-point path, which was 8 %
-- of Redis's instructions per request (COUNT=instructions benches/check_lua.sh). Outside
-- 0 .. 2^53 µs, printf's.
local function fixed3(x)
  if not (x >= 0 and x < 9007199254740992) then return format('%.3f', x) end
  local whole = floor(x)
  local milli = ceil((x - whole) * 1000)
  if milli >= 1000 then whole, milli = whole + 1, milli - 1000 end
  return format('%d.%03d', whole, milli)
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local op = ARGV[1]
local n = #KEYS
if op == 'reserve' or op == 'refund_if' then n = n - 1 end
-- Where key 1's values start, less one stride ("batch" puts the request sizes first).
local BASE = 2
if op == 'batch' then BASE = 3 + tonumber(ARGV[2]) end

-- A finite number, or nil (tonumber accepts "inf" and "nan").
local function finite(s)
  local v = tonumber(s)
  if v and v == v and v > -math.huge and v < math.huge then return v end
  return nil
end

-- state(key, 1) without its table (a table per key is garbage to collect on every request):
-- the key's value as one finite number, or nil.
local function number_state(key)
  local raw = redis.pcall('GET', key)
  if type(raw) ~= 'string' then return nil end
  return finite(raw)
end

-- GCRA: until the slack (tau - lead) holds one cell more than rem; 0 when that exceeds tau.
local function next_cell(T, tau, lead, rem)
  if (rem + 1) * T > tau + EPS then return 0 end
  return max(0, (rem + 1) * T + lead - tau)
end

-- ARGV values as numbers, each distinct string parsed once per call: the keys of a batch
-- mostly share one policy's values, and parsing them (strtod) for every key and every use
-- was 11 % of Redis's instructions per request (COUNT=instructions benches/check_lua.sh).
local parsed = {}
local function num(s)
  local v = parsed[s]
  if v == nil then
    v = tonumber(s)
    parsed[s] = v
  end
  return v
end
local function arg(i, j) return num(ARGV[BASE + (i - 1) * STRIDE + j]) end
local function slot_id(i) return ARGV[BASE + (i - 1) * STRIDE + 7] end

-- The common request, one GCRA key, decided and spent in one step: what gcra() and commit()
-- do, without the general path's dispatch, returned lists and library calls, which were a
-- tenth of Redis's instructions per request (COUNT=instructions benches/check_lua.sh).
-- tests/central/check_script/ holds both paths to the Rust GCRA, step by step. Each PX value's
-- text is made once per call (`px_text`): Redis prints a number argument with snprintf.
-- Every PX of a state goes through px_of (a number argument would be printed "%.17g",
-- "1e+17" from 10^17 ms on, which SET refuses): one-key and general paths write the same.
-- A TTL past 2^46 ms (2 230 years) is cut to it: '%d' of a number past 2^63 is undefined,
-- and Redis refuses an expiry that overflows.
local LONGEST_PX = 70368744177664
local px_text = {}
local function px_of(ttl_us)
  local ms = min(floor(ttl_us / 1000) + 2, LONGEST_PX)
  local px = px_text[ms]
  if not px then
    px = format('%d', ms)
    px_text[ms] = px
  end
  return px
end
local function check_gcra_key(i, reply, spent)
  local b = BASE + (i - 1) * STRIDE
  local limit, period, burst, cost = parsed[ARGV[b + 1]], parsed[ARGV[b + 2]], parsed[ARGV[b + 3]], parsed[ARGV[b + 4]]
  if not (limit and period and burst and cost) then
    limit, period, burst, cost = arg(i, 1), arg(i, 2), arg(i, 3), arg(i, 4)
  end
  local key = KEYS[i]
  local T = period / limit
  local tau = burst * T
  local tat = number_state(key) or now
  if tat < now then tat = now end
  local new = tat + cost * T
  local r = #reply
  if new - now <= tau + EPS then
    local lead = new - now
    local rem = floor((tau - lead + EPS) / T)
    redis.call('SET', key, fixed3(new), 'PX', px_of(lead))
    if spent then spent[#spent + 1] = i end
    reply[r + 1], reply[r + 2], reply[r + 3] = 1, 1, rem
    reply[r + 4], reply[r + 5], reply[r + 6] = ceil(lead), 0, ceil(next_cell(T, tau, lead, rem))
    return
  end
  local lead = tat - now
  local rem = floor((tau - lead + EPS) / T)
  if rem < 0 then rem = 0 end
  reply[r + 1], reply[r + 2], reply[r + 3] = 0, 0, rem
  reply[r + 4], reply[r + 5], reply[r + 6] = ceil(lead), ceil(new - tau - now), ceil(next_cell(T, tau, lead, rem))
end

-- The calls a gateway makes most: one one-key GCRA request ("check"), or a batch of them.
-- Decided here, before the general path's functions are defined: a script's top level runs
-- on every call, and creating those closures was an eighth of Redis's instructions per
-- request in batches of 7, a fifth unbatched (COUNT=instructions benches/check_lua.sh).
-- Each request is what check() does with it.
local gcra_only = op == 'check' and n == 1 and ARGV[BASE] == '1'
if op == 'batch' and tonumber(ARGV[2]) == n then
  gcra_only = true
  for i = 1, n do
    if ARGV[2 + i] ~= '1' or ARGV[BASE + (i - 1) * STRIDE] ~= '1' then
      gcra_only = false
      break
    end
  end
end
if gcra_only then
  local reply = {}
  for i = 1, n do check_gcra_key(i, reply) end
  reply[#reply + 1] = now
  return packed(reply)
end

-- The key's value split on ':' into exactly `parts` finite numbers, or nil: absent, not a
-- string, or another algorithm's format.
local function state(key, parts)
  -- One call, not TYPE then GET: a key of another type answers an error reply here.
  local raw = redis.pcall('GET', key)
  if type(raw) ~= 'string' then return nil end
  if parts == 1 then
    local v = finite(raw)
    if v then return {v} end
    return nil
  end
  local _, colons = string.gsub(raw, ':', '')
  if colons ~= parts - 1 then return nil end
  local out = {}
  for part in string.gmatch(raw, '[^:]+') do
    local v = finite(part)
    if not v then return nil end
    out[#out + 1] = v
  end
  if #out ~= parts then return nil end
  return out
end

local function gcra(key, limit, period, burst, cost)
  local T = period / limit
  local tau = burst * T
  local tat = max(number_state(key) or now, now)
  local new = tat + cost * T
  if new - now <= tau + EPS then
    local rem = floor((tau - (new - now) + EPS) / T)
    return true, fixed3(new), new - now, rem, new - now, 0, next_cell(T, tau, new - now, rem)
  end
  local rem = max(floor((tau - (tat - now) + EPS) / T), 0)
  return false, nil, 0, rem, tat - now, new - tau - now, next_cell(T, tau, tat - now, rem)
end

-- Until a bucket of `tokens` (whole: rem) refilling at `rate` after `debt` holds rem + 1.
local function tb_next(tokens, rem, burst, rate, debt)
  if rem + 1 > burst then return 0 end
  return (rem + 1 - tokens) / rate + debt
end

local function token_bucket(key, limit, period, burst, cost)
  local rate = limit / period
  local tokens, last = burst, now
  local s = state(key, 2)
  if s then tokens, last = s[1], s[2] end
  tokens = min(burst, tokens + max(0, now - last) * rate)
  if tokens + EPS * rate >= cost then
    local left = tokens - cost
    local full = (burst - left) / rate
    local rem = floor(left + EPS * rate)
    return true, format('%.6f:%d', left, now), full, rem, full, 0, tb_next(left, rem, burst, rate, 0)
  end
  local debt = max(0, last - now)
  local rem = floor(tokens)
  return false, nil, 0, rem, (burst - tokens) / rate + debt, (cost - tokens) / rate + debt,
    tb_next(tokens, rem, burst, rate, debt)
end

-- A sliding window key now: the current window's index, and the previous and current
-- windows' counts (a state older than the previous window counts as empty).
local function window(key, period)
  local idx = floor(now / period)
  local s = state(key, 3)
  if s and s[1] == idx then return idx, s[2], s[3] end
  if s and s[1] == idx - 1 then return idx, s[3], 0 end
  return idx, 0, 0
end

local function sliding_window(key, limit, period, cost)
  local idx, prev, curr = window(key, period)
  local elapsed = now - idx * period
  local function estimate(p, c) return p * (period - elapsed) / period + c end
  local function reset(p, c)
    if c > 0 then return 2 * period - elapsed end
    if p > 0 then return period - elapsed end
    return 0
  end
  -- How long until a request of c fits, given it does not fit now.
  local function wait_for(p, c_now, c)
    if c_now + c <= limit then
      if p == 0 then return 0 end
      return period * (1 - (limit - c - c_now) / p) - elapsed
    end
    return (period - elapsed) + max(0, period * (1 - (limit - c) / c_now))
  end
  -- One more cell is free exactly when a request of rem + 1 fits; 0 when full.
  local function next_cell(p, c_now, rem)
    if (p == 0 and c_now == 0) or rem + 1 > limit then return 0 end
    return max(0, wait_for(p, c_now, rem + 1))
  end
  -- The room left, in cells times the period: integers, exact while below 2^53 (a
  -- million a day is not), so the admission and the count left are exact, as the Rust
  -- algorithm's (EPS here would be a thousandth of a cell: admitted over the bound).
  local function room(p, c) return limit * period - p * (period - elapsed) - c * period end
  local function cells_left(p, c)
    local r = room(p, c)
    local q = floor(r / period)
    if q * period > r then q = q - 1 elseif (q + 1) * period <= r then q = q + 1 end
    return q
  end
  if room(prev, curr) + EPS >= cost * period then
    curr = curr + cost
    local r = reset(prev, curr)
    local rem = cells_left(prev, curr)
    return true, idx .. ':' .. prev .. ':' .. curr, r, rem, r, 0, next_cell(prev, curr, rem)
  end
  local rem = max(0, cells_left(prev, curr))
  return false, nil, 0, rem, reset(prev, curr), wait_for(prev, curr, cost), next_cell(prev, curr, rem)
end

local function leaky_bucket(key, limit, period, cost, max_delay)
  local T = period / limit
  local slot = max(number_state(key) or now, now)
  local wait = slot - now
  if wait > max_delay + EPS then
    return false, nil, 0, 0, wait, wait - max_delay, wait - max_delay
  end
  local nxt = slot + cost * T
  local lead = nxt - now
  local rem = max(0, floor((max_delay - lead + EPS) / T) + 1)
  -- The next slot opens when the lead is down to max_delay, then one every T; 0 when full.
  local next_us = lead - max_delay
  if lead <= max_delay + EPS then
    local cells = rem - 1
    if (cells + 1) * T > max_delay + EPS then next_us = 0
    else next_us = (cells + 1) * T - (max_delay - lead) end
  end
  return true, fixed3(nxt), lead, rem, lead, wait, max(0, next_us)
end

-- Cells held on a concurrency key once expired slots are dropped (0 for a foreign value).
local function held(key)
  if redis.call('TYPE', key).ok ~= 'zset' then return 0 end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  return redis.call('ZCARD', key)
end

local function concurrency(key, limit, hold, cost, slot)
  local inflight = held(key)
  -- The same call run again (sent after a dropped connection): the cells this
  -- acquisition already holds are its own, not someone else's. Its last member says all
  -- are there: commit adds them in order, all with one score (a run cut short by an error
  -- between its ZADDs holds only the first ones, and counts as someone else's).
  if inflight > 0 and cost >= 1 and redis.call('ZSCORE', key, slot .. '#' .. cost) then
    inflight = max(0, inflight - cost)
  end
  if inflight + cost <= limit then
    return true, 'slots', hold, limit - inflight - cost, 0, 0, 0
  end
  return false, nil, 0, max(0, limit - inflight), 0, CONCURRENCY_RETRY_US, 0
end

-- The concurrency hold of key i: its period argument, or the default.
local function hold_of(i)
  local hold = arg(i, 2)
  if hold <= 0 then return CONCURRENCY_HOLD_US end
  return hold
end

-- One decision: returns admitted, new_state, ttl_us, remaining, reset_us, wait_us, next_us.
local function decide(i)
  local key, alg, limit, period, burst, cost = KEYS[i], arg(i, 0), arg(i, 1), arg(i, 2), arg(i, 3), arg(i, 4)
  if alg == 1 then return gcra(key, limit, period, burst, cost)
  elseif alg == 2 then return token_bucket(key, limit, period, burst, cost)
  elseif alg == 3 then return sliding_window(key, limit, period, cost)
  elseif alg == 4 then return leaky_bucket(key, limit, period, cost, arg(i, 5))
  end
  return concurrency(key, limit, hold_of(i), cost, slot_id(i))
end

-- Call f on `list` in slices of at most BATCH entries (whole groups of `group`): unpack
-- of a long list overflows Lua's C stack (a cost of a few thousand concurrency cells).
local BATCH = 1000
local function in_batches(list, group, f)
  local step = BATCH - BATCH % group
  for first = 1, #list, step do
    f({unpack(list, first, min(first + step - 1, #list))})
  end
end

-- The members of one acquisition: one per cell, so a cost of c holds c of the limit.
local function members(i)
  local out = {}
  for c = 1, arg(i, 4) do out[c] = slot_id(i) .. '#' .. c end
  return out
end

-- Spend key i: a string state with its PX, or the acquisition's slot members.
local function commit(i, value, ttl)
  local key = KEYS[i]
  if arg(i, 0) ~= 5 then
    redis.call('SET', key, value, 'PX', px_of(ttl))
    return
  end
  if redis.call('TYPE', key).ok ~= 'zset' then redis.call('DEL', key) end
  local args = {}
  for _, m in ipairs(members(i)) do
    args[#args + 1] = now + ttl
    args[#args + 1] = m
  end
  in_batches(args, 2, function(batch) redis.call('ZADD', key, unpack(batch)) end)
  -- Every member expires by now + ttl (the newest): the key outlives none of them.
  redis.call('PEXPIRE', key, px_of(ttl))
end

-- Undo one committed spend (refunds, releases, and the receipts' undos). A key that no
-- longer holds this algorithm's state has nothing of ours to give back.
local function refund(i)
  local key, alg, limit, period, burst, cost = KEYS[i], arg(i, 0), arg(i, 1), arg(i, 2), arg(i, 3), arg(i, 4)
  if alg == 5 then
    if redis.call('TYPE', key).ok == 'zset' then
      in_batches(members(i), 1, function(batch) redis.call('ZREM', key, unpack(batch)) end)
    end
    return
  end
  local s = state(key, (alg == 2 and 2) or (alg == 3 and 3) or 1)
  if not s then return end
  local ttl = redis.call('PTTL', key)
  if ttl < 1 then ttl = 1 end
  local value
  if alg == 1 or alg == 4 then
    value = fixed3(s[1] - cost * period / limit)
  elseif alg == 2 then
    value = format('%.6f:%d', min(burst, s[1] + cost), s[2])
  else
    local idx = floor(now / period)
    if s[1] ~= idx and s[1] ~= idx - 1 then return end
    value = s[1] .. ':' .. s[2] .. ':' .. max(0, s[3] - cost)
  end
  redis.call('SET', key, value, 'PX', ttl)
end

-- Spend key i's cost whatever its state (op "debit", see the header).
local function debit(i)
  local key, alg, limit, period, burst, cost = KEYS[i], arg(i, 0), arg(i, 1), arg(i, 2), arg(i, 3), arg(i, 4)
  if alg == 1 or alg == 4 then
    local tat = max(number_state(key) or now, now) + cost * period / limit
    redis.call('SET', key, fixed3(tat), 'PX', px_of(tat - now))
  elseif alg == 2 then
    local rate = limit / period
    local tokens, last = burst, now
    local s = state(key, 2)
    if s then tokens, last = s[1], s[2] end
    tokens = min(burst, tokens + max(0, now - last) * rate) - cost
    local full = (burst - tokens) / rate
    redis.call('SET', key, format('%.6f:%d', tokens, now), 'PX', px_of(full))
  elseif alg == 3 then
    local idx, prev, curr = window(key, period)
    local ttl = 2 * period - (now - idx * period)
    redis.call('SET', key, idx .. ':' .. prev .. ':' .. (curr + cost), 'PX', px_of(ttl))
  end
end

-- Forget each key (op "reset": the admin API's DELETE /limits/...): absent is full.
if op == 'reset' then
  for i = 1, n do redis.call('DEL', KEYS[i]) end
  return {now}
end

if op == 'debit' then
  for i = 1, n do debit(i) end
  return {now}
end

if op == 'refund_if' then
  local receipt = redis.call('GET', KEYS[n + 1])
  if receipt then
    redis.call('DEL', KEYS[n + 1])
    for i in string.gmatch(receipt, '%d+') do refund(tonumber(i)) end
  end
  return {now}
end

-- Give back once per marker (op "refund", see the header).
if op == 'refund' then
  n, BASE = n - 1, 3
  if #ARGV ~= 2 + n * STRIDE then
    return redis.error_reply('refund: keys then a marker; the marker life then 8 values per key')
  end
  if redis.call('SET', KEYS[n + 1], '1', 'NX', 'PX', ARGV[2]) then
    for i = 1, n do refund(i) end
  end
  return {now}
end

-- Only concurrency slots (see the header): any other key would be refunded without a marker.
if op == 'release' then
  for i = 1, n do
    if arg(i, 0) == 5 then refund(i) end
  end
  return {now}
end

-- Decide keys first..last (one request), spend them all-or-nothing, and append their
-- replies to `reply`; the indexes spent go to `spent` (nil: not wanted).
local function check(first, last, reply, spent)
  if first == last and arg(first, 0) == 1 then return check_gcra_key(first, reply, spent) end
  if first == last then
    -- One key (most requests): spent exactly when admitted; no tables.
    local ok, st, ttl, rem, reset, wait, nxt = decide(first)
    if ok then commit(first, st, ttl) end
    local r = #reply
    reply[r + 1] = ok and 1 or 0
    reply[r + 2] = ok and 1 or 0
    reply[r + 3] = max(0, rem)
    reply[r + 4] = ceil(max(0, reset))
    reply[r + 5] = ceil(max(0, wait))
    reply[r + 6] = ceil(max(0, nxt))
    if ok and spent then spent[#spent + 1] = first end
    return
  end
  local admitted, states, ttls, rems, resets, waits, nexts = {}, {}, {}, {}, {}, {}, {}
  local enforce_ok, all_ok = true, true
  for i = first, last do
    admitted[i], states[i], ttls[i], rems[i], resets[i], waits[i], nexts[i] = decide(i)
    if not admitted[i] then
      all_ok = false
      if arg(i, 6) == 1 then enforce_ok = false end
    end
  end
  for i = first, last do
    -- Spend only if every policy allows; shadow keys only when all (shadow too) allow.
    local spend = all_ok or (enforce_ok and arg(i, 6) == 1)
    if spend and admitted[i] then
      commit(i, states[i], ttls[i])
      if spent then spent[#spent + 1] = i end
    end
    reply[#reply + 1] = admitted[i] and 1 or 0
    reply[#reply + 1] = (spend and admitted[i]) and 1 or 0
    reply[#reply + 1] = max(0, rems[i])
    reply[#reply + 1] = ceil(max(0, resets[i]))
    reply[#reply + 1] = ceil(max(0, waits[i]))
    reply[#reply + 1] = ceil(max(0, nexts[i]))
  end
end

local reply = {}
if op == 'batch' then
  local sizes, total = {}, 0
  for r = 1, tonumber(ARGV[2]) do
    sizes[r] = num(ARGV[2 + r])
    total = total + sizes[r]
  end
  if total ~= n then return redis.error_reply('batch: request sizes do not add up to the keys') end
  local first = 1
  for r = 1, #sizes do
    local last = first + sizes[r] - 1
    check(first, last, reply)
    first = last + 1
  end
  reply[#reply + 1] = now
  return packed(reply)
end

local spent = {}
check(1, n, reply, spent)
if op == 'reserve' and #spent > 0 then
  redis.call('SET', KEYS[n + 1], table.concat(spent, ','), 'PX', RECEIPT_MS)
end
reply[#reply + 1] = now
return packed(reply)
