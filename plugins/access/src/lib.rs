//! The bundled access policy: role-based scopes.
//!
//! The host asks it about every API request with the authenticated
//! principal, the action and the target. A principal's roles are strings
//! the deployer gives it; this policy reads them as follows, and a request
//! is allowed when at least one role grants it.
//!
//! # Roles
//!
//! | role | grants |
//! | --- | --- |
//! | `admin` | every action, on every target |
//! | `operator` | `takedown-file`, `takedown-status`, `hold`, `withdraw`, `start-job`, `inspect`; `read` and `list` everywhere |
//! | `auditor` | `inspect`, `takedown-status` |
//! | `reader` | `read`, `list` everywhere |
//! | `reader:store/NAME` | `read`, `list` on the object store `NAME` |
//! | `reader:repo/NS/NAME` | `read`, `list` on the repository `NS/NAME` |
//! | `writer` | `read`, `list`, `write`, `delete`, `delete-version` everywhere |
//! | `writer:store/NAME` | the same, on the object store `NAME` |
//! | `writer:repo/NS/NAME` | the same, on the repository `NS/NAME` |
//!
//! `swap-plugin` and `admin` (managing principals) need `admin`: replacing
//! this very policy is the widest power there is.
//!
//! # Scopes
//!
//! - A store scope matches a request whose target store is exactly `NAME`;
//!   a repository scope one whose target repository is exactly `NS/NAME`.
//!   There is no prefix or wildcard matching: `reader:repo/ns/app` does not
//!   cover `ns/app2`, and `reader:store/serving` covers no repository.
//! - A request whose target has neither a store nor a repository (listing
//!   every store, say) is granted only by unscoped roles.
//! - Scoped roles grant data actions only; `operator`, `auditor` and
//!   `admin` take no scope.
//!
//! # Spelling
//!
//! Roles are matched exactly: case, whitespace and every separator count.
//! A role this grammar does not describe (`Admin`, `superuser`,
//! `reader:store/`, `reader:bucket/x`, `reader:repo/ns`, `admin:store/x`)
//! grants nothing; a deny names the first such role, so a typo is easy to
//! find. A principal with no roles may do nothing.
//!
//! # Denials
//!
//! A deny says who could not do what, and which roles would have allowed
//! it: `principal "bob" may not write to store "preserved": needs writer of
//! that store, or admin`.
//!
//! The request's headers do not enter the decision.

use custodian_sdk::access::{AccessRequest, AccessRules, Action, Decision, Target};

/// The policy; stateless, as the host may call it on any instance.
pub struct Policy;

/// Where a scoped role applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope<'a> {
    /// Every target.
    Everything,
    /// One object store, by name.
    Store(&'a str),
    /// One repository, `namespace/name`.
    Repository(&'a str),
}

impl Scope<'_> {
    fn covers(self, target: &Target) -> bool {
        match self {
            Scope::Everything => true,
            Scope::Store(name) => target.store.as_deref() == Some(name),
            Scope::Repository(name) => target.repository.as_deref() == Some(name),
        }
    }
}

/// A role this policy understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role<'a> {
    Admin,
    Operator,
    Auditor,
    Reader(Scope<'a>),
    Writer(Scope<'a>),
}

/// A segment of a scope: not empty and without `/`.
fn segment(text: &str) -> Option<&str> {
    (!text.is_empty() && !text.contains('/')).then_some(text)
}

/// `store/NAME` or `repo/NS/NAME`.
fn scope(text: &str) -> Option<Scope<'_>> {
    if let Some(name) = text.strip_prefix("store/") {
        return segment(name).map(Scope::Store);
    }
    let repository = text.strip_prefix("repo/")?;
    let (namespace, name) = repository.split_once('/')?;
    segment(namespace)?;
    segment(name)?;
    Some(Scope::Repository(repository))
}

fn parse(role: &str) -> Option<Role<'_>> {
    match role {
        "admin" => return Some(Role::Admin),
        "operator" => return Some(Role::Operator),
        "auditor" => return Some(Role::Auditor),
        "reader" => return Some(Role::Reader(Scope::Everything)),
        "writer" => return Some(Role::Writer(Scope::Everything)),
        _ => {}
    }
    let (kind, rest) = role.split_once(':')?;
    let scope = scope(rest)?;
    match kind {
        "reader" => Some(Role::Reader(scope)),
        "writer" => Some(Role::Writer(scope)),
        _ => None,
    }
}

fn reads(action: Action) -> bool {
    matches!(action, Action::Read | Action::List)
}

fn writes(action: Action) -> bool {
    matches!(
        action,
        Action::Write | Action::Delete | Action::DeleteVersion
    )
}

