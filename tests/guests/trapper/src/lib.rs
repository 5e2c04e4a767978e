//! A takedown-world guest that loads and links like any other but panics
//! on every call: what a plugin with a bug on its first code path looks
//! like. A host must refuse to swap it in at its smoke call.

// Natively the export macro expands to nothing, so nothing uses the policy.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

use custodian_sdk::Error;
use custodian_sdk::steps::{StepResult, Timer, WitCommit};
use custodian_sdk::takedown::{Request, RequestStatus, TakedownSteps};

struct Trapper;

impl TakedownSteps for Trapper {
    fn step(_timer: Timer) -> Result<StepResult, Error> {
        panic!("trapper traps on step")
    }

    fn plan_create(_request: Request, _now_ms: u64) -> Result<WitCommit, Error> {
        panic!("trapper traps on plan-create")
    }

    fn plan_hold(_request: Vec<u8>, _enabled: bool, _now_ms: u64) -> Result<WitCommit, Error> {
        panic!("trapper traps on plan-hold")
    }

    fn plan_denial(_request: Vec<u8>, _now_ms: u64) -> Result<Option<WitCommit>, Error> {
        panic!("trapper traps on plan-denial")
    }

    fn plan_withdraw(_request: Vec<u8>, _now_ms: u64) -> Result<WitCommit, Error> {
        panic!("trapper traps on plan-withdraw")
    }

    fn status(_request: Vec<u8>) -> Result<RequestStatus, Error> {
        panic!("trapper traps on status")
    }
}

custodian_sdk::export_takedown!(Trapper);
