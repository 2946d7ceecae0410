package redisstore

import "github.com/redis/go-redis/v9"

// Every Lua script the store runs lives in this file, named for its caller.
//
// Rules every script keeps:
//   - It touches one shop's keys only (one hash tag, one cluster slot). Keys
//     the script cannot name in advance (a hold's items, the holds the
//     reaper pops) are built from the shop's key base, passed as ARGV[1];
//     at least one real key of the shop is declared in KEYS so the client
//     routes the call to the slot's node.
//   - A write is keyed by the token (or, for adjust, by a per-call id), so
//     running the same call twice, for instance after a lost reply, changes
//     nothing the second time: Reserve finds its hold, Release finds none,
//     a claim finds its marker, an adjust finds its id.
//   - Time is the Redis server's (TIME): Redis 7 replicates a script's
//     effects, not the script, so reading the clock in a script that writes
//     is allowed and replicas see the same values.
//   - Scripts run to completion without yielding, so each call is atomic:
//     that is what makes a reserve all-or-nothing and a reaped hold
//     returned once.

// newScript tags a script with its callers in a first comment line, so a
// script listed by the server (SCRIPT LOAD, a replica's log, a debugger)
// says where it comes from.
func newScript(callers, body string) *redis.Script {
	return redis.NewScript("-- reservoir/redisstore caller=" + callers + "\n" + body)
}

// luaPrelude holds the helpers the scripts share. Ids stay strings in Lua
// (see keys.go); quantities are numbers.
const luaPrelude = `
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- hold_allocs turns a hold's HGETALL reply into {item, location, quantity}.
local function hold_allocs(flat)
  local out = {}
  for i = 1, #flat, 2 do
    local item, loc = string.match(flat[i], '^a:(%d+):(%d+)$')
    if item then
      out[#out + 1] = {item, loc, tonumber(flat[i + 1])}
    end
  end
  return out
end

-- decode reads "item:location:quantity,..." (the claimed marker's format).
local function decode(s)
  local out = {}
  for item, loc, q in string.gmatch(s, '(%d+):(%d+):(%d+)') do
    out[#out + 1] = {item, loc, tonumber(q)}
  end
  return out
end

-- move adds sign * quantity to each allocation's quantity field.
local function move(base, allocs, sign)
  for _, a in ipairs(allocs) do
    redis.call('HINCRBY', base .. 'qty:' .. a[1], a[2], sign * a[3])
  end
end

-- drop deletes a hold and its expiry index entry.
local function drop(base, expiry, token)
  redis.call('DEL', base .. 'hold:' .. token)
  redis.call('ZREM', expiry, token)
end
`

// scriptReserve (caller: Reserve) holds every line of a cart or nothing.
//
// KEYS: expiry, hold, claimed.
// ARGV: base, token, ttl ms, authority, check ("1"; "0" only in tests),
// line count, then per line: item, quantity, location count, locations in
// preference order.
//
// Replies: {"claimed"}; {"existing", HGETALL of the hold} (the caller
// decides between a replay and a token conflict); {"short", item,
// requested, best unheld, ...}; {"reserved", expiry ms, the chosen location
// of each line in line order}.
var scriptReserve = newScript("reserve", luaPrelude+`
local expiry, hold, claimed = KEYS[1], KEYS[2], KEYS[3]
local base, token = ARGV[1], ARGV[2]
if redis.call('EXISTS', claimed) == 1 then
  return {'claimed'}
end
if ARGV[5] == '1' then
  local h = redis.call('HGETALL', hold)
  if #h > 0 then
    return {'existing', h}
  end
end
local n = tonumber(ARGV[6])
local i = 7
local chosen, short = {}, {}
for l = 1, n do
  local item, q, nl = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  i = i + 3
  local qk = base .. 'qty:' .. item
  local pick, best = nil, 0
  for k = 0, nl - 1 do
    if not pick then
      local loc = ARGV[i + k]
      local v = tonumber(redis.call('HGET', qk, loc) or '0')
      if v >= q then
        pick = loc
      elseif v > best then
        best = v
      end
    end
  end
  i = i + nl
  if pick then
    chosen[l] = {item, pick, q}
  else
    short[#short + 1] = item
    short[#short + 1] = q
    short[#short + 1] = best
  end
end
if #short > 0 then
  table.insert(short, 1, 'short')
  return short
end
local exp = now_ms() + tonumber(ARGV[3])
local fields = {'exp', exp, 'auth', ARGV[4]}
local out = {'reserved', exp}
move(base, chosen, -1)
for _, c in ipairs(chosen) do
  fields[#fields + 1] = 'a:' .. c[1] .. ':' .. c[2]
  fields[#fields + 1] = c[3]
  out[#out + 1] = c[2]
end
redis.call('DEL', hold)
redis.call('HSET', hold, unpack(fields))
redis.call('ZADD', expiry, exp, token)
return out
`)

