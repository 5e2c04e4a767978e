//! The bundled takedown policy: deny what a takedown names (the host stops
//! serving it), preserve it, verify it, find every repository holding it,
//! remove its serving copies (the preserved copy is then the only one),
//! keep it for retention, then purge it and keep re-sweeping for late
//! writes. A withdrawal lifts the denial, putting the serving copies back
//! first.
//!
//! # Denial
//!
//! A takedown's first effect is that its content stops being served: the
//! host refuses every read and push of an object that has a row in
//! partition `denial` (the contract's `denial` module), and this policy
//! writes those rows ([`denial_work`]; its progress is the request's
//! `denial` row, [`denial`]). A request denies every object it names; for
//! a pack, the pack and every member, nested packs and their members
//! included, recursively; for a manifest, the manifest and every chunk it
//! lists. Chunks are denied by id too (a chunk is a piece of the
//! taken-down file); the host checks a file read only against the file's
//! own object, so another file that shares a chunk keeps serving by its
//! path.
//!
//! `plan-create`'s commit ([`create`]) denies as much as fits in it (a
//! request naming a few blobs is fully denied by it); `plan-denial`
//! commits do the rest, and a step of a request whose denial is not
//! settled does one chunk of it and nothing else (no preservation before
//! denial). `plan-withdraw` ([`withdraw`]; refused once purging has
//! begun, allowed under a legal hold) marks the request withdrawn; its
//! denials are then lifted the same way, and its preserved copy follows
//! retention as before.
//!
//! # Removal and restoration
//!
//! Once an object is preserved and verified, the phase `remove` deletes
//! its serving copy, every version ([`remove`]), when all of these hold
//! at that moment: the request is settled and not withdrawn; its own copy
//! is verified (a manifest's reassembly too); the object is at most
//! 16 MiB (the largest put a plugin can make, so it can be restored
//! whole; larger objects keep their serving copy and stay denied by id)
//! and the content index agrees with the copy; **every** request denying
//! it has verified its own copy, so whichever is withdrawn last can
//! restore it; and, **the shared-chunk rule**, every manifest whose file
//! the object is a chunk of (the index's `c` rows) is taken down by a
//! request that also denies the object and is not withdrawn: a chunk
//! another served file still uses keeps its serving copy. An object that
//! fails is recorded as kept (a `kept` row with the reason) and not looked
//! at again; one kept only because another request has not verified it
//! yet is removed by that request, which checks the same conditions after
//! its own verification. A removal commits its intent before deleting
//! anything; a crash leaves the intent, which the next step finishes.
//!
//! A withdrawal's lifting first finishes pending removals, then restores
//! ([`restore`]), then lifts: every serving copy missing and needed (no
//! other remaining denier holds a verified copy, or a file it is a chunk
//! of is about to be served again) is put back from this request's
//! preserved copy (or another denier's), checked against BLAKE3 and the
//! index's CRC, before any of its denials is lifted. With no copy at all
//! (lost otherwise: no removal happens without one) it records
//! `last_error` and lifts anyway.
//!
//! A request filed after a serving copy was removed acquires the object
//! from the preserved copy of a request denying it (verified, not being
//! purged; [`acquire`]), and reads a removed pack or manifest's entries
//! from one to seed or deny them ([`source`]).
//!
//! Each timer step is one bounded checkpoint transition
//! (seed → acquire → closure → discover → remove → retain → purging →
//! purged),
//! committed by the host atomically with the timer's update and audited.
//! Retention decisions (the retain-until, asked once, at the filing; legal
//! holds) are the deployer's retention plugin's, asked through
//! `retention-oracle`; the pace of the steps is this policy's (see
//! [`context`]: at once while there is work).
//!
//! # Locks
//!
//! What a request preserves is locked, and the host enforces the locks
//! for every caller, this policy included ([`lock`]): the filing writes
//! the request's lock (retain-until as the retention policy answered, no
//! hold, not purging); a legal hold's commit sets or clears its hold; each
//! piece's intent commit locks the piece's key to the request before the
//! piece is written; the step that begins the first purge pass sets it
//! purging, which it does only once the lock's retain-until has passed
//! with no hold. The host deletes a locked piece only then (the lock
//! alone decides; an operator may extend its retain-until, never shorten
//! it); a delete it refuses anyway is recorded, never retried in a loop
//! ([`purge`]). Nothing else this
//! policy does deletes or overwrites a preserved piece: pieces are put
//! with `if-none-match: *`, and a corrupt or changed piece is reported,
//! never replaced.
//!
//! # Grants
//!
//! KV partition `takedown` (read-write), `denial` (read-write, the rows
//! the host checks before serving an object), `lock` (read-write, the
//! locks the host enforces over preserved pieces), `content` (read only, the
//! host's content index, see [`content`]), object stores `serving`
//! (read-write: serving copies are removed once preserved and restored on
//! a withdrawal) and `preserved` (read-write).
//!
//! # Key layout (partition `takedown`)
//!
//! Per request: `TAG 0x00 id(32) TAIL`; an `object` is a 32-byte id.
//!
//! | tag | tail | value |
//! |---|---|---|
//! | `request` | — | the request (JSON: repository, created-ms, object count or pack id in hex) |
//! | `actions` | — | the objects a request names, 32 bytes each, in the order filed (read only while seeding and denying) |
//! | `state` | — | [`state::State`] (JSON, `version` 1, unknown fields refused) |
//! | `todo` | object | expected kind byte: 0 any, 1 blob, 2 manifest, 3 pack |
//! | `object` | object | [`state::ObjectInfo`]: kind, size, copied, CRC so far, chunks enqueued, verified, source failed, holders cursor, holders done |
//! | `source` | object | [`acquire::Source`]: the selected source (key, etag, size, CRC, kind, selected-at; and the request, when it is another request's preserved copy), kept as provenance |
//! | `piece` | object, offset (u64 BE) | [`copy::Piece`]: the intent (object, offset, length, CRC, preserved key), written before the piece |
//! | `discover` | object | `[0]` an object, `[1]` a pack |
//! | `closure` | manifest | [`closure::Checkpoint`]: next chunk, running CRC, running length |
//! | `pack-todo` | pack | [`seed::PackCursor`]: next inventory entry (and the validated count) |
//! | `pack-seen` | pack | empty: the pack is walked by this request, once |
//! | `holder` | namespace 0x00 repository | [`discover::HolderMarker`]: this request planned the repository's cache purge (written absent-guarded, so once) |
//! | `denial` | — | [`denial::DenialState`] (JSON, `version` 1): since-ms, how many named objects are denied (`next_action`), settled, how many objects are denied, withdrawn-ms, a revision bumped by every write, serving copies removed and restored, the withdrawal's restore pass (done, cursor) and last error; absent for a request filed before denial (settled, denying nothing, removing nothing) |
//! | `deny-todo` | object | [`denial::Cursor`]: a pack or manifest whose members or chunks are still being denied (kind, next entry, entry count) |
//! | `denied` | object | empty: this request denies the object (lifting deletes exactly these; denying again is a no-op) |
//! | `remove` | object | [`remove::Intent`] (serving key, planned-ms): a removal intent, committed on its own before the serving copy is deleted; replaced by `removed` by the step's commit |
//! | `removed` | object | [`remove::Removed`] (serving key, removed-ms, versions deleted): this request removed the object's serving copy |
//! | `kept` | object | the reason (UTF-8): a verified object whose serving copy this request keeps |
//!
//! Partition `denial` (the contract's layout): `o` id → one or more
//! denials of 40 bytes (request id, since-ms); this policy appends its
//! own entry (creating the row) and removes it when lifting (deleting an
//! emptied row), each write guarded on the value read. At most 64
//! requests deny one object; one more fails with `conflict`.
//!
//! Partition `invalidation` (the contract's outbox layout): one entry per
//! holder repository a request discovers (`e` requested-ms, request id,
//! `namespace/name` → the objects that revealed it), written with the
//! `holder` marker that makes it once per request; the host delivers it
//! and deletes it once delivered.
//!
//! Partition `lock` (the contract's layout): `r` request id → the
//! request's lock (created-ms, retain-until-ms, hold, purging); `k
//! preserved 0x00 key` → the id of the request whose lock keeps that
//! piece. Written only forward, never deleted.
//!
//! Preserved pieces live in store `preserved` at
//! `pieces/<id hex>/<first byte of object, hex>/<object hex>/<offset as 16
//! hex digits>`.
//!
//! # Audit events
//!
//! Targets always start with the request id (hex).
//!
//! - `TakedownRequested` (id, repository): `plan-create`.
//! - `TakedownDenialActivated`: every object the request names is denied
//!   (detail: how many objects); in `plan-create`'s commit when it all
//!   fits, else in the `plan-denial` commit or step that finishes it.
//! - `TakedownWithdrawn`: `plan-withdraw` (detail: how many denied
//!   objects are to be lifted).
//! - `TakedownDenialLifted`: a withdrawn request's every denial is lifted
//!   (detail: how many serving copies it restored).
//! - `PreservationPurgeStarted`: a purge pass begins (the lock's
//!   retain-until has passed, no hold; once purged, hourly re-sweeps).
//! - `PreservationSourceSelected` (id, object): a source was chosen (the
//!   serving copy, or another request's preserved copy once the serving
//!   copy was removed; the detail names it).
//! - `PreservationSourceCorrupt` (id, object): the serving copy is corrupt,
//!   changed, missing or too large; recorded, never retried.
//! - `PreservationPieceIntent` (id, object, preserved key): a piece's
//!   durable intent, committed with it before the piece is written
//!   (detail: offset, length, CRC).
//! - `PreservationVerified`: acquisition (or, after closure, every
//!   manifest's reassembly) is verified.
//! - `PreservationClosureMismatch` (id, manifest, chunk when one is to
//!   blame): a manifest does not reassemble from the preserved copy;
//!   recorded once, and closure goes on.
//! - `PreservationClosureIncomplete`: closure ended with a mismatch.
//! - `PreservationAcquisitionIncomplete`: acquisition ended with a corrupt
//!   source.
//! - `PreservationClosurePending`: acquisition ended; manifests still need
//!   their reassembly verified.
//! - `PreservationDiscoveryComplete` / `PreservationDiscoveryIncomplete`:
//!   every holder there will ever be was found (the denial was in force
//!   throughout), or not and why ([`discover`]).
//! - `PreservationPiecePurged` (id, object, preserved key): a piece was
//!   visited by a purge pass; detail `deleted`, `absent`, or `refused:`
//!   and why (the host kept a locked piece).
//! - `PreservationPurgeComplete`: a purge pass visited every piece.
//! - `PreservationLegalHold`: `plan-hold`, detail `on` or `off`.
//! - `ServingCopyRemoved` (id, object): the object's serving copy (every
//!   version) was removed, by the step that decided it or, after a crash,
//!   the step (or withdrawal) that finished its intent; once per object
//!   and request.
//! - `ServingCopyRestored` (id, object): a withdrawal put the object's
//!   serving copy back (detail: whose preserved copy, how many bytes).
//! - `PreservationCheckpoint`: any other step (detail: the phase, or
//!   `denial activation` / `denial lifting` for a step of denial work).
//!
//! # Bounds
//!
//! A step makes well under 100 host calls (the host's default budget is
//! 256) and commits at most 96 operations and 8 audit entries; each
//! phase's per-step constants say what they bound.
//!
//! Acquisition and discovery take up to 8 objects a step, not one: a
//! step's fixed costs (the request's rows, its commit, the host's timer
//! row and claim) are then shared by them. An acquire step takes another
//! object only while its commit has room (72 operations of its own, a
//! manifest's queued chunks included), it has read under 4 MiB and has
//! audited fewer than 8 entries, and queues one manifest's chunks at most
//! (two queued in one step could each queue a chunk they share). A
//! discover step gives each further object only the holders its commit
//! still has room for, and plans a holder once even when several of its
//! objects reveal it. The pieces an acquire step copies (8 at most, over
//! all its objects) have their intents in one commit, before any is
//! published.
//!
//! A commit carrying denial work (`plan-create`'s, `plan-denial`'s, a
//! step of denial work) has at most 72 operations in all, its own rows
//! and guards included, leaving 24 of the host's 96 for the rows the
//! host adds (timer, audit): denying an object costs at most 4, lifting
//! one 3, so a chunk denies or lifts up to 23 objects
//! ([`denial::COMMIT_OPS`]). Its reads are bounded by 8 rounds of at most
//! 6 host calls each.
//!
//! A remove step looks at 8 `object` rows and may remove the serving
//! copies of all 8 (so it decides on each object once); its intent commit
//! has at most 72 operations, an object whose removal needs more guards
//! (more than 16 deniers or 16 manifests) is kept ([`remove`]). A lifting
//! chunk of a withdrawal finishes at most 4 pending removals, or visits 24
//! denied objects and restores at most 6 objects and 32 MiB (one object
//! at least; one at a time in memory, each at most 16 MiB, under the
//! plugin's 64 MiB), in ~150 host calls at the most ([`restore`]); its
//! audit entries stay within 7.
//!
//! # Modules
//!
//! Each imports only modules listed before it (CI checks that the modules
//! of a crate import each other in no cycle): the encodings and keys
//! ([`codec`], [`keys`]), several reads in one snapshot ([`reads`]) and
//! deleting every version of a stored object ([`versions`]); the host's content index ([`content`]); the request
//! record ([`request`]); the preservation state ([`state`]) and the
//! `denial` row ([`denial`]); the locks ([`lock`]); a step in progress
//! ([`context`]); what every request denying an object holds of it
//! ([`survey`]); pieces and the acquisition queue ([`copy`], [`queue`]);
//! discovery, removal, closure and purging ([`discover`], [`remove`],
//! [`closure`], [`purge`]); preserved copies read back ([`preserved`]);
//! an object's bytes wherever a whole copy is ([`source`]); acquisition,
//! restoration and seeding ([`acquire`], [`restore`], [`seed`]); denial work
//! ([`denial_work`]); and the entry points: filing ([`create`]),
//! withdrawing ([`withdraw`]), legal holds ([`hold`]), steps ([`step`])
//! and status ([`status`]).

