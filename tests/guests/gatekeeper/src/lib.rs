//! An access-world guest for the host's tests. It lets `read` through and
//! denies everything else, unless the principal's name asks it to
//! misbehave:
//!
//! - `trap` panics;
//! - `spin` never returns;
//! - `hog` allocates until its memory limit stops it;
//! - `chatty` writes to stderr, then allows;
//! - `sleepy` sleeps for a millisecond (a WASI wait), then allows;
//! - `counter` denies with the number of calls its instance has answered
//!   (`call N`), which shows whether the host reuses instances;
//! - `long` denies with a reason of 1 MiB.

// Natively the export macro expands to nothing, so nothing uses the policy.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

use std::sync::atomic::{AtomicU32, Ordering};

use custodian_sdk::access::{AccessRequest, AccessRules, Action, Decision};

/// Calls this instance answered: guest state that outlives a call.
static CALLS: AtomicU32 = AtomicU32::new(0);

struct Gatekeeper;

impl AccessRules for Gatekeeper {
    fn decide(request: AccessRequest) -> Decision {
        let calls = CALLS.fetch_add(1, Ordering::Relaxed) + 1;
        match request.principal.name.as_str() {
            "trap" => panic!("the gatekeeper traps when asked to"),
            "spin" => loop {
                std::hint::black_box(calls);
            },
            "hog" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1; 1 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            "chatty" => {
                eprintln!("the gatekeeper was asked by chatty");
                Decision::Allow
            }
            "sleepy" => {
                std::thread::sleep(std::time::Duration::from_millis(1));
                Decision::Allow
            }
            "counter" => Decision::Deny(format!("call {calls}")),
            "long" => Decision::Deny("x".repeat(1 << 20)),
            _ if request.action == Action::Read => Decision::Allow,
            _ => Decision::Deny("the gatekeeper lets only reads through".into()),
        }
    }
}

custodian_sdk::export_access!(Gatekeeper);
