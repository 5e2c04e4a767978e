//! Lifecycle rules: read as [`LifecycleView`]s relative to the store's
//! prefix, and extended read-merge-append.
//!
//! PutBucketLifecycleConfiguration replaces the whole configuration, so a
//! rule is added by reading every rule, appending one, and writing them
//! all back as read (the SDK's own types round-trip every field it
//! models). A missing configuration is "no rules"; a refused read is
//! `Auth`, never an empty answer. S3 offers no conditional write here: two
//! writers appending at once can lose one append (the later re-read shows
//! it), never a rule either of them read.

use aws_sdk_s3::types::{
    AbortIncompleteMultipartUpload, BucketLifecycleConfiguration, ExpirationStatus, LifecycleRule,
    LifecycleRuleFilter, NoncurrentVersionExpiration, TransitionDefaultMinimumObjectSize,
};
use custodian_base::detail::Detail;

use super::super::{LifecycleView, ObjectError, RetentionOutcome};
use super::S3Store;
use super::errors::{self, Class};

/// S3's limit on rules in one configuration.
const MAX_RULES: usize = 1000;

/// Days after which an abandoned multipart upload is aborted by the
/// bucket: long enough for the slowest legitimate compose, short enough
/// that abandoned parts (billed storage) do not pile up.
pub(super) const ABORT_UPLOADS_AFTER_DAYS: i32 = 7;

/// Longest noncurrent retention accepted (S3 takes a positive i32; a
/// century is past any sane retention and well inside it).
const MAX_RETENTION_DAYS: u64 = 36_500;

/// Every rule of the bucket and the setting that rides beside them.
#[derive(Debug, Default)]
pub(super) struct Rules {
    pub rules: Vec<LifecycleRule>,
    pub minimum_size: Option<TransitionDefaultMinimumObjectSize>,
}

/// The bucket-key prefix a rule filters on, when it filters on a prefix
/// alone (tag or size filters cover only part of it). `None` for rules
/// that select on more than a prefix.
#[allow(deprecated)] // legacy rules carry the prefix on the rule itself
fn plain_prefix(rule: &LifecycleRule) -> Option<&str> {
    match rule.filter() {
        None => Some(rule.prefix().unwrap_or("")),
        Some(filter) => {
            let narrowed = filter.tag().is_some()
                || filter.and().is_some()
                || filter.object_size_greater_than().is_some()
                || filter.object_size_less_than().is_some();
            (!narrowed).then(|| filter.prefix().unwrap_or(""))
        }
    }
}

/// The bucket-key prefix a rule applies within, whatever else it filters.
#[allow(deprecated)] // legacy rules carry the prefix on the rule itself
fn rule_prefix(rule: &LifecycleRule) -> &str {
    match rule.filter() {
        None => rule.prefix().unwrap_or(""),
        Some(filter) => filter
            .prefix()
            .or_else(|| filter.and().and_then(|and| and.prefix()))
            .unwrap_or(""),
    }
}

fn enabled(rule: &LifecycleRule) -> bool {
    rule.status() == &ExpirationStatus::Enabled
}

fn rule_error(e: impl std::error::Error + Send + Sync + 'static) -> ObjectError {
    ObjectError::InvalidArgument(Detail::caused_by("building a lifecycle rule", e))
}

impl S3Store {
    /// Every rule, `Rules::default()` when the bucket has none.
    pub(super) async fn bucket_rules(&self) -> Result<Rules, ObjectError> {
        match self
            .client
            .get_bucket_lifecycle_configuration()
            .bucket(&self.bucket)
            .send()
            .await
        {
            Ok(out) => Ok(Rules {
                rules: out.rules().to_vec(),
                minimum_size: out.transition_default_minimum_object_size().cloned(),
            }),
            Err(e) => {
                let what = format!("bucket {:?}", self.bucket);
                let failure = errors::failure(&e, "GetBucketLifecycleConfiguration", &what);
                match failure.code.as_deref() {
                    Some("NoSuchLifecycleConfiguration") => Ok(Rules::default()),
                    _ if failure.class == Class::NotFound
                        && failure.code.as_deref() != Some("NoSuchBucket") =>
                    {
                        Ok(Rules::default())
                    }
                    _ => Err(failure.into_error()),
                }
            }
        }
    }

    /// Writes `rules` back with `added` appended.
    async fn append_rule(&self, current: Rules, added: LifecycleRule) -> Result<(), ObjectError> {
        if current.rules.len() >= MAX_RULES {
            return Err(ObjectError::InvalidArgument(
                format!(
                    "bucket {:?} already has S3's limit of {MAX_RULES} lifecycle rules",
                    self.bucket
                )
                .into(),
            ));
        }
        let mut rules = current.rules;
        rules.push(added);
        let configuration = BucketLifecycleConfiguration::builder()
            .set_rules(Some(rules))
            .build()
            .map_err(rule_error)?;
        self.client
            .put_bucket_lifecycle_configuration()
            .bucket(&self.bucket)
            .lifecycle_configuration(configuration)
            .set_transition_default_minimum_object_size(current.minimum_size)
            .send()
            .await
            .map_err(|e| {
                let what = format!("bucket {:?}", self.bucket);
                errors::object_error(&e, "PutBucketLifecycleConfiguration", &what)
            })?;
        Ok(())
    }

