//! A takedown-world guest for the timer tests. What a step does depends on
//! its timer's reference (UTF-8):
//!
//! - `count:N:ID` counts to N, one guarded increment of the row `ID` in
//!   partition `takedown` per step, with an audit entry naming the step;
//!   it reschedules one second later until the count reaches N.
//! - `trap:ID` panics; `fail:ID` answers `unavailable`; `spin:ID` never
//!   returns; `greedy:ID` keeps reading past its budget and then returns a
//!   commit anyway; `past:ID` commits an audit entry and reschedules into
//!   the past, forever (the runaway the host must contain).
//!
//! The status of a request filed for repository `giant/status` is 40 MiB.
//!
//! Filing a request for repository `wipe/preserved` makes it the hostile
//! takedown plugin the lock tests need: it lists every version in the
//! `preserved` store, deletes each one, overwrites and deletes each key,
//! and records what the host let through in its audit entry
//! (`Wiped`, targets `deleted:N`, `refused:M`).

// Natively the export macro expands to nothing, so nothing uses the policy.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

use custodian_sdk::audit::Entry;
use custodian_sdk::objects::{self, PutCondition};
use custodian_sdk::steps::{StepResult, Timer, WitCommit};
use custodian_sdk::takedown::{Counts, Denial, Request, RequestStatus, TakedownSteps};
use custodian_sdk::{Batch, Commit, Error, kv};

const PARTITION: &str = "takedown";

struct Stepper;

fn count_of(value: Option<&[u8]>) -> Result<u64, Error> {
    value.map_or(Ok(0), |bytes| {
        <[u8; 8]>::try_from(bytes)
            .map(u64::from_be_bytes)
            .map_err(|_| Error::Corrupt("a count is 8 bytes".into()))
    })
}

fn count(reference: &[u8], target: u64, now_ms: u64) -> Result<StepResult, Error> {
    let observed = kv::get(PARTITION, reference)?;
    let done = count_of(observed.as_deref())?;
    if done >= target {
        return Err(Error::PreconditionFailed(format!(
            "already counted to {target}"
        )));
    }
    let step = done + 1;
    let name = String::from_utf8_lossy(reference).into_owned();
    let commit = Commit::new(
        Batch::new()
            .require_observed(PARTITION, reference.to_vec(), observed.as_deref())
            .put(PARTITION, reference.to_vec(), step.to_be_bytes().to_vec()),
    )
    .audit(Entry {
        event: "Counted".into(),
        targets: vec![name, format!("count:{step}")],
        detail: None,
    });
    Ok(if step == target {
        commit.done()
    } else {
        commit.reschedule(now_ms + 1_000)
    })
}

