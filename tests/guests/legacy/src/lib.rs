//! A guest built against the 0.1 contract, as a plugin built before 0.2
//! was: straight from the runtime's frozen copy of the 0.1 WIT
//! (`host/runtime/wit-0.1`), without the SDK (which speaks 0.2). It
//! implements the retention and the takedown worlds; the 0.2 host must
//! still load, link and call both.
//!
//! Retention: what `assess` does depends on `settings.retention-ms`:
//! - `0`: lists the versions of the store `unversioned` and answers the
//!   host's error as it came (a 0.1 guest sees `unsupported` as
//!   `invalid-argument` prefixed `unsupported: `);
//! - `1`: writes `now-ms` to key `seen` of partition `legacy` in a guarded
//!   batch, reads it back, and denies with `kv: <outcome> <value>`;
//! - anything else: a plain decision, retained for `retention-ms` after
//!   `created-ms`.
//!
//! Takedown: `plan-create` records the request's repository under its id
//! in partition `takedown`; `status` reads it back; `step` asks the
//! retention oracle about an item created at the timer's `now-ms` and
//! records the answer's `retain-until-ms` under the timer's reference;
//! `plan-hold` plans nothing but an audit entry.
// wit-bindgen generates the ABI glue (unsafe, undocumented) in this crate.
#![allow(unsafe_code, missing_docs)]

wit_bindgen::generate!({
    path: ["../../../host/runtime/wit-0.1", "wit"],
    world: "custodian-test:legacy/legacy@0.1.0",
    generate_all,
});

use custodian::host::types::Error;
use custodian::host::{audit, kv, objects};
use custodian::policy::retention_oracle;
use custodian::policy::retention_types::{Assessment, Item, Settings, Stage, Verdict};
use custodian::policy::steps::{Commit, StepResult, Timer};
use exports::custodian::policy::takedown_steps::{Counts, Request, RequestStatus};

const PARTITION: &str = "takedown";

fn put(key: &[u8], value: Vec<u8>) -> kv::Write {
    kv::Write::Put(kv::Entry {
        partition: PARTITION.into(),
        key: key.to_vec(),
        value,
    })
}

struct Legacy;

fn round_trip(now_ms: u64) -> Result<String, Error> {
    let entry = kv::Entry {
        partition: "legacy".into(),
        key: b"seen".to_vec(),
        value: now_ms.to_string().into_bytes(),
    };
    let outcome = kv::apply(&kv::Batch {
        preconditions: vec![kv::Precondition::Absent(kv::KeyRef {
            partition: "legacy".into(),
            key: b"seen".to_vec(),
        })],
        writes: vec![kv::Write::Put(entry)],
    })?;
    let outcome = match outcome {
        kv::Outcome::Committed => "committed".to_owned(),
        kv::Outcome::PreconditionFailed(i) => format!("precondition {i} failed"),
        kv::Outcome::DeadlinePassed => "deadline passed".to_owned(),
    };
    let value = kv::get("legacy", b"seen")?.unwrap_or_default();
    Ok(format!("kv: {outcome} {}", String::from_utf8_lossy(&value)))
}

impl exports::custodian::policy::retention_rules::Guest for Legacy {
    fn assess(settings: Settings, item: Item, now_ms: u64) -> Result<Assessment, Error> {
        let retain_until_ms = item.created_ms.saturating_add(settings.retention_ms);
        let verdict = match settings.retention_ms {
            0 => {
                let page = objects::list_versions("unversioned", "", None, 10)?;
                Verdict::Deny(format!("{} versions", page.versions.len()))
            }
            1 => Verdict::Deny(round_trip(now_ms)?),
            _ if item.hold => Verdict::Deny("held".into()),
            _ if now_ms < retain_until_ms => Verdict::Deny("retained".into()),
            _ => Verdict::Allow,
        };
        Ok(Assessment {
            retain_until_ms,
            may_delete: verdict.clone(),
            may_purge: verdict,
            next_check_ms: retain_until_ms.max(now_ms),
        })
    }

    fn set_hold(item: Item, enabled: bool) -> Result<Item, Error> {
        if enabled && matches!(item.stage, Stage::Purging | Stage::Purged) {
            return Err(Error::PreconditionFailed(
                "purging has begun; a hold is too late".into(),
            ));
        }
        Ok(Item {
            hold: enabled,
            ..item
        })
    }
}

impl exports::custodian::policy::takedown_steps::Guest for Legacy {
    fn plan_create(request: Request, _now_ms: u64) -> Result<Commit, Error> {
        if request.id.len() != 32 {
            return Err(Error::InvalidArgument("a request id is 32 bytes".into()));
        }
        Ok(Commit {
            batch: kv::Batch {
                preconditions: vec![kv::Precondition::Absent(kv::KeyRef {
                    partition: PARTITION.into(),
                    key: request.id.clone(),
                })],
                writes: vec![put(&request.id, request.repository.clone().into_bytes())],
            },
            audit: vec![audit::Entry {
                event: "LegacyCreated".into(),
                targets: vec![request.repository],
                detail: None,
            }],
        })
    }

    fn step(timer: Timer) -> Result<StepResult, Error> {
        let item = Item {
            created_ms: timer.now_ms,
            noncurrent_since_ms: None,
            hold: false,
            stage: Stage::Retaining,
        };
        let assessment = retention_oracle::assess(item, timer.now_ms)?;
        Ok(StepResult::Done(Commit {
            batch: kv::Batch {
                preconditions: Vec::new(),
                writes: vec![put(
                    &timer.reference,
                    assessment.retain_until_ms.to_string().into_bytes(),
                )],
            },
            audit: Vec::new(),
        }))
    }

    fn plan_hold(request: Vec<u8>, enabled: bool, _now_ms: u64) -> Result<Commit, Error> {
        Ok(Commit {
            batch: kv::Batch {
                preconditions: Vec::new(),
                writes: Vec::new(),
            },
            audit: vec![audit::Entry {
                event: if enabled {
                    "LegacyHeld"
                } else {
                    "LegacyReleased"
                }
                .into(),
                targets: vec![format!("{} bytes", request.len())],
                detail: None,
            }],
        })
    }

    fn status(request: Vec<u8>) -> Result<RequestStatus, Error> {
        let repository = kv::get(PARTITION, &request)?
            .ok_or_else(|| Error::NotFound("no such request".into()))?;
        Ok(RequestStatus {
            repository: String::from_utf8_lossy(&repository).into_owned(),
            created_ms: 0,
            phase: "seed".into(),
            verification: "none".into(),
            counts: Counts {
                objects: 1,
                verified: 0,
                corrupt: 0,
                pieces: 0,
                bytes: 0,
                holders: 0,
                purged_pieces: 0,
            },
            retain_until_ms: 0,
            hold: false,
            purged: false,
            next_purge_ms: None,
            last_error: None,
        })
    }
}

export!(Legacy);
