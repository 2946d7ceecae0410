package redisstore

import "github.com/redis/go-redis/v9"

// Every Lua script the store runs lives in this file, named for its caller.
//
// Rules every script keeps:
//   - It touches one shop's keys only (one hash tag, one cluster slot). Keys
//     the script cannot name in advance (a hold's items, the holds the
//     reaper pops, the tombstone index) are built from the shop's key base,
//     passed as ARGV[1]; at least one real key of the shop is declared in
//     KEYS so the client routes the call to the slot's node.
//   - A script that decides (reserve, release, claim_check, reap, run with
//     mode "decide") reads the shop's fence first and changes nothing when
//     the fence names another decider: it answers {"fence", fence}. The
//     check and the decision are one atomic step, so a handoff (which sets
//     the fence in a script too) is either before the decision or after it.
//   - Run with mode "shadow", the same script only evaluates: it never
//     reaches a write, and the store runs it with EVALSHA_RO, so the server
//     itself would refuse one.
//   - A write is keyed by the token (or, for an adjust, by its change id),
//     so running the same call twice, for instance after a lost reply,
//     changes nothing the second time: Reserve finds its hold or its
//     tombstone, Release finds none, a claim's cleanup finds its
//     tombstone, an adjust finds its marker.
//   - Time is the Redis server's (TIME): Redis 7 replicates a script's
//     effects, not the script, so reading the clock in a script that writes
//     is allowed and replicas see the same values.
//   - Scripts run to completion without yielding, so each call is atomic:
//     that is what makes a reserve all-or-nothing, a reaped hold returned
//     once and a fence check hold for the whole decision.

// newScript tags a script with its callers in a first comment line, so a
// script listed by the server (SCRIPT LOAD, a replica's log, a debugger)
// says where it comes from.
func newScript(callers, body string) *redis.Script {
	return redis.NewScript("-- reservoir/redisstore caller=" + callers + "\n" + body)
}

// Script modes (the mode argument of reserve, release and claim_check).
const (
	modeDecide = "decide"
	modeShadow = "shadow"
)

// luaPrelude holds the helpers the scripts share. Ids stay strings in Lua
// (see keys.go); quantities are numbers.
const luaPrelude = `
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- field returns a field of an HGETALL reply, or nil.
local function field(flat, name)
  for i = 1, #flat, 2 do
    if flat[i] == name then
      return flat[i + 1]
    end
  end
  return nil
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

-- decode reads "item:location:quantity,..." (reservation.EncodeAllocations).
local function decode(s)
  local out = {}
  for item, loc, q in string.gmatch(s, '(%d+):(%d+):(%d+)') do
    out[#out + 1] = {item, loc, tonumber(q)}
  end
  return out
end

-- encode is decode's inverse (in the order given).
local function encode(allocs)
  local parts = {}
  for i, a in ipairs(allocs) do
    parts[i] = a[1] .. ':' .. a[2] .. ':' .. string.format('%d', a[3])
  end
  return table.concat(parts, ',')
end

-- same_allocs compares two allocation lists as sets.
local function same_allocs(a, b)
  if #a ~= #b then
    return false
  end
  local m = {}
  for _, x in ipairs(a) do
    m[x[1] .. ':' .. x[2]] = x[3]
  end
  for _, x in ipairs(b) do
    if m[x[1] .. ':' .. x[2]] ~= x[3] then
      return false
    end
  end
  return true
end

-- move adds sign * quantity to each allocation's quantity field.
local function move(base, allocs, sign)
  for _, a in ipairs(allocs) do
    redis.call('HINCRBY', base .. 'qty:' .. a[1], a[2], sign * a[3])
  end
end

-- note logs that a token's hold or tombstone changed, while a copy of the
-- shop into MySQL is under way (its copy key exists): the copy catches up
-- with what the log lists. Without a copy it costs one EXISTS.
local function note(base, token)
  if redis.call('EXISTS', base .. 'copy') == 1 then
    local chg = base .. 'chg'
    redis.call('ZADD', chg, redis.call('INCR', base .. 'chgseq'), token)
    local ttl = redis.call('PTTL', base .. 'copy')
    if ttl > 0 then
      redis.call('PEXPIRE', chg, ttl)
    end
  end
end

-- put_hold writes a hold and its expiry index entry.
local function put_hold(base, token, exp, auth, allocs)
  local fields = {'exp', exp, 'auth', auth}
  for _, a in ipairs(allocs) do
    fields[#fields + 1] = 'a:' .. a[1] .. ':' .. a[2]
    fields[#fields + 1] = a[3]
  end
  local key = base .. 'hold:' .. token
  redis.call('DEL', key)
  redis.call('HSET', key, unpack(fields))
  redis.call('ZADD', base .. 'expiry', exp, token)
  note(base, token)
end

-- drop deletes a hold and its expiry index entry.
local function drop(base, token)
  redis.call('DEL', base .. 'hold:' .. token)
  redis.call('ZREM', base .. 'expiry', token)
  note(base, token)
end

-- fence_of reads a shop's fence; no fence is Redis at epoch 0.
local function fence_of(key)
  return redis.call('GET', key) or 'redis@0'
end

-- decides reports whether a fence names Redis as the decider.
local function decides(f)
  return string.match(f, '^(%a+)@') == 'redis'
end

-- entomb writes a token's tombstone ("state;expiry ms;allocations;short",
-- see keys.go) for ttl ms, indexes it by when it is forgotten, and trims
-- the index of tombstones already forgotten.
local function entomb(base, token, state, exp, allocs, short, ttl, now)
  redis.call('SET', base .. 'tomb:' .. token, state .. ';' .. exp .. ';' .. allocs .. ';' .. short, 'PX', ttl)
  local tombs = base .. 'tombs'
  redis.call('ZREMRANGEBYSCORE', tombs, '-inf', now)
  redis.call('ZADD', tombs, now + ttl, token)
  note(base, token)
end

-- tomb_parts splits a tombstone into state, expiry, allocations, short.
local function tomb_parts(v)
  return string.match(v, '^(%a*);(%d*);([^;]*);([^;]*)$')
end
`

