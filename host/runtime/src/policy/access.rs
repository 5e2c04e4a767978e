//! The access world's driver: asks an access plugin whether a request may
//! go on. The plugin is granted nothing.
//!
//! The host asks on every API request, so calls run on warm instances: an
//! instance that answered serves later calls (about 1 µs a decision
//! instead of 6 µs or more for a fresh instance). Each call still gets its
//! own deadline and budget of host calls; an instance that trapped, hit a
//! limit or wrote to stderr is dropped, every instance is retired after
//! 1024 calls, and at most 4 are kept idle. A plugin therefore may see
//! state an earlier call left behind; `sdk/wit/access.wit` tells plugins to
//! decide from the request alone.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::bindings::policy::access::exports::custodian::policy::access_rules as wit;
use crate::bindings::policy::access::{Access, AccessPre};
use crate::host::CallState;
use crate::{CallContext, CallError, Limits, LoadError, Plugin, Services, World};
pub use custodian_core::decisions::access::{
    AccessJudge, AccessRequest, Action, Decision, Principal, Target, Unanswered,
};

use super::warm::WarmInstances;

/// A loaded access plugin, ready to be asked.
pub struct AccessPolicy {
    plugin: Arc<Plugin>,
    pre: AccessPre<CallState>,
    call: Arc<CallContext>,
    warm: WarmInstances<Access>,
    /// Decisions made without waiting that took longer than [`QUICK`];
    /// from [`SLOW_CALLS`] on, this plugin is asked only where it may take
    /// its time ([`AccessPolicy::decide_now`] answers `None`).
    slow: AtomicU32,
}

/// Slow decisions after which a plugin is no longer asked on a thread
/// that must not be held up. More than one, so that a quick plugin the
/// OS happened to preempt mid-call keeps its place; few, so that one that
/// is really slow (or spins until its time limit) holds such threads only
/// this many times.
const SLOW_CALLS: u32 = 3;

/// Longest a decision may take on a thread that must not be held up (an
/// async runtime's worker, serving other requests meanwhile) for its
/// plugin to keep being asked there. The bundled policy decides in about
/// a microsecond, but the wall clock also counts the OS preempting the
/// thread (a time slice is a few milliseconds when wrk and the server
/// share two cores) and a new instance's first page faults: at 1 ms, the
/// bundled policy was demoted within the first second of a load test.
const QUICK: Duration = Duration::from_millis(20);

impl AccessPolicy {
    /// Wraps `plugin`, which must implement the access world; its calls
    /// run with `limits` (`services` supplies only the clock and I/O
    /// runtime: nothing is granted). There is no 0.1 access world, so a
    /// 0.1 plugin never implements it.
    ///
    /// # Errors
    /// [`LoadError::WrongWorld`], or [`LoadError::Link`] if its exports do
    /// not have the access world's types.
    pub fn new(
        plugin: Arc<Plugin>,
        services: Arc<Services>,
        limits: Limits,
    ) -> Result<Self, LoadError> {
        let pre = super::link(&plugin, World::Access, AccessPre::new)?;
        let call = super::isolated_call(&plugin, services, limits);
        Ok(Self {
            plugin,
            pre,
            call,
            warm: WarmInstances::new(),
            slow: AtomicU32::new(0),
        })
    }

    /// The plugin asked.
    pub fn plugin(&self) -> &Plugin {
        &self.plugin
    }

    /// The plugin's decision on `request`. A deny's reason is kept to
    /// [`custodian_core::decisions::access::MAX_REASON_BYTES`].
    ///
    /// # Errors
    /// [`CallError::Input`] for a request outside the bounds the plugin is
    /// promised (it is not asked); otherwise the call failing (a trap, a
    /// limit, no free instance).
    pub fn decide(&self, request: &AccessRequest) -> Result<Decision, CallError> {
        request
            .check_bounds()
            .map_err(|e| CallError::Input(e.to_string()))?;
        let request = wit::AccessRequest::from(request);
        let answer = self.warm.call(
            &self.plugin,
            &self.call,
            |s| self.pre.instantiate(s),
            |i, s| i.custodian_policy_access_rules().call_decide(s, &request),
        )?;
        Ok(match answer {
            wit::Decision::Allow => Decision::Allow,
            wit::Decision::Deny(reason) => Decision::deny(reason),
        })
    }

    /// [`AccessPolicy::decide`] on the calling thread, which must not be
    /// held up: `None` when the plugin cannot be asked so (see
    /// `host/no_wait.rs`: it wanted to wait on I/O or on the host's
    /// mechanisms, and what it answered is discarded), or has taken longer
    /// than 20 ms (`QUICK`) three times (`SLOW_CALLS`). The caller then
    /// asks [`AccessPolicy::decide`] on a thread that may block. A decision
    /// is a function of the request alone (the access world's contract)
    /// and a refused wait had no effect, so asking again is safe.
    ///
    /// A plugin that spins is stopped by its time limit as anywhere else,
    /// and holds the calling thread that long at most three times: from
    /// then on it is asked elsewhere.
    pub fn decide_now(&self, request: &AccessRequest) -> Option<Result<Decision, CallError>> {
        if self.slow.load(Ordering::Relaxed) >= SLOW_CALLS {
            return None;
        }
        let started = Instant::now();
        let answer = crate::host::no_wait::without_waiting(|| self.decide(request));
        if started.elapsed() > QUICK {
            self.slow.fetch_add(1, Ordering::Relaxed);
        }
        answer
    }
}

impl AccessJudge for AccessPolicy {
    fn decide(&self, request: &AccessRequest) -> Result<Decision, Unanswered> {
        AccessPolicy::decide(self, request).map_err(|e| Unanswered(e.to_string()))
    }

    fn decide_now(&self, request: &AccessRequest) -> Option<Result<Decision, Unanswered>> {
        AccessPolicy::decide_now(self, request)
            .map(|answer| answer.map_err(|e| Unanswered(e.to_string())))
    }

    fn plugin_hash(&self) -> String {
        self.plugin.info().hash.clone()
    }
}

impl From<Action> for wit::Action {
    fn from(action: Action) -> Self {
        match action {
            Action::Read => Self::Read,
            Action::List => Self::List,
            Action::Write => Self::Write,
            Action::Delete => Self::Delete,
            Action::DeleteVersion => Self::DeleteVersion,
            Action::TakedownFile => Self::TakedownFile,
            Action::TakedownStatus => Self::TakedownStatus,
            Action::Hold => Self::Hold,
            Action::Withdraw => Self::Withdraw,
            Action::StartJob => Self::StartJob,
            Action::Inspect => Self::Inspect,
            Action::SwapPlugin => Self::SwapPlugin,
            Action::Admin => Self::Admin,
        }
    }
}

impl From<&Target> for wit::Target {
    fn from(t: &Target) -> Self {
        Self {
            store: t.store.clone(),
            repository: t.repository.clone(),
            key: t.key.clone(),
            version: t.version.clone(),
            size: t.size,
            subject: t.subject.clone(),
        }
    }
}

impl From<&AccessRequest> for wit::AccessRequest {
    fn from(r: &AccessRequest) -> Self {
        Self {
            principal: wit::Principal {
                name: r.principal.name.clone(),
                roles: r.principal.roles.clone(),
            },
            action: r.action.into(),
            target: (&r.target).into(),
            headers: r.headers.clone(),
        }
    }
}

#[cfg(test)]
mod tests;
