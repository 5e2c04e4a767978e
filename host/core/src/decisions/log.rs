//! The decision log: plugin decisions the host acts on, as audit records
//! (event `decision/WORLD/FUNCTION`), each naming the deciding plugin's
//! content hash, a digest of the input and the output, so a reader can
//! tell which build decided what, and find every decision on the same
//! input.
//!
//! Which decisions are logged:
//! - always: a denial, and a decision that lets something be destroyed
//!   (the retention answer before a destructive operation on a `locked`
//!   store, allow or deny);
//! - otherwise a sample, [`Sampling`] of them (1% unless `[audit]
//!   routine_decisions` says otherwise: an access allow is asked on every
//!   request, and logging each would double the writes of a read).
//!
//! A record's detail is `{"input": …, "output": …}`: the input itself is
//! kept when the detail has room for it (the bound is
//! [`audit::MAX_DETAIL_BYTES`]), so a dry run can ask a candidate plugin
//! the questions the serving one was asked; its digest is kept always.
//!
//! A record that cannot be written is logged instead and the decision
//! stands: refusing requests because the log is unavailable would turn a
//! record-keeping fault into an outage.

use std::sync::Arc;

use async_trait::async_trait;
use custodian_base::clock::Clock;
use custodian_kv::Kv;

use crate::audit::{self, Record};
use crate::decisions::PolicyError;
use crate::decisions::purge::{Candidate, Governance, PurgeJudge, Verdict};
use crate::timers::{self, DueTimer, Fired, StepFailure};

/// The event prefix of every decision record.
pub const EVENT_PREFIX: &str = "decision/";

/// Routine decisions logged per million by default: 1%.
pub const ROUTINE_PER_MILLION: u32 = 10_000;

/// How many routine decisions in a million are logged (denials and
/// destructive decisions always are).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sampling {
    per_million: u32,
}

impl Default for Sampling {
    fn default() -> Self {
        Self {
            per_million: ROUTINE_PER_MILLION,
        }
    }
}

impl Sampling {
    /// Logs `fraction` of routine decisions: 0 logs none, 1 every one.
    ///
    /// # Errors
    /// A fraction outside `0..=1` (or not a number), named.
    pub fn of(fraction: f64) -> Result<Self, String> {
        if !(0.0..=1.0).contains(&fraction) {
            return Err(format!(
                "a fraction of routine decisions must be within 0..=1, not {fraction}"
            ));
        }
        // Within 0..=1, the product is within 0..=1e6: exact enough and in
        // range for a u32.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let per_million = (fraction * 1e6).round() as u32;
        Ok(Self { per_million })
    }

    /// Routine decisions logged per million.
    pub fn per_million(self) -> u32 {
        self.per_million
    }

    /// Whether a decision of `weight` is logged, given `draw`, a uniform
    /// random number below one million.
    pub fn logs(self, weight: Weight, draw: u32) -> bool {
        weight == Weight::Always || draw < self.per_million
    }

    /// Whether a decision of `weight` is logged this time.
    pub fn draw(self, weight: Weight) -> bool {
        // No draw is needed for what is always logged, nor for a rate of
        // none: a draw reads the OS's randomness.
        weight == Weight::Always || (self.per_million > 0 && self.logs(weight, draw()))
    }
}

/// How much a decision matters to the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Weight {
    /// A denial, or a decision that lets something be destroyed: always
    /// logged.
    Always,
    /// Anything else: sampled.
    Routine,
}

/// One decision.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision<'a> {
    /// The world (`retention`, `access`).
    pub world: &'a str,
    /// The function asked (`assess`, `decide`).
    pub function: &'a str,
    /// The deciding plugin's content hash, when known.
    pub plugin: Option<&'a str>,
    /// The input: its digest is a target, and it is kept in the detail
    /// when there is room.
    pub input: serde_json::Value,
    /// The outcome in a word (`allow`, `deny`, `unanswered`).
    pub outcome: &'a str,
    /// The output.
    pub output: serde_json::Value,
    /// What the decision was about (`store:NAME`, `key:K`, `version:V`,
    /// `principal:NAME`, `action:A`).
    pub about: Vec<String>,
}