// scriptReserve (caller: Reserve, as authority and as shadow) holds every
// line of a cart or nothing; in shadow mode it only says what it would do.
//
// KEYS: expiry, hold, tomb, fence.
// ARGV: base, token, ttl ms, authority, check ("1"; "0" only in tests),
// mode, tombstone ttl ms, line count, then per line: item, quantity,
// location count, locations in preference order.
//
// Replies: {"fence", fence} (decide only: another store decides);
// {"tomb", tombstone}; {"existing", HGETALL of the hold} (the caller
// decides between a replay and a token conflict); {"short", item,
// requested, best unheld, ...} (deciding, it also wrote the refused
// tombstone); {"reserved", expiry ms, the chosen location of each line in
// line order}.
var scriptReserve = newScript("reserve", luaPrelude+`
local expiry, hold, tomb, fence = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local base, token, decide = ARGV[1], ARGV[2], ARGV[6] == 'decide'
if decide then
  local f = fence_of(fence)
  if not decides(f) then
    return {'fence', f}
  end
end
local t = redis.call('GET', tomb)
if t then
  return {'tomb', t}
end
if ARGV[5] == '1' then
  local h = redis.call('HGETALL', hold)
  if #h > 0 then
    return {'existing', h}
  end
end
local n = tonumber(ARGV[8])
local i = 9
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
local now = now_ms()
if #short > 0 then
  if decide then
    -- The refusal is final for the token: a delayed first attempt of the
    -- same cart finds this tombstone and holds nothing.
    local lines = {}
    for s = 1, #short, 3 do
      lines[#lines + 1] = short[s] .. ':' .. string.format('%d', short[s + 1]) .. ':' .. string.format('%d', short[s + 2])
    end
    entomb(base, token, 'refused', 0, '', table.concat(lines, ','), tonumber(ARGV[7]), now)
  end
  table.insert(short, 1, 'short')
  return short
end
local exp = now + tonumber(ARGV[3])
local out = {'reserved', exp}
for _, c in ipairs(chosen) do
  out[#out + 1] = c[2]
end
if not decide then
  return out
end
move(base, chosen, -1)
put_hold(base, token, exp, ARGV[4], chosen)
return out
`)

