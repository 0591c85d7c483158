//! The check mistral-common runs on every tool's `parameters`:
//! `jsonschema.Draft7Validator.check_schema`, i.e. validation against the JSON Schema draft-07
//! meta-schema (with its `regex` format checked; the URI formats need packages jsonschema does
//! not install by default and are not checked).

use serde_json::Value;

const SIMPLE_TYPES: &[&str] = &[
    "array", "boolean", "integer", "null", "number", "object", "string",
];

/// Keywords whose value must be a schema (`{"$ref": "#"}` in the meta-schema).
const SCHEMA_KEYWORDS: &[&str] = &[
    "additionalItems",
    "contains",
    "additionalProperties",
    "propertyNames",
    "if",
    "then",
    "else",
    "not",
];
/// Keywords whose value must be a string.
const STRING_KEYWORDS: &[&str] = &[
    "$id",
    "$schema",
    "$ref",
    "$comment",
    "title",
    "description",
    "format",
    "contentMediaType",
    "contentEncoding",
];
/// Keywords whose value must be a number.
const NUMBER_KEYWORDS: &[&str] = &["maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum"];
/// Keywords whose value must be a non-negative integer.
const COUNT_KEYWORDS: &[&str] = &[
    "maxLength",
    "minLength",
    "maxItems",
    "minItems",
    "maxProperties",
    "minProperties",
];
/// Keywords whose value must be a non-empty array of schemas.
const SCHEMA_ARRAY_KEYWORDS: &[&str] = &["allOf", "anyOf", "oneOf"];
/// Keywords whose value must be an object of schemas.
const SCHEMA_MAP_KEYWORDS: &[&str] = &["definitions", "properties", "patternProperties"];

fn is_number(v: &Value) -> bool {
    v.is_number()
}

