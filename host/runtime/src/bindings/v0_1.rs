//! The second generation of bindings: the 0.1 contract, generated from the
//! frozen copy in `host/runtime/wit-0.1`, so that plugins built against
//! `custodian:host@0.1.x` and `custodian:policy@0.1.x` keep loading.
//!
//! Why two generations: 0.2 added two cases to the WIT `error` variant
//! (`unsupported`, `other`). Before 1.0 a minor version is a breaking one,
//! and this change is breaking in fact: wasmtime type-checks a host
//! function against the import type the guest was built with, and a 9-case
//! variant does not match an 11-case one (nor could an old guest lift a
//! case it does not know). So a 0.1 plugin must be linked against host
//! interfaces named `@0.1.0` whose `error` has the 0.1 cases.
//!
//! Everything else in the two contracts is the same shape, so the 0.1
//! generation adds no behaviour of its own:
//! - the host interfaces (`crate::host::v0_1`) delegate to the 0.2
//!   implementation, converting arguments and results with [`Convert`] and
//!   errors with `crate::host::error_v0_1` (the one down-conversion:
//!   `unsupported` becomes `invalid-argument` prefixed `unsupported: `,
//!   `other` becomes `unavailable`);
//! - the policy types shared by several worlds (`retention-types`,
//!   `steps`) are not generated again: `with` maps them to the 0.2 types,
//!   which wasmtime type-checks structurally against the 0.1 plugin's;
//! - the policy drivers (`crate::policy`) call a 0.1 plugin's exports and
//!   convert its answers to the 0.2 types, so each driver's logic exists
//!   once.
//!
//! When to drop it: once no deployed plugin is built against 0.1 (e.g.
//! when 1.0 freezes the contract, or a release after every bundled and
//! known third-party plugin has been rebuilt against 0.2). Dropping it is
//! deleting this module, `host/runtime/wit-0.1`, `crate::host::v0_1`, the
//! `V0_1` arms of the drivers and `(0, 1)` from
//! `custodian_contract::version::COMPATIBLE_SERIES`.

pub(crate) mod host {
    wasmtime::component::bindgen!({
        path: "wit-0.1",
        world: "custodian:host/capabilities@0.1.0",
        imports: { default: trappable },
        // The same `HostError` as the 0.2 interfaces return: the 0.2
        // implementation's errors, converted to the 0.1 `error` by the
        // 0.1 `types::Host::convert_error`.
        trappable_error_type: {
            "custodian:host/types.error" => crate::bindings::HostError,
        },
    });
}

/// The policy worlds' export bindings at 0.1.
pub(crate) mod policy {
    pub(crate) mod retention {
        wasmtime::component::bindgen!({
            path: "wit-0.1",
            world: "custodian:policy/retention@0.1.0",
            with: {
                "custodian:host": crate::bindings::v0_1::host::custodian::host,
                "custodian:policy/retention-types@0.1.0":
                    crate::bindings::policy::retention::custodian::policy::retention_types,
            },
        });
    }
    pub(crate) mod archive {
        wasmtime::component::bindgen!({
            path: "wit-0.1",
            world: "custodian:policy/archive@0.1.0",
            with: { "custodian:host": crate::bindings::v0_1::host::custodian::host },
        });
    }
    pub(crate) mod purge {
        wasmtime::component::bindgen!({
            path: "wit-0.1",
            world: "custodian:policy/purge@0.1.0",
            with: { "custodian:host": crate::bindings::v0_1::host::custodian::host },
        });
    }
    pub(crate) mod takedown {
        wasmtime::component::bindgen!({
            path: "wit-0.1",
            world: "custodian:policy/takedown@0.1.0",
            imports: { default: trappable },
            trappable_error_type: {
                "custodian:host/types.error" => crate::bindings::HostError,
            },
            with: {
                "custodian:host": crate::bindings::v0_1::host::custodian::host,
                "custodian:policy/retention-types@0.1.0":
                    crate::bindings::policy::retention::custodian::policy::retention_types,
                "custodian:policy/steps@0.1.0":
                    crate::bindings::policy::takedown::custodian::policy::steps,
            },
        });
    }
}

/// A value of one generation as the same value of the other: the 0.1 and
/// 0.2 types are distinct Rust types of the same shape.
pub(crate) trait Convert<T> {
    fn convert(self) -> T;
}

macro_rules! unchanged {
    ($($ty:ty),*) => {
        $(impl Convert<$ty> for $ty {
            fn convert(self) -> $ty {
                self
            }
        })*
    };
}
unchanged!((), bool, u8, u32, u64, String);
// The policy types both generations share (`with`).
unchanged!(
    crate::bindings::policy::retention::custodian::policy::retention_types::Item,
    crate::bindings::policy::retention::custodian::policy::retention_types::Assessment,
    crate::bindings::policy::takedown::custodian::policy::steps::Commit,
    crate::bindings::policy::takedown::custodian::policy::steps::StepResult
);

impl<A: Convert<B>, B> Convert<Vec<B>> for Vec<A> {
    fn convert(self) -> Vec<B> {
        self.into_iter().map(Convert::convert).collect()
    }
}

impl<A: Convert<B>, B> Convert<Option<B>> for Option<A> {
    fn convert(self) -> Option<B> {
        self.map(Convert::convert)
    }
}

impl<A: Convert<C>, B: Convert<D>, C, D> Convert<(C, D)> for (A, B) {
    fn convert(self) -> (C, D) {
        (self.0.convert(), self.1.convert())
    }
}