/// Tries to destroy everything in `preserved`: every version deleted,
/// every key overwritten and deleted. Counts what the host allowed.
fn wipe() -> Result<WitCommit, Error> {
    const STORE: &str = "preserved";
    let (mut deleted, mut refused) = (0u32, 0u32);
    let mut tally = |outcome: Result<(), Error>| match outcome {
        Ok(()) => deleted += 1,
        Err(_) => refused += 1,
    };
    let mut cursor = None;
    loop {
        let page = objects::list_versions(STORE, "", cursor.as_deref(), 1000)?;
        for version in &page.versions {
            tally(objects::delete_version(
                STORE,
                &version.key,
                &version.version_id,
            ));
            if version.is_current {
                let overwrite = objects::put(
                    STORE,
                    &version.key,
                    b"wiped",
                    &PutCondition::Unconditional,
                    None,
                    &[],
                );
                tally(overwrite.map(|_| ()));
                tally(objects::delete(STORE, &version.key));
            }
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    Ok(Commit::new(Batch::new())
        .audit(Entry {
            event: "Wiped".into(),
            targets: vec![format!("deleted:{deleted}"), format!("refused:{refused}")],
            detail: None,
        })
        .into_wit())
}

impl TakedownSteps for Stepper {
    fn step(timer: Timer) -> Result<StepResult, Error> {
        let text = String::from_utf8_lossy(&timer.reference).into_owned();
        let mut parts = text.splitn(3, ':');
        match (parts.next(), parts.next(), parts.next()) {
            (Some("count"), Some(n), Some(_)) => {
                let target = n
                    .parse()
                    .map_err(|_| Error::InvalidArgument(format!("{n:?} is not a count")))?;
                count(&timer.reference, target, timer.now_ms)
            }
            (Some("trap"), ..) => panic!("stepper was told to trap"),
            (Some("fail"), ..) => Err(Error::Unavailable("stepper was told to fail".into())),
            (Some("past"), ..) => Ok(Commit::new(Batch::new())
                .audit(Entry {
                    event: "Spun".into(),
                    targets: vec![text.clone()],
                    detail: None,
                })
                .reschedule(0)),
            (Some("spin"), ..) => {
                let mut x = timer.now_ms | 1;
                loop {
                    x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005));
                }
            }
            (Some("greedy"), ..) => {
                for _ in 0..100_000 {
                    if kv::get(PARTITION, b"anything").is_err() {
                        // Ignore the budget and carry on, as a careless
                        // policy might; the host must still commit nothing.
                    }
                }
                Ok(Commit::new(Batch::new().put(PARTITION, timer.reference, vec![1])).done())
            }
            _ => Err(Error::InvalidArgument(format!(
                "unknown stepper reference {text:?}"
            ))),
        }
    }

    fn plan_create(request: Request, _now_ms: u64) -> Result<WitCommit, Error> {
        if request.repository == "wipe/preserved" {
            return wipe();
        }
        // The stepper's "requests" are its timer references; recording one
        // only marks it, so the host's create path can be exercised.
        let mut key = b"created/".to_vec();
        key.extend_from_slice(&request.id);
        Ok(
            Commit::new(Batch::new().put(PARTITION, key, request.repository.into_bytes()))
                .into_wit(),
        )
    }

    fn plan_hold(request: Vec<u8>, enabled: bool, _now_ms: u64) -> Result<WitCommit, Error> {
        let mut key = b"hold/".to_vec();
        key.extend_from_slice(&request);
        Ok(Commit::new(Batch::new().put(PARTITION, key, vec![u8::from(enabled)])).into_wit())
    }

    fn plan_denial(_request: Vec<u8>, _now_ms: u64) -> Result<Option<WitCommit>, Error> {
        // The stepper's requests name no content: nothing to deny.
        Ok(None)
    }

    fn plan_withdraw(request: Vec<u8>, _now_ms: u64) -> Result<WitCommit, Error> {
        let mut key = b"withdrawn/".to_vec();
        key.extend_from_slice(&request);
        Ok(Commit::new(Batch::new().put(PARTITION, key, Vec::new())).into_wit())
    }

    fn status(request: Vec<u8>) -> Result<RequestStatus, Error> {
        let mut created = b"created/".to_vec();
        created.extend_from_slice(&request);
        if kv::get(PARTITION, &created)?.as_deref() == Some(GIANT.as_bytes()) {
            return Ok(counting(0, "x".repeat(GIANT_BYTES)));
        }
        let Some(value) = kv::get(PARTITION, &request)? else {
            return Err(Error::NotFound("no such counter".into()));
        };
        Ok(counting(count_of(Some(&value))?, "counting".into()))
    }
}

/// A request filed for this repository has a status whose phase is
/// [`GIANT_BYTES`] long: the oversized answer the host must not copy
/// into its responses.
const GIANT: &str = "giant/status";

/// 40 MiB, what the hostile plugin of the hardening review answered.
const GIANT_BYTES: usize = 40 << 20;

/// The status of a counter at `verified`, in `phase`.
fn counting(verified: u64, phase: String) -> RequestStatus {
    RequestStatus {
        repository: String::new(),
        created_ms: 0,
        phase,
        verification: "verified".into(),
        counts: Counts {
            objects: 0,
            verified,
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
        denial: Denial {
            since_ms: 0,
            settled: true,
            denied: 0,
            removed: 0,
            restored: 0,
            withdrawn_ms: None,
        },
        last_error: None,
    }
}

custodian_sdk::export_takedown!(Stepper);
