//! JSON to and from component values, for generic invocation
//! (`custodian run`).
//!
//! The mapping, by WIT type:
//!
//! | WIT | JSON |
//! |---|---|
//! | `bool`, integers, floats | booleans and numbers (integers are range-checked) |
//! | `char`, `string` | strings |
//! | `list<u8>` | an array of numbers; on input also a string, taken as its UTF-8 bytes |
//! | `list<T>`, `tuple<..>` | arrays |
//! | `record` | an object keyed by field name (as in the WIT, kebab-case); absent `option` fields are `none` |
//! | `variant` | `"case"` for a case without payload, `{"case": payload}` otherwise |
//! | `enum` | `"case"` |
//! | `option<T>` | `null` or the value |
//! | `result<T, E>` | `{"ok": value}` or `{"err": value}` (`null` when there is no payload) |
//! | `flags` | an array of the set flags' names |
//!
//! Resources, streams and futures cannot be expressed and are refused.

use serde_json::{Map, Number, Value, json};
use wasmtime::component::Val;
use wasmtime::component::types::{ComponentFunc, Type};

/// Converts a function's JSON input — an object keyed by parameter name, or
/// an array of the parameters in order — to argument values.
///
/// # Errors
/// A message naming the parameter (and path inside it) that does not fit.
pub(crate) fn params(func: &ComponentFunc, input: &Value) -> Result<Vec<Val>, String> {
    let params: Vec<(&str, Type)> = func.params().collect();
    match input {
        Value::Object(fields) => {
            if let Some(unknown) = fields.keys().find(|k| !params.iter().any(|(n, _)| n == k)) {
                let names: Vec<&str> = params.iter().map(|(n, _)| *n).collect();
                return Err(format!(
                    "unknown parameter {unknown:?}; the parameters are {names:?}"
                ));
            }
            params
                .iter()
                .map(|(name, ty)| to_val(ty, fields.get(*name).unwrap_or(&Value::Null), name))
                .collect()
        }
        Value::Array(items) if items.len() == params.len() => params
            .iter()
            .zip(items)
            .map(|((name, ty), item)| to_val(ty, item, name))
            .collect(),
        Value::Null if params.is_empty() => Ok(Vec::new()),
        _ => Err(format!(
            "the input must be an object of the {} parameters (or an array of them)",
            params.len()
        )),
    }
}

fn integer<T: TryFrom<i128>>(value: &Value, path: &str, ty: &str) -> Result<T, String> {
    let n = value
        .as_u64()
        .map(i128::from)
        .or_else(|| value.as_i64().map(i128::from))
        .ok_or_else(|| format!("{path}: expected an integer ({ty}), got {value}"))?;
    T::try_from(n).map_err(|_| format!("{path}: {n} does not fit {ty}"))
}

fn float(value: &Value, path: &str) -> Result<f64, String> {
    value
        .as_f64()
        .ok_or_else(|| format!("{path}: expected a number, got {value}"))
}

fn string<'a>(value: &'a Value, path: &str) -> Result<&'a str, String> {
    value
        .as_str()
        .ok_or_else(|| format!("{path}: expected a string, got {value}"))
}

fn array<'a>(value: &'a Value, path: &str) -> Result<&'a Vec<Value>, String> {
    value
        .as_array()
        .ok_or_else(|| format!("{path}: expected an array, got {value}"))
}

/// `{"name": payload}` or `"name"`.
fn tagged<'a>(value: &'a Value, path: &str) -> Result<(&'a str, Option<&'a Value>), String> {
    match value {
        Value::String(name) => Ok((name, None)),
        Value::Object(map) if map.len() == 1 => {
            let (name, payload) = map.iter().next().expect("one entry");
            Ok((name, Some(payload)))
        }
        _ => Err(format!(
            "{path}: expected \"case\" or {{\"case\": payload}}, got {value}"
        )),
    }
}