    /// An id no rule of `rules` has: `base`, or `base-N`.
    fn free_rule_id(rules: &[LifecycleRule], base: &str) -> String {
        let taken = |id: &str| rules.iter().any(|r| r.id() == Some(id));
        if !taken(base) {
            return base.to_owned();
        }
        (2..)
            .map(|n| format!("{base}-{n}"))
            .find(|id| !taken(id))
            .unwrap_or_else(|| base.to_owned())
    }

    /// See [`super::super::ObjectAdmin::lifecycle_rules`]: the rules that
    /// reach into this store, prefixes relative to it (`""` for a rule
    /// covering all of it). Rules for other parts of the bucket are left
    /// out.
    pub(super) async fn read_lifecycle(&self) -> Result<Vec<LifecycleView>, ObjectError> {
        let store = self.keys.prefix();
        let rules = self.bucket_rules().await?;
        Ok(rules
            .rules
            .iter()
            .filter_map(|rule| {
                let prefix = rule_prefix(rule);
                let relative = if store.starts_with(prefix) {
                    String::new()
                } else {
                    prefix.strip_prefix(store)?.to_owned()
                };
                Some(LifecycleView {
                    id: rule.id().unwrap_or_default().to_owned(),
                    enabled: enabled(rule),
                    prefix: relative,
                    noncurrent_days: rule
                        .noncurrent_version_expiration()
                        .and_then(NoncurrentVersionExpiration::noncurrent_days)
                        .and_then(|d| u64::try_from(d).ok()),
                    expired_delete_marker: rule
                        .expiration()
                        .and_then(|e| e.expired_object_delete_marker())
                        == Some(true),
                })
            })
            .collect())
    }

    /// See [`super::super::ObjectAdmin::ensure_noncurrent_retention`]: an
    /// enabled rule on exactly `prefix` (and nothing narrower) keeping
    /// noncurrent versions at least `days` satisfies it; otherwise one is
    /// appended.
    pub(super) async fn ensure_retention(
        &self,
        prefix: &str,
        days: u64,
    ) -> Result<RetentionOutcome, ObjectError> {
        if !(1..=MAX_RETENTION_DAYS).contains(&days) {
            return Err(ObjectError::InvalidArgument(
                format!("noncurrent retention of {days} days is outside 1..={MAX_RETENTION_DAYS}")
                    .into(),
            ));
        }
        let full = self.keys.unchecked(prefix)?;
        let current = self.bucket_rules().await?;
        let found = current.rules.iter().find_map(|rule| {
            let kept = rule
                .noncurrent_version_expiration()
                .and_then(NoncurrentVersionExpiration::noncurrent_days)
                .and_then(|d| u64::try_from(d).ok())?;
            (enabled(rule) && plain_prefix(rule) == Some(full.as_str()) && kept >= days)
                .then(|| (rule.id().unwrap_or_default().to_owned(), kept))
        });
        if let Some((rule_id, kept)) = found {
            return Ok(RetentionOutcome {
                rule_id,
                noncurrent_days: kept,
                created: false,
            });
        }
        let rule_id = Self::free_rule_id(&current.rules, &format!("custodian-noncurrent-{days}d"));
        let rule = LifecycleRule::builder()
            .id(&rule_id)
            .status(ExpirationStatus::Enabled)
            .filter(LifecycleRuleFilter::builder().prefix(&full).build())
            .noncurrent_version_expiration(
                NoncurrentVersionExpiration::builder()
                    .noncurrent_days(i32::try_from(days).unwrap_or(i32::MAX))
                    .build(),
            )
            .build()
            .map_err(rule_error)?;
        self.append_rule(current, rule).await?;
        Ok(RetentionOutcome {
            rule_id,
            noncurrent_days: days,
            created: true,
        })
    }

    /// Makes sure abandoned uploads under `prefix` are aborted by the
    /// bucket. Returns the id of the rule that does it and whether it was
    /// just added.
    pub(super) async fn ensure_abort_rule(
        &self,
        prefix: &str,
    ) -> Result<(String, bool), ObjectError> {
        let full = self.keys.unchecked(prefix)?;
        let current = self.bucket_rules().await?;
        let found = current.rules.iter().find(|rule| {
            enabled(rule)
                && rule
                    .abort_incomplete_multipart_upload()
                    .and_then(AbortIncompleteMultipartUpload::days_after_initiation)
                    .is_some()
                && plain_prefix(rule).is_some_and(|p| full.starts_with(p))
        });
        if let Some(rule) = found {
            return Ok((rule.id().unwrap_or_default().to_owned(), false));
        }
        let rule_id = Self::free_rule_id(&current.rules, "custodian-abort-incomplete-uploads");
        let rule = LifecycleRule::builder()
            .id(&rule_id)
            .status(ExpirationStatus::Enabled)
            .filter(LifecycleRuleFilter::builder().prefix(&full).build())
            .abort_incomplete_multipart_upload(
                AbortIncompleteMultipartUpload::builder()
                    .days_after_initiation(ABORT_UPLOADS_AFTER_DAYS)
                    .build(),
            )
            .build()
            .map_err(rule_error)?;
        self.append_rule(current, rule).await?;
        Ok((rule_id, true))
    }
}
