// A purge policy: a version no archive governs goes once it is a day
// old; a version an archive maps goes once its copy there is proven by
// size; a version the archive does not map stays. Edit the rules, then
// run `custodian plugin test` on the build with `cases.json` (add a case
// for each rule you add).
//
// jco's conventions: u64 values are BigInts, options are the value or
// undefined, variants are `{ tag, val }`.

// How long a version is kept after it was written, whatever governs it.
const MIN_AGE_MS = 24n * 3_600_000n;

export const purgeRules = {
  judge(candidate, governance, nowMs) {
    // A version whose write time is unknown is treated as new.
    const written = candidate.lastModifiedMs ?? nowMs;
    if (nowMs - written < MIN_AGE_MS) {
      return { tag: 'retain', val: `${candidate.key} was written less than a day ago` };
    }
    switch (governance.tag) {
      case 'unarchived':
        return { tag: 'delete' };
      case 'mapped': {
        const mapping = governance.val;
        if (mapping.size === candidate.size) {
          return { tag: 'delete' };
        }
        return {
          tag: 'retain',
          val: `${candidate.size} bytes here, ${mapping.size} in the archive: the copy is not proven`,
        };
      }
      default:
        return { tag: 'retain', val: `the archive at ${governance.val} does not map it` };
    }
  },
};
