//! Where an S3 store lives and how the client reaches it: bucket, key
//! prefix, endpoint, region, timeouts and retries. Credentials are never
//! part of this configuration: they come from the standard chain (the
//! environment, the shared profile, web identity, container or instance
//! metadata), so no secret passes through a config file, a flag or a log.

use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_config::meta::region::RegionProviderChain;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{ProvideCredentials, Region, SharedCredentialsProvider};

use super::super::{ObjectError, ObjectKey};

/// The region used against a custom endpoint when none is configured:
/// S3-compatible servers accept any, but SigV4 needs one to sign with.
const FALLBACK_REGION: &str = "us-east-1";

/// How long to wait for a TCP (and TLS) connection before the attempt
/// counts as failed. Bounds a black-holed endpoint: without it a dropped
/// SYN waits for the kernel's minutes-long retransmission limit.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest single attempt of one request, transfer included. Bounds a
/// server that accepts a request and then trickles or stalls: the SDK's
/// stalled-stream protection catches a body that stops moving, this
/// catches one that moves too slowly to ever finish. Sized for a 5 GiB
/// part at ~20 MiB/s.
pub const DEFAULT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(300);

/// Longest one call may take across all its retries, so a caller holding
/// a lease never waits on the store for longer than it can reason about.
pub const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(900);

/// Attempts per request, the first included (the SDK's standard mode:
/// exponential backoff with jitter, and a shared retry quota that stops
/// retrying when most requests fail). Bounds how long a dead endpoint
/// is hammered before the call answers `Unavailable`.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;

/// Where one S3 store lives. Holds no credentials (see the module
/// documentation); `Debug` is therefore safe to log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Config {
    /// The bucket.
    pub bucket: String,
    /// Prepended to every object key: `""`, or a `/`-terminated path. Its
    /// bytes count against S3's 1024-byte key limit.
    pub prefix: String,
    /// A custom endpoint (an S3-compatible server), e.g.
    /// `http://127.0.0.1:9000`; `None` is AWS.
    pub endpoint: Option<String>,
    /// The region; `None` asks the standard chain (`AWS_REGION`, the
    /// profile, instance metadata).
    pub region: Option<String>,
    /// Address buckets as `endpoint/bucket/key` instead of
    /// `bucket.endpoint/key`: what most S3-compatible servers need.
    pub force_path_style: bool,
    /// See [`DEFAULT_CONNECT_TIMEOUT`].
    pub connect_timeout: Duration,
    /// See [`DEFAULT_ATTEMPT_TIMEOUT`].
    pub attempt_timeout: Duration,
    /// See [`DEFAULT_OPERATION_TIMEOUT`].
    pub operation_timeout: Duration,
    /// See [`DEFAULT_MAX_ATTEMPTS`].
    pub max_attempts: u32,
}

impl S3Config {
    /// A configuration for `bucket` on AWS, no prefix, the default
    /// timeouts and retries.
    pub fn new(bucket: impl Into<String>) -> Self {
        Self {
            bucket: bucket.into(),
            prefix: String::new(),
            endpoint: None,
            region: None,
            force_path_style: false,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            attempt_timeout: DEFAULT_ATTEMPT_TIMEOUT,
            operation_timeout: DEFAULT_OPERATION_TIMEOUT,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
        }
    }

    /// Parses `s3://bucket` or `s3://bucket/prefix` (a trailing `/` is
    /// implied). Endpoint and region are set separately: they are not
    /// part of a store's name.
    ///
    /// # Errors
    /// [`ObjectError::InvalidArgument`] naming what is wrong.
    pub fn from_url(url: &str) -> Result<Self, ObjectError> {
        let refuse = |why: &str| {
            ObjectError::InvalidArgument(
                format!("store URL {url:?}: {why} (expected s3://bucket or s3://bucket/prefix)")
                    .into(),
            )
        };
        let rest = url
            .strip_prefix("s3://")
            .ok_or_else(|| refuse("the scheme is not s3://"))?;
        if rest.contains(['?', '#']) {
            return Err(refuse(
                "queries and fragments are not part of a store name; set endpoint and region separately",
            ));
        }
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        validate_bucket(bucket).map_err(|why| refuse(&why))?;
        let mut config = Self::new(bucket);
        config.prefix = normalize_prefix(prefix).map_err(|why| refuse(&why))?;
        Ok(config)
    }

    /// Checks the fields a client cannot be built without.
    ///
    /// # Errors
    /// [`ObjectError::InvalidArgument`] naming the field.
    pub fn validate(&self) -> Result<(), ObjectError> {
        let refuse = |why: String| ObjectError::InvalidArgument(format!("S3 store: {why}").into());
        validate_bucket(&self.bucket).map_err(refuse)?;
        if normalize_prefix(&self.prefix).map_err(refuse)? != self.prefix {
            return Err(refuse(format!(
                "prefix {:?} must be empty or end with '/'",
                self.prefix
            )));
        }
        if let Some(endpoint) = &self.endpoint
            && !(endpoint.starts_with("http://") || endpoint.starts_with("https://"))
        {
            return Err(refuse(format!(
                "endpoint {endpoint:?} is not an http:// or https:// URL"
            )));
        }
        if self.max_attempts == 0 {
            return Err(refuse("max_attempts must be at least 1".into()));
        }
        for (name, value) in [
            ("connect_timeout", self.connect_timeout),
            ("attempt_timeout", self.attempt_timeout),
            ("operation_timeout", self.operation_timeout),
        ] {
            if value.is_zero() {
                return Err(refuse(format!("{name} must not be zero")));
            }
        }
        Ok(())
    }