fn to_val(ty: &Type, value: &Value, path: &str) -> Result<Val, String> {
    Ok(match ty {
        Type::Bool => Val::Bool(
            value
                .as_bool()
                .ok_or_else(|| format!("{path}: expected a boolean, got {value}"))?,
        ),
        Type::S8 => Val::S8(integer(value, path, "s8")?),
        Type::U8 => Val::U8(integer(value, path, "u8")?),
        Type::S16 => Val::S16(integer(value, path, "s16")?),
        Type::U16 => Val::U16(integer(value, path, "u16")?),
        Type::S32 => Val::S32(integer(value, path, "s32")?),
        Type::U32 => Val::U32(integer(value, path, "u32")?),
        Type::S64 => Val::S64(integer(value, path, "s64")?),
        Type::U64 => Val::U64(integer(value, path, "u64")?),
        // Narrowing to f32 is what the parameter's type asks for.
        #[allow(clippy::cast_possible_truncation)]
        Type::Float32 => Val::Float32(float(value, path)? as f32),
        Type::Float64 => Val::Float64(float(value, path)?),
        Type::Char => {
            let s = string(value, path)?;
            let mut chars = s.chars();
            match (chars.next(), chars.next()) {
                (Some(c), None) => Val::Char(c),
                _ => return Err(format!("{path}: expected one character, got {s:?}")),
            }
        }
        Type::String => Val::String(string(value, path)?.to_owned()),
        Type::List(list) => {
            let element = list.ty();
            if let (Type::U8, Value::String(s)) = (&element, value) {
                Val::List(s.bytes().map(Val::U8).collect())
            } else {
                Val::List(
                    array(value, path)?
                        .iter()
                        .enumerate()
                        .map(|(i, item)| to_val(&element, item, &format!("{path}[{i}]")))
                        .collect::<Result<_, _>>()?,
                )
            }
        }
        Type::Record(record) => {
            let map = value
                .as_object()
                .ok_or_else(|| format!("{path}: expected an object, got {value}"))?;
            let fields: Vec<_> = record.fields().collect();
            if let Some(unknown) = map
                .keys()
                .find(|k| !fields.iter().any(|f| f.name == k.as_str()))
            {
                return Err(format!("{path}: unknown field {unknown:?}"));
            }
            Val::Record(
                fields
                    .iter()
                    .map(|field| {
                        let item = map.get(field.name).unwrap_or(&Value::Null);
                        to_val(&field.ty, item, &format!("{path}.{}", field.name))
                            .map(|v| (field.name.to_owned(), v))
                    })
                    .collect::<Result<_, _>>()?,
            )
        }
        Type::Tuple(tuple) => {
            let items = array(value, path)?;
            let types: Vec<Type> = tuple.types().collect();
            if items.len() != types.len() {
                return Err(format!("{path}: expected {} items", types.len()));
            }
            Val::Tuple(
                types
                    .iter()
                    .zip(items)
                    .enumerate()
                    .map(|(i, (ty, item))| to_val(ty, item, &format!("{path}[{i}]")))
                    .collect::<Result<_, _>>()?,
            )
        }
        Type::Variant(variant) => {
            let (name, payload) = tagged(value, path)?;
            let case = variant
                .cases()
                .find(|c| c.name == name)
                .ok_or_else(|| format!("{path}: unknown case {name:?}"))?;
            let payload = match (case.ty, payload) {
                (Some(ty), Some(p)) => Some(Box::new(to_val(&ty, p, &format!("{path}.{name}"))?)),
                (None, None | Some(Value::Null)) => None,
                (Some(_), None) => return Err(format!("{path}: case {name:?} needs a payload")),
                (None, Some(_)) => return Err(format!("{path}: case {name:?} has no payload")),
            };
            Val::Variant(name.to_owned(), payload)
        }
        Type::Enum(cases) => {
            let name = string(value, path)?;
            if !cases.names().any(|n| n == name) {
                return Err(format!("{path}: unknown case {name:?}"));
            }
            Val::Enum(name.to_owned())
        }
        Type::Option(option) => match value {
            Value::Null => Val::Option(None),
            other => Val::Option(Some(Box::new(to_val(&option.ty(), other, path)?))),
        },
        Type::Result(result) => {
            let (name, payload) = tagged(value, path)?;
            let side = |ty: Option<Type>| -> Result<Option<Box<Val>>, String> {
                match (ty, payload) {
                    (Some(ty), Some(p)) => {
                        Ok(Some(Box::new(to_val(&ty, p, &format!("{path}.{name}"))?)))
                    }
                    (None, None | Some(Value::Null)) => Ok(None),
                    (Some(_), None) => Err(format!("{path}: {name:?} needs a payload")),
                    (None, Some(_)) => Err(format!("{path}: {name:?} has no payload")),
                }
            };
            match name {
                "ok" => Val::Result(Ok(side(result.ok())?)),
                "err" => Val::Result(Err(side(result.err())?)),
                _ => return Err(format!("{path}: expected \"ok\" or \"err\", got {name:?}")),
            }
        }
        Type::Flags(flags) => {
            let set = array(value, path)?
                .iter()
                .map(|v| string(v, path).map(str::to_owned))
                .collect::<Result<Vec<_>, _>>()?;
            if let Some(unknown) = set.iter().find(|f| !flags.names().any(|n| n == f.as_str())) {
                return Err(format!("{path}: unknown flag {unknown:?}"));
            }
            Val::Flags(set)
        }
        other => {
            return Err(format!("{path}: a {other:?} cannot be given as JSON"));
        }
    })
}

