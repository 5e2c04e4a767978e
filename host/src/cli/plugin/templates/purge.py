"""A purge policy: a version no archive governs goes once it is a day
old; a version an archive maps goes once its copy there is proven by
size; a version the archive does not map stays. Edit the rules, then run
`custodian plugin test` on the build with `cases.json` (add a case for
each rule you add)."""

from wit_world import exports
from wit_world.exports.purge_rules import (
    Governance_Mapped,
    Governance_Unarchived,
    Verdict_Delete,
    Verdict_Retain,
)

# How long a version is kept after it was written, whatever governs it.
MIN_AGE_MS = 24 * 3_600_000


class PurgeRules(exports.PurgeRules):
    def judge(self, candidate, governance, now_ms):
        # A version whose write time is unknown is treated as new.
        written = candidate.last_modified_ms
        if written is None:
            written = now_ms
        if now_ms - written < MIN_AGE_MS:
            return Verdict_Retain(f"{candidate.key} was written less than a day ago")
        if isinstance(governance, Governance_Unarchived):
            return Verdict_Delete()
        if isinstance(governance, Governance_Mapped):
            mapping = governance.value
            if mapping.size == candidate.size:
                return Verdict_Delete()
            return Verdict_Retain(
                f"{candidate.size} bytes here, {mapping.size} in the archive: "
                "the copy is not proven"
            )
        return Verdict_Retain(f"the archive at {governance.value} does not map it")
