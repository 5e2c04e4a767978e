//! An access policy: a principal with the `admin` role may do anything;
//! any other may read and list. Edit the rules, then run `custodian plugin
//! test` on the build with `cases.json` (add a case for each rule you add).

use custodian_sdk::access::{AccessRequest, AccessRules, Action, Decision};

/// The policy; asked on every API request, so keep it quick.
pub struct Policy;

impl AccessRules for Policy {
    fn decide(request: AccessRequest) -> Decision {
        let admin = request.principal.roles.iter().any(|role| role == "admin");
        if admin || matches!(request.action, Action::Read | Action::List) {
            Decision::Allow
        } else {
            Decision::Deny(format!("{} may only read", request.principal.name))
        }
    }
}

custodian_sdk::export_access!(Policy);

// Allocation in wasm: a call's small allocations are cut from one region
// that starts over once the call has freed them all. Keep it while the
// policy keeps nothing on the heap between calls; with a cache in a
// `static` it is merely no faster (see `custodian_sdk::arena`).
custodian_sdk::use_call_arena!();