// scriptRelease (caller: Release, as authority and as shadow) gives a
// hold's units back and leaves a released tombstone; in shadow mode it
// only reads.
//
// KEYS: hold, tomb, fence.
// ARGV: base, token, mode, tombstone ttl ms, claim grace ms, resolved
// claiming stamp ("" when none: the stamp of a claiming hold the ledger
// was found not to have claimed).
//
// Replies: {"fence", fence}; {"released", HGETALL of the hold} (in shadow
// mode: what would be released); {"tomb", tombstone}; {"none"};
// {"in_progress", stamp} (a claim started within the grace); {"resolve",
// stamp} (a claim started longer ago: the caller asks the ledger).
var scriptRelease = newScript("release", luaPrelude+`
local hold, tomb, fence = KEYS[1], KEYS[2], KEYS[3]
local base, token, decide = ARGV[1], ARGV[2], ARGV[3] == 'decide'
if decide then
  local f = fence_of(fence)
  if not decides(f) then
    return {'fence', f}
  end
end
local h = redis.call('HGETALL', hold)
if #h == 0 then
  local t = redis.call('GET', tomb)
  if t then
    return {'tomb', t}
  end
  return {'none'}
end
if not decide then
  return {'released', h}
end
local now = now_ms()
local claiming = field(h, 'claiming')
if claiming and claiming ~= ARGV[6] then
  if now - tonumber(claiming) < tonumber(ARGV[5]) then
    return {'in_progress', claiming}
  end
  return {'resolve', claiming}
end
local allocs = hold_allocs(h)
move(base, allocs, 1)
drop(base, token)
entomb(base, token, 'released', field(h, 'exp'), encode(allocs), '', tonumber(ARGV[4]), now)
return {'released', h}
`)

// scriptClaimCheck (caller: Claim, as authority and as shadow) reads what
// a claim starts from, with the server's clock to judge expiry. Deciding,
// it marks the hold claiming (a release then waits, the reaper leaves it
// alone) with a fresh stamp on every attempt, so the grace always covers
// the latest attempt's ledger deduction.
//
// A hold past its expiry that no claim has started is expired on the spot
// when deciding (units back, expired tombstone), as the reaper would: once
// a claim answered "expired", no later call may treat the hold as live.
//
// KEYS: hold, tomb, fence. ARGV: mode, base, token, tombstone ttl ms.
//
// Replies: {"fence", fence}; {"tomb", tombstone}; {"none"}; {"expired",
// expiry ms}; {"hold", HGETALL of the hold, stamp} (the stamp only when
// deciding).
var scriptClaimCheck = newScript("claim_check", luaPrelude+`
local hold, tomb, fence = KEYS[1], KEYS[2], KEYS[3]
local decide = ARGV[1] == 'decide'
local base, token, ttl = ARGV[2], ARGV[3], tonumber(ARGV[4])
if decide then
  local f = fence_of(fence)
  if not decides(f) then
    return {'fence', f}
  end
end
local t = redis.call('GET', tomb)
if t then
  return {'tomb', t}
end
local h = redis.call('HGETALL', hold)
if #h == 0 then
  return {'none'}
end
local now = now_ms()
local exp = field(h, 'exp')
if tonumber(exp) <= now and not field(h, 'claiming') then
  if decide then
    -- Expire it now, as the reaper would: an answer "expired" must not be
    -- followed by another that treats the hold as live.
    local allocs = hold_allocs(h)
    move(base, allocs, 1)
    drop(base, token)
    entomb(base, token, 'expired', exp, encode(allocs), '', ttl, now)
  end
  return {'expired', exp}
end
if not decide then
  return {'hold', h}
end
local stamp = string.format('%d', now)
redis.call('HSET', hold, 'claiming', stamp)
return {'hold', h, stamp}
`)

// scriptClaimAbort (caller: Claim as authority, after the ledger refused
// the deduction) clears the claiming mark the attempt set, unless a later
// attempt has stamped it since.
//
// KEYS: hold. ARGV: stamp.
// Reply: {"cleared" or "kept"}.
var scriptClaimAbort = newScript("claim_abort", `
if redis.call('HGET', KEYS[1], 'claiming') == ARGV[1] then
  redis.call('HDEL', KEYS[1], 'claiming')
  return {'cleared'}
end
return {'kept'}
`)

