//! Where the cluster is and how to reach it: endpoints, the key prefix,
//! TLS and credentials, and the per-call time budget.

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use crate::KvError;

/// The longest key prefix: every etcd key carries it, so it counts
/// against etcd's request limit (see the module documentation's
/// "Limits").
pub const MAX_PREFIX_BYTES: usize = 256;
/// The time budget of one call when none is configured.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest time budget accepted: a call that may block longer than
/// this is a hang, whatever the cluster is doing.
pub const MAX_REQUEST_TIMEOUT: Duration = Duration::from_secs(300);

/// The environment variable naming a PEM file of the CA that signed the
/// cluster's certificates; setting it turns TLS on.
pub const ENV_CA: &str = "CUSTODIAN_ETCD_CA";
/// The environment variable naming a PEM client certificate (needs
/// [`ENV_KEY`] and [`ENV_CA`]).
pub const ENV_CERT: &str = "CUSTODIAN_ETCD_CERT";
/// The environment variable naming the PEM private key of [`ENV_CERT`].
pub const ENV_KEY: &str = "CUSTODIAN_ETCD_KEY";
/// The environment variable holding the etcd user name (needs
/// [`ENV_PASSWORD`]).
pub const ENV_USER: &str = "CUSTODIAN_ETCD_USER";
/// The environment variable holding the etcd user's password.
pub const ENV_PASSWORD: &str = "CUSTODIAN_ETCD_PASSWORD";

/// How to reach an etcd cluster and where in its keyspace a store lives.
#[derive(Clone)]
pub struct EtcdConfig {
    /// Client URLs of the cluster's members: `http://host:port`,
    /// `https://host:port` (needs [`EtcdConfig::tls`]), or `host:port`
    /// (the scheme then follows whether TLS is configured). Requests are
    /// spread over all of them; a member that is down is skipped.
    pub endpoints: Vec<String>,
    /// Every key of the store starts with this, so several deployments or
    /// tests can share one cluster. Empty, or at most
    /// [`MAX_PREFIX_BYTES`] bytes ending in `/` with no `\0`: under that
    /// rule no two distinct prefixes can address the same etcd key.
    pub prefix: Vec<u8>,
    /// TLS towards the cluster; `None` speaks plain HTTP/2.
    pub tls: Option<EtcdTls>,
    /// etcd user name and password; `None` when the cluster has no auth.
    pub auth: Option<(String, String)>,
    /// The time budget of every call, retries included; a call that
    /// cannot finish in time answers [`KvError::Unavailable`]. It also
    /// bounds how long after its `NotAfter` check a batch can be proposed
    /// (see the module documentation), so fencing's lease margin must
    /// cover it.
    pub request_timeout: Duration,
}

/// TLS material, as PEM.
#[derive(Clone)]
pub struct EtcdTls {
    /// The CA certificate(s) the members' certificates must chain to.
    pub ca_pem: Vec<u8>,
    /// A client certificate, for clusters that require one.
    pub client: Option<EtcdClientCert>,
}

/// A client certificate and its private key, as PEM.
#[derive(Clone)]
pub struct EtcdClientCert {
    /// The certificate chain presented to the members.
    pub cert_pem: Vec<u8>,
    /// Its private key.
    pub key_pem: Vec<u8>,
}

/// Shows where the store is, never the password or the key.
impl std::fmt::Debug for EtcdConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdConfig")
            .field("endpoints", &self.endpoints)
            .field("prefix", &String::from_utf8_lossy(&self.prefix))
            .field(
                "tls",
                &self.tls.as_ref().map(|tls| match tls.client {
                    Some(_) => "with a client certificate",
                    None => "without a client certificate",
                }),
            )
            .field("user", &self.auth.as_ref().map(|(user, _)| user))
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}

