//! The retention table run natively. `tests/` at the workspace root runs
//! the same `cases.json` through the built `.wasm`; both must give exactly
//! the `expect` of every case.

use custodian_plugin_retention::Policy;
use custodian_sdk::Error;
use custodian_sdk::retention::{Assessment, Item, RetentionRules, Settings, Stage, Verdict};
use serde_json::{Value, json};

fn u64_field(value: &Value, name: &str) -> u64 {
    value[name]
        .as_u64()
        .unwrap_or_else(|| panic!("{name} is not a u64 in {value}"))
}

fn settings(value: &Value) -> Settings {
    Settings {
        retention_ms: u64_field(value, "retention-ms"),
        noncurrent_retention_ms: u64_field(value, "noncurrent-retention-ms"),
    }
}

fn stage(name: &str) -> Stage {
    match name {
        "active" => Stage::Active,
        "retaining" => Stage::Retaining,
        "purging" => Stage::Purging,
        "purged" => Stage::Purged,
        other => panic!("unknown stage {other}"),
    }
}

fn stage_name(stage: Stage) -> &'static str {
    match stage {
        Stage::Active => "active",
        Stage::Retaining => "retaining",
        Stage::Purging => "purging",
        Stage::Purged => "purged",
    }
}

fn item(value: &Value) -> Item {
    Item {
        created_ms: u64_field(value, "created-ms"),
        noncurrent_since_ms: value["noncurrent-since-ms"].as_u64(),
        hold: value["hold"].as_bool().expect("hold is a bool"),
        stage: stage(value["stage"].as_str().expect("stage is a string")),
    }
}

fn item_json(item: &Item) -> Value {
    json!({
        "created-ms": item.created_ms,
        "noncurrent-since-ms": item.noncurrent_since_ms,
        "hold": item.hold,
        "stage": stage_name(item.stage),
    })
}

fn verdict_json(verdict: &Verdict) -> Value {
    match verdict {
        Verdict::Allow => json!("allow"),
        Verdict::Deny(reason) => json!({ "deny": reason }),
    }
}

fn assessment_json(a: &Assessment) -> Value {
    json!({
        "retain-until-ms": a.retain_until_ms,
        "may-delete": verdict_json(&a.may_delete),
        "may-purge": verdict_json(&a.may_purge),
        "next-check-ms": a.next_check_ms,
    })
}

fn error_json(error: &Error) -> Value {
    let (case, message) = match error {
        Error::NotFound(m) => ("not-found", m),
        Error::PreconditionFailed(m) => ("precondition-failed", m),
        Error::Conflict(m) => ("conflict", m),
        Error::ChecksumMismatch(m) => ("checksum-mismatch", m),
        Error::Corrupt(m) => ("corrupt", m),
        Error::Unavailable(m) => ("unavailable", m),
        Error::BudgetExhausted(m) => ("budget-exhausted", m),
        Error::AccessDenied(m) => ("access-denied", m),
        Error::InvalidArgument(m) => ("invalid-argument", m),
        Error::Unsupported(m) => ("unsupported", m),
        Error::Other(m) => ("other", m),
    };
    json!({ case: message })
}

fn outcome<T>(result: Result<T, Error>, ok: impl Fn(&T) -> Value) -> Value {
    match result {
        Ok(value) => json!({ "ok": ok(&value) }),
        Err(error) => json!({ "err": error_json(&error) }),
    }
}

#[test]
fn every_case_of_the_table_gives_its_expected_result_natively() {
    let cases: Vec<Value> =
        serde_json::from_str(include_str!("../cases.json")).expect("cases.json parses");
    assert!(cases.len() >= 15, "the table lost its cases");
    for case in cases {
        let input = &case["input"];
        let got = match case["function"].as_str() {
            Some("assess") => outcome(
                Policy::assess(
                    settings(&input["settings"]),
                    item(&input["item"]),
                    u64_field(input, "now-ms"),
                ),
                assessment_json,
            ),
            Some("set-hold") => outcome(
                Policy::set_hold(item(&input["item"]), input["enabled"].as_bool().unwrap()),
                item_json,
            ),
            other => panic!("unknown function {other:?}"),
        };
        assert_eq!(got, case["expect"], "case {}", case["name"]);
    }
}
