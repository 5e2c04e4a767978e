//! The retention table (`plugins/retention/cases.json`) through the built
//! `.wasm`. `plugins/retention/tests/cases.rs` runs the same table natively;
//! both must give exactly each case's `expect`.

use std::sync::Arc;

use custodian::policy::retention::{Item, RetentionPolicy, Settings, Stage, Verdict};
use custodian::runtime::{Grants, Limits};
use serde_json::Value;

use crate::support::{self, World, runtime};

fn cases() -> Vec<Value> {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/retention/cases.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn every_case_of_the_table_gives_its_expected_result_through_the_wasm() {
    let world = World::new();
    let runtime = runtime();
    let plugin = runtime.load_file(support::retention()).unwrap();
    let cases = cases();
    assert!(cases.len() >= 15, "the table lost its cases");
    for case in cases {
        let function = plugin
            .function("retention", case["function"].as_str().unwrap())
            .unwrap();
        let got = function
            .call_json(
                world.call(Grants::none(), Limits::default()),
                &case["input"],
            )
            .unwrap();
        assert_eq!(got, case["expect"], "case {}", case["name"]);
    }
}

#[test]
fn the_typed_driver_gets_the_same_decisions_as_the_table() {
    let world = World::new();
    let runtime = runtime();
    let policy =
        RetentionPolicy::new(Arc::new(runtime.load_file(support::retention()).unwrap())).unwrap();
    let settings = Settings {
        retention_ms: 86_400_000,
        noncurrent_retention_ms: 3_600_000,
    };
    let item = Item {
        created_ms: 1_700_000_000_000,
        noncurrent_since_ms: None,
        hold: true,
        stage: Stage::Retaining,
    };
    let call = || world.call(Grants::none(), Limits::default());
    let assessment = policy
        .assess(call(), settings, item, 1_700_086_405_000)
        .unwrap()
        .unwrap();
    assert_eq!(assessment.retain_until_ms, 1_700_086_400_000);
    assert_eq!(
        assessment.may_delete,
        Verdict::Deny("a legal hold is set".into())
    );
    assert_eq!(assessment.next_check_ms, 1_700_086_405_000 + 3_600_000);
    let purging = Item {
        hold: false,
        stage: Stage::Purging,
        ..item
    };
    let refused = policy.set_hold(call(), purging, true).unwrap();
    assert!(
        matches!(
            refused,
            Err(custodian::policy::PolicyError::PreconditionFailed(_))
        ),
        "{refused:?}"
    );
}
