--[[
decide.lua -- exact mode's server-side script: sluice's six algorithms,
decided atomically inside Redis, field for field as the C engine decides
them (docs/semantics.md, src/algo/*.c, sl_take_all in src/limiter.c).
src/fleet/script.c embeds this file, formats its calls and reads its reply;
docs/store.md ("Exact mode's script") explains the design.

CALL    EVALSHA sha n KEYS[1..n] ARGV...   (n >= 1: distinct state keys; the
        C side has merged repeated keys, adding their costs)
ARGV[1]   now: "" or "-1" = Redis TIME; else decimal ns since the epoch
ARGV[2]   the requests the keys belong to:
          "0" = one request, all-or-nothing (charge only if every
                non-shadow check allows);
          "1" = one request, dry (decide every check, charge nothing);
          "g" then one byte per request = its number of keys (1..255): a
                batch of requests over consecutive keys, each decided
                all-or-nothing in turn (a later one sees what an earlier
                one charged; repeated keys across requests are fine);
          "r" / "n" = one request, every key a concurrency key: release
                / renew its lease (the key's nums carry it); the request's
                allowed is 1 when every key held it live (LEASE below);
          "f" then one byte per request: the same, but every key is
                charged by force (approximate mode's sync; sl_limiter_force):
                whether or not it fits, into a debt below empty that stops
                at what the state counts (fill_max below; a window's count
                at 2^32 - 1). The reply is REPLY_F below
          "p" before "0", "1" or "g": the same, and where the Redis
                module decides (SL.DECIDE) its reply is REPLY_P below;
                the script ignores it and answers REPLY
then, for key u (1..n), three values at ARGV[3u .. 3u+2]:
  algo    sl_algo: "0" token_bucket, "1" leaky_bucket, "2" fixed_window,
          "3" sliding_log, "4" sliding_window, "5" gcra, "6" concurrency;
          "7" CL.THROTTLE's cell (redis-cell's GCRA, CELL below)
  shadow  "1" = never denies the request (still decided and charged)
  nums    32 bytes, four little-endian int64 ('<i8i8i8i8'):
          cost (0 <= cost <= the largest cost; 0 = a peek), then
            buckets (0, 1, 5): cap = burst*Wg, Lg, Wg (ticks: see algo.h)
            windows (2, 3, 4): LIMIT, PERIOD in ms, PHASE in ms (fixed_window:
              its windows start at PHASE + k*PERIOD; the daemon sends a
              calendar window's start and length, as Lua in Redis has no
              time zones; 0 = epoch-aligned; 0 for the other two)
            concurrency (6): LIMIT, the lease's life in ms, then the lease
              id: 8 raw bytes, the sorted set's member (not a number)
            cell (7): the quantity (any; limit + 1 = above the limit: it
              never fits), then this call's rate: EI, DVT (ns; DVT = EI *
              LIMIT, DVT + EI <= 2^52) and LIMIT
          Binary, not decimal: struct.unpack reads all four in one call,
          where tonumber costs about 0.3 us each (a sixth of the script).
REPLY_F ("f") { now, levels }: levels is one string, 16 bytes per key u in
          order, '<i8i8': its signed level (remaining after its charge,
          negative = owed), then its limit. One string, not 1 + 6n values:
          a sync round pushes every key of an interval, and Redis building
          (and the daemon reading) six replies per key cost more than the
          charge itself.
REPLY_P ("p", the module only) REPLY's values in REPLY's order, as one
          string of little-endian int64 ('<i8' each): where Redis would
          make a reply of each (1 + requests + 6 per key, a call into
          Redis and about 40 ns each), one string
REPLY   { now, then per request: allowed, then six per key u:
          allowed, limit, remaining, reset_ns, retry_after_ns, delay_ns }
  now is the script's clock, a decimal string (ns exceed 2^53); allowed is
  the request's overall answer. Durations are integers, or decimal strings from
  2^53 ns on (fixed_window and sliding_log with periods over 104 days, and
  gcra and leaky_bucket for a clock far behind the state). A check that would allow but was not charged because another
  denied reports a peek's figures (allowed 1); a denied one its denial's.

STATE   one Redis key per check, with a PEXPIRE/PX equal to its time to
        fresh (rounded up to a ms): an idle key disappears when it would
        carry no information. Denials and peeks write nothing.
  token_bucket   string '<i8i4i8': last (ms, ns within the ms), tokens (ticks)
  gcra, leaky    string '<i8i4i8': TAT/free_at rounded up to a ns (ms, ns),
                 and how far above the exact tick value that is (< Lg)
  fixed_window   string '<i8I4': window start (ms), count
  sliding_window string '<i8I4I4': window start (ms), prev, curr
  concurrency    sorted set: member = lease id (8 bytes), score = its
                 expiry in ms on Redis's clock; live while now < expiry.
                 Expired members are removed on every call; PEXPIRE = the
                 newest lease's life. (Never in "f" mode: approximate mode
                 keeps leases local.)
LEASE   "r"/"n": per key, allowed 1 when its lease was live (released, or
        its expiry now + life), then limit, remaining (free slots after),
        reset (until the last live lease expires), 0, 0.
  cell           string: the TAT in ns since the epoch, in decimal: the
                 layout redis-cell writes (`new_tat_ns.to_string()`) and
                 the module's CL.THROTTLE reads and writes. Each call
                 brings its rate and applies it to the key's one TAT
                 (src/algo/cell.c, whose arithmetic this copies), so a
                 key's limits may change between calls. The decimal is
                 read as (ms, ns within the ms), both exact, and only the
                 TAT's distance from now is formed (exact below 2^52 ns:
                 beyond that the key is limited whatever the rate, as every
                 DVT is below it). Its reply: remaining may be the string
                 "9223372036854775807" (an EI under 1 us: redis-cell's
                 division by 0); a limited retry of 0 means none (it
                 never fits); reset and retry may be decimal strings.
  sliding_log    hash used as a deque: field "m" = '<i8I4I4i8i4I4i8i4I4'
                 (head index, count, sum, newest (ms, ns, cost), oldest
                 (ms, ns, cost)); field "<index>" = entry '<i8i4I4'
                 (ms, ns, cost), indices head .. head+count-1, oldest first

ARITHMETIC  Lua numbers are doubles, so every quantity here stays an exact
  integer below 2^53 (rs_policy_check admits only policies for which that
  holds). Absolute instants (~1.8e18 ns) do not fit: they are kept as
  (ms, ns-within-ms) pairs and only differences, relative to now, are
  formed. floor(a/b) and ceil(a/b) of exact integers a < 2^53 are exact.
]]

local call = redis.call
local floor, ceil = math.floor, math.ceil
local tonumber = tonumber
local spack, sunpack = struct.pack, struct.unpack
local fmt, ssub, sbyte = string.format, string.sub, string.byte
local unpack = unpack
local KEYS, ARGV = KEYS, ARGV

local nk = #KEYS
if nk == 0 or #ARGV ~= 2 + 3 * nk then
  return redis.error_reply('ERR sluice decide.lua: malformed arguments')
end
-- The requests: sizes[d] keys each (nil: one request of all the keys).
local mode = ARGV[2]
if sbyte(mode, 1) == 112 then mode = ssub(mode, 2) end -- "p": REPLY_P
local dry, sizes = mode == '1', nil
local force = ssub(mode, 1, 1) == 'f'
local lease_op = (mode == 'r' or mode == 'n') and mode or nil
if mode ~= '0' and mode ~= '1' and not lease_op then
  if (ssub(mode, 1, 1) ~= 'g' and not force) or #mode < 2 then
    return redis.error_reply('ERR sluice decide.lua: malformed arguments')
  end
  sizes = {sbyte(mode, 2, -1)}
  local sum = 0
  for d = 1, #sizes do
    if sizes[d] == 0 then
      return redis.error_reply('ERR sluice decide.lua: malformed arguments')
    end
    sum = sum + sizes[d]
  end
  if sum ~= nk then
    return redis.error_reply('ERR sluice decide.lua: malformed arguments')
  end
end

-- The clock, as (ms, ns within the ms) and as the decimal string returned.
local now_ms, now_sub, now_str
do
  local a = ARGV[1]
  if a == '' or a == '-1' then
    local tm = call('TIME')
    local us = tonumber(tm[2])
    local uf = us % 1000
    now_ms = tonumber(tm[1]) * 1000 + (us - uf) / 1000
    now_sub = uf * 1000
    now_str = tm[1] .. ssub('00000' .. tm[2], -6) .. '000'
  else
    local n = #a
    if n > 6 then
      now_ms = tonumber(ssub(a, 1, n - 6))
      now_sub = tonumber(ssub(a, n - 5))
    else
      now_ms, now_sub = 0, tonumber(a)
    end
    now_str = a
  end
end

-- Which algorithms this call decides. Lua makes a closure of every function
-- definition it runs, on every call: only those this call uses are defined.
local u0, u1, u2, u3, u4, u5 = false, false, false, false, false, false
local u6, u7 = false, false
for u = 1, nk do
  local a = ARGV[3 * u]
  if lease_op and a ~= '6' then
    return redis.error_reply('ERR sluice decide.lua: a lease names a concurrency key')
  end
  if a == '6' then u6 = true
  elseif a == '0' then u0 = true
  elseif a == '1' then u1 = true
  elseif a == '2' then u2 = true
  elseif a == '3' then u3 = true
  elseif a == '4' then u4 = true
  elseif a == '5' then u5 = true
  elseif a == '7' and not force then u7 = true
  else return redis.error_reply('ERR sluice decide.lua: unknown algorithm')
  end
end
local dur, token_bucket, gcra_leaky, fixed_window, sliding_window, concurrency
local conc_write, conc_op, cell
local B24, wide_sign, muldiv, META, ENT, sliding_log, slog_write
local U32 = 4294967295

-- The most a bucket can be filled by forced charges, in ticks (cap - tokens,
-- or the debt): every figure below then stays under 2^53 (algo_fill_max).
local function fill_max(cap, Lg)
  local room = 9007199254740992 - 2 * Lg - cap
  if room > cap then return room end
  return cap
end

-- The duration ms*1e6 + ns (|ns| < 2^52, the total >= 0) as an exact
-- integer, or as a decimal string at 2^53 ns and beyond.
if u1 or u2 or u3 or u5 or u7 then
  dur = function(ms, ns)
    if ms >= 4e9 then
      local c = floor(ns / 1e6)
      ms, ns = ms + c, ns - c * 1e6
      if ms >= 4e9 then return fmt('%d%06d', ms, ns) end
    end
    return ms * 1e6 + ns
  end
end

--[[ Each algorithm: (key, cost, constants..., w) -> allowed, remaining,
reset, retry_after, delay [, value, ttl]. An allowed request with cost > 0
changes the state: with w it is written now, else the new state is returned
(value, ttl in ms) for the caller to write once every check has passed.
In "f" mode (force) every charge is written now and the values are
1, the signed level, 0, 0, 0. ]]

-- token_bucket: tokens in ticks, refilled by Lg per ns, capped at cap.
if u0 then
  token_bucket = function(key, cost, cap, Lg, Wg, w)
    local raw = call('GET', key)
    local tok, te_ms, te_sub = cap, now_ms, now_sub
    if raw then
      local l_ms, l_sub, l_tok = sunpack('<i8i4i8', raw)
      if l_ms < now_ms or (l_ms == now_ms and l_sub < now_sub) then
        -- elapsed ns: exact whenever it is at most cap/Lg (< 2^52); beyond
        -- that the bucket is full anyway
        local e = (now_ms - l_ms) * 1e6 + (now_sub - l_sub)
        if e <= floor((cap - l_tok) / Lg) then
          tok = l_tok + e * Lg
          if tok > cap then tok = cap end
        end
      else -- a time before the last update is the last update
        te_ms, te_sub, tok = l_ms, l_sub, l_tok
      end
    end
    local want = cost * Wg
    if force then -- down to cap - fill_max (tb_force)
      local least = cap - fill_max(cap, Lg)
      if want > tok - least then
        if tok > least then tok = least end
      else
        tok = tok - want
      end
      if cost > 0 then
        local reset = ceil((cap - tok) / Lg)
        call('SET', key, spack('<i8i4i8', te_ms, te_sub, tok), 'PX',
             (te_ms - now_ms) + ceil((te_sub - now_sub + reset) / 1e6))
      end
      return 1, floor(tok / Wg), 0, 0, 0
    end
    if tok >= want or cost == 0 then -- a peek is allowed, even in debt
      tok = tok - want
      local reset = ceil((cap - tok) / Lg)
      if cost == 0 then
        if tok < 0 then return 1, 0, reset, 0, 0 end
        return 1, floor(tok / Wg), reset, 0, 0
      end
      local v = spack('<i8i4i8', te_ms, te_sub, tok)
      local ttl = (te_ms - now_ms) + ceil((te_sub - now_sub + reset) / 1e6)
      if w then
        call('SET', key, v, 'PX', ttl)
        return 1, floor(tok / Wg), reset, 0, 0
      end
      return 1, floor(tok / Wg), reset, 0, 0, v, ttl
    end
    local rem = 0 -- tokens below zero: a forced charge's debt
    if tok > 0 then rem = floor(tok / Wg) end
    return 0, rem, ceil((cap - tok) / Lg), ceil((want - tok) / Lg), 0
  end
end

-- gcra and leaky_bucket: one future instant in ticks (TAT / free_at); the
-- debt is its distance from now. Their decisions differ only in delay.
if u1 or u5 then
  gcra_leaky = function(key, cost, cap, Lg, Wg, w, leaky)
    local raw = call('GET', key)
    local debt = 0
    if raw then
      local a_ms, a_sub, b = sunpack('<i8i4i8', raw)
      if a_ms > now_ms or (a_ms == now_ms and a_sub > now_sub) then
        local dms, dsub = a_ms - now_ms, a_sub - now_sub
        local d = dms * 1e6 + dsub -- exact up to fill_max/Lg + 1 (< 2^53)
        local most = cap
        if force then most = fill_max(cap, Lg) end
        if d > floor(most / Lg) + 1 then
          -- The debt exceeds cap (a forced charge's, or a clock far behind
          -- the state: then d may exceed 2^53 ns): ceil(debt/Lg) = d.
          if force then -- beyond fill_max (a clock behind): unchanged,
            -- the level reported at the stop (algo_tat_force)
            return 1, floor((cap - most) / Wg), 0, 0, 0
          end
          local big = dur(dms, dsub)
          if cost == 0 then
            if leaky then return 1, 0, big, 0, big end
            return 1, 0, big, 0, 0
          end
          return 0, 0, big, dur(dms, dsub - floor((cap + b - cost * Wg) / Lg)), 0
        end
        debt = d * Lg - b
      end
    end
    local after = debt + cost * Wg
    if force then -- up to fill_max (algo_tat_force)
      local most = fill_max(cap, Lg)
      if cost * Wg > most - debt then
        if debt > most then after = debt else after = most end
      end
      if cost > 0 then
        local k = ceil(after / Lg)
        local s = now_sub + k
        local sm = s % 1e6
        call('SET', key, spack('<i8i4i8', now_ms + (s - sm) / 1e6, sm,
             k * Lg - after), 'PX', ceil(k / 1e6))
      end
      -- A debt past fill_max by under a ns (d not past floor(most/Lg) + 1
      -- above; a clock behind the TAT) is reported at the stop too: where
      -- T < 1 ns that ns holds whole units.
      if after > most then after = most end
      return 1, floor((cap - after) / Wg), 0, 0, 0
    end
    if after <= cap or cost == 0 then -- a peek is always allowed
      local rem = 0
      if after < cap then rem = floor((cap - after) / Wg) end
      local k = ceil(after / Lg) -- reset; the new instant is now + k ns
      local delay = 0
      if leaky then delay = ceil(debt / Lg) end
      if cost == 0 then return 1, rem, k, 0, delay end
      local s = now_sub + k
      local sm = s % 1e6
      local v = spack('<i8i4i8', now_ms + (s - sm) / 1e6, sm, k * Lg - after)
      local ttl = ceil(k / 1e6)
      if w then
        call('SET', key, v, 'PX', ttl)
        return 1, rem, k, 0, delay
      end
      return 1, rem, k, 0, delay, v, ttl
    end
    local rem = 0
    if debt < cap then rem = floor((cap - debt) / Wg) end
    return 0, rem, ceil(debt / Lg), ceil((after - cap) / Lg), 0
  end
end

-- cell: redis-cell's GCRA (src/algo/cell.c), quantity q at rate (ei, dvt)
-- on the key's TAT, decimal ns (CELL above).
if u7 then
  cell = function(key, q, ei, dvt, w)
    local raw = call('GET', key)
    local t_ms, t_sub = now_ms, now_sub -- max(TAT, now)
    if raw then
      local n = #raw
      if n > 19 or not string.find(raw, '^%d+$') then
        error({err = 'WRONGTYPE sluice decide.lua: ' .. key ..
                     ' holds no TAT'})
      end
      local a_ms, a_sub = 0, tonumber(raw)
      if n > 6 then
        a_ms, a_sub = tonumber(ssub(raw, 1, n - 6)), tonumber(ssub(raw, n - 5))
      end
      if a_ms > now_ms or (a_ms == now_ms and a_sub > now_sub) then
        t_ms, t_sub = a_ms, a_sub
      end
    end
    local dms, dsub = t_ms - now_ms, t_sub - now_sub
    if dms >= 4600000000 then
      -- TAT - now > 2^52 > dvt: limited whatever the quantity; exact as
      -- (ms, ns) only (a TAT another writer left far ahead).
      local retry = 0
      if q * ei <= dvt then retry = dur(dms, dsub - (dvt - q * ei)) end
      return 0, 0, dur(dms, dsub), retry, 0
    end
    local ttl = dms * 1e6 + dsub -- TAT - now, exact
    local inc = q * ei
    local a = 1
    if ttl + inc > dvt then -- late: limited (no retry when it never fits)
      a = 0
    else
      ttl = ttl + inc
    end
    local rem, nx = 0, dvt - ttl -- redis-cell's whole-us quotient
    if nx > -ei then
      local nx_us, ei_us = floor(nx / 1000), floor(ei / 1000)
      if nx < 0 then nx_us = -floor(-nx / 1000) end
      if ei_us == 0 then
        if nx_us > 0 then rem = '9223372036854775807' end
      elseif nx_us > 0 then
        rem = floor(nx_us / ei_us)
      end
    end
    if a == 0 then
      local retry = 0
      if inc <= dvt then retry = ttl + inc - dvt end
      return 0, rem, ttl, retry, 0
    end
    if q == 0 then return 1, rem, ttl, 0, 0 end
    local s = t_sub + inc
    local sm = s % 1e6
    local ms = t_ms + (s - sm) / 1e6
    local v
    if ms > 0 then v = fmt('%d%06d', ms, sm) else v = fmt('%d', sm) end
    local px = ceil(ttl / 1e6)
    if w then
      call('SET', key, v, 'PX', px)
      return 1, rem, ttl, 0, 0
    end
    return 1, rem, ttl, 0, 0, v, px
  end
end

-- fixed_window: a count per window of Wms ms from PHASE (0: epoch-aligned).
if u2 then
  fixed_window = function(key, cost, L, Wms, w, phase)
    local raw = call('GET', key)
    local t_ms, t_sub = now_ms, now_sub
    local start = now_ms - (now_ms - phase) % Wms
    local count = 0
    if raw then
      local s_start, s_count = sunpack('<i8I4', raw)
      if s_start > start then -- clock went back into an earlier window
        start, t_ms, t_sub = s_start, s_start, 0
      end
      if s_start == start then count = s_count end
    end
    if force then -- up to a count of 2^32 - 1 (fw_force)
      local c = cost
      if c > U32 - count then c = U32 - count end
      if c > 0 then
        call('SET', key, spack('<i8I4', start, count + c), 'PX',
             start + Wms - now_ms)
      end
      return 1, L - count - c, 0, 0, 0
    end
    local to_end = dur(start + Wms - t_ms, -t_sub)
    if count + cost <= L or cost == 0 then -- a peek is always allowed
      if cost == 0 then
        if count > L then return 1, 0, to_end, 0, 0 end -- in debt
        if count > 0 then return 1, L - count, to_end, 0, 0 end
        return 1, L, 0, 0, 0
      end
      local v = spack('<i8I4', start, count + cost)
      local ttl = start + Wms - now_ms
      if w then
        call('SET', key, v, 'PX', ttl)
        return 1, L - count - cost, to_end, 0, 0
      end
      return 1, L - count - cost, to_end, 0, 0, v, ttl
    end
    if count > L then return 0, 0, to_end, to_end, 0 end
    return 0, L - count, to_end, to_end, 0
  end
end

-- The sign of a*b - q*c for integers 0 <= a, b, q, c < 2^53, exactly:
-- limbs of 2^24, column sums below 2^51, carries propagated upwards.
if u4 then
  B24 = 16777216
  wide_sign = function(a, b, q, c)
    local a0 = a % B24
    local t = (a - a0) / B24
    local a1 = t % B24
    local a2 = (t - a1) / B24
    local b0 = b % B24
    t = (b - b0) / B24
    local b1 = t % B24
    local b2 = (t - b1) / B24
    local q0 = q % B24
    t = (q - q0) / B24
    local q1 = t % B24
    local q2 = (t - q1) / B24
    local c0 = c % B24
    t = (c - c0) / B24
    local c1 = t % B24
    local c2 = (t - c1) / B24
    local d0 = a0 * b0 - q0 * c0
    local d1 = (a0 * b1 + a1 * b0) - (q0 * c1 + q1 * c0)
    local d2 = (a0 * b2 + a1 * b1 + a2 * b0) - (q0 * c2 + q1 * c1 + q2 * c0)
    local d3 = (a1 * b2 + a2 * b1) - (q1 * c2 + q2 * c1)
    local d4 = a2 * b2 - q2 * c2
    local k = floor(d0 / B24)
    d0 = d0 - k * B24
    d1 = d1 + k
    k = floor(d1 / B24)
    d1 = d1 - k * B24
    d2 = d2 + k
    k = floor(d2 / B24)
    d2 = d2 - k * B24
    d3 = d3 + k
    k = floor(d3 / B24)
    d3 = d3 - k * B24
    d4 = d4 + k
    if d4 ~= 0 then return d4 end
    return d0 + d1 + d2 + d3 -- each in [0, 2^24): >= 0, 0 iff all are
  end

  -- floor(a*b/c) for integers 0 <= a, b < 2^53, 1 <= c < 2^53, when the
  -- quotient is below 2^52: a double estimate (off by at most 2), fixed up
  -- with exact comparisons.
  muldiv = function(a, b, c)
    local p = a * b
    if p < 9007199254740992 then return floor(p / c) end -- exact product
    local q = floor(p / c)
    while wide_sign(a, b, q, c) < 0 do q = q - 1 end
    while wide_sign(a, b, q + 1, c) >= 0 do q = q + 1 end
    return q
  end

  -- sliding_window: estimate = prev*(W - e)/W + curr. With
  -- K = ceil(prev*(W - e)/W) = prev - floor(prev*e/W), every comparison the
  -- C code makes multiplied by W becomes one on integers: allowed iff
  -- curr + cost + K <= L, remaining = max(0, L - curr - cost - K).
  sliding_window = function(key, cost, L, Wms, w)
    local raw = call('GET', key)
    local W = Wms * 1e6
    local start = now_ms - now_ms % Wms
    local t_ms, t_sub = now_ms, now_sub
    local prev, curr = 0, 0
    if raw then
      local s_start, s_prev, s_curr = sunpack('<i8I4I4', raw)
      if s_start > start then -- clock went back: the stored window's start
        start, t_ms, t_sub = s_start, s_start, 0
      end
      if s_start == start then
        prev, curr = s_prev, s_curr
      elseif s_start == start - Wms then
        prev = s_curr
      end
    end
    local e = (t_ms - start) * 1e6 + t_sub
    local K = 0
    if prev > 0 then K = prev - muldiv(prev, e, W) end
    if force then -- curr up to 2^32 - 1 (sw_force)
      local c = cost
      if c > U32 - curr then c = U32 - curr end
      if c > 0 then
        call('SET', key, spack('<i8I4I4', start, prev, curr + c), 'PX',
             start + 2 * Wms - now_ms)
      end
      return 1, L - curr - c - K, 0, 0, 0
    end
    local room = L - curr - cost
    if room >= K or cost == 0 then -- a peek is always allowed
      local rem = room - K
      if rem < 0 then rem = 0 end
      local c2 = curr + cost
      local reset = 0
      if c2 > 0 then reset = 2 * W - e elseif prev > 0 then reset = W - e end
      if cost == 0 then return 1, rem, reset, 0, 0 end
      local v = spack('<i8I4I4', start, prev, c2)
      local ttl = start + 2 * Wms - now_ms
      if w then
        call('SET', key, v, 'PX', ttl)
        return 1, rem, reset, 0, 0
      end
      return 1, rem, reset, 0, 0, v, ttl
    end
    local rem = L - curr - K
    if rem < 0 then rem = 0 end
    local left = W - e
    local reset = 0
    if curr > 0 then reset = left + W elseif prev > 0 then reset = left end
    -- retry: the least d > 0 at which the estimate admits cost again
    if room >= 0 and prev > 0 then
      -- in this window: prev*(left - d) <= room*W
      local d = left - muldiv(room, W, prev)
      if d < left then return 0, rem, reset, d, 0 end
    end
    -- in the next one, where curr becomes prev
    local e2 = 0
    if curr > L - cost then e2 = W - muldiv(L - cost, W, curr) end
    return 0, rem, reset, left + e2, 0
  end
end

-- sliding_log: a log of (instant, cost), one entry per distinct instant; an
-- entry counts while its time > te - W, te = max(now, newest).
if u3 then
  META, ENT = '<i8I4I4i8i4I4i8i4I4', '<i8i4I4'

  sliding_log = function(key, cost, L, Wms, w)
    local m = call('HGET', key, 'm')
    local te_ms, te_sub = now_ms, now_sub
    local head, count, sum = 0, 0, 0
    local n_ms, n_sub, n_c
    local first, live = 0, 0 -- entries expired at te, live cost
    local cur_ms, cur_sub, cur_c -- entry head+first (when first < count)
    local buf, bi, bn, chunk = nil, 0, 0, 16
    -- Moves cur to entry head+first, fetching entries ahead in chunks.
    local function advance()
      if bi >= bn then
        local nf = count - first
        if nf > chunk then nf = chunk end
        local f = {}
        for k = 1, nf do f[k] = head + first + k - 1 end
        buf, bi, bn = call('HMGET', key, unpack(f)), 0, nf
        if chunk < 512 then chunk = chunk * 2 end
      end
      bi = bi + 1
      cur_ms, cur_sub, cur_c = sunpack(ENT, buf[bi])
    end
    if m then
      local o_ms, o_sub, o_c
      head, count, sum, n_ms, n_sub, n_c, o_ms, o_sub, o_c = sunpack(META, m)
      if count > 0 then
        if n_ms > te_ms or (n_ms == te_ms and n_sub > te_sub) then
          te_ms, te_sub = n_ms, n_sub
        end
        local x = n_ms + Wms - te_ms
        if x < 0 or (x == 0 and n_sub <= te_sub) then
          first = count -- even the newest has expired: all have
        else
          cur_ms, cur_sub, cur_c = o_ms, o_sub, o_c
          live = sum
          while true do
            x = cur_ms + Wms - te_ms
            if x > 0 or (x == 0 and cur_sub > te_sub) then break end
            live = live - cur_c
            first = first + 1
            advance() -- the newest is live: first < count
          end
        end
      end
    end
    if force then -- a live sum up to 2^32 - 1 (slog_force)
      if cost > U32 - live then cost = U32 - live end
      if cost == 0 then return 1, L - live, 0, 0, 0 end
    end
    if live + cost <= L or cost == 0 or force then -- peeks: always allowed
      if cost == 0 then
        local rem = L - live
        if rem < 0 then rem = 0 end -- in debt
        if first < count then
          return 1, rem, dur(n_ms + Wms - te_ms, n_sub - te_sub), 0, 0
        end
        return 1, rem, 0, 0, 0
      end
      -- The new log: expired entries dropped, cost added at te.
      local nhead, ncount = head + first, count - first
      local idx, ent, o_ms, o_sub, o_c
      if ncount == 0 then
        nhead, ncount, idx = 0, 1, 0
        n_c = cost
        o_ms, o_sub, o_c = te_ms, te_sub, cost
      elseif n_ms == te_ms and n_sub == te_sub then
        idx = nhead + ncount - 1
        n_c = n_c + cost
        if ncount == 1 then o_ms, o_sub, o_c = te_ms, te_sub, n_c
        else o_ms, o_sub, o_c = cur_ms, cur_sub, cur_c end
      else
        idx = nhead + ncount
        ncount = ncount + 1
        n_c = cost
        o_ms, o_sub, o_c = cur_ms, cur_sub, cur_c
      end
      ent = spack(ENT, te_ms, te_sub, n_c)
      local meta = spack(META, nhead, ncount, live + cost, te_ms, te_sub, n_c,
                         o_ms, o_sub, o_c)
      local ttl = (te_ms - now_ms) + Wms
      if te_sub > now_sub then ttl = ttl + 1 end
      local wr = {first, count, head, idx, ent, meta, ttl}
      if force then return 1, L - live - cost, 0, 0, 0, wr, 0, true end
      if w then
        return 1, L - live - cost, dur(Wms, 0), 0, 0, wr, 0, true
      end
      return 1, L - live - cost, dur(Wms, 0), 0, 0, wr, 0
    end
    -- Denied: wait until enough of the oldest live entries have left.
    local need, freed = live + cost - L, 0
    local reset = dur(n_ms + Wms - te_ms, n_sub - te_sub)
    local rem = L - live
    if rem < 0 then rem = 0 end -- in debt
    while true do
      freed = freed + cur_c
      if freed >= need then
        return 0, rem, reset, dur(cur_ms + Wms - te_ms, cur_sub - te_sub), 0
      end
      first = first + 1
      advance()
    end
  end

  -- Writes a new sliding_log (from sliding_log's wr table).
  slog_write = function(key, wr)
    local first, count, head = wr[1], wr[2], wr[3]
    if first == count then
      if count > 0 then call('DEL', key) end
    elseif first > 0 then
      local i = head
      while i < head + first do
        local f, n = {}, 0
        while n < 1000 and i < head + first do
          n = n + 1
          f[n] = i
          i = i + 1
        end
        call('HDEL', key, unpack(f))
      end
    end
    call('HSET', key, 'm', wr[6], wr[4], wr[5])
    call('PEXPIRE', key, wr[7])
  end
end

-- concurrency: leases in a sorted set, member = id, score = expiry (ms).
-- A lease is live while now < its expiry: expiries are whole ms, so that
-- is now_ms < expiry, and ZREMRANGEBYSCORE to now_ms reclaims the rest.
if u6 then
  -- The figures of key's `live` leases: remaining, reset (ns).
  local function held(key, N, live)
    if live == 0 then return N, 0 end
    local last = call('ZRANGE', key, -1, -1, 'WITHSCORES')
    return N - live, (tonumber(last[2]) - now_ms) * 1e6 - now_sub
  end

  concurrency = function(key, cost, N, Wms, lease, w)
    call('ZREMRANGEBYSCORE', key, '-inf', now_ms)
    local live = call('ZCARD', key)
    local rem, reset = held(key, N, live)
    if force then return 1, rem, 0, 0, 0 end -- no lease by force
    if live + cost <= N then
      if cost == 0 then return 1, rem, reset, 0, 0 end
      local wr = {lease, now_ms + Wms, Wms}
      if w then conc_write(key, wr) end
      return 1, rem - 1, Wms * 1e6, 0, 0, wr, 0, w
    end
    local first = call('ZRANGE', key, 0, 0, 'WITHSCORES')
    local retry = (tonumber(first[2]) - now_ms) * 1e6 - now_sub
    if rem < 0 then rem = 0 end
    return 0, rem, reset, retry, 0
  end

  -- Records the lease concurrency() admitted (its wr table).
  conc_write = function(key, wr)
    call('ZADD', key, wr[2], wr[1])
    call('PEXPIRE', key, wr[3])
  end

  -- Releases ('r') or renews ('n') key's lease: 1 when it was live.
  conc_op = function(key, N, Wms, lease)
    call('ZREMRANGEBYSCORE', key, '-inf', now_ms)
    local done = 0
    if call('ZSCORE', key, lease) then
      done = 1
      if lease_op == 'r' then
        call('ZREM', key, lease)
      else -- no lease outlives now + life: the key's TTL is that
        call('ZADD', key, now_ms + Wms, lease)
        call('PEXPIRE', key, Wms)
      end
    end
    local rem, reset = held(key, N, call('ZCARD', key))
    return done, rem, reset
  end
end

-- Decides key u (for its cost, or as a peek): its limit, then the
-- algorithm's values.
local function decide(u, peek, w)
  local j = 3 * u
  local algo, key = ARGV[j], KEYS[u]
  local cost, c1, c2, c3 = sunpack('<i8i8i8i8', ARGV[j + 2])
  if peek then cost = 0 end
  if algo == '0' or algo == '5' or algo == '1' then
    if algo == '0' then
      return c1 / c3, token_bucket(key, cost, c1, c2, c3, w)
    end
    return c1 / c3, gcra_leaky(key, cost, c1, c2, c3, w, algo == '1')
  elseif algo == '2' then
    return c1, fixed_window(key, cost, c1, c2, w, c3)
  elseif algo == '4' then
    return c1, sliding_window(key, cost, c1, c2, w)
  elseif algo == '6' then
    return c1, concurrency(key, cost, c1, c2, ssub(ARGV[j + 2], 25, 32), w)
  elseif algo == '7' then
    return c3, cell(key, cost, c1, c2, w)
  elseif algo == '3' then
    local lim, a, r, re, ra, de, wr, ttl, now = c1, sliding_log(key, cost, c1, c2, w)
    if now then slog_write(key, wr) end
    return lim, a, r, re, ra, de, wr, ttl
  end
  error('sluice decide.lua: unknown algorithm ' .. tostring(algo))
end

-- One request over keys s..e, all-or-nothing: its answer goes to out[o],
-- each key's six values after it. Returns the next free index of out.
local function request(out, o, s, e)
  if s == e then -- one check: charge it as it is decided
    local lim, a, r, re, ra, de = decide(s, false, not dry)
    local all = 1
    if a == 0 and ARGV[3 * s + 1] ~= '1' then all = 0 end
    out[o], out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5],
      out[o + 6] = all, a, lim, r, re, ra, de
    return o + 7
  end
  -- Several checks: decide them all, then charge all or none.
  local all, pv, pt = 1, {}, {}
  for u = s, e do
    local lim, a, r, re, ra, de, v, t = decide(u, false, false)
    if a == 0 and ARGV[3 * u + 1] ~= '1' then all = 0 end
    local j = o + 1 + 6 * (u - s)
    out[j], out[j + 1], out[j + 2], out[j + 3], out[j + 4], out[j + 5] =
      a, lim, r, re, ra, de
    pv[u], pt[u] = v or false, t
  end
  out[o] = all
  if not dry then
    for u = s, e do
      local v = pv[u]
      if v then -- allowed, with a cost
        if all == 1 then
          if ARGV[3 * u] == '3' then slog_write(KEYS[u], v)
          elseif ARGV[3 * u] == '6' then conc_write(KEYS[u], v)
          else call('SET', KEYS[u], v, 'PX', pt[u]) end
        else -- not charged, because another check denied: a peek's figures
          local j = o + 1 + 6 * (u - s)
          local lim, a, r, re, ra, de = decide(u, true, false)
          out[j], out[j + 1], out[j + 2], out[j + 3], out[j + 4], out[j + 5] =
            a, lim, r, re, ra, de
        end
      end
    end
  end
  return o + 1 + 6 * (e - s + 1)
end

if force then -- every key charged by force, now, in order (REPLY_F)
  local lv = {}
  for u = 1, nk do
    local lim, _, r = decide(u, false, true)
    lv[u] = spack('<i8i8', r, lim)
  end
  return {now_str, table.concat(lv)}
end

local out = {now_str}
if lease_op then -- one request: every key's lease released or renewed
  local all = 1
  for u = 1, nk do
    local N, Wms = sunpack('<i8i8', ARGV[3 * u + 2], 9)
    local done, rem, reset = conc_op(KEYS[u], N, Wms, ssub(ARGV[3 * u + 2], 25, 32))
    if done == 0 then all = 0 end
    local j = 3 + 6 * (u - 1)
    out[j], out[j + 1], out[j + 2], out[j + 3], out[j + 4], out[j + 5] =
      done, N, rem, reset, 0, 0
  end
  out[2] = all
  return out
end
if not sizes then
  request(out, 2, 1, nk)
else
  local o, s = 2, 1
  for d = 1, #sizes do
    o = request(out, o, s, s + sizes[d] - 1)
    s = s + sizes[d]
  end
end
return out