impl<A: Convert<C>, B: Convert<D>, C, D> Convert<Result<C, D>> for Result<A, B> {
    fn convert(self) -> Result<C, D> {
        self.map(Convert::convert).map_err(Convert::convert)
    }
}

/// A 0.1 plugin's error answer is one of the 0.2 cases.
impl Convert<super::host::custodian::host::types::Error> for host::custodian::host::types::Error {
    fn convert(self) -> super::host::custodian::host::types::Error {
        use super::host::custodian::host::types::Error as New;
        match self {
            Self::NotFound(m) => New::NotFound(m),
            Self::PreconditionFailed(m) => New::PreconditionFailed(m),
            Self::Conflict(m) => New::Conflict(m),
            Self::ChecksumMismatch(m) => New::ChecksumMismatch(m),
            Self::Corrupt(m) => New::Corrupt(m),
            Self::Unavailable(m) => New::Unavailable(m),
            Self::BudgetExhausted(m) => New::BudgetExhausted(m),
            Self::AccessDenied(m) => New::AccessDenied(m),
            Self::InvalidArgument(m) => New::InvalidArgument(m),
        }
    }
}

/// [`Convert`] both ways between `old::$ty` and `new::$ty`, records with
/// the same fields.
macro_rules! same_record {
    ($ty:ident { $($field:ident),* $(,)? }) => {
        impl Convert<new::$ty> for old::$ty {
            fn convert(self) -> new::$ty {
                new::$ty { $($field: self.$field.convert()),* }
            }
        }
        impl Convert<old::$ty> for new::$ty {
            fn convert(self) -> old::$ty {
                old::$ty { $($field: self.$field.convert()),* }
            }
        }
    };
}

/// [`Convert`] both ways between `old::$ty` and `new::$ty`, variants (or
/// enums) with the same cases.
macro_rules! same_variant {
    ($ty:ident { $($case:ident $(($payload:ident))?),* $(,)? }) => {
        impl Convert<new::$ty> for old::$ty {
            fn convert(self) -> new::$ty {
                match self {
                    $(old::$ty::$case $(($payload))? => new::$ty::$case $(($payload.convert()))?),*
                }
            }
        }
        impl Convert<old::$ty> for new::$ty {
            fn convert(self) -> old::$ty {
                match self {
                    $(new::$ty::$case $(($payload))? => old::$ty::$case $(($payload.convert()))?),*
                }
            }
        }
    };
}

mod kv {
    use super::Convert;
    use super::host::custodian::host::kv as old;
    use crate::bindings::host::custodian::host::kv as new;

    same_record!(KeyRef { partition, key });
    same_record!(Entry {
        partition,
        key,
        value
    });
    same_variant!(Precondition { Absent(x), Equals(x), NotAfter(x) });
    same_variant!(Write { Put(x), Delete(x) });
    same_record!(Batch {
        preconditions,
        writes
    });
    same_variant!(Outcome { Committed, PreconditionFailed(x), DeadlinePassed });
    same_record!(Page { entries, next });
}

mod objects {
    use super::Convert;
    use super::host::custodian::host::objects as old;
    use crate::bindings::host::custodian::host::objects as new;

    same_variant!(PutCondition { IfMatch(x), IfNoneMatchAny, Unconditional });
    same_record!(ObjectMeta {
        key,
        version_id,
        etag,
        size,
        crc64,
        last_modified_ms,
        metadata
    });
    same_record!(ListedObject {
        key,
        size,
        etag,
        last_modified_ms
    });
    same_record!(ObjectPage { objects, next });
    same_record!(ListedVersion {
        key,
        version_id,
        etag,
        size,
        is_current,
        is_delete_marker,
        last_modified_ms,
    });
    same_record!(VersionPage { versions, next });
}

mod audit {
    use super::Convert;
    use super::host::custodian::host::audit as old;
    use crate::bindings::host::custodian::host::audit as new;

    same_record!(Entry {
        event,
        targets,
        detail
    });
}

mod log {
    use super::Convert;
    use super::host::custodian::host::log as old;
    use crate::bindings::host::custodian::host::log as new;

    same_variant!(Level {
        Trace,
        Debug,
        Info,
        Warn,
        Error
    });
}

mod archive {
    use super::Convert;
    use super::policy::archive::exports::custodian::policy::archive_map as old;
    use crate::bindings::policy::archive::exports::custodian::policy::archive_map as new;

    same_record!(VersionRef { key, version_id });
    same_record!(RegistryRow {
        source,
        source_etag,
        destination,
        destination_etag,
        size
    });
    same_variant!(Hop { Follow(x), Missing(x) });
}

mod purge {
    use super::Convert;
    use super::policy::purge::exports::custodian::policy::purge_rules as old;
    use crate::bindings::policy::purge::exports::custodian::policy::purge_rules as new;

    same_record!(Candidate {
        key,
        version_id,
        etag,
        size,
        is_delete_marker,
        last_modified_ms
    });
    same_record!(Mapping {
        source_key,
        source_version_id,
        source_etag,
        destination_key,
        destination_version_id,
        destination_etag,
        size,
    });
    same_variant!(Governance { Unarchived, Mapped(x), Unmapped(x) });
    same_variant!(Verdict { Delete, Retain(x) });
}

mod takedown {
    use super::Convert;
    use super::policy::takedown::exports::custodian::policy::takedown_steps as old;
    use crate::bindings::policy::takedown::exports::custodian::policy::takedown_steps as new;

    same_record!(Request {
        id,
        repository,
        created_ms,
        objects,
        pack
    });
    same_record!(Counts {
        objects,
        verified,
        corrupt,
        pieces,
        bytes,
        holders,
        purged_pieces
    });
}