pub mod acquire;
pub mod closure;
pub mod codec;
pub mod content;
pub mod context;
pub mod copy;
pub mod create;
pub mod denial;
pub mod denial_work;
pub mod discover;
pub mod hold;
pub mod keys;
pub mod lock;
pub mod preserved;
pub mod purge;
pub mod queue;
pub mod reads;
pub mod remove;
pub mod request;
pub mod restore;
pub mod seed;
pub mod source;
pub mod state;
pub mod status;
pub mod step;
pub mod survey;
pub mod versions;
pub mod withdraw;

use custodian_sdk::Error;
use custodian_sdk::steps::{StepResult, Timer, WitCommit};
use custodian_sdk::takedown::{Request, RequestStatus, TakedownSteps};

// Allocation in wasm: a call's small allocations are cut from one region
// that starts over once the call has freed them all; the policy keeps
// nothing on the heap between calls (see `custodian_sdk::arena`).
custodian_sdk::use_call_arena!();

/// The policy; stateless: a call may run on a fresh instance or on one
/// that served earlier calls, so it decides from its arguments alone.
pub struct Policy;

impl TakedownSteps for Policy {
    fn plan_create(request: Request, now_ms: u64) -> Result<WitCommit, Error> {
        create::plan(request, now_ms)
    }

    fn plan_denial(request: Vec<u8>, now_ms: u64) -> Result<Option<WitCommit>, Error> {
        denial_work::plan(&request, now_ms)
    }

    fn plan_withdraw(request: Vec<u8>, now_ms: u64) -> Result<WitCommit, Error> {
        withdraw::plan(&request, now_ms)
    }

    fn step(timer: Timer) -> Result<StepResult, Error> {
        step::run(&timer)
    }

    fn plan_hold(request: Vec<u8>, enabled: bool, now_ms: u64) -> Result<WitCommit, Error> {
        hold::plan(&request, enabled, now_ms)
    }

    fn status(request: Vec<u8>) -> Result<RequestStatus, Error> {
        status::of(&request)
    }
}

custodian_sdk::export_takedown!(Policy);
