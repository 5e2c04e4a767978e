//! The access vocabulary: who asks to do what to which target, and the
//! access policy's answer. The server builds an [`AccessRequest`] for
//! every API request from the authenticated principal and the route; the
//! runtime asks the loaded access plugin through [`AccessJudge`]. A
//! judge that cannot answer denies: access fails closed.

/// Most roles one principal carries, and most bytes of one role: bounds
/// what every request copies into the access plugin.
pub const MAX_ROLES: usize = 32;
/// Longest role, in bytes.
pub const MAX_ROLE_BYTES: usize = 128;
/// Most headers passed to the access plugin with one request.
pub const MAX_HEADERS: usize = 8;

/// Who is asking: an authenticated principal.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Principal {
    /// The principal's name (a [`custodian_contract::name`]).
    pub name: String,
    /// Its roles, as the deployer wrote them (`admin`, `reader:store/NAME`,
    /// …); only the access policy gives them meaning.
    pub roles: Vec<String>,
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
    /// Set or clear a takedown request's legal hold.
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

/// Why the access policy gave no answer: the request is then denied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the access plugin did not answer: {0}")]
pub struct Unanswered(pub String);

/// Asks the deployer's access policy.
pub trait AccessJudge: Send + Sync {
    /// The access policy's decision on `request`. Blocks while the plugin
    /// runs: async callers call it on a blocking thread.
    ///
    /// # Errors
    /// [`Unanswered`] when the plugin trapped, ran past a limit or could
    /// not be called: the caller denies (fail closed).
    fn decide(&self, request: &AccessRequest) -> Result<Decision, Unanswered>;

    /// The hash of the plugin that decides, for the decision log.
    fn plugin_hash(&self) -> String;
}
