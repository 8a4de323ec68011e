-- tokenbucket.lua — the Redis anchor of `make bench-server`: a token bucket
-- in a Redis script, the way rate limiters on Redis commonly do it (one
-- hash per key: tokens and the last refill time, both read, refilled,
-- charged, written back, and an expiry once the bucket would be full).
-- Loaded with SCRIPT LOAD, called with EVALSHA SHA 1 KEY CAPACITY LIMIT
-- PERIOD_MS COST. The time is the server's (TIME), so the client need not
-- send it. Returns {allowed, tokens left}.
local capacity = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local period = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local s = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(s[1]) or capacity
local ts = tonumber(s[2]) or now
if now > ts then
  tokens = math.min(capacity, tokens + (now - ts) * limit / period)
end
local allowed = 0
if tokens >= cost then
  tokens = tokens - cost
  allowed = 1
end
redis.call('HMSET', KEYS[1], 'tokens', tokens, 'ts', now)
redis.call('PEXPIRE', KEYS[1],
  math.ceil((capacity - tokens) * period / limit) + 1)
return {allowed, math.floor(tokens)}