/// jsonschema's `integer`: an int, or a float with an integral value.
fn is_integer(v: &Value) -> bool {
    match v {
        Value::Number(n) => {
            n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => false,
    }
}

fn unique_strings(items: &[Value]) -> bool {
    let strings: Vec<&str> = items.iter().filter_map(Value::as_str).collect();
    (1..strings.len()).all(|i| !strings[..i].contains(&strings[i]))
}

fn is_regex(pattern: &str) -> bool {
    fancy_regex::Regex::new(pattern).is_ok()
}

fn fail(path: &str, what: impl std::fmt::Display) -> Result<(), String> {
    Err(format!(
        "{}{what}",
        if path.is_empty() {
            String::new()
        } else {
            format!("at {path}: ")
        }
    ))
}

/// `Draft7Validator.check_schema(schema)`: `Err` names the first violation found.
pub fn check_schema(schema: &Value) -> Result<(), String> {
    check(schema, "")
}

fn check(schema: &Value, path: &str) -> Result<(), String> {
    let map = match schema {
        Value::Bool(_) => return Ok(()),
        Value::Object(map) => map,
        other => return fail(path, format!("{other} is not of type 'object', 'boolean'")),
    };
    for (key, v) in map {
        let here = format!("{path}/{key}");
        let k = key.as_str();
        if SCHEMA_KEYWORDS.contains(&k) {
            check(v, &here)?;
        } else if STRING_KEYWORDS.contains(&k) {
            if !v.is_string() {
                return fail(&here, format!("{v} is not of type 'string'"));
            }
        } else if NUMBER_KEYWORDS.contains(&k) {
            if !is_number(v) {
                return fail(&here, format!("{v} is not of type 'number'"));
            }
        } else if COUNT_KEYWORDS.contains(&k) {
            if !is_integer(v) || v.as_f64().is_some_and(|f| f < 0.0) {
                return fail(&here, format!("{v} is not a non-negative integer"));
            }
        } else if SCHEMA_ARRAY_KEYWORDS.contains(&k) {
            check_schema_array(v, &here)?;
        } else if SCHEMA_MAP_KEYWORDS.contains(&k) {
            let Value::Object(items) = v else {
                return fail(&here, format!("{v} is not of type 'object'"));
            };
            for (name, sub) in items {
                if k == "patternProperties" && !is_regex(name) {
                    return fail(
                        &here,
                        format!("{name:?} is not a 'regex' chatids can verify"),
                    );
                }
                check(sub, &format!("{here}/{name}"))?;
            }
        } else {
            match k {
                "readOnly" | "uniqueItems" if !v.is_boolean() => {
                    return fail(&here, format!("{v} is not of type 'boolean'"))
                }
                "examples" | "enum" if !v.is_array() => {
                    return fail(&here, format!("{v} is not of type 'array'"))
                }
                "multipleOf" if !(is_number(v) && v.as_f64().is_some_and(|f| f > 0.0)) => {
                    return fail(&here, format!("{v} is not a number greater than 0"))
                }
                "pattern" => match v {
                    Value::String(p) if is_regex(p) => {}
                    Value::String(p) => {
                        return fail(&here, format!("{p:?} is not a 'regex' chatids can verify"))
                    }
                    _ => return fail(&here, format!("{v} is not of type 'string'")),
                },
                "items" => {
                    if v.is_array() {
                        check_schema_array(v, &here)?;
                    } else {
                        check(v, &here)?;
                    }
                }
                "required" => check_string_array(v, &here)?,
                "dependencies" => {
                    let Value::Object(items) = v else {
                        return fail(&here, format!("{v} is not of type 'object'"));
                    };
                    for (name, sub) in items {
                        let sub_path = format!("{here}/{name}");
                        if check(sub, &sub_path).is_err()
                            && check_string_array(sub, &sub_path).is_err()
                        {
                            return fail(
                                &sub_path,
                                format!("{sub} is not a schema or an array of unique strings"),
                            );
                        }
                    }
                }
                "type" => {
                    let ok = match v {
                        Value::String(t) => SIMPLE_TYPES.contains(&t.as_str()),
                        Value::Array(ts) => {
                            !ts.is_empty()
                                && ts
                                    .iter()
                                    .all(|t| t.as_str().is_some_and(|t| SIMPLE_TYPES.contains(&t)))
                                && unique_strings(ts)
                        }
                        _ => false,
                    };
                    if !ok {
                        return fail(
                            &here,
                            format!("{v} is not valid under any of the given schemas"),
                        );
                    }
                }
                _ => {}
            }
        }
    }
    Ok(())
}

fn check_schema_array(v: &Value, path: &str) -> Result<(), String> {
    match v {
        Value::Array(items) if !items.is_empty() => {
            for (i, sub) in items.iter().enumerate() {
                check(sub, &format!("{path}/{i}"))?;
            }
            Ok(())
        }
        Value::Array(_) => fail(path, "[] should be non-empty"),
        _ => fail(path, format!("{v} is not of type 'array'")),
    }
}

fn check_string_array(v: &Value, path: &str) -> Result<(), String> {
    match v {
        Value::Array(items) if items.iter().all(Value::is_string) && unique_strings(items) => {
            Ok(())
        }
        _ => fail(path, format!("{v} is not an array of unique strings")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn draft7_meta_schema_rules() {
        let ok = json!({"type": "object", "properties": {"a": {"type": ["string", "null"], "enum": ["x", 1]},
            "b": {"type": "array", "items": {"type": "integer"}, "minItems": 1.0}}, "required": ["a"],
            "additionalProperties": false, "pattern": "^a+$"});
        assert_eq!(check_schema(&ok), Ok(()));
        for bad in [
            json!({"type": "dict"}),
            json!({"properties": {"a": {"type": "str"}}}),
            json!({"required": ["a", "a"]}),
            json!({"required": "a"}),
            json!({"minLength": -1}),
            json!({"anyOf": []}),
            json!({"pattern": "("}),
            json!({"description": 3}),
            json!({"properties": {"a": 3}}),
        ] {
            assert!(check_schema(&bad).is_err(), "{bad}");
        }
    }
}
