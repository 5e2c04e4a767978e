//! The access vocabulary: who asks to do what to which target, and the
//! access policy's answer. The server builds an [`AccessRequest`] for
//! every API request from the authenticated principal and the route; the
//! runtime asks the loaded access plugin through [`AccessJudge`]. A
//! judge that cannot answer denies: access fails closed.
//!
//! Every request is copied into the access plugin, on every API call: the
//! bounds below cap that copy, whatever a caller sends or a deployer
//! configures. The runtime refuses to ask about a request outside them
//! ([`AccessRequest::check_bounds`]), so the plugin can rely on them.

/// Most roles one principal carries, and most bytes of one role: bounds
/// what every request copies into the access plugin.
pub const MAX_ROLES: usize = 32;
/// Longest role, in bytes.
pub const MAX_ROLE_BYTES: usize = 128;
/// Most headers passed to the access plugin with one request.
pub const MAX_HEADERS: usize = 8;
/// Longest principal name, in bytes (a [`custodian_contract::name`]).
pub const MAX_NAME_BYTES: usize = 64;
/// Longest string of a [`Target`] (store, repository, key, version,
/// subject), in bytes: an object key's bound, the longest of them.
pub const MAX_TARGET_BYTES: usize = custodian_contract::limits::MAX_OBJECT_KEY_BYTES;
/// Longest header name passed to the access plugin, in bytes.
pub const MAX_HEADER_NAME_BYTES: usize = 64;
/// Longest header value passed to the access plugin, in bytes.
pub const MAX_HEADER_VALUE_BYTES: usize = 1024;
/// Most bytes of a deny reason the host keeps: the reason is the plugin's
/// string, echoed to the caller and written to the audit log, so a plugin
/// must not be able to bloat either.
pub const MAX_REASON_BYTES: usize = 1024;

/// Who is asking: an authenticated principal.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Principal {
    /// The principal's name (a [`custodian_contract::name`]).
    pub name: String,
    /// Its roles, as the deployer wrote them (`admin`, `reader:store/NAME`,
    /// …); only the access policy gives them meaning.
    pub roles: Vec<String>,
}

impl Principal {
    /// How the audit log names this principal: see [`actor`].
    pub fn actor(&self) -> String {
        actor(&self.name)
    }
}

/// How the audit log names principal `name`: `principal:NAME`, apart
/// from the `operator:NAME` of commands on a data directory and the
/// plugins' own actors.
pub fn actor(name: &str) -> String {
    format!("principal:{name}")
}

/// What the request would do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// Read an object or a repository's file (GET, HEAD).
    Read,
    /// List a store's objects or versions, or a repository's files.
    List,
    /// Write an object or push a file.
    Write,
    /// Delete an object's current version (a delete marker on a
    /// versioned store).
    Delete,
    /// Permanently delete one exact version.
    DeleteVersion,
    /// File a takedown request.
    TakedownFile,
    /// Read a takedown request's status.
    TakedownStatus,
    /// Set or clear a takedown request's legal hold, or extend its
    /// retention (both only ever keep more).
    Hold,
    /// Withdraw a takedown request.
    Withdraw,
    /// Start a verification or purge job.
    StartJob,
    /// Read the host's own records: jobs, the audit log, the timers, the
    /// plugin set.
    Inspect,
    /// Replace a policy plugin.
    SwapPlugin,
    /// Manage principals and credentials.
    Admin,
}

impl Action {
    /// Every action, in declaration order.
    pub const ALL: [Action; 13] = [
        Action::Read,
        Action::List,
        Action::Write,
        Action::Delete,
        Action::DeleteVersion,
        Action::TakedownFile,
        Action::TakedownStatus,
        Action::Hold,
        Action::Withdraw,
        Action::StartJob,
        Action::Inspect,
        Action::SwapPlugin,
        Action::Admin,
    ];

    /// The action's name, as the WIT enum spells it.
    pub fn name(self) -> &'static str {
        match self {
            Action::Read => "read",
            Action::List => "list",
            Action::Write => "write",
            Action::Delete => "delete",
            Action::DeleteVersion => "delete-version",
            Action::TakedownFile => "takedown-file",
            Action::TakedownStatus => "takedown-status",
            Action::Hold => "hold",
            Action::Withdraw => "withdraw",
            Action::StartJob => "start-job",
            Action::Inspect => "inspect",
            Action::SwapPlugin => "swap-plugin",
            Action::Admin => "admin",
        }
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What the request acts on; each field is `None` when the route has no
/// such part.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Target {
    /// The object store.
    pub store: Option<String>,
    /// The repository, `namespace/name`.
    pub repository: Option<String>,
    /// The object key or file path (or a listing's prefix).
    pub key: Option<String>,
    /// The exact version.
    pub version: Option<String>,
    /// The body's declared size, in bytes.
    pub size: Option<u64>,
    /// The other thing the action names: a takedown request's id, a
    /// plugin's world, a job's id, a principal's name.
    pub subject: Option<String>,
}