// scriptSettle finishes a claim the ledger has recorded: it removes the
// token's hold (its units come back), takes the deduction out of the
// quantities (the ledger went down by it) and leaves the claimed
// tombstone. A hold that was released or expired in the meantime left its
// units back already: its tombstone becomes claimed and the deduction goes
// out. With neither a hold nor a tombstone, only the tombstone is written:
// every caller found the hold in Redis before the ledger was deducted, so
// a hold gone without a tombstone was removed by something that already
// counted the deduction (a rewrite from the ledger, a tombstone
// forgotten). It checks no fence: it completes a decision already made.
// Four callers:
//
//   - Claim as authority, after Ledger.Deduct (claim_cleanup).
//   - Claim as authority, for a token without hold whose claim the ledger
//     has (claim_finish).
//   - Release (release_settle) and Reap (reap_settle), for a claiming hold
//     older than the grace whose claim the ledger has.
//
// KEYS: hold, tomb.
// ARGV: base, token, tombstone ttl ms, deducted allocations.
// Replies: {"done", tombstone} (claimed before: nothing changed);
// {"removed", HGETALL of the hold}; {"converted", former state};
// {"gone"}.
var scriptSettle = newScript("claim_cleanup,claim_finish,release_settle,reap_settle,reserve_settle,get_settle", luaPrelude+`
local hold, tomb = KEYS[1], KEYS[2]
local base, token, ttl, deducted = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local now = now_ms()
local t = redis.call('GET', tomb)
if t then
  local state, exp = tomb_parts(t)
  if state == 'claimed' then
    return {'done', t}
  end
  move(base, decode(deducted), -1)
  entomb(base, token, 'claimed', exp, deducted, '', ttl, now)
  return {'converted', state}
end
local h = redis.call('HGETALL', hold)
if #h == 0 then
  entomb(base, token, 'claimed', 0, deducted, '', ttl, now)
  return {'gone'}
end
move(base, hold_allocs(h), 1)
drop(base, token)
move(base, decode(deducted), -1)
entomb(base, token, 'claimed', field(h, 'exp'), deducted, '', ttl, now)
return {'removed', h}
`)

// scriptGet (caller: Get) reads a token's hold or tombstone. It writes
// nothing (run read-only). Read as the shop's decider (mode "decide") it
// reads the fence first, in the same atomic step.
//
// KEYS: hold, tomb, fence. ARGV: mode ("decide" or "shadow").
// Replies: {"fence", fence} (decide only: another store decides); {"hold",
// HGETALL}; {"tomb", tombstone}; {"none"}.
var scriptGet = newScript("get", luaPrelude+`
if ARGV[1] == 'decide' then
  local f = fence_of(KEYS[3])
  if not decides(f) then
    return {'fence', f}
  end
end
local h = redis.call('HGETALL', KEYS[1])
if #h > 0 then
  return {'hold', h}
end
local t = redis.call('GET', KEYS[2])
if t then
  return {'tomb', t}
end
return {'none'}
`)

// scriptAvailability (caller: Availability) reads an item's quantities.
// It writes nothing (run read-only). Read as the shop's decider (mode
// "decide") it reads the fence first, in the same atomic step.
//
// KEYS: qty hash of the item, fence. ARGV: mode ("decide" or "shadow").
// Replies: {"fence", fence} (decide only); {"qty", HGETALL}.
var scriptAvailability = newScript("availability", luaPrelude+`
if ARGV[1] == 'decide' then
  local f = fence_of(KEYS[2])
  if not decides(f) then
    return {'fence', f}
  end
end
return {'qty', redis.call('HGETALL', KEYS[1])}
`)

// scriptAdjust (callers: Adjust as authority, and Apply for a change-feed
// adjust) moves one quantity by a delta, once per change id: both callers
// key the marker by the same id, so the relay's delivery of an adjust that
// Adjust applied at once changes nothing.
//
// The quantity moves before the marker is set: a script that fails
// halfway keeps what it wrote, and a marker without its move would make
// every later delivery skip the change.
//
// KEYS: qty hash of the item, the change's op key.
// ARGV: location, delta, marker ttl ms.
// Reply: {applied (1 or 0), quantity after}.
var scriptAdjust = newScript("adjust,apply_adjust", `
if redis.call('EXISTS', KEYS[2]) == 1 then
  return {0, tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')}
end
local q = redis.call('HINCRBY', KEYS[1], ARGV[1], ARGV[2])
redis.call('SET', KEYS[2], '1', 'PX', ARGV[3])
return {1, q}
`)

