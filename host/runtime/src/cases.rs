//! Table tests for any plugin: a file of calls, each with the answer it
//! must give, in the JSON form of generic calls (`custodian run`; see the
//! table in `json.rs`). `custodian plugin test` runs such a file against a
//! built component, whatever language it was written in, and reports each
//! case's differences.
//!
//! A file is a JSON array of cases:
//!
//! ```json
//! [{"name": "a fresh item is retained", "function": "assess",
//!   "input": {"settings": {..}, "item": {..}, "now-ms": 1700000001000},
//!   "expect": {"ok": {..}}}]
//! ```
//!
//! `name` and `expect` are required; `function` may be left out when the
//! world exports one function; `input` defaults to `{}` (no parameters).
//! Names are unique, so a report names each case unambiguously.

use std::collections::HashSet;

use serde_json::{Map, Value};

/// Most cases one file may hold. Each runs in a fresh instance with its
/// own in-memory state: a bound keeps a mistaken (or hostile) file from
/// running for hours, and a real table is far smaller (the bundled access
/// table has 181).
pub const MAX_CASES: usize = 100_000;

/// One call and the answer it must give.
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    /// Unique within its file.
    pub name: String,
    /// The function, as the WIT spells it; `None` when the file leaves it
    /// to the world's only function.
    pub function: Option<String>,
    /// The parameters, keyed by name as the WIT spells them.
    pub input: Value,
    /// The answer, in the JSON form of the function's result.
    pub expect: Value,
}

/// Why a cases file cannot be run.
#[derive(Debug, thiserror::Error)]
pub enum CasesError {
    /// Not JSON at all.
    #[error("the cases are not JSON")]
    Json(#[source] serde_json::Error),
    /// JSON, but not an array of cases.
    #[error("the cases must be a JSON array of objects with \"name\" and \"expect\"")]
    NotAnArray,
    /// An array with nothing in it: a table that tests nothing.
    #[error("the file holds no cases")]
    Empty,
    /// More than [`MAX_CASES`].
    #[error("the file holds {0} cases; at most {MAX_CASES} are run")]
    TooMany(usize),
    /// One case is malformed.
    #[error("case {index} ({name}): {problem}")]
    Case {
        /// Its position in the array, from 0.
        index: usize,
        /// Its name, or `unnamed`.
        name: String,
        /// What is wrong with it.
        problem: String,
    },
}

/// Parses a cases file.
///
/// # Errors
/// [`CasesError`] naming the first problem: a file that is not an array of
/// cases, an empty one, a case without a name or an `expect`, a field of
/// the wrong type, an unknown field (a typo such as `expected` would
/// otherwise make a case test nothing) or a name used twice.
pub fn parse(text: &str) -> Result<Vec<Case>, CasesError> {
    let value: Value = serde_json::from_str(text).map_err(CasesError::Json)?;
    let Value::Array(rows) = value else {
        return Err(CasesError::NotAnArray);
    };
    if rows.is_empty() {
        return Err(CasesError::Empty);
    }
    if rows.len() > MAX_CASES {
        return Err(CasesError::TooMany(rows.len()));
    }
    let mut names = HashSet::new();
    let mut cases = Vec::with_capacity(rows.len());
    for (index, row) in rows.into_iter().enumerate() {
        let case = case(row).map_err(|(name, problem)| CasesError::Case {
            index,
            name,
            problem,
        })?;
        if !names.insert(case.name.clone()) {
            return Err(CasesError::Case {
                index,
                name: case.name,
                problem: "another case has this name".to_owned(),
            });
        }
        cases.push(case);
    }
    Ok(cases)
}

/// One case, or its name (as far as it is known) and what is wrong.
fn case(row: Value) -> Result<Case, (String, String)> {
    let Value::Object(mut fields) = row else {
        return Err(("unnamed".to_owned(), "not a JSON object".to_owned()));
    };
    let name = match fields.remove("name") {
        Some(Value::String(name)) if !name.is_empty() => name,
        Some(_) => {
            return Err((
                "unnamed".to_owned(),
                "\"name\" is not a non-empty string".to_owned(),
            ));
        }
        None => return Err(("unnamed".to_owned(), "no \"name\"".to_owned())),
    };
    let fail = |problem: String| (name.clone(), problem);
    let function = match fields.remove("function") {
        None | Some(Value::Null) => None,
        Some(Value::String(function)) => Some(function),
        Some(_) => return Err(fail("\"function\" is not a string".to_owned())),
    };
    let input = fields
        .remove("input")
        .unwrap_or_else(|| Value::Object(Map::new()));
    let expect = fields
        .remove("expect")
        .ok_or_else(|| fail("no \"expect\"".to_owned()))?;
    if let Some(unknown) = fields.keys().next() {
        return Err(fail(format!(
            "unknown field {unknown:?}; a case has name, function, input and expect"
        )));
    }
    Ok(Case {
        name,
        function,
        input,
        expect,
    })
}

/// One place where an answer differs from the expected one.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Difference {
    /// Where, as a path from the answer's root: `.ok.next-check-ms`,
    /// `[2]`, or `` (empty) for the whole answer.
    pub path: String,
    /// The expected value there, `None` when the answer has something the
    /// expectation does not.
    pub expected: Option<Value>,
    /// The answer's value there, `None` when it lacks what was expected.
    pub got: Option<Value>,
}

