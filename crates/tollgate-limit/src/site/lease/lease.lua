-- tollgate lease grant: the coordinator's side of `site = "lease"` (see grant.rs for the
-- rule and the bound, hold.rs for long cells). The key's state is the GCRA theoretical
-- arrival time in microseconds, less the cells its long cells hold, in the format
-- check.lua keeps for a central GCRA key (so check.lua's debit takes from it).
--
-- KEYS[1]: the key. KEYS[2]: its grant-rate average ("count:at_us:born_us", in KEYS[1]'s
-- slot).
-- KEYS[3]: its long cells' holds ("until_us:n,until_us:n,...", until ascending, same slot).
-- KEYS[4]: its returnable run (returns.rs): "since_us|state|at_us:n,at_us:n,...|id,id,..."
-- (the run's start, KEYS[1]'s value as this script last left it, the returns taken in the
-- window, the ids of the last returns taken: a call sent again is not taken twice).
-- KEYS[5]: its demand (fair.rs): "count:at_us", the requests nodes reported, decayed.
-- ARGV[1]: op ("lease"), then interval_us (T), tolerance_us (burst * T), lead_us (how far
-- ahead granted cells may conform: the horizon, or 0 for a slow node), want, span_us (the
-- grant-rate time constant), long (long cells wanted instead, or 0), hold_us (how long a
-- long cell is held: its life less the TTL), keep (cells a long grant must leave
-- conforming), long_busy (per mille: long cells only under this grant rate),
-- return_cells (M: the budget, 0 = no returns), return_window_us, return_busy (per mille:
-- grants are returnable from this grant rate), returned (cells given back), returned_at_us
-- (when the earliest of them was granted: a reply's now_us), returned_id (the return's id,
-- 0 for none), demand (requests the node counted since its last call), demand_span_us
-- (the demand's time constant).
-- Reply: granted, frontier_us (tat - tolerance - now after the grant, rounded up: the
-- conform time of the last cell granted, relative to now), now_us, busy (cells granted
-- over the last span, decayed, this grant included, per mille of what the rate allows in
-- the time the average has lived: busy.rs `busy`; without KEYS[2], always 1000),
-- long (1 when the cells granted are long cells), returnable (1 when the cells granted live
-- lease_ttl less return_cells * T and may be given back), demand (the key's, this call's
-- report included, per mille of what the rate allows over its span: fair.rs; 0 without
-- KEYS[5]).
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
local span = tonumber(ARGV[6])
local long = tonumber(ARGV[7]) or 0

-- The grant rate before this grant (busy.rs): cells granted, decayed, and when the
-- average started ("count:at_us:born_us"; a value of two fields was written before the
-- start was kept, and counts as born long ago). Read cautiously (what the average has not
-- seen counts as the full rate), it gates long cells and returns.
local count, at, born = nil, now, now
local unseen = 1
if KEYS[2] and span and span > 0 then
  count = 0
  local rate = redis.call('GET', KEYS[2])
  if rate then
    local c, a, b = string.match(rate, '^([^:]+):([^:]+):?([^:]*)$')
    if c and tonumber(c) and tonumber(a) then
      count, at, born = tonumber(c), tonumber(a), tonumber(b) or -math.huge
    end
  end
  count = count * math.exp(-math.max(0, now - at) / span)
  unseen = math.exp(-math.max(0, now - born) / span)
end
local busy_before = count and math.floor((count * T / span + unseen) * 1000 + 0.5) or 1000

-- The state is the key's tat less its held cells (hold.rs): a plain GCRA tat once the
-- holds that ended are settled into it; the held cells come off the level.
local raw = redis.call('GET', KEYS[1])
-- A value that is not a number (the key held a token bucket's central state before the
-- policy moved to leases) counts as a full key rather than failing every call.
local old = raw and tonumber(raw)
local tat = old or 0
local holds, held, changed, had_holds = {}, 0, false, false
if KEYS[3] then
  local h = redis.call('GET', KEYS[3])
  if h then
    for u, n in string.gmatch(h, '([^:,]+):([^:,]+)') do
      if tonumber(u) and tonumber(n) then
        holds[#holds + 1] = {tonumber(u), tonumber(n)}
        held = held + tonumber(n)
      end
    end
  end
  had_holds = held > 0
  -- An ended hold's cells are taken at its end, from the bucket as it was then.
  local first = 1
  while holds[first] and holds[first][1] < now do
    tat = math.max(tat, holds[first][1]) + holds[first][2] * T
    held = held - holds[first][2]
    first = first + 1
    changed = true
  end
  local left = {}
  for i = first, #holds do left[#left + 1] = holds[i] end
  holds = left
end

-- The returnable run (returns.rs), and the cells a node gives back. A run goes on only if
-- this call left M cells of room, no long cell was held or ended its hold, and the key's
-- state is as this script left it (a debit, check.lua's, ends the run).
local M = tonumber(ARGV[11]) or 0
local run, since, recent, ids, had_run, back = false, now, {}, {}, false, 0
if KEYS[4] and M > 0 then
  local window = tonumber(ARGV[12])
  local r = redis.call('GET', KEYS[4])
  local state = nil
  if r then
    local s, st, list, idl = string.match(r, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)$')
    if s and tonumber(s) then
      had_run, since, state = true, tonumber(s), st
      for i in string.gmatch(idl, '[^,]+') do
        if tonumber(i) then ids[#ids + 1] = tonumber(i) end
      end
      for a, n in string.gmatch(list, '([^:,]+):([^:,]+)') do
        if tonumber(a) and tonumber(n) and tonumber(a) + window >= now then
          recent[#recent + 1] = {tonumber(a), tonumber(n)}
        end
      end
    end
  end
  -- No hold before settling: none held now, none ending at this call.
  run = old ~= nil and not had_holds and (not had_run or state == raw)
    and tat >= now + M * T - EPS
  local cells, at, id = tonumber(ARGV[14]) or 0, tonumber(ARGV[15]) or 0, tonumber(ARGV[16]) or 0
  local retried = false
  for _, i in ipairs(ids) do
    if id ~= 0 and i == id then retried = true end
  end
  if run and cells > 0 and not retried and at > since and now - at <= window then
    local used = 0
    for _, e in ipairs(recent) do used = used + e[2] end
    back = math.max(0, math.min(cells, M - used))
    if back > 0 then
      -- Counted at the end of its 32nd of the window (returns.rs): at most 34 entries.
      local q = math.floor(window / 32)
      local bucket = now
      if q > 0 then bucket = math.ceil(now / q) * q end
      local last = recent[#recent]
      if last and last[1] == bucket then
        last[2] = last[2] + back
      else
        recent[#recent + 1] = {bucket, back}
      end
      tat = tat - back * T
      if #ids == 8 then table.remove(ids, 1) end
      ids[#ids + 1] = id
    end
  end
end

local before = math.max(old or now, now)
tat = math.max(tat, now)
local granted, is_long = 0, 0
local level = math.floor((now + tau - held * T - tat + EPS) / T)
local keep = tonumber(ARGV[9]) or 0
if KEYS[3] and long > 0 and keep > 0 and busy_before < tonumber(ARGV[10]) and level >= long + keep then
  granted, is_long = long, 1
  -- The hold's end, rounded up to a 32nd of a hold; holds with one end are one
  -- (hold.rs `hold_end`).
  local hold = tonumber(ARGV[8])
  local q = math.floor(hold / 32)
  local untl = now + hold
  if q > 0 then untl = math.ceil(untl / q) * q end
  local last = holds[#holds]
  if last and last[1] >= untl then
    last[2] = last[2] + long
  else
    holds[#holds + 1] = {untl, long}
  end
  -- Held, not yet taken: the state moves when the hold ends.
  held = held + long
  changed = true
else
  local fits = math.floor((now + lead + tau - held * T - tat + EPS) / T)
  granted = math.max(0, math.min(want, fits))
  tat = tat + granted * T
end
-- Stored when it moved: cells granted or given back, or ended holds settled (they are gone
-- from KEYS[3] after this call).
local stored = raw
if tat ~= before then
  stored = string.format('%.3f', tat)
  redis.call('SET', KEYS[1], stored, 'PX', math.floor((tat - now) / 1000) + 2)
end
local returnable = 0
if KEYS[4] and M > 0 then
  if run and busy_before >= tonumber(ARGV[13]) and is_long == 0 then returnable = 1 end
  local life = math.floor((tat - now + tonumber(ARGV[12])) / 1000) + 2
  local idv = {}
  for i, v in ipairs(ids) do idv[i] = string.format('%d', v) end
  if not run or (granted > 0 and returnable == 0) then
    -- The run ends: a new one begins now, with no returns taken (none if there was none:
    -- nothing is written, and the next call begins one).
    if had_run then
      local v = string.format('%d|%s||%s', now, stored or '', table.concat(idv, ','))
      redis.call('SET', KEYS[4], v, 'PX', life)
    end
  else
    local parts = {}
    for i, e in ipairs(recent) do parts[i] = string.format('%d:%d', e[1], e[2]) end
    local v = string.format('%d|%s|%s|%s', since, stored or '', table.concat(parts, ','),
      table.concat(idv, ','))
    redis.call('SET', KEYS[4], v, 'PX', life)
  end
end
if changed then
  if #holds == 0 then
    redis.call('DEL', KEYS[3])
  else
    -- Kept until settling its holds can no longer raise the state past now: the latest
    -- end + the cells held then * T.
    local parts, peak, suffix = {}, now, 0
    for i = #holds, 1, -1 do
      suffix = suffix + holds[i][2]
      peak = math.max(peak, holds[i][1] + suffix * T)
    end
    for i, h in ipairs(holds) do parts[i] = string.format('%.3f:%d', h[1], h[2]) end
    redis.call('SET', KEYS[3], table.concat(parts, ','), 'PX', math.ceil((peak - now) / 1000) + 2)
  end
end

-- The grant rate: stored only with a grant (decay needs no write), forgotten after four
-- spans (then it starts again). Reported as seen (busy.rs): over the time the average has
-- lived, at least a quarter of the span (one TTL: FIRST_WINDOW_TTLS / BUSY_TTLS). A call
-- without KEYS[2] or span gets 1000 and touches nothing more (a caller that does not read
-- it: never calm).
local busy = 1000
if count then
  count = count + granted
  if granted > 0 then
    redis.call('SET', KEYS[2], string.format('%.4f:%d:%d', count, now, born), 'PX', math.floor(4 * span / 1000) + 1)
  end
  busy = math.floor(count * T / (span * math.max(1 - unseen, 0.25)) * 1000 + 0.5)
  -- Nothing seen at all (no average, nothing granted): the cautious 1000.
  if count == 0 and unseen == 1 then busy = 1000 end
end
-- The key's demand (fair.rs): stored only with a report, forgotten after four spans.
local demand = 0
local dspan = tonumber(ARGV[18])
if KEYS[5] and dspan and dspan > 0 then
  local dc, da = 0, now
  local d = redis.call('GET', KEYS[5])
  if d then
    local c, a = string.match(d, '^([^:]+):([^:]+)$')
    if c and tonumber(c) and tonumber(a) then dc, da = tonumber(c), tonumber(a) end
  end
  dc = dc * math.exp(-math.max(0, now - da) / dspan)
  local reported = tonumber(ARGV[17]) or 0
  if reported > 0 then
    dc = dc + reported
    redis.call('SET', KEYS[5], string.format('%.4f:%d', dc, now), 'PX', math.floor(4 * dspan / 1000) + 1)
  end
  demand = math.floor(dc * T / dspan * 1000 + 0.5)
end
return {granted, math.ceil(tat + held * T - tau - now - EPS), now, busy, is_long, returnable, demand}