impl Decision<'_> {
    /// The audit record of this decision at `at_ms`.
    pub fn record(&self, at_ms: u64) -> Record {
        let plugin = self.plugin.unwrap_or("unknown");
        let input = self.input.to_string();
        let mut targets = vec![
            format!("plugin:{plugin}"),
            format!("input:{}", input_digest(&input)),
            format!("outcome:{}", self.outcome),
        ];
        targets.extend(
            self.about
                .iter()
                .take(audit::MAX_TARGETS - targets.len())
                .map(|t| audit::truncated(t, audit::MAX_TARGET_BYTES)),
        );
        Record {
            at_ms,
            actor: format!("plugin:{}@{}", self.world, &plugin[..plugin.len().min(12)]),
            event: format!("{EVENT_PREFIX}{}/{}", self.world, self.function),
            targets,
            detail: Some(self.detail(&input)),
        }
    }

    /// `{"input": …, "output": …}`; without the input when both do not
    /// fit, and cut (no longer JSON) when the output alone does not.
    fn detail(&self, input: &str) -> String {
        let output = self.output.to_string();
        let whole = format!(r#"{{"input":{input},"output":{output}}}"#);
        if whole.len() <= audit::MAX_DETAIL_BYTES {
            return whole;
        }
        audit::truncated(
            &format!(r#"{{"output":{output}}}"#),
            audit::MAX_DETAIL_BYTES,
        )
    }
}

/// The digest a decision record names its input by: `blake3:` and the
/// first 128 bits of the BLAKE3 hash of the input's JSON text.
pub fn input_digest(input: &str) -> String {
    format!("blake3:{}", &blake3::hash(input.as_bytes()).to_hex()[..32])
}

/// The input a decision record kept, if it kept one (see the module
/// documentation).
pub fn kept_input(record: &Record) -> Option<serde_json::Value> {
    let detail: serde_json::Value = serde_json::from_str(record.detail.as_deref()?).ok()?;
    detail.get("input").cloned()
}

/// A uniform draw below one million, for [`Sampling::logs`].
///
/// Every API request and every step draws, so the draw must not be a
/// system call (`getrandom` was one per request): each thread seeds a
/// SplitMix64 sequence from the OS once and steps it. Sampling needs
/// draws an observer cannot steer, not secrecy; the seed is secret and
/// differs per thread and process. A thread that cannot get a seed draws
/// 0 (log it) every time, so a fault logs more, never less.
fn draw() -> u32 {
    thread_local! {
        static STATE: std::cell::Cell<Option<u64>> = std::cell::Cell::new({
            let mut seed = [0u8; 8];
            getrandom::fill(&mut seed).ok().map(|()| u64::from_le_bytes(seed))
        });
    }
    STATE.with(|state| {
        let Some(current) = state.get() else {
            return 0;
        };
        let next = current.wrapping_add(0x9E37_79B9_7F4A_7C15);
        state.set(Some(next));
        // SplitMix64's output function: every bit of `next` reaches every
        // bit of the result.
        let mut z = next;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        // The modulo bias is below 2^-44 for a 64-bit draw.
        (z % 1_000_000) as u32
    })
}

/// The input of a step of `timer` at `now_ms`, as a step's decision
/// record keeps it.
fn step_input(timer: &DueTimer, now_ms: u64) -> serde_json::Value {
    serde_json::json!({
        "kind": timer.kind,
        "reference": timers::display_reference(&timer.reference),
        "due-ms": timer.due_ms,
        "steps": timer.steps,
        "failures": timer.failures,
        "now-ms": now_ms,
    })
}

/// What a step's decision is about: its timer.
fn step_about(timer: &DueTimer) -> Vec<String> {
    vec![format!(
        "timer:{}/{}",
        timer.kind,
        timers::display_reference(&timer.reference)
    )]
}

/// The decision record of a step of `timer` by the plugin `plugin` of
/// `world` that answered `fired` at `now_ms`, if `sampling` logs it: a
/// step that ends its timer always, one that steps again as sampled. What
/// a step destroys is recorded as it happens (the retention answer on a
/// `locked` store, and the policy's own entries committed with the step).
pub fn step_decision(
    sampling: Sampling,
    (world, plugin): (&str, &str),
    timer: &DueTimer,
    fired: &Fired,
    now_ms: u64,
) -> Option<Record> {
    let (weight, outcome, next, commit) = match fired {
        Fired::Reschedule { due_ms, commit } => {
            (Weight::Routine, "reschedule", Some(*due_ms), commit)
        }
        Fired::Done(commit) => (Weight::Always, "done", None, commit),
    };
    if !sampling.draw(weight) {
        return None;
    }
    let events: Vec<&str> = commit.audit.iter().map(|e| e.event.as_str()).collect();
    let decision = Decision {
        world,
        function: "step",
        plugin: Some(plugin),
        input: step_input(timer, now_ms),
        outcome,
        output: serde_json::json!({
            "next-ms": next,
            "writes": commit.batch.writes.len(),
            "events": events,
        }),
        about: step_about(timer),
    };
    Some(decision.record(now_ms))
}

/// The decision record of a step of `timer` that failed with `failure`:
/// always logged, as a denial is (the policy refused, or could not
/// answer).
pub fn step_failure(
    (world, plugin): (&str, &str),
    timer: &DueTimer,
    failure: &StepFailure,
    now_ms: u64,
) -> Record {
    Decision {
        world,
        function: "step",
        plugin: Some(plugin),
        input: step_input(timer, now_ms),
        outcome: "failed",
        output: serde_json::json!({
            "cause": failure.cause,
            "error": failure.message,
        }),
        about: step_about(timer),
    }
    .record(now_ms)
}

/// A purge judge whose every judgement is logged: a deletion is
/// destructive and a refusal is a denial, so each is logged ("always").
pub struct LoggedJudge {
    inner: Arc<dyn PurgeJudge>,
    kv: Arc<dyn Kv>,
    clock: Arc<dyn Clock>,
}

impl LoggedJudge {
    /// Logs `inner`'s judgements to `kv`'s audit log, stamped by `clock`.
    pub fn new(inner: Arc<dyn PurgeJudge>, kv: Arc<dyn Kv>, clock: Arc<dyn Clock>) -> Self {
        Self { inner, kv, clock }
    }
}

#[async_trait]
impl PurgeJudge for LoggedJudge {
    async fn judge(
        &self,
        candidate: &Candidate,
        governance: &Governance,
        now_ms: u64,
    ) -> Result<Verdict, PolicyError> {
        let verdict = self.inner.judge(candidate, governance, now_ms).await;
        let (outcome, output) = match &verdict {
            Ok(Verdict::Delete) => ("delete", serde_json::json!("delete")),
            Ok(Verdict::Retain(reason)) => ("retain", serde_json::json!({ "retain": reason })),
            Err(error) => (
                "unanswered",
                serde_json::json!({ "error": error.to_string() }),
            ),
        };
        let hash = self.inner.plugin_hash();
        let input = serde_json::json!({
            "candidate": candidate,
            "governance": format!("{governance:?}"),
            "now-ms": now_ms,
        });
        let record = Decision {
            world: "purge",
            function: "judge",
            plugin: hash.as_deref(),
            input,
            outcome,
            output,
            about: vec![
                format!("key:{}", candidate.key),
                format!("version:{}", candidate.version_id),
            ],
        }
        .record(self.clock.now_ms());
        if let Err(error) = audit::append(self.kv.as_ref(), &record).await {
            tracing::warn!(%error, key = %candidate.key, "cannot log a purge judgement");
        }
        verdict
    }

    fn plugin_hash(&self) -> Option<String> {
        self.inner.plugin_hash()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision() -> Decision<'static> {
        Decision {
            world: "retention",
            function: "assess",
            plugin: Some("ab12cd34ef56ab12cd34ef56"),
            input: serde_json::json!({"created-ms": 1, "now-ms": 2}),
            outcome: "deny",
            output: serde_json::json!({"deny": "retained until 5"}),
            about: vec!["store:docs".into(), "key:a.txt".into()],
        }
    }

    #[test]
    fn a_decision_record_names_the_plugin_the_input_digest_the_outcome_and_the_output() {
        let record = decision().record(7);
        assert_eq!(record.event, "decision/retention/assess");
        assert_eq!(record.actor, "plugin:retention@ab12cd34ef56");
        assert_eq!(record.targets[0], "plugin:ab12cd34ef56ab12cd34ef56");
        assert!(record.targets[1].starts_with("input:blake3:"));
        assert_eq!(record.targets[1].len(), "input:blake3:".len() + 32);
        assert_eq!(record.targets[2], "outcome:deny");
        assert_eq!(record.targets[3..], ["store:docs", "key:a.txt"]);
        assert_eq!(
            record.detail.as_deref(),
            Some(r#"{"input":{"created-ms":1,"now-ms":2},"output":{"deny":"retained until 5"}}"#)
        );
        assert_eq!(kept_input(&record), Some(decision().input));
        assert!(record.validate().is_ok());
        let mut same_input = decision();
        same_input.outcome = "allow";
        assert_eq!(same_input.record(8).targets[1], record.targets[1]);
    }

    #[test]
    fn denials_and_destructive_decisions_are_always_logged_and_routine_ones_sampled() {
        let sampling = Sampling::default();
        assert!(sampling.logs(Weight::Always, 999_999));
        assert!(sampling.logs(Weight::Routine, 0));
        assert!(sampling.logs(Weight::Routine, ROUTINE_PER_MILLION - 1));
        assert!(!sampling.logs(Weight::Routine, ROUTINE_PER_MILLION));
        let logged = (0..100_000)
            .filter(|_| sampling.draw(Weight::Routine))
            .count();
        // 1% of 100,000 is 1,000; 5 standard deviations (~31 each) either side.
        assert!((840..=1_160).contains(&logged), "{logged}");
    }

    #[test]
    fn draws_spread_evenly_over_the_million_and_each_thread_draws_its_own_sequence() {
        let mut tenths = [0u32; 10];
        for _ in 0..100_000 {
            let d = draw();
            assert!(d < 1_000_000, "{d}");
            tenths[(d / 100_000) as usize] += 1;
        }
        // ~10,000 a tenth, one standard deviation ~95: 5 either side.
        assert!(
            tenths.iter().all(|n| (9_525..=10_475).contains(n)),
            "{tenths:?}"
        );
        let there: Vec<u32> = std::thread::spawn(|| (0..16).map(|_| draw()).collect())
            .join()
            .unwrap();
        let here: Vec<u32> = (0..16).map(|_| draw()).collect();
        assert_ne!(there, here, "two threads drew the same sequence");
    }

    #[test]
    fn a_sampling_rate_is_a_fraction_from_none_to_every_decision() {
        let none = Sampling::of(0.0).unwrap();
        assert!(!(0..1_000).any(|_| none.draw(Weight::Routine)));
        assert!(none.draw(Weight::Always));
        let every = Sampling::of(1.0).unwrap();
        assert!((0..1_000).all(|_| every.draw(Weight::Routine)));
        assert_eq!(Sampling::of(0.25).unwrap().per_million(), 250_000);
        for bad in [-0.1, 1.5, f64::NAN, f64::INFINITY] {
            assert!(Sampling::of(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_input_too_big_for_the_detail_is_left_out_and_its_digest_kept() {
        let mut d = decision();
        d.input = serde_json::json!("x".repeat(audit::MAX_DETAIL_BYTES));
        let record = d.record(1);
        assert_eq!(kept_input(&record), None);
        assert_eq!(
            record.detail.as_deref(),
            Some(r#"{"output":{"deny":"retained until 5"}}"#)
        );
        assert!(record.targets[1].starts_with("input:blake3:"));
    }

    struct Fixed(Verdict);

    #[async_trait]
    impl PurgeJudge for Fixed {
        async fn judge(
            &self,
            _: &Candidate,
            _: &Governance,
            _: u64,
        ) -> Result<Verdict, PolicyError> {
            Ok(self.0.clone())
        }

        fn plugin_hash(&self) -> Option<String> {
            Some("feedfacefeedfacefeedface".into())
        }
    }

    #[tokio::test]
    async fn every_purge_judgement_is_logged_with_its_plugin_and_answered_unchanged() {
        use custodian_base::clock::FixedClock;
        use custodian_kv::memory::MemoryKv;
        let clock: Arc<dyn Clock> = Arc::new(FixedClock::new(1_000));
        let kv: Arc<dyn Kv> = Arc::new(MemoryKv::new(clock.clone()));
        let candidate = Candidate {
            key: "a.txt".into(),
            version_id: "v1".into(),
            etag: "e".into(),
            size: 3,
            is_delete_marker: false,
            last_modified_ms: Some(1),
        };
        for (verdict, outcome) in [
            (Verdict::Delete, "outcome:delete"),
            (Verdict::Retain("mapped elsewhere".into()), "outcome:retain"),
        ] {
            let judge =
                LoggedJudge::new(Arc::new(Fixed(verdict.clone())), kv.clone(), clock.clone());
            let got = judge
                .judge(&candidate, &Governance::Unarchived, 5)
                .await
                .unwrap();
            assert_eq!(got, verdict);
            let (records, _) = audit::read(kv.as_ref(), 0, None, 10).await.unwrap();
            let last = records.last().unwrap();
            assert_eq!(last.event, "decision/purge/judge");
            assert!(last.targets.contains(&outcome.to_owned()), "{last:?}");
            assert!(
                last.targets
                    .contains(&"plugin:feedfacefeedfacefeedface".to_owned())
            );
            assert!(last.targets.contains(&"version:v1".to_owned()));
        }
    }

    #[test]
    fn a_step_that_ends_its_timer_or_fails_is_always_logged_and_one_that_goes_on_as_sampled() {
        use crate::timers::{FailureCause, StepCommit};
        let timer = DueTimer {
            kind: "takedown".into(),
            reference: b"r1".to_vec(),
            due_ms: 5,
            steps: 3,
            failures: 0,
        };
        let on = Fired::Reschedule {
            due_ms: 9,
            commit: StepCommit::default(),
        };
        let done = Fired::Done(StepCommit::default());
        let none = Sampling::of(0.0).unwrap();
        let decider = ("takedown", "abc123");
        assert!(step_decision(none, decider, &timer, &on, 7).is_none());
        let record = step_decision(none, decider, &timer, &done, 7).expect("always");
        assert_eq!(record.event, "decision/takedown/step");
        assert!(record.targets.contains(&"outcome:done".to_owned()));
        let every = Sampling::of(1.0).unwrap();
        let record = step_decision(every, decider, &timer, &on, 7).expect("sampled");
        assert!(record.targets.contains(&"outcome:reschedule".to_owned()));
        assert_eq!(kept_input(&record).unwrap()["steps"], 3);
        let failure = StepFailure::because(FailureCause::Trap, "wasm trap");
        let record = step_failure(decider, &timer, &failure, 7);
        assert!(record.targets.contains(&"outcome:failed".to_owned()));
        assert!(record.detail.unwrap().contains("wasm trap"));
    }

    #[test]
    fn a_huge_output_or_target_is_cut_to_the_audit_bounds() {
        let long = "é".repeat(10_000);
        let mut d = decision();
        d.output = serde_json::json!(long);
        d.about = vec![long.clone(); 100];
        let record = d.record(1);
        assert!(record.validate().is_ok());
        assert!(record.detail.unwrap().len() <= audit::MAX_DETAIL_BYTES);
    }
}