// scriptReap (caller: Reap) expires the due holds of a shop Redis decides,
// among the tokens the reaper listed, in the order given, up to a number
// of hold records (one per allocation, as in mysqlstore). A hold is taken
// whole; the first one is taken even if it alone exceeds the limit, so a
// large cart cannot block the reaper. A token whose hold is gone, or not
// due, by the time the script runs is skipped. A claiming hold is skipped
// within the grace; older, it is handed back to the caller to ask the
// ledger, unless the caller passes the stamp the ledger was asked about
// (it did not claim it): then it expires, if no later attempt stamped it.
//
// KEYS: expiry, fence.
// ARGV: base, record limit, claim grace ms, tombstone ttl ms, then per
// token: token, resolved stamp ("" when none).
//
// Replies: {"fence", fence}; {"ok", records, units, holds expired,
// {token, stamp, ...} to resolve}.
var scriptReap = newScript("reap", luaPrelude+`
local expiry, fence = KEYS[1], KEYS[2]
local base, limit, grace, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local f = fence_of(fence)
if not decides(f) then
  return {'fence', f}
end
local now = now_ms()
local records, units, holds, resolve = 0, 0, 0, {}
for i = 5, #ARGV, 2 do
  if records >= limit then
    break
  end
  local token, resolved = ARGV[i], ARGV[i + 1]
  local score = redis.call('ZSCORE', expiry, token)
  if score and tonumber(score) <= now then
    local h = redis.call('HGETALL', base .. 'hold:' .. token)
    local claiming = field(h, 'claiming')
    if claiming and claiming ~= resolved then
      if now - tonumber(claiming) >= grace then
        resolve[#resolve + 1] = token
        resolve[#resolve + 1] = claiming
      end
    elseif #h == 0 then
      drop(base, token)
    else
      local allocs = hold_allocs(h)
      if records > 0 and records + #allocs > limit then
        break
      end
      move(base, allocs, 1)
      drop(base, token)
      entomb(base, token, 'expired', field(h, 'exp'), encode(allocs), '', ttl, now)
      records = records + #allocs
      holds = holds + 1
      for _, a in ipairs(allocs) do
        units = units + a[3]
      end
    end
  end
end
return {'ok', records, units, holds, resolve}
`)

// scriptFence (callers: Yield, Force, Apply of a fence change) raises a
// shop's fence: it sets the given fence only when the current one has a
// lower epoch, so a handoff repeated, or overtaken by a newer one, changes
// nothing.
//
// KEYS: fence. ARGV: new fence ("mysql@4"), its epoch.
// Replies: {"raised" or "unchanged", the fence after}.
var scriptFence = newScript("yield,force,apply_fence", `
local f = redis.call('GET', KEYS[1]) or 'redis@0'
local epoch = tonumber(string.match(f, '@(%d+)$') or '0')
if epoch < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[1], ARGV[1])
  return {'raised', ARGV[1]}
end
return {'unchanged', f}
`)