impl EtcdConfig {
    /// Plain HTTP, no auth, the default time budget.
    pub fn new(endpoints: Vec<String>, prefix: impl Into<Vec<u8>>) -> Self {
        Self {
            endpoints,
            prefix: prefix.into(),
            tls: None,
            auth: None,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }

    /// `endpoints` and `prefix`, with TLS and credentials from the
    /// environment: [`ENV_CA`] (a PEM file; its presence turns TLS on),
    /// [`ENV_CERT`] and [`ENV_KEY`] (a client certificate and its key,
    /// both or neither), [`ENV_USER`] and [`ENV_PASSWORD`] (both or
    /// neither). A variable set to the empty string counts as unset.
    ///
    /// # Errors
    /// [`KvError::InvalidArgument`] when a file cannot be read or is not
    /// PEM, when only one of a pair is set, or when the result fails
    /// [`EtcdConfig::validate`].
    pub fn from_env(endpoints: Vec<String>, prefix: Vec<u8>) -> Result<Self, KvError> {
        Self::from_vars(endpoints, prefix, |name| std::env::var_os(name))
    }

    /// [`EtcdConfig::from_env`] reading variables through `var`, so tests
    /// need not change the process's environment.
    pub(super) fn from_vars(
        endpoints: Vec<String>,
        prefix: Vec<u8>,
        var: impl Fn(&str) -> Option<OsString>,
    ) -> Result<Self, KvError> {
        let var = |name: &str| var(name).filter(|value| !value.is_empty());
        let mut config = Self::new(endpoints, prefix);
        let pair = |first: &str, second: &str| match (var(first), var(second)) {
            (Some(a), Some(b)) => Ok(Some((a, b))),
            (None, None) => Ok(None),
            _ => Err(KvError::InvalidArgument(
                format!("{first} and {second} must be set together").into(),
            )),
        };
        let client = pair(ENV_CERT, ENV_KEY)?;
        config.tls = match var(ENV_CA) {
            Some(ca) => Some(EtcdTls {
                ca_pem: read_pem(ENV_CA, &ca, "CERTIFICATE")?,
                client: match client {
                    Some((cert, key)) => Some(EtcdClientCert {
                        cert_pem: read_pem(ENV_CERT, &cert, "CERTIFICATE")?,
                        key_pem: read_pem(ENV_KEY, &key, "PRIVATE KEY")?,
                    }),
                    None => None,
                },
            }),
            // A client certificate is only ever presented inside TLS, and
            // TLS needs a CA: a certificate without one is a mistake.
            None if client.is_some() => {
                return Err(KvError::InvalidArgument(
                    format!("{ENV_CERT} and {ENV_KEY} need {ENV_CA}").into(),
                ));
            }
            None => None,
        };
        config.auth = pair(ENV_USER, ENV_PASSWORD)?
            .map(|(user, password)| {
                let text = |name: &str, value: OsString| {
                    value.into_string().map_err(|_| {
                        KvError::InvalidArgument(format!("{name} is not valid UTF-8").into())
                    })
                };
                Ok::<_, KvError>((text(ENV_USER, user)?, text(ENV_PASSWORD, password)?))
            })
            .transpose()?;
        config.validate()?;
        Ok(config)
    }

    /// Checks every field: at least one endpoint, each `[scheme://]host:port`
    /// with a scheme matching the TLS setting; the prefix rule; a time
    /// budget in `1 ms..=`[`MAX_REQUEST_TIMEOUT`]; TLS material that looks
    /// like PEM.
    ///
    /// # Errors
    /// [`KvError::InvalidArgument`] naming the first problem.
    pub fn validate(&self) -> Result<(), KvError> {
        let invalid = |why: String| Err(KvError::InvalidArgument(why.into()));
        if self.endpoints.is_empty() {
            return invalid("no etcd endpoint is configured".into());
        }
        for endpoint in &self.endpoints {
            check_endpoint(endpoint, self.tls.is_some())?;
        }
        check_prefix(&self.prefix)?;
        check_request_timeout(self.request_timeout)?;
        if let Some(tls) = &self.tls {
            looks_like_pem("the CA", &tls.ca_pem, "CERTIFICATE")?;
            if let Some(client) = &tls.client {
                looks_like_pem("the client certificate", &client.cert_pem, "CERTIFICATE")?;
                looks_like_pem("the client key", &client.key_pem, "PRIVATE KEY")?;
            }
        }
        if let Some((user, _)) = &self.auth
            && user.is_empty()
        {
            return invalid("the etcd user name is empty".into());
        }
        Ok(())
    }
}

/// Accepts `[http://|https://]host:port[/]`, where `host` is a name, an
/// IPv4 address or a bracketed IPv6 address; `https` only with TLS,
/// `http` only without.
/// Checks what a configuration file alone decides, so `config check`
/// catches it: each endpoint's form, the prefix rule, the time budget.
/// Whether an endpoint's scheme fits TLS is checked when the host
/// connects, since TLS comes from the environment.
///
/// # Errors
/// [`KvError::InvalidArgument`] naming the first problem.
pub fn check_file_settings(
    endpoints: &[String],
    prefix: &[u8],
    request_timeout: Duration,
) -> Result<(), KvError> {
    for endpoint in endpoints {
        check_endpoint(endpoint, endpoint.starts_with("https://"))?;
    }
    check_prefix(prefix)?;
    check_request_timeout(request_timeout)
}

fn check_prefix(prefix: &[u8]) -> Result<(), KvError> {
    if prefix.len() > MAX_PREFIX_BYTES {
        return Err(KvError::InvalidArgument(
            format!(
                "a key prefix of {} bytes exceeds {MAX_PREFIX_BYTES}",
                prefix.len()
            )
            .into(),
        ));
    }
    if !(prefix.is_empty() || prefix.ends_with(b"/")) || prefix.contains(&0) {
        return Err(KvError::InvalidArgument(
            format!(
                "the key prefix {:?} must be empty or end in '/', and contain no NUL byte",
                String::from_utf8_lossy(prefix)
            )
            .into(),
        ));
    }
    Ok(())
}

fn check_request_timeout(request_timeout: Duration) -> Result<(), KvError> {
    if request_timeout < Duration::from_millis(1) || request_timeout > MAX_REQUEST_TIMEOUT {
        return Err(KvError::InvalidArgument(
            format!("request_timeout {request_timeout:?} is outside 1ms..={MAX_REQUEST_TIMEOUT:?}")
                .into(),
        ));
    }
    Ok(())
}

fn check_endpoint(endpoint: &str, tls: bool) -> Result<(), KvError> {
    let invalid = |why: &str| {
        Err(KvError::InvalidArgument(
            format!("etcd endpoint {endpoint:?}: {why}").into(),
        ))
    };
    let (scheme, rest) = match endpoint.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, endpoint),
    };
    match (scheme, tls) {
        (None, _) | (Some("http"), false) | (Some("https"), true) => {}
        (Some("https"), false) => return invalid(&format!("https needs TLS ({ENV_CA})")),
        (Some("http"), true) => return invalid("TLS is configured, so use https"),
        (Some(_), _) => return invalid("the scheme must be http or https"),
    }
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    let Some((host, port)) = authority.rsplit_once(':') else {
        return invalid("expected host:port");
    };
    if !port.parse::<u16>().is_ok_and(|port| port != 0) {
        return invalid("the port must be a number in 1..=65535");
    }
    let bad_host = host.is_empty()
        || host
            .bytes()
            .any(|b| b.is_ascii_whitespace() || b.is_ascii_control() || b"/?#@".contains(&b))
        || match host.strip_prefix('[') {
            Some(v6) => !v6.ends_with(']'),
            None => host.contains([':', '[', ']']),
        };
    if bad_host {
        return invalid("the host is not a name or an address");
    }
    Ok(())
}

fn looks_like_pem(what: &str, pem: &[u8], label: &str) -> Result<(), KvError> {
    let text = String::from_utf8_lossy(pem);
    // "-----BEGIN RSA PRIVATE KEY-----" and "-----BEGIN EC PRIVATE KEY-----"
    // are PEM private keys too, so match on the label's tail.
    let found = text
        .lines()
        .any(|line| line.starts_with("-----BEGIN ") && line.ends_with(&format!("{label}-----")));
    if found {
        Ok(())
    } else {
        Err(KvError::InvalidArgument(
            format!("{what} is not PEM (no \"-----BEGIN ...{label}-----\" line)").into(),
        ))
    }
}

fn read_pem(variable: &str, path: &OsString, label: &str) -> Result<Vec<u8>, KvError> {
    let path = Path::new(path);
    let pem = std::fs::read(path).map_err(|e| {
        KvError::InvalidArgument(crate::Detail::caused_by(
            format!("{variable}={}: cannot read", path.display()),
            e,
        ))
    })?;
    looks_like_pem(&format!("{variable}={}", path.display()), &pem, label)?;
    Ok(pem)
}