    /// Builds the client, with credentials from the standard chain or
    /// from `credentials` when given.
    pub(super) async fn client(
        &self,
        credentials: Option<SharedCredentialsProvider>,
    ) -> Result<aws_sdk_s3::Client, ObjectError> {
        self.validate()?;
        let timeouts = TimeoutConfig::builder()
            .connect_timeout(self.connect_timeout)
            .operation_attempt_timeout(self.attempt_timeout)
            .operation_timeout(self.operation_timeout)
            .build();
        // Standard mode, not adaptive: adaptive rate-limits the client
        // itself on throttling, which would slow a lease heartbeat behind
        // a bulk upload sharing the client.
        let retries = RetryConfig::standard().with_max_attempts(self.max_attempts);
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .timeout_config(timeouts)
            .retry_config(retries);
        let region = match (&self.region, &self.endpoint) {
            (Some(region), _) => RegionProviderChain::first_try(Region::new(region.clone())),
            (None, Some(_)) => RegionProviderChain::default_provider()
                .or_else(Region::from_static(FALLBACK_REGION)),
            (None, None) => RegionProviderChain::default_provider(),
        };
        loader = loader.region(region);
        if let Some(endpoint) = &self.endpoint {
            loader = loader.endpoint_url(endpoint.clone());
        }
        if let Some(credentials) = credentials {
            loader = loader.credentials_provider(credentials);
        }
        let shared = loader.load().await;
        if shared.region().is_none() {
            return Err(ObjectError::InvalidArgument(
                "S3 store: no region configured, and none found in AWS_REGION, the profile or \
                 instance metadata"
                    .into(),
            ));
        }
        let config = aws_sdk_s3::config::Builder::from(&shared)
            .force_path_style(self.force_path_style)
            .build();
        Ok(aws_sdk_s3::Client::from_conf(config))
    }
}

/// Wraps any credentials provider for [`S3Config::client`].
pub(super) fn shared_credentials(
    provider: impl ProvideCredentials + 'static,
) -> SharedCredentialsProvider {
    SharedCredentialsProvider::new(provider)
}

/// S3's bucket naming rules (the DNS-compatible subset every region
/// accepts): 3..=63 of `[a-z0-9.-]`, starting and ending with a letter or
/// digit, no `..`.
fn validate_bucket(bucket: &str) -> Result<(), String> {
    let bytes = bucket.as_bytes();
    let allowed = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'.' || *b == b'-';
    let edge = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if !(3..=63).contains(&bytes.len())
        || !bytes.iter().all(allowed)
        || !edge(bytes.first())
        || !edge(bytes.last())
        || bucket.contains("..")
    {
        return Err(format!(
            "bucket {bucket:?} is not a valid S3 bucket name (3..=63 of a-z, 0-9, '.', '-', \
             starting and ending with a letter or digit)"
        ));
    }
    Ok(())
}

/// `""` stays empty; anything else must be a valid key path and gets a
/// trailing `/`, so `data` and `data/` name the same store.
fn normalize_prefix(prefix: &str) -> Result<String, String> {
    let trimmed = prefix.strip_suffix('/').unwrap_or(prefix);
    if trimmed.is_empty() {
        return if prefix.is_empty() {
            Ok(String::new())
        } else {
            Err("the prefix \"/\" names no path".into())
        };
    }
    ObjectKey::new(trimmed).map_err(|e| format!("prefix: {e}"))?;
    Ok(format!("{trimmed}/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_url_names_a_bucket_and_an_optional_prefix() {
        let bare = S3Config::from_url("s3://my-bucket").unwrap();
        assert_eq!(
            (bare.bucket.as_str(), bare.prefix.as_str()),
            ("my-bucket", "")
        );
        let slash = S3Config::from_url("s3://my-bucket/").unwrap();
        assert_eq!(slash.prefix, "");
        let nested = S3Config::from_url("s3://my.bucket-2/tier/data").unwrap();
        assert_eq!(
            (nested.bucket.as_str(), nested.prefix.as_str()),
            ("my.bucket-2", "tier/data/")
        );
        assert_eq!(
            S3Config::from_url("s3://b12/tier/data/").unwrap().prefix,
            "tier/data/"
        );
        assert_eq!(nested.endpoint, None);
        assert_eq!(nested.max_attempts, DEFAULT_MAX_ATTEMPTS);
    }

    #[test]
    fn malformed_store_urls_are_invalid_with_the_reason() {
        for bad in [
            "s3:/bucket",
            "file:///x",
            "s3://",
            "s3://ab",
            "s3://Upper",
            "s3://-bucket",
            "s3://bucket-",
            "s3://bu..cket",
            "s3://bucket_x",
            "s3://bucket//double",
            "s3://bucket/a/../b",
            "s3://bucket/./b",
            "s3://bucket/p?region=x",
            "s3://bucket#frag",
            &format!("s3://{}", "b".repeat(64)),
        ] {
            let got = S3Config::from_url(bad);
            assert!(
                matches!(&got, Err(ObjectError::InvalidArgument(why)) if why.contains(bad)),
                "{bad}: {got:?}"
            );
        }
    }

    #[test]
    fn a_config_without_a_usable_endpoint_or_budget_is_invalid() {
        let mut config = S3Config::new("bucket");
        config.endpoint = Some("127.0.0.1:9000".into());
        assert!(matches!(
            config.validate(),
            Err(ObjectError::InvalidArgument(_))
        ));
        let mut config = S3Config::new("bucket");
        config.max_attempts = 0;
        assert!(config.validate().is_err());
        let mut config = S3Config::new("bucket");
        config.prefix = "no-slash".into();
        assert!(config.validate().is_err());
        let mut config = S3Config::new("bucket");
        config.attempt_timeout = Duration::ZERO;
        assert!(config.validate().is_err());
        assert_eq!(S3Config::new("bucket").validate(), Ok(()));
    }
}