// scriptApplyState (caller: Apply, for a change-feed state change) makes
// Redis follow a reservation's state as MySQL holds it. It checks no fence
// for terminal states: MySQL's decision is applied whoever decides now.
//
//   - held: nothing if the token has a tombstone, or a hold of the same
//     allocations. A hold of other allocations is replaced (units given
//     back, MySQL's taken) when the fence says MySQL decides, and kept
//     when Redis does. Otherwise the hold is created, its units taken out
//     without a stock check: the decider decided, Redis mirrors.
//   - terminal: an existing tombstone of the same state, or any tombstone
//     when the change is not a claim, stays as it is; a non-claimed
//     tombstone and a claim: the ledger went down, so the deduction goes
//     out and the tombstone becomes claimed. Without a tombstone: the hold,
//     if any, gives its units back and goes; a claim takes its deduction
//     out; the tombstone is written.
//
// KEYS: hold, tomb, fence.
// ARGV: base, token, state, allocations, expiry ms, short lines,
// tombstone ttl ms.
//
// Replies: {"unchanged"}; {"kept"}; {"replaced"}; {"created"};
// {"converted", former state}; {"tombstoned"}.
var scriptApplyState = newScript("apply_state", luaPrelude+`
local hold, tomb, fence = KEYS[1], KEYS[2], KEYS[3]
local base, token, state, allocs = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local exp, short, ttl = ARGV[5], ARGV[6], tonumber(ARGV[7])
local now = now_ms()
local t = redis.call('GET', tomb)
if t then
  local was = tomb_parts(t)
  if was == state or state ~= 'claimed' or was == 'claimed' then
    return {'unchanged'}
  end
  move(base, decode(allocs), -1)
  entomb(base, token, 'claimed', exp, allocs, '', ttl, now)
  return {'converted', was}
end
local h = redis.call('HGETALL', hold)
if state == 'held' then
  local want = decode(allocs)
  if #h > 0 then
    local have = hold_allocs(h)
    if same_allocs(have, want) then
      return {'unchanged'}
    end
    if decides(fence_of(fence)) then
      return {'kept'}
    end
    move(base, have, 1)
    move(base, want, -1)
    put_hold(base, token, exp, 'mysql', want)
    return {'replaced'}
  end
  move(base, want, -1)
  put_hold(base, token, exp, 'mysql', want)
  return {'created'}
end
if #h > 0 then
  move(base, hold_allocs(h), 1)
  drop(base, token)
end
if state == 'claimed' then
  move(base, decode(allocs), -1)
end
entomb(base, token, state, exp, allocs, short, ttl, now)
return {'tombstoned'}
`)

// scriptDrift (caller: Drift) reads a shop's holds and the quantities of
// the given items plus every item a hold names, in one atomic step, so
// holds and quantities agree with each other.
//
// KEYS: expiry. ARGV: base, items....
// Reply: {{token, expiry score, HGETALL}, ...}, {{item, HGETALL}, ...}.
var scriptDrift = newScript("drift", luaPrelude+`
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

// scriptRewrite (caller: Rewrite) makes a shop exactly a snapshot: its
// fence, holds and tombstones, and every quantity of an item the ledger
// or a hold names as the ledger's available minus what the holds hold
// there, in one atomic step so no write of the shop interleaves. Holds
// and tombstones the snapshot lacks are deleted; a quantity hash of an
// item that neither the ledger nor a hold names is left alone.
//
// The markers of the adjusts the ledger rows include are set as Apply
// sets them, so none of those adjusts is applied on top of the copy.
//
// KEYS: expiry, tombs, fence.
// ARGV: base, tombstone ttl ms, fence, marker ttl ms, ledger row count,
// then item, location, available per row; hold count, then token, expiry
// ms, authority, allocations per hold; tombstone count, then token, state,
// expiry ms, allocations, short lines per tombstone; covered adjust count,
// then their change ids.
//
// Reply: {holds written, tombstones written, holds dropped}.
var scriptRewrite = newScript("rewrite", luaPrelude+`
local expiry, tombs, fence = KEYS[1], KEYS[2], KEYS[3]
local base, ttl, marker_ttl = ARGV[1], tonumber(ARGV[2]), ARGV[4]
local cur = redis.call('GET', fence) or 'redis@0'
if tonumber(string.match(cur, '@(%d+)$') or '0') > tonumber(string.match(ARGV[3], '@(%d+)$') or '0') then
  return {'newer', cur}
end
local now = now_ms()
local old = redis.call('ZRANGE', expiry, 0, -1)
for _, token in ipairs(old) do
  redis.call('DEL', base .. 'hold:' .. token)
  note(base, token)
end
redis.call('DEL', expiry)
for _, token in ipairs(redis.call('ZRANGE', tombs, 0, -1)) do
  redis.call('DEL', base .. 'tomb:' .. token)
  note(base, token)
end
redis.call('DEL', tombs)
redis.call('SET', fence, ARGV[3])
local want = {}
local function cell(item, loc, q)
  want[item] = want[item] or {}
  want[item][loc] = (want[item][loc] or 0) + q
end
local i = 5
local n = tonumber(ARGV[i]); i = i + 1
for k = 1, n do
  cell(ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]))
  i = i + 3