impl Target {
    /// Each part the target has, as `LABEL:VALUE` (`store:`, `repo:`,
    /// `key:`, `version:`, `subject:`): how audit records and reports name
    /// it.
    pub fn labels(&self) -> Vec<String> {
        [
            ("store", &self.store),
            ("repo", &self.repository),
            ("key", &self.key),
            ("version", &self.version),
            ("subject", &self.subject),
        ]
        .into_iter()
        .filter_map(|(label, value)| value.as_ref().map(|v| format!("{label}:{v}")))
        .collect()
    }
}

/// One question for the access policy.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AccessRequest {
    /// Who asks.
    pub principal: Principal,
    /// What they would do.
    pub action: Action,
    /// To what.
    pub target: Target,
    /// The request's relevant headers, lower-case names, at most
    /// [`MAX_HEADERS`].
    pub headers: Vec<(String, String)>,
}

/// The access policy's answer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Decision {
    /// The request may go on.
    Allow,
    /// It may not, for this reason (shown to the caller and audited).
    Deny(String),
}

impl Decision {
    /// A deny for `reason`, cut to [`MAX_REASON_BYTES`] at a character
    /// boundary (with `…` after the cut): how the host keeps a plugin's
    /// reason.
    pub fn deny(mut reason: String) -> Self {
        if reason.len() > MAX_REASON_BYTES {
            let mut end = MAX_REASON_BYTES;
            while !reason.is_char_boundary(end) {
                end -= 1;
            }
            reason.truncate(end);
            reason.push('…');
        }
        Self::Deny(reason)
    }
}

/// A request outside the bounds the access plugin is promised: what
/// exceeded which bound.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the access request is outside the bounds the access policy is promised: {0}")]
pub struct OutOfBounds(pub String);

impl AccessRequest {
    /// Checks the request is within the bounds of this module (the ones
    /// `sdk/wit/access.wit` promises the plugin).
    ///
    /// # Errors
    /// [`OutOfBounds`], naming the first field that exceeds its bound.
    pub fn check_bounds(&self) -> Result<(), OutOfBounds> {
        let out = |what: String| Err(OutOfBounds(what));
        let principal = &self.principal;
        if !custodian_contract::name::is_name(&principal.name, MAX_NAME_BYTES) {
            return out(format!(
                "the principal's name is not 1..={MAX_NAME_BYTES} bytes of [a-z0-9._-]"
            ));
        }
        if principal.roles.len() > MAX_ROLES {
            return out(format!(
                "{} roles (at most {MAX_ROLES})",
                principal.roles.len()
            ));
        }
        if let Some(role) = principal.roles.iter().find(|r| r.len() > MAX_ROLE_BYTES) {
            return out(format!(
                "a role of {} bytes (at most {MAX_ROLE_BYTES})",
                role.len()
            ));
        }
        let target = &self.target;
        for (what, field) in [
            ("store", &target.store),
            ("repository", &target.repository),
            ("key", &target.key),
            ("version", &target.version),
            ("subject", &target.subject),
        ] {
            if let Some(value) = field
                && value.len() > MAX_TARGET_BYTES
            {
                return out(format!(
                    "a {what} of {} bytes (at most {MAX_TARGET_BYTES})",
                    value.len()
                ));
            }
        }
        if self.headers.len() > MAX_HEADERS {
            return out(format!(
                "{} headers (at most {MAX_HEADERS})",
                self.headers.len()
            ));
        }
        for (name, value) in &self.headers {
            let lower_case = name
                .bytes()
                .all(|b| b.is_ascii() && !b.is_ascii_uppercase());
            if name.is_empty() || name.len() > MAX_HEADER_NAME_BYTES || !lower_case {
                return out(format!(
                    "a header name that is not 1..={MAX_HEADER_NAME_BYTES} bytes of \
                     lower-case ASCII"
                ));
            }
            if value.len() > MAX_HEADER_VALUE_BYTES {
                return out(format!(
                    "the value of header {name:?} is {} bytes (at most \
                     {MAX_HEADER_VALUE_BYTES})",
                    value.len()
                ));
            }
        }
        Ok(())
    }
}

