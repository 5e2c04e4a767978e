"""Custodian's retention policy, in Python.

The same rules as the bundled Rust policy (plugins/retention/src/lib.rs):

- An item is retained until ``created + retention`` and, once it is no
  longer the current version, until ``noncurrent-since + noncurrent
  retention`` if that is later.
- A legal hold blocks deletion and purging. It cannot be placed once
  purging has begun, and an item held while purging (or purged) is corrupt
  state.
- When to look again follows the takedown worker's cadence: every second
  while work is active, at the end of retention (clamped to 1 s..1 h) while
  retaining, hourly when held or purged.

Built with componentize-py against the `retention` world of
custodian:policy@0.2.0; see README.md.
"""

from dataclasses import replace

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports.retention_types import (
    Assessment,
    Item,
    Settings,
    Stage,
    Verdict,
    Verdict_Allow,
    Verdict_Deny,
)
from wit_world.imports.types import (
    Error_Corrupt,
    Error_InvalidArgument,
    Error_PreconditionFailed,
)

SECOND_MS = 1_000
HOUR_MS = 3_600_000
# Instants are carried as signed milliseconds by some stores and languages,
# so a retain-until beyond i64::MAX could not be stored there. Python ints
# never overflow, so this bound (not an overflow) is what refuses it.
LATEST_MS = 2**63 - 1
# timestamp-ms is a u64: next-check saturates there rather than wrapping.
U64_MAX = 2**64 - 1

PURGE_OWNED = (Stage.PURGING, Stage.PURGED)


def _add(start: int, duration: int, what: str) -> int:
    end = start + duration
    if end > LATEST_MS:
        raise Err(Error_InvalidArgument(f"{what} is past the representable range"))
    return end


def _retain_until(settings: Settings, item: Item) -> int:
    if settings.retention_ms == 0:
        raise Err(Error_InvalidArgument("retention-ms must be positive"))
    until = _add(item.created_ms, settings.retention_ms, "created + retention")
    if item.noncurrent_since_ms is not None:
        # Checked even when it ends earlier than `until`: an unrepresentable
        # instant is a settings error whichever bound wins.
        noncurrent = _add(
            item.noncurrent_since_ms,
            settings.noncurrent_retention_ms,
            "noncurrent-since + noncurrent retention",
        )
        until = max(until, noncurrent)
    return until


def _retained_until(retain_until_ms: int) -> Verdict:
    return Verdict_Deny(f"retained until {retain_until_ms}")


class RetentionRules(exports.RetentionRules):
    """The policy; stateless: a call may run on a fresh instance or on one
    that served earlier calls, so it decides from its arguments alone."""

    def assess(self, settings: Settings, item: Item, now_ms: int) -> Assessment:
        if item.hold and item.stage in PURGE_OWNED:
            raise Err(Error_Corrupt("an item under legal hold cannot be purging or purged"))
        retain_until_ms = _retain_until(settings, item)
        retained = now_ms < retain_until_ms

        may_delete: Verdict
        if item.hold:
            may_delete = Verdict_Deny("a legal hold is set")
        elif retained:
            may_delete = _retained_until(retain_until_ms)
        else:
            may_delete = Verdict_Allow()

        # The hold wins over every stage; a purged item may always be
        # re-swept, since late writes are exactly what purging must catch.
        may_purge: Verdict
        if item.hold:
            may_purge = Verdict_Deny("a legal hold is set")
        elif item.stage == Stage.PURGING:
            may_purge = Verdict_Deny("purging is already under way")
        elif item.stage == Stage.PURGED:
            may_purge = Verdict_Allow()
        elif retained:
            may_purge = _retained_until(retain_until_ms)
        else:
            may_purge = Verdict_Allow()

        match item.stage:
            case Stage.PURGED:
                delay = HOUR_MS
            case Stage.RETAINING if item.hold:
                # Nothing will change until the hold is cleared.
                delay = HOUR_MS
            case Stage.RETAINING:
                # Wake when retention ends, but neither spin (>= 1 s) nor
                # sleep past a change of settings for long (<= 1 h).
                delay = min(max(retain_until_ms - now_ms, SECOND_MS), HOUR_MS)
            case _:
                # Active work and purging are stepped every second, held or not.
                delay = SECOND_MS

        return Assessment(
            retain_until_ms=retain_until_ms,
            may_delete=may_delete,
            may_purge=may_purge,
            next_check_ms=min(now_ms + delay, U64_MAX),
        )

    def set_hold(self, item: Item, enabled: bool) -> Item:
        # Clearing is always allowed; only placing one is refused late.
        if enabled and item.stage in PURGE_OWNED:
            raise Err(
                Error_PreconditionFailed("purging has begun; a legal hold can no longer be placed")
            )
        return replace(item, hold=enabled)