end
local holds = tonumber(ARGV[i]); i = i + 1
for k = 1, holds do
  local allocs = decode(ARGV[i + 3])
  put_hold(base, ARGV[i], ARGV[i + 1], ARGV[i + 2], allocs)
  for _, a in ipairs(allocs) do
    cell(a[1], a[2], -a[3])
  end
  i = i + 4
end
local ntombs = tonumber(ARGV[i]); i = i + 1
for k = 1, ntombs do
  entomb(base, ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ttl, now)
  i = i + 5
end
local covered = tonumber(ARGV[i]); i = i + 1
for k = 1, covered do
  redis.call('SET', base .. 'op:' .. ARGV[i], '1', 'PX', marker_ttl)
  i = i + 1
end
for item, locs in pairs(want) do
  local key = base .. 'qty:' .. item
  redis.call('DEL', key)
  for loc, q in pairs(locs) do
    redis.call('HSET', key, loc, q)
  end
end
return {holds, ntombs, #old}
`)

// scriptCopyStart (caller: StartCopy) turns on the change log of a shop
// Redis decides, for a copy of its state into MySQL: while the copy key
// exists, every script that writes a hold or a tombstone logs the token
// (note). A copy under way is joined (its id is kept, its lifetime
// renewed); a new one gets a new id and an empty log.
//
// KEYS: copy, fence. ARGV: base, copy ttl ms.
// Replies: {"fence", fence} (Redis does not decide the shop); {"copy", id,
// seq (the log's position now), size (holds and indexed tombstones)}.
var scriptCopyStart = newScript("copy_start", luaPrelude+`
local copy, base = KEYS[1], ARGV[1]
local f = fence_of(KEYS[2])
if not decides(f) then
  return {'fence', f}
end
local id = redis.call('GET', copy)
if not id then
  id = tostring(redis.call('INCR', base .. 'copygen'))
  redis.call('DEL', base .. 'chg')
end
redis.call('SET', copy, id, 'PX', ARGV[2])
redis.call('PEXPIRE', base .. 'chg', ARGV[2])
local size = redis.call('ZCARD', base .. 'expiry') + redis.call('ZCARD', base .. 'tombs')
return {'copy', id, tonumber(redis.call('GET', base .. 'chgseq') or '0'), size}
`)

// scriptCopyChanged (caller: Changed) reads the change log of a copy: the
// tokens logged after a position, in log order, up to a limit, and
// renews the copy's lifetime. A log that is not the copy's any more (the
// copy key expired, or another copy replaced it) cannot be trusted to be
// complete: the reply says so.
//
// KEYS: copy. ARGV: base, copy id, after (position), limit, copy ttl ms.
// Replies: {"lost"}; {"changed", position read up to, token, ...}.
var scriptCopyChanged = newScript("copy_changed", `
local copy, base = KEYS[1], ARGV[1]
if redis.call('GET', copy) ~= ARGV[2] then
  return {'lost'}
end
redis.call('PEXPIRE', copy, ARGV[5])
redis.call('PEXPIRE', base .. 'chg', ARGV[5])
local got = redis.call('ZRANGEBYSCORE', base .. 'chg', '(' .. ARGV[3], '+inf', 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[4]))
local upto = tonumber(redis.call('GET', base .. 'chgseq') or '0')
local out = {'changed', 0}
for i = 1, #got, 2 do
  out[#out + 1] = got[i]
end
if #got / 2 >= tonumber(ARGV[4]) then
  upto = tonumber(got[#got])
end
out[2] = upto
return out
`)

// scriptCopyEnd (caller: EndCopy) turns a copy's change log off, if it is
// still that copy's.
//
// KEYS: copy. ARGV: base, copy id.
// Reply: {"ended" or "other"}.
var scriptCopyEnd = newScript("copy_end", `
if redis.call('GET', KEYS[1]) ~= ARGV[2] then
  return {'other'}
end
redis.call('DEL', KEYS[1], ARGV[1] .. 'chg')
return {'ended'}
`)
