"""A retention policy: an item is kept for the configured retention after
it was created, and a legal hold keeps it until the hold is cleared. Edit
the rules, then run `custodian plugin test` on the build with `cases.json`
(add a case for each rule you add)."""

from dataclasses import replace

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports.retention_types import Assessment, Stage, Verdict_Allow, Verdict_Deny
from wit_world.imports.types import Error_InvalidArgument, Error_PreconditionFailed

# How long until the host asks again, while nothing else says when.
RECHECK_MS = 60_000
# timestamp-ms is a u64: sums saturate there rather than overflow it.
U64_MAX = 2**64 - 1


class RetentionRules(exports.RetentionRules):
    def assess(self, settings, item, now_ms):
        if settings.retention_ms == 0:
            raise Err(Error_InvalidArgument("retention-ms must be positive"))
        retain_until_ms = min(item.created_ms + settings.retention_ms, U64_MAX)
        if item.hold:
            verdict = Verdict_Deny("a legal hold is set")
        elif now_ms < retain_until_ms:
            verdict = Verdict_Deny(f"retained until {retain_until_ms}")
        else:
            verdict = Verdict_Allow()
        return Assessment(
            retain_until_ms=retain_until_ms,
            may_delete=verdict,
            may_purge=verdict,
            next_check_ms=min(now_ms + RECHECK_MS, U64_MAX),
        )

    def set_hold(self, item, enabled):
        if enabled and item.stage in (Stage.PURGING, Stage.PURGED):
            raise Err(Error_PreconditionFailed("purging has begun"))
        return replace(item, hold=enabled)
