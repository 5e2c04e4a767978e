//! Bindings generated from `wit/`, in one place.
//!
//! The host capabilities are generated once (from the `capabilities` world)
//! and every policy world reuses them through `with`, so a `kv::Batch` is
//! the same Rust type whichever world a plugin implements.
#![allow(missing_docs, unsafe_code, clippy::all)]

/// The host capabilities: `custodian:host/*`.
pub mod host {
    wit_bindgen::generate!({
        path: "wit",
        world: "custodian:host/capabilities@0.2.0",
        additional_derives: [PartialEq, Eq],
        generate_all,
    });
}

macro_rules! policy_world {
    ($module:ident, $world:literal, $macro_name:literal, $bindings_module:literal $(, $shared:literal => $path:path)*) => {
        /// Bindings of one policy world.
        pub mod $module {
            wit_bindgen::generate!({
                path: "wit",
                world: $world,
                additional_derives: [PartialEq, Eq],
                with: {
                    "custodian:host/types@0.2.0": crate::bindings::host::custodian::host::types,
                    "custodian:host/kv@0.2.0": crate::bindings::host::custodian::host::kv,
                    "custodian:host/objects@0.2.0": crate::bindings::host::custodian::host::objects,
                    "custodian:host/checksum@0.2.0": crate::bindings::host::custodian::host::checksum,
                    "custodian:host/clock@0.2.0": crate::bindings::host::custodian::host::clock,
                    "custodian:host/audit@0.2.0": crate::bindings::host::custodian::host::audit,
                    "custodian:host/log@0.2.0": crate::bindings::host::custodian::host::log,
                    $($shared: $path,)*
                },
                generate_all,
                pub_export_macro: true,
                export_macro_name: $macro_name,
                default_bindings_module: $bindings_module,
            });
        }
    };
}

policy_world!(
    retention,
    "custodian:policy/retention@0.2.0",
    "export_retention",
    "custodian_sdk::bindings::retention"
);
policy_world!(
    takedown,
    "custodian:policy/takedown@0.2.0",
    "export_takedown",
    "custodian_sdk::bindings::takedown",
    // One `Item` type whether a policy decides retention or asks about it.
    "custodian:policy/retention-types@0.2.0" => crate::bindings::retention::custodian::policy::retention_types
);
policy_world!(
    purge,
    "custodian:policy/purge@0.2.0",
    "export_purge",
    "custodian_sdk::bindings::purge"
);
policy_world!(
    archive,
    "custodian:policy/archive@0.2.0",
    "export_archive",
    "custodian_sdk::bindings::archive"
);
policy_world!(
    access,
    "custodian:policy/access@0.2.0",
    "export_access",
    "custodian_sdk::bindings::access"
);