/// Why the access policy gave no answer: the request is then denied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the access plugin did not answer: {0}")]
pub struct Unanswered(pub String);

/// Asks the deployer's access policy.
pub trait AccessJudge: Send + Sync {
    /// The access policy's decision on `request`. Blocks while the plugin
    /// runs: async callers call it on a blocking thread, never on an async
    /// worker (a guest's WASI calls, such as writing its panic message,
    /// block on the I/O runtime, which tokio refuses on its workers).
    ///
    /// # Errors
    /// [`Unanswered`] when the plugin trapped, ran past a limit or could
    /// not be called: the caller denies (fail closed).
    fn decide(&self, request: &AccessRequest) -> Result<Decision, Unanswered>;

    /// The decision on `request` made on the calling thread without ever
    /// blocking it, so an async worker may ask: `None` when this judge
    /// cannot answer so (the caller then asks [`AccessJudge::decide`]
    /// where it may block). An `Unanswered` here is final, as from
    /// `decide`: the plugin was asked and failed. (Required, not
    /// defaulted: a judge that wraps another must pass this on, or every
    /// decision would silently take the slow path.)
    fn decide_now(&self, request: &AccessRequest) -> Option<Result<Decision, Unanswered>>;

    /// The hash of the plugin that decides, for the decision log.
    fn plugin_hash(&self) -> String;
}

#[cfg(test)]
mod tests {
    use super::{
        AccessRequest, Action, Decision, MAX_HEADER_VALUE_BYTES, MAX_REASON_BYTES, MAX_ROLE_BYTES,
        MAX_ROLES, MAX_TARGET_BYTES, Principal, Target,
    };

    fn request() -> AccessRequest {
        AccessRequest {
            principal: Principal {
                name: "bob".into(),
                roles: vec!["reader".into()],
            },
            action: Action::Read,
            target: Target {
                store: Some("serving".into()),
                key: Some("a/b".into()),
                ..Target::default()
            },
            headers: vec![("content-type".into(), "text/plain".into())],
        }
    }

    #[test]
    fn a_request_within_every_bound_passes_its_check() {
        assert_eq!(request().check_bounds(), Ok(()));
    }

    #[test]
    fn each_field_past_its_bound_fails_the_check() {
        let mut cases: Vec<(&str, AccessRequest)> = Vec::new();
        let mut r = request();
        r.principal.name = "Bob".into();
        cases.push(("name", r));
        let mut r = request();
        r.principal.roles = vec!["reader".into(); MAX_ROLES + 1];
        cases.push(("roles", r));
        let mut r = request();
        r.principal.roles = vec!["r".repeat(MAX_ROLE_BYTES + 1)];
        cases.push(("role", r));
        let mut r = request();
        r.target.key = Some("k".repeat(MAX_TARGET_BYTES + 1));
        cases.push(("key", r));
        let mut r = request();
        r.target.subject = Some("s".repeat(MAX_TARGET_BYTES + 1));
        cases.push(("subject", r));
        let mut r = request();
        r.headers = vec![("a".into(), "b".into()); 9];
        cases.push(("headers", r));
        let mut r = request();
        r.headers = vec![("Content-Type".into(), "b".into())];
        cases.push(("header name", r));
        let mut r = request();
        r.headers = vec![("a".into(), "v".repeat(MAX_HEADER_VALUE_BYTES + 1))];
        cases.push(("header value", r));
        for (what, request) in cases {
            assert!(request.check_bounds().is_err(), "{what}");
        }
    }

    #[test]
    fn a_long_deny_reason_is_cut_at_a_character_boundary() {
        let Decision::Deny(kept) = Decision::deny("é".repeat(MAX_REASON_BYTES)) else {
            panic!("a deny stays a deny");
        };
        assert!(kept.len() <= MAX_REASON_BYTES + '…'.len_utf8());
        assert!(kept.ends_with('…'));
        assert_eq!(
            Decision::deny("short".into()),
            Decision::Deny("short".into())
        );
    }

    #[test]
    fn every_action_has_a_distinct_wit_name() {
        let mut names: Vec<&str> = Action::ALL.iter().map(|a| a.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Action::ALL.len());
    }
}
