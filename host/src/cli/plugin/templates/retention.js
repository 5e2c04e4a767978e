// A retention policy: an item is kept for the configured retention after
// it was created, and a legal hold keeps it until the hold is cleared.
// Edit the rules, then run `custodian plugin test` on the build with
// `cases.json` (add a case for each rule you add).
//
// jco's conventions: u64 values are BigInts, enums are their WIT names,
// variants are `{ tag, val }`, and throwing `{ tag, val }` from a function
// that returns `result<_, error>` answers that `err`.

// How long until the host asks again, while nothing else says when.
const RECHECK_MS = 60_000n;
// timestamp-ms is a u64: sums saturate there rather than overflow it.
const U64_MAX = 2n ** 64n - 1n;
const min = (a, b) => (a < b ? a : b);

export const retentionRules = {
  assess(settings, item, nowMs) {
    if (settings.retentionMs === 0n) {
      throw { tag: 'invalid-argument', val: 'retention-ms must be positive' };
    }
    const retainUntilMs = min(item.createdMs + settings.retentionMs, U64_MAX);
    let verdict;
    if (item.hold) {
      verdict = { tag: 'deny', val: 'a legal hold is set' };
    } else if (nowMs < retainUntilMs) {
      verdict = { tag: 'deny', val: `retained until ${retainUntilMs}` };
    } else {
      verdict = { tag: 'allow' };
    }
    return {
      retainUntilMs,
      mayDelete: verdict,
      mayPurge: verdict,
      nextCheckMs: min(nowMs + RECHECK_MS, U64_MAX),
    };
  },

  setHold(item, enabled) {
    if (enabled && (item.stage === 'purging' || item.stage === 'purged')) {
      throw { tag: 'precondition-failed', val: 'purging has begun' };
    }
    return { ...item, hold: enabled };
  },
};