/// Every place where `got` differs from `expected`, deepest first within
/// objects and arrays, in the expectation's order (so a report is stable).
/// Empty when they are equal.
pub fn differences(expected: &Value, got: &Value) -> Vec<Difference> {
    let mut found = Vec::new();
    compare(String::new(), expected, got, &mut found);
    found
}

fn compare(path: String, expected: &Value, got: &Value, found: &mut Vec<Difference>) {
    match (expected, got) {
        (Value::Object(want), Value::Object(have)) => {
            for (key, value) in want {
                let here = format!("{path}.{key}");
                match have.get(key) {
                    Some(other) => compare(here, value, other, found),
                    None => found.push(Difference {
                        path: here,
                        expected: Some(value.clone()),
                        got: None,
                    }),
                }
            }
            for (key, value) in have.iter().filter(|(k, _)| !want.contains_key(*k)) {
                found.push(Difference {
                    path: format!("{path}.{key}"),
                    expected: None,
                    got: Some(value.clone()),
                });
            }
        }
        // Arrays of the same length compare element by element; of
        // different lengths, whole, since an inserted element would make
        // every later one "differ".
        (Value::Array(want), Value::Array(have)) if want.len() == have.len() => {
            for (index, (value, other)) in want.iter().zip(have).enumerate() {
                compare(format!("{path}[{index}]"), value, other, found);
            }
        }
        _ if expected == got => {}
        _ => found.push(Difference {
            path,
            expected: Some(expected.clone()),
            got: Some(got.clone()),
        }),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_table_of_cases_parses_with_its_defaults() {
        let cases = parse(
            r#"[{"name": "a", "function": "assess", "input": {"x": 1}, "expect": {"ok": 2}},
                {"name": "b", "expect": "allow"}]"#,
        )
        .unwrap();
        assert_eq!(cases.len(), 2);
        assert_eq!(cases[0].function.as_deref(), Some("assess"));
        assert_eq!(cases[1].function, None);
        assert_eq!(cases[1].input, json!({}));
        assert_eq!(cases[1].expect, json!("allow"));
    }

    #[test]
    fn a_malformed_table_is_refused_naming_the_case_and_the_problem() {
        let refused = |text: &str| parse(text).unwrap_err().to_string();
        assert_eq!(refused("{"), "the cases are not JSON");
        assert!(refused(r#"{"name": "a"}"#).contains("JSON array"));
        assert_eq!(refused("[]"), "the file holds no cases");
        assert_eq!(refused("[1]"), "case 0 (unnamed): not a JSON object");
        assert_eq!(
            refused(r#"[{"expect": 1}]"#),
            "case 0 (unnamed): no \"name\""
        );
        assert_eq!(refused(r#"[{"name": "a"}]"#), "case 0 (a): no \"expect\"");
        assert_eq!(
            refused(r#"[{"name": "a", "expected": 1}]"#),
            "case 0 (a): no \"expect\""
        );
        assert!(
            refused(r#"[{"name": "a", "expect": 1, "expectd": 2}]"#)
                .contains("unknown field \"expectd\"")
        );
        assert_eq!(
            refused(r#"[{"name": "a", "expect": 1}, {"name": "a", "expect": 2}]"#),
            "case 1 (a): another case has this name"
        );
        assert!(refused(r#"[{"name": "a", "function": 3, "expect": 1}]"#).contains("\"function\""));
    }

    #[test]
    fn equal_answers_have_no_differences() {
        let answer = json!({"ok": {"a": [1, {"b": null}], "c": "d"}});
        assert!(differences(&answer, &answer.clone()).is_empty());
    }

    #[test]
    fn each_difference_is_named_by_its_path() {
        let expected = json!({"ok": {"retain-until-ms": 5, "may-delete": "allow", "list": [1, 2]}});
        let got = json!({"ok": {"retain-until-ms": 6, "list": [1, 3], "extra": true}});
        let found = differences(&expected, &got);
        let paths: Vec<&str> = found.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                ".ok.retain-until-ms",
                ".ok.may-delete",
                ".ok.list[1]",
                ".ok.extra"
            ]
        );
        assert_eq!(found[0].expected, Some(json!(5)));
        assert_eq!(found[0].got, Some(json!(6)));
        assert_eq!(found[1].got, None, "missing in the answer");
        assert_eq!(found[3].expected, None, "not expected");
    }

    #[test]
    fn a_different_kind_of_answer_differs_whole() {
        let found = differences(&json!({"ok": 1}), &json!({"err": {"not-found": "x"}}));
        assert_eq!(found.len(), 2, "{found:?}");
        let found = differences(&json!([1, 2]), &json!([1, 2, 3]));
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].path, "");
        let found = differences(&json!("allow"), &json!({"deny": "no"}));
        assert_eq!(found[0].path, "");
    }
}
