//! The policy worlds' types and the traits a plugin implements.

/// Timer-driven steps: what a step receives and returns.
pub mod steps {
    pub use crate::bindings::takedown::custodian::policy::steps::{
        Commit as WitCommit, Reschedule, StepResult, Timer,
    };
}

/// The retention world: [`RetentionRules`](retention::RetentionRules) decides what may be deleted and
/// when to look again.
pub mod retention {
    pub use crate::bindings::retention::exports::custodian::policy::retention_rules::{
        Assessment, Guest as RetentionRules, Item, Settings, Stage, Verdict,
    };
}

/// The takedown world: [`TakedownSteps`](takedown::TakedownSteps) is the preservation state machine.
pub mod takedown {
    pub use crate::bindings::takedown::exports::custodian::policy::takedown_steps::{
        Counts, Denial, Guest as TakedownSteps, Request, RequestStatus,
    };
}

/// The purge world: [`PurgeRules`](purge::PurgeRules) judges which exact versions may go.
pub mod purge {
    pub use crate::bindings::purge::exports::custodian::policy::purge_rules::{
        Candidate, Governance, Guest as PurgeRules, Mapping, Verdict,
    };
}

/// The archive world: [`ArchiveMap`](archive::ArchiveMap) chooses the next hop of a moved
/// version.
pub mod archive {
    pub use crate::bindings::archive::exports::custodian::policy::archive_map::{
        Guest as ArchiveMap, Hop, RegistryRow, VersionRef,
    };
}

/// The access world: [`AccessRules`](access::AccessRules) decides who may
/// do what on the data plane, for every API request.
pub mod access {
    pub use crate::bindings::access::exports::custodian::policy::access_rules::{
        AccessRequest, Action, Decision, Guest as AccessRules, Principal, Target,
    };
}