fn grants(role: Role<'_>, action: Action, target: &Target) -> bool {
    match role {
        Role::Admin => true,
        Role::Operator => {
            reads(action)
                || matches!(
                    action,
                    Action::TakedownFile
                        | Action::TakedownStatus
                        | Action::Hold
                        | Action::Withdraw
                        | Action::StartJob
                        | Action::Inspect
                )
        }
        Role::Auditor => matches!(action, Action::Inspect | Action::TakedownStatus),
        Role::Reader(scope) => reads(action) && scope.covers(target),
        Role::Writer(scope) => (reads(action) || writes(action)) && scope.covers(target),
    }
}

/// "may not VERB", with the preposition the target follows.
fn verb(action: Action) -> &'static str {
    match action {
        Action::Read => "read from",
        Action::List => "list",
        Action::Write => "write to",
        Action::Delete => "delete from",
        Action::DeleteVersion => "delete versions from",
        Action::TakedownFile => "file a takedown",
        Action::TakedownStatus => "read a takedown's status",
        Action::Hold => "set a legal hold",
        Action::Withdraw => "withdraw a takedown",
        Action::StartJob => "start a job",
        Action::Inspect => "inspect the host",
        Action::SwapPlugin => "swap a plugin",
        Action::Admin => "manage principals",
    }
}

/// The target as a deny names it after [`verb`]: ` store "NAME"`,
/// ` repository "NS/NAME"`, both, or nothing; joined by ` against` or
/// ` on` after the verbs that take no preposition of their own.
fn place(action: Action, target: &Target) -> String {
    let store = target.store.as_ref().map(|s| format!(" store {s:?}"));
    let repository = target
        .repository
        .as_ref()
        .map(|r| format!(" repository {r:?}"));
    let place = match (store, repository) {
        (Some(store), Some(repository)) => format!("{store} and{repository}"),
        (Some(one), None) | (None, Some(one)) => one,
        (None, None) => return String::new(),
    };
    match action {
        _ if reads(action) || writes(action) => place,
        Action::TakedownFile => format!(" against{place}"),
        _ => format!(" on{place}"),
    }
}

/// The roles that would have granted `action` on `target`.
fn needs(action: Action, target: &Target) -> String {
    let of = match (&target.store, &target.repository) {
        (Some(_), Some(_)) => " of that store or repository",
        (Some(_), None) => " of that store",
        (None, Some(_)) => " of that repository",
        (None, None) => "",
    };
    match action {
        Action::Read | Action::List => format!("reader or writer{of}, operator or admin"),
        Action::Write | Action::Delete | Action::DeleteVersion => {
            format!("writer{of}, or admin")
        }
        Action::TakedownFile | Action::Hold | Action::Withdraw | Action::StartJob => {
            "operator or admin".to_owned()
        }
        Action::TakedownStatus | Action::Inspect => "operator, auditor or admin".to_owned(),
        Action::SwapPlugin | Action::Admin => "admin".to_owned(),
    }
}

fn denial(request: &AccessRequest) -> String {
    let principal = &request.principal;
    let mut reason = format!(
        "principal {:?} may not {}{}: needs {}",
        principal.name,
        verb(request.action),
        place(request.action, &request.target),
        needs(request.action, &request.target)
    );
    if principal.roles.is_empty() {
        reason.push_str("; it has no roles");
    } else if let Some(unknown) = principal.roles.iter().find(|r| parse(r).is_none()) {
        reason.push_str(&format!(
            "; its role {unknown:?} is unknown and grants nothing"
        ));
    }
    reason
}

impl AccessRules for Policy {
    fn decide(request: AccessRequest) -> Decision {
        let granted = request
            .principal
            .roles
            .iter()
            .filter_map(|role| parse(role))
            .any(|role| grants(role, request.action, &request.target));
        if granted {
            Decision::Allow
        } else {
            Decision::Deny(denial(&request))
        }
    }
}

custodian_sdk::export_access!(Policy);

// Allocation in wasm: a call's small allocations are cut from one region
// that starts over once the call has freed them all; the policy keeps
// nothing on the heap between calls (see `custodian_sdk::arena`).
custodian_sdk::use_call_arena!();

#[cfg(test)]
mod tests {
    use super::{Role, Scope, parse};

    #[test]
    fn every_role_of_the_grammar_parses_and_nothing_near_it_does() {
        assert_eq!(parse("admin"), Some(Role::Admin));
        assert_eq!(
            parse("reader:store/serving"),
            Some(Role::Reader(Scope::Store("serving")))
        );
        assert_eq!(
            parse("writer:repo/ns/app"),
            Some(Role::Writer(Scope::Repository("ns/app")))
        );
        for unknown in [
            "",
            "Admin",
            " admin",
            "admin ",
            "superuser",
            "reader:",
            "reader:store",
            "reader:store/",
            "reader:store/a/b",
            "reader:bucket/serving",
            "reader:repo/ns",
            "reader:repo/ns/",
            "reader:repo//app",
            "writer:repo/ns/app/x",
            "admin:store/serving",
            "operator:store/serving",
            "auditor:repo/ns/app",
        ] {
            assert_eq!(parse(unknown), None, "{unknown:?}");
        }
    }
}
