//! The bundled takedown policy: preserve what a takedown removes, verify
//! it, find every repository holding it, keep it for retention, then purge
//! it and keep re-sweeping for late writes.
//!
//! Each timer step is one bounded checkpoint transition
//! (seed → acquire → closure → discover → retain → purging → purged),
//! committed by the host atomically with the timer's update and audited.
//! Retention decisions (retain-until, may-purge, when to look again, legal
//! hold) are the deployer's retention plugin's, asked through
//! `retention-oracle`.
//!
//! # Grants
//!
//! KV partition `takedown` (read-write), `content` (read only, the host's
//! content index, see [`content`]), object stores `serving` (read only)
//! and `preserved` (read-write).
//!
//! # Key layout (partition `takedown`)
//!
//! Per request: `TAG 0x00 id(32) TAIL`; an `object` is a 32-byte id.
//!
//! | tag | tail | value |
//! |---|---|---|
//! | `request` | — | the request (JSON: repository, created-ms, object count or pack id in hex) |
//! | `actions` | — | the objects a request names, 32 bytes each, in the order filed (read only while seeding) |
//! | `state` | — | [`state::State`] (JSON, `version` 1, unknown fields refused) |
//! | `todo` | object | expected kind byte: 0 any, 1 blob, 2 manifest, 3 pack |
//! | `object` | object | [`state::ObjectInfo`]: kind, size, copied, CRC so far, chunks enqueued, verified, source failed, holders cursor, holders done |
//! | `source` | object | [`acquire::Source`]: the selected serving copy (key, etag, size, CRC, kind, selected-at), kept as provenance |
//! | `piece` | object, offset (u64 BE) | [`copy::Piece`]: the intent (object, offset, length, CRC, preserved key), written before the piece |
//! | `discover` | object | `[0]` an object, `[1]` a pack |
//! | `closure` | manifest | [`closure::Checkpoint`]: next chunk, running CRC, running length |
//! | `pack-todo` | pack | [`seed::PackCursor`]: next inventory entry (and the validated count) |
//! | `pack-seen` | pack | empty: the pack is walked by this request, once |
//! | `known-ns` | object, namespace | empty: the namespace holds the object |
//! | `holder` | namespace 0x00 repository | [`discover::HolderMarker`]: this request planned the repository's cache purge (written absent-guarded, so once) |
//!
//! Shared, one per repository: `cache-purge 0x00 namespace 0x00 repository`
//! → [`discover::CachePurge`] `{operation: "takedown:<id hex>",
//! requested_ms}`, for the host's cache server; a later request's plan
//! replaces a pending one (the purge covers both).
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
//! - `PreservationPurgeStarted`: a purge pass begins (retention allows it,
//!   no hold; once purged, hourly re-sweeps).
//! - `PreservationSourceSelected` (id, object): a serving copy was chosen.
//! - `PreservationSourceCorrupt` (id, object): the serving copy is corrupt,
//!   changed, missing or too large; recorded, never retried.
//! - `PreservationVerified`: acquisition (or, after closure, every
//!   manifest's reassembly) is verified.
//! - `PreservationAcquisitionIncomplete`: acquisition ended with a corrupt
//!   source.
//! - `PreservationClosurePending`: acquisition ended; manifests still need
//!   their reassembly verified.
//! - `PreservationDiscoveryComplete` / `PreservationDiscoveryIncomplete`:
//!   every holder was found, with acquisition complete or not.
//! - `PreservationPiecePurged` (id, object, preserved key): a piece was
//!   visited by a purge pass; detail `deleted` or `absent`.
//! - `PreservationPurgeComplete`: a purge pass visited every piece.
//! - `PreservationLegalHold`: `plan-hold`, detail `on` or `off`.
//! - `PreservationCheckpoint`: any other step (detail: the phase).
//!
//! # Bounds
//!
//! A step makes well under 100 host calls (the host's default budget is
//! 256) and commits at most 96 operations and 8 audit entries; each
//! phase's per-step constants say what they bound.

pub mod acquire;
pub mod closure;
pub mod codec;
pub mod content;
pub mod context;
pub mod copy;
pub mod discover;
pub mod hold;
pub mod keys;
pub mod purge;
pub mod queue;
pub mod request;
pub mod seed;
pub mod state;
pub mod status;
pub mod step;

use custodian_sdk::Error;
use custodian_sdk::steps::{StepResult, Timer, WitCommit};
use custodian_sdk::takedown::{Request, RequestStatus, TakedownSteps};

/// The policy; stateless, as every call gets a fresh instance.
pub struct Policy;

impl TakedownSteps for Policy {
    fn plan_create(request: Request, now_ms: u64) -> Result<WitCommit, Error> {
        request::plan_create(request, now_ms)
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