// scriptRelease (caller: Release) gives a hold's units back.
//
// KEYS: expiry, hold, claimed. ARGV: base, token.
// Replies: {"released", HGETALL of the hold}; {"claimed"}; {"none"}.
var scriptRelease = newScript("release", luaPrelude+`
local expiry, hold, claimed = KEYS[1], KEYS[2], KEYS[3]
local base, token = ARGV[1], ARGV[2]
local h = redis.call('HGETALL', hold)
if #h == 0 then
  if redis.call('EXISTS', claimed) == 1 then
    return {'claimed'}
  end
  return {'none'}
end
move(base, hold_allocs(h), 1)
drop(base, expiry, token)
return {'released', h}
`)

// scriptClaimCheck (caller: Claim as authority) reads what a claim starts
// from, with the server's clock to judge expiry. It writes nothing.
//
// KEYS: hold, claimed.
// Replies: {"claimed", marker}; {"none"}; {"hold", now ms, HGETALL}.
var scriptClaimCheck = newScript("claim_check", luaPrelude+`
local marker = redis.call('GET', KEYS[2])
if marker then
  return {'claimed', marker}
end
local h = redis.call('HGETALL', KEYS[1])
if #h == 0 then
  return {'none'}
end
return {'hold', now_ms(), h}
`)

// scriptSettle removes a claimed token's hold and makes the quantities
// follow the ledger's deduction: each allocation of the hold comes back,
// each deducted allocation goes out (when the two match, nothing moves).
// It then sets the claimed marker. When there is no hold (and no marker),
// the deduction still goes out: the ledger went down whether or not Redis
// held the units (a hold released or reaped after the deduction, or one
// Redis never saw). Four callers:
//
//   - Claim as authority, after Ledger.Deduct (claim_cleanup): the second
//     half of the legacy two-system claim.
//   - Claim as shadow (settle), with what the authority deducted.
//   - Reap (reap_settle), for an expired hold whose token the ledger
//     deducted: the claim's own settle or cleanup was lost.
//   - FollowClaims (follow_claims), for a recent claim without a marker.
//
// KEYS: expiry, hold, claimed.
// ARGV: base, token, marker ttl ms, deducted allocations
// ("item:location:quantity,...").
// Replies: {"done", marker} (claimed before: nothing changed);
// {"removed", HGETALL of the hold}; {"gone"} (no hold).
var scriptSettle = newScript("claim_cleanup,settle,reap_settle,follow_claims", luaPrelude+`
local expiry, hold, claimed = KEYS[1], KEYS[2], KEYS[3]
local base, token = ARGV[1], ARGV[2]
local marker = redis.call('GET', claimed)
if marker then
  return {'done', marker}
end
local h = redis.call('HGETALL', hold)
if #h > 0 then
  move(base, hold_allocs(h), 1)
  drop(base, expiry, token)
end
move(base, decode(ARGV[4]), -1)
redis.call('SET', claimed, ARGV[4], 'PX', ARGV[3])
if #h == 0 then
  return {'gone'}
end
return {'removed', h}
`)

// scriptAdjust (caller: Adjust) moves one quantity by a delta, once per
// call id.
//
// KEYS: qty hash of the item, the call's op key.
// ARGV: location, delta, op ttl ms.
// Reply: {applied (1 or 0), quantity after}.
var scriptAdjust = newScript("adjust", `
if redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[3]) then
  return {1, redis.call('HINCRBY', KEYS[1], ARGV[1], ARGV[2])}
end
return {0, tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')}
`)

// scriptReap (caller: Reap) returns the expired holds of a shop among
// the tokens the reaper checked against the ledger, in the order given, up
// to a number of hold records (one per allocation, as in mysqlstore). A
// hold is taken whole; the first one is taken even if it alone exceeds the
// limit, so a large cart cannot block the reaper. A token whose hold is
// gone, or not expired, by the time the script runs (released, or released
// and reserved again, after the reaper listed it) is skipped.
//
// KEYS: expiry. ARGV: base, record limit, tokens....
// Reply: {records, units}.
var scriptReap = newScript("reap", luaPrelude+`
local expiry, base, limit = KEYS[1], ARGV[1], tonumber(ARGV[2])
local now = now_ms()
local records, units = 0, 0
for i = 3, #ARGV do
  if records >= limit then
    break
  end
  local token = ARGV[i]
  local score = redis.call('ZSCORE', expiry, token)
  if score and tonumber(score) <= now then
    local allocs = hold_allocs(redis.call('HGETALL', base .. 'hold:' .. token))
    if records > 0 and records + #allocs > limit then
      break
    end
    move(base, allocs, 1)
    drop(base, expiry, token)
    records = records + #allocs
    for _, a in ipairs(allocs) do
      units = units + a[3]
    end
  end
end
return {records, units}
`)

