//! The access table run natively. The runtime's tests run the same
//! `cases.json` through the built `.wasm`; both must give exactly the
//! `expect` of every case.

use custodian_plugin_access::Policy;
use custodian_sdk::access::{AccessRequest, AccessRules, Action, Decision, Principal, Target};
use serde_json::{Value, json};

fn action(name: &str) -> Action {
    match name {
        "read" => Action::Read,
        "list" => Action::List,
        "write" => Action::Write,
        "delete" => Action::Delete,
        "delete-version" => Action::DeleteVersion,
        "takedown-file" => Action::TakedownFile,
        "takedown-status" => Action::TakedownStatus,
        "hold" => Action::Hold,
        "withdraw" => Action::Withdraw,
        "start-job" => Action::StartJob,
        "inspect" => Action::Inspect,
        "swap-plugin" => Action::SwapPlugin,
        "admin" => Action::Admin,
        other => panic!("unknown action {other}"),
    }
}

fn text(value: &Value) -> Option<String> {
    value.as_str().map(str::to_owned)
}

fn request(input: &Value) -> AccessRequest {
    let principal = &input["principal"];
    let target = &input["target"];
    AccessRequest {
        principal: Principal {
            name: text(&principal["name"]).expect("a name"),
            roles: principal["roles"]
                .as_array()
                .expect("roles")
                .iter()
                .map(|r| text(r).expect("a role is a string"))
                .collect(),
        },
        action: action(input["action"].as_str().expect("an action")),
        target: Target {
            store: text(&target["store"]),
            repository: text(&target["repository"]),
            key: text(&target["key"]),
            version: text(&target["version"]),
            size: target["size"].as_u64(),
            subject: text(&target["subject"]),
        },
        headers: input["headers"]
            .as_array()
            .expect("headers")
            .iter()
            .map(|h| (text(&h[0]).expect("a name"), text(&h[1]).expect("a value")))
            .collect(),
    }
}

fn decision_json(decision: &Decision) -> Value {
    match decision {
        Decision::Allow => json!("allow"),
        Decision::Deny(reason) => json!({ "deny": reason }),
    }
}

fn cases() -> Vec<Value> {
    serde_json::from_str(include_str!("../cases.json")).expect("cases.json parses")
}

#[test]
fn every_case_of_the_table_gives_its_expected_result_natively() {
    let cases = cases();
    assert!(cases.len() >= 150, "the table lost its cases");
    for case in cases {
        let got = decision_json(&Policy::decide(request(&case["input"]["request"])));
        assert_eq!(got, case["expect"], "case {}", case["name"]);
    }
}

#[test]
fn the_table_asks_every_role_about_every_action() {
    let asked: Vec<(String, String)> = cases()
        .iter()
        .filter_map(|case| {
            let input = &case["input"]["request"];
            match input["principal"]["roles"].as_array()?.as_slice() {
                [role] => Some((text(role)?, text(&input["action"])?)),
                [] => Some((String::new(), text(&input["action"])?)),
                _ => None,
            }
        })
        .collect();
    let roles = [
        "",
        "admin",
        "operator",
        "auditor",
        "reader",
        "writer",
        "reader:store/serving",
        "writer:store/serving",
        "reader:repo/ns/app",
        "writer:repo/ns/app",
    ];
    let actions = [
        "read",
        "list",
        "write",
        "delete",
        "delete-version",
        "takedown-file",
        "takedown-status",
        "hold",
        "withdraw",
        "start-job",
        "inspect",
        "swap-plugin",
        "admin",
    ];
    for role in roles {
        for action in actions {
            assert!(
                asked.iter().any(|(r, a)| r == role && a == action),
                "no case asks {role:?} about {action}"
            );
        }
    }
}

#[test]
fn only_admin_may_swap_a_plugin_or_manage_principals() {
    for action in [Action::SwapPlugin, Action::Admin] {
        for role in ["operator", "auditor", "reader", "writer", "writer:store/x"] {
            let decision = Policy::decide(AccessRequest {
                principal: Principal {
                    name: "bob".into(),
                    roles: vec![role.into()],
                },
                action,
                target: Target {
                    store: Some("x".into()),
                    repository: None,
                    key: None,
                    version: None,
                    size: None,
                    subject: Some("access".into()),
                },
                headers: Vec::new(),
            });
            assert!(matches!(decision, Decision::Deny(_)), "{role}");
        }
    }
}
