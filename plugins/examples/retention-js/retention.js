// Custodian's retention policy, in JavaScript.
//
// The same rules as the bundled Rust policy (plugins/retention/src/lib.rs):
//
// - An item is retained until `created + retention` and, once it is no
//   longer the current version, until `noncurrent-since + noncurrent
//   retention` if that is later.
// - A legal hold blocks deletion and purging. It cannot be placed once
//   purging has begun, and an item held while purging (or purged) is
//   corrupt state.
// - When to look again follows the takedown worker's cadence: every second
//   while work is active, at the end of retention (clamped to 1 s..1 h)
//   while retaining, hourly when held or purged.
//
// Built with ComponentizeJS against the `retention` world of
// custodian:policy@0.2.0; see README.md. The bindings follow jco's
// conventions: the exported interface `retention-rules` is the export
// `retentionRules`, names are camelCase, every u64 (timestamp-ms) is a
// BigInt, an `option` is the value or `undefined`, enums are their WIT
// names as strings, variants are `{ tag, val }`, and throwing from a
// function that returns `result<_, error>` returns its `err` case.

const SECOND_MS = 1_000n;
const HOUR_MS = 3_600_000n;
// Instants are carried as signed milliseconds by some stores and languages,
// so a retain-until beyond i64::MAX could not be stored there. BigInts never
// overflow, so this bound (not an overflow) is what refuses it.
const LATEST_MS = 2n ** 63n - 1n;
// timestamp-ms is a u64: next-check saturates there rather than wrapping.
const U64_MAX = 2n ** 64n - 1n;

const ALLOW = Object.freeze({ tag: 'allow' });
const deny = (reason) => ({ tag: 'deny', val: reason });

// The `error` variant of custodian:host/types, thrown to answer `err`.
const failure = (tag, message) => ({ tag, val: message });

const max = (a, b) => (a > b ? a : b);
const min = (a, b) => (a < b ? a : b);

function purgeOwned(stage) {
  return stage === 'purging' || stage === 'purged';
}

function add(start, duration, what) {
  const end = start + duration;
  if (end > LATEST_MS) {
    throw failure('invalid-argument', `${what} is past the representable range`);
  }
  return end;
}

function retainUntil(settings, item) {
  if (settings.retentionMs === 0n) {
    throw failure('invalid-argument', 'retention-ms must be positive');
  }
  const created = add(item.createdMs, settings.retentionMs, 'created + retention');
  if (item.noncurrentSinceMs === undefined) {
    return created;
  }
  // Checked even when it ends earlier than `created`: an unrepresentable
  // instant is a settings error whichever bound wins.
  const noncurrent = add(
    item.noncurrentSinceMs,
    settings.noncurrentRetentionMs,
    'noncurrent-since + noncurrent retention',
  );
  return max(created, noncurrent);
}

function nextCheckDelay(item, retainUntilMs, nowMs) {
  switch (item.stage) {
    case 'purged':
      return HOUR_MS;
    case 'retaining':
      if (item.hold) {
        // Nothing will change until the hold is cleared.
        return HOUR_MS;
      }
      // Wake when retention ends, but neither spin (>= 1 s) nor sleep past
      // a change of settings for long (<= 1 h).
      return min(max(retainUntilMs - nowMs, SECOND_MS), HOUR_MS);
    default:
      // Active work and purging are stepped every second, held or not.
      return SECOND_MS;
  }
}

export const retentionRules = {
  assess(settings, item, nowMs) {
    if (item.hold && purgeOwned(item.stage)) {
      throw failure('corrupt', 'an item under legal hold cannot be purging or purged');
    }
    const retainUntilMs = retainUntil(settings, item);
    const retained = nowMs < retainUntilMs;

    let mayDelete;
    if (item.hold) {
      mayDelete = deny('a legal hold is set');
    } else if (retained) {
      mayDelete = deny(`retained until ${retainUntilMs}`);
    } else {
      mayDelete = ALLOW;
    }

    // The hold wins over every stage; a purged item may always be re-swept,
    // since late writes are exactly what purging must catch.
    let mayPurge;
    if (item.hold) {
      mayPurge = deny('a legal hold is set');
    } else if (item.stage === 'purging') {
      mayPurge = deny('purging is already under way');
    } else if (item.stage === 'purged') {
      mayPurge = ALLOW;
    } else if (retained) {
      mayPurge = deny(`retained until ${retainUntilMs}`);
    } else {
      mayPurge = ALLOW;
    }

    return {
      retainUntilMs,
      mayDelete,
      mayPurge,
      nextCheckMs: min(nowMs + nextCheckDelay(item, retainUntilMs, nowMs), U64_MAX),
    };
  },

  setHold(item, enabled) {
    // Clearing is always allowed; only placing one is refused late.
    if (enabled && purgeOwned(item.stage)) {
      throw failure(
        'precondition-failed',
        'purging has begun; a legal hold can no longer be placed',
      );
    }
    return { ...item, hold: enabled };
  },
};