// scriptSnapshot (callers: Drift, Resync) reads a shop's holds and the
// quantities of the given items plus every item a hold names, in one
// atomic step, so holds and quantities agree with each other.
//
// KEYS: expiry. ARGV: base, items....
// Reply: {{token, expiry score, HGETALL}, ...}, {{item, HGETALL}, ...}.
var scriptSnapshot = newScript("drift,resync", luaPrelude+`
local expiry, base = KEYS[1], ARGV[1]
local idx = redis.call('ZRANGE', expiry, 0, -1, 'WITHSCORES')
local holds, items, seen = {}, {}, {}
for i = 2, #ARGV do
  if not seen[ARGV[i]] then
    seen[ARGV[i]] = true
    items[#items + 1] = ARGV[i]
  end
end
for i = 1, #idx, 2 do
  local h = redis.call('HGETALL', base .. 'hold:' .. idx[i])
  holds[#holds + 1] = {idx[i], idx[i + 1], h}
  for _, a in ipairs(hold_allocs(h)) do
    if not seen[a[1]] then
      seen[a[1]] = true
      items[#items + 1] = a[1]
    end
  end
end
local qty = {}
for _, item in ipairs(items) do
  qty[#qty + 1] = {item, redis.call('HGETALL', base .. 'qty:' .. item)}
end
return {holds, qty}
`)

// scriptResync (caller: Resync) rebuilds a shop: its holds, claimed
// markers and quantities (ledger available minus held), in one atomic step
// so no Redis write of the shop interleaves with it.
//
// KEYS: expiry.
// ARGV: base, marker ttl ms, holds from ("redis" or "mysql"),
// ledger row count, then item, location, available per row;
// claim count, then token, deducted allocations per claim;
// for "mysql": hold count, then token, expiry ms, authority, allocations
// per hold.
//
// With "redis" the shop keeps its own holds, minus those whose token the
// ledger has deducted (leftovers of a claim whose cleanup never ran) and
// index entries without a hold. With "mysql" every hold is replaced by
// the given ones. Either way every claimed token gets its marker, and
// every quantity hash of an item the ledger or a hold names is rewritten.
// A quantity hash of an item that neither names is left alone.
//
// Reply: {holds kept or written, holds dropped}.
var scriptResync = newScript("resync", luaPrelude+`
local expiry, base, ttl, from = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local i = 4
local ledger = {}
local n = tonumber(ARGV[i]); i = i + 1
for k = 1, n do
  ledger[k] = {ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])}
  i = i + 3
end
local claims = {}
n = tonumber(ARGV[i]); i = i + 1
for k = 1, n do
  claims[ARGV[i]] = ARGV[i + 1]
  i = i + 2
end
local idx = redis.call('ZRANGE', expiry, 0, -1)
local kept, dropped = {}, 0
if from == 'mysql' then
  local written = {}
  n = tonumber(ARGV[i]); i = i + 1
  for k = 1, n do
    local token, exp, auth, allocs = ARGV[i], ARGV[i + 1], ARGV[i + 2], decode(ARGV[i + 3])
    i = i + 4
    if not claims[token] then
      local fields = {'exp', exp, 'auth', auth}
      for _, a in ipairs(allocs) do
        fields[#fields + 1] = 'a:' .. a[1] .. ':' .. a[2]
        fields[#fields + 1] = a[3]
      end
      local key = base .. 'hold:' .. token
      redis.call('DEL', key)
      redis.call('HSET', key, unpack(fields))
      redis.call('ZADD', expiry, exp, token)
      written[token] = true
      kept[#kept + 1] = allocs
    end
  end
  for _, token in ipairs(idx) do
    if not written[token] then
      drop(base, expiry, token)
      dropped = dropped + 1
    end
  end
else
  for _, token in ipairs(idx) do
    local h = redis.call('HGETALL', base .. 'hold:' .. token)
    if #h == 0 or claims[token] then
      drop(base, expiry, token)
      dropped = dropped + 1
    else
      kept[#kept + 1] = hold_allocs(h)
    end
  end
end
for token, marker in pairs(claims) do
  redis.call('SET', base .. 'claimed:' .. token, marker, 'PX', ttl)
end
local want = {}
local function cell(item, loc)
  want[item] = want[item] or {}
  want[item][loc] = want[item][loc] or 0
end
for _, r in ipairs(ledger) do
  cell(r[1], r[2])
  want[r[1]][r[2]] = want[r[1]][r[2]] + r[3]
end
for _, allocs in ipairs(kept) do
  for _, a in ipairs(allocs) do
    cell(a[1], a[2])
    want[a[1]][a[2]] = want[a[1]][a[2]] - a[3]
  end
end
for item, locs in pairs(want) do
  local key = base .. 'qty:' .. item
  redis.call('DEL', key)
  for loc, q in pairs(locs) do
    redis.call('HSET', key, loc, q)
  end
end
return {#kept, dropped}
`)