/// Converts a result value to JSON.
pub(crate) fn to_json(value: &Val) -> Value {
    match value {
        Val::Bool(b) => json!(b),
        Val::S8(n) => json!(n),
        Val::U8(n) => json!(n),
        Val::S16(n) => json!(n),
        Val::U16(n) => json!(n),
        Val::S32(n) => json!(n),
        Val::U32(n) => json!(n),
        Val::S64(n) => json!(n),
        Val::U64(n) => json!(n),
        Val::Float32(n) => Number::from_f64(f64::from(*n)).map_or(Value::Null, Value::Number),
        Val::Float64(n) => Number::from_f64(*n).map_or(Value::Null, Value::Number),
        Val::Char(c) => json!(c.to_string()),
        Val::String(s) => json!(s),
        Val::List(items) | Val::Tuple(items) | Val::FixedLengthList(items) => {
            Value::Array(items.iter().map(to_json).collect())
        }
        Val::Map(pairs) => Value::Array(
            pairs
                .iter()
                .map(|(k, v)| Value::Array(vec![to_json(k), to_json(v)]))
                .collect(),
        ),
        Val::Record(fields) => Value::Object(
            fields
                .iter()
                .map(|(name, v)| (name.clone(), to_json(v)))
                .collect::<Map<_, _>>(),
        ),
        Val::Variant(name, None) | Val::Enum(name) => json!(name),
        Val::Variant(name, Some(payload)) => json!({ name: to_json(payload) }),
        Val::Option(None) => Value::Null,
        Val::Option(Some(v)) => to_json(v),
        Val::Result(Ok(v)) => json!({ "ok": v.as_deref().map_or(Value::Null, to_json) }),
        Val::Result(Err(v)) => json!({ "err": v.as_deref().map_or(Value::Null, to_json) }),
        Val::Flags(names) => json!(names),
        Val::Resource(_) | Val::Future(_) | Val::Stream(_) | Val::ErrorContext(_) => {
            json!("<unrepresentable handle>")
        }
    }
}

/// A short, WIT-like rendering of a type, for `plugin inspect`.
pub(crate) fn type_name(ty: &Type) -> String {
    match ty {
        Type::Bool => "bool".into(),
        Type::S8 => "s8".into(),
        Type::U8 => "u8".into(),
        Type::S16 => "s16".into(),
        Type::U16 => "u16".into(),
        Type::S32 => "s32".into(),
        Type::U32 => "u32".into(),
        Type::S64 => "s64".into(),
        Type::U64 => "u64".into(),
        Type::Float32 => "f32".into(),
        Type::Float64 => "f64".into(),
        Type::Char => "char".into(),
        Type::String => "string".into(),
        Type::List(l) => format!("list<{}>", type_name(&l.ty())),
        Type::Option(o) => format!("option<{}>", type_name(&o.ty())),
        Type::Result(r) => format!(
            "result<{}, {}>",
            r.ok().map_or("_".into(), |t| type_name(&t)),
            r.err().map_or("_".into(), |t| type_name(&t))
        ),
        Type::Tuple(t) => format!(
            "tuple<{}>",
            t.types()
                .map(|t| type_name(&t))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Type::Record(r) => format!(
            "record {{ {} }}",
            r.fields().map(|f| f.name).collect::<Vec<_>>().join(", ")
        ),
        Type::Variant(v) => format!(
            "variant {{ {} }}",
            v.cases().map(|c| c.name).collect::<Vec<_>>().join(", ")
        ),
        Type::Enum(e) => format!("enum {{ {} }}", e.names().collect::<Vec<_>>().join(", ")),
        Type::Flags(f) => format!("flags {{ {} }}", f.names().collect::<Vec<_>>().join(", ")),
        other => format!("{other:?}"),
    }
}

/// `name(param: type, ...) -> result`, for `plugin inspect`.
pub(crate) fn signature(name: &str, func: &ComponentFunc) -> String {
    let params: Vec<String> = func
        .params()
        .map(|(n, t)| format!("{n}: {}", type_name(&t)))
        .collect();
    let results: Vec<String> = func.results().map(|t| type_name(&t)).collect();
    if results.is_empty() {
        format!("{name}({})", params.join(", "))
    } else {
        format!("{name}({}) -> {}", params.join(", "), results.join(", "))
    }
}
