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
//! - otherwise a sample, [`ROUTINE_PER_MILLION`] of them (an access
//!   allow is asked on every request: logging each would double the
//!   writes of a read).
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

/// The event prefix of every decision record.
pub const EVENT_PREFIX: &str = "decision/";

/// Routine decisions logged per million: 1%.
pub const ROUTINE_PER_MILLION: u32 = 10_000;

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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision<'a> {
    /// The world (`retention`, `access`).
    pub world: &'a str,
    /// The function asked (`assess`, `decide`).
    pub function: &'a str,
    /// The deciding plugin's content hash, when known.
    pub plugin: Option<&'a str>,
    /// The input, in a stable text form: its digest is recorded.
    pub input: &'a str,
    /// The outcome in a word (`allow`, `deny`, `unanswered`).
    pub outcome: &'a str,
    /// The output, as JSON text (cut to the audit detail bound).
    pub output: &'a str,
    /// What the decision was about (`store:NAME`, `key:K`, `version:V`,
    /// `principal:NAME`, `action:A`).
    pub about: Vec<String>,
}

impl Decision<'_> {
    /// Whether a decision of `weight` is logged, given `draw`, a uniform
    /// random number below one million.
    pub fn logged(weight: Weight, draw: u32) -> bool {
        weight == Weight::Always || draw < ROUTINE_PER_MILLION
    }

    /// The audit record of this decision at `at_ms`.
    pub fn record(&self, at_ms: u64) -> Record {
        let plugin = self.plugin.unwrap_or("unknown");
        let mut targets = vec![
            format!("plugin:{plugin}"),
            format!(
                "input:blake3:{}",
                &blake3::hash(self.input.as_bytes()).to_hex()[..32]
            ),
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
            detail: Some(audit::truncated(self.output, audit::MAX_DETAIL_BYTES)),
        }
    }
}

/// A uniform draw below one million, for [`Decision::logged`]; 0 (log it)
/// when no randomness is available, so a fault logs more, never less.
pub fn draw() -> u32 {
    let mut bytes = [0u8; 4];
    match getrandom::fill(&mut bytes) {
        Ok(()) => u32::from_le_bytes(bytes) % 1_000_000,
        Err(_) => 0,
    }
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
            Ok(Verdict::Delete) => ("delete", "\"delete\"".to_owned()),
            Ok(Verdict::Retain(reason)) => (
                "retain",
                serde_json::json!({ "retain": reason }).to_string(),
            ),
            Err(error) => (
                "unanswered",
                serde_json::json!({ "error": error.to_string() }).to_string(),
            ),
        };
        let hash = self.inner.plugin_hash();
        let input = format!("{candidate:?} {governance:?} now {now_ms}");
        let record = Decision {
            world: "purge",
            function: "judge",
            plugin: hash.as_deref(),
            input: &input,
            outcome,
            output: &output,
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
            input: "item created 1 at 2",
            outcome: "deny",
            output: r#"{"deny":"retained until 5"}"#,
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
            Some(r#"{"deny":"retained until 5"}"#)
        );
        assert!(record.validate().is_ok());
        let mut same_input = decision();
        same_input.outcome = "allow";
        assert_eq!(same_input.record(8).targets[1], record.targets[1]);
    }

    #[test]
    fn denials_and_destructive_decisions_are_always_logged_and_routine_ones_sampled() {
        assert!(Decision::logged(Weight::Always, 999_999));
        assert!(Decision::logged(Weight::Routine, 0));
        assert!(Decision::logged(Weight::Routine, ROUTINE_PER_MILLION - 1));
        assert!(!Decision::logged(Weight::Routine, ROUTINE_PER_MILLION));
        let logged = (0..100_000)
            .filter(|_| Decision::logged(Weight::Routine, draw()))
            .count();
        // 1% of 100,000 is 1,000; 5 standard deviations (~31 each) either side.
        assert!((840..=1_160).contains(&logged), "{logged}");
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
    fn a_huge_output_or_target_is_cut_to_the_audit_bounds() {
        let long = "é".repeat(10_000);
        let mut d = decision();
        d.output = &long;
        d.about = vec![long.clone(); 100];
        let record = d.record(1);
        assert!(record.validate().is_ok());
        assert!(record.detail.unwrap().len() <= audit::MAX_DETAIL_BYTES);
    }
}
