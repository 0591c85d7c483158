//! What a render reads, converted once and kept: [`Data`] and the `tojson` memo.
//!
//! [`super::ChatTemplate::render`] converts its JSON context into the engine's values on every
//! call. A caller that renders the same messages again and again (a session re-rendering a
//! growing conversation) converts each message once into a [`Data`] and passes those instead
//! ([`super::ChatTemplate::render_data`]). Values the template reads are immutable (the
//! sandbox refuses `dict.update`, `list.append`, ...), so sharing them between renders cannot
//! change a render.
//!
//! The same holds for `tojson`: its output depends only on the value and the options, so a
//! [`JsonMemo`] handed to a render keeps the JSON of each dict, list and long string it wrote
//! (Llama 3.1's template writes every tool result with `tojson`), keyed by the value's
//! address and the options. Each entry holds a clone of its value, so the address
//! cannot be reused by another value while the entry exists.

use std::cell::RefCell;
use std::collections::HashMap;

use minijinja::value::{Value, ValueKind};

use super::pyvalue::{self, new_dict, new_list, Dict};

/// A value a template reads (a message, a tool list, ...), converted and shareable
/// between renders (cloning it is a reference count).
#[derive(Debug, Clone)]
pub struct Data {
    pub(super) value: Value,
    /// Nesting depth as `json_depth` counts it (a scalar is 1).
    pub(super) depth: usize,
}

impl Data {
    /// A JSON value as Python's `json.loads` makes it; `map_str` may replace a string value
    /// (not a dict key) with another text.
    pub fn from_json(
        j: &serde_json::Value,
        map_str: &mut dyn FnMut(&str) -> Option<String>,
    ) -> Data {
        match j {
            serde_json::Value::String(s) => Data::string(s, map_str),
            serde_json::Value::Array(a) => {
                Data::list(a.iter().map(|v| Data::from_json(v, map_str)).collect())
            }
            serde_json::Value::Object(o) => Data::dict(
                o.iter()
                    .map(|(k, v)| (k.as_str(), Data::from_json(v, map_str)))
                    .collect(),
            ),
            scalar => Data {
                value: pyvalue::from_json(scalar),
                depth: 1,
            },
        }
    }

    /// A `str`, through `map_str` as in [`Data::from_json`].
    pub fn string(s: &str, map_str: &mut dyn FnMut(&str) -> Option<String>) -> Data {
        let value = match map_str(s) {
            Some(mapped) => Value::from(mapped),
            None => Value::from(s),
        };
        Data { value, depth: 1 }
    }

    /// A `list`.
    pub fn list(items: Vec<Data>) -> Data {
        let depth = 1 + items.iter().map(|d| d.depth).max().unwrap_or(0);
        Data {
            value: new_list(items.into_iter().map(|d| d.value).collect()),
            depth,
        }
    }

    /// A `dict`, keys in the given order (a repeated key keeps its first position and its
    /// last value, as a Python dict built key by key).
    pub fn dict(entries: Vec<(&str, Data)>) -> Data {
        let depth = 1 + entries.iter().map(|(_, d)| d.depth).max().unwrap_or(0);
        let mut map = Dict::with_capacity(entries.len());
        for (k, d) in entries {
            map.insert(Value::from(k), d.value);
        }
        Data {
            value: new_dict(map),
            depth,
        }
    }

    /// `None`.
    pub fn none() -> Data {
        Data {
            value: Value::from(()),
            depth: 1,
        }
    }

    /// A `bool`.
    pub fn bool(b: bool) -> Data {
        Data {
            value: Value::from(b),
            depth: 1,
        }
    }
}

/// The JSON `tojson` wrote for dicts and lists, kept between renders (see the module
/// documentation). Bounded: it starts over when it holds more than [`JsonMemo::MAX_BYTES`].
#[derive(Debug, Default)]
pub struct JsonMemo {
    entries: HashMap<(usize, u64), (Value, std::sync::Arc<str>)>,
    bytes: usize,
}

impl JsonMemo {
    /// What the memo may hold in JSON text before it starts over (a session keeps one, so
    /// this bounds what each session keeps; a 20k-token agent conversation needs about 100 KB).
    pub const MAX_BYTES: usize = 4 << 20;

    /// Number of values memoized.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is memoized.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

thread_local! {
    /// The memo of the render running on this thread, if its caller gave one.
    static CURRENT: RefCell<Option<JsonMemo>> = const { RefCell::new(None) };
}

/// Run `f` with `memo` reachable from [`memoized_json`] on this thread.
pub(super) fn with_memo<R>(memo: Option<&mut JsonMemo>, f: impl FnOnce() -> R) -> R {
    let Some(memo) = memo else {
        return f();
    };
    /// Gives the memo back to its owner when `f` returns or unwinds.
    struct Restore<'m> {
        memo: &'m mut JsonMemo,
        previous: Option<JsonMemo>,
    }
    impl Drop for Restore<'_> {
        fn drop(&mut self) {
            *self.memo = CURRENT
                .with(|c| c.replace(self.previous.take()))
                .unwrap_or_default();
        }
    }
    let previous = CURRENT.with(|c| c.replace(Some(std::mem::take(memo))));
    let _restore = Restore { memo, previous };
    f()
}

/// Strings shorter than this are written every time (cheap, and the engine keeps short
/// strings inside the value, where they have no address of their own).
const MIN_MEMO_STR: usize = 64;

/// The address that identifies a dict, list or long string value (`None` for anything
/// else): that of its shared allocation, which the memo entry's clone keeps alive.
fn address(v: &Value) -> Option<usize> {
    if let Some(d) = v.downcast_object_ref::<Dict>() {
        return Some(d as *const Dict as usize);
    }
    if let Some(l) = v.downcast_object_ref::<Vec<Value>>() {
        return Some(l as *const Vec<Value> as usize);
    }
    v.as_str()
        .filter(|s| v.kind() == ValueKind::String && s.len() >= MIN_MEMO_STR)
        .map(|s| s.as_ptr() as usize)
}

/// `write(v)`, or what it returned for the same value and `options` (a key that tells the
/// options apart) earlier in this render or in an earlier one with the same memo.
pub(super) fn memoized_json(
    v: &Value,
    options: u64,
    write: impl FnOnce() -> Result<String, minijinja::Error>,
) -> Result<Value, minijinja::Error> {
    let Some(at) = address(v) else {
        return write().map(Value::from);
    };
    let key = (at, options);
    let hit = CURRENT.with(|c| {
        c.borrow()
            .as_ref()
            .map(|m| m.entries.get(&key).map(|(_, s)| s.clone()))
    });
    match hit {
        // No memo for this render.
        None => write().map(Value::from),
        Some(Some(json)) => Ok(Value::from(json)),
        Some(None) => {
            let json: std::sync::Arc<str> = write()?.into();
            CURRENT.with(|c| {
                if let Some(m) = c.borrow_mut().as_mut() {
                    if m.bytes + json.len() > JsonMemo::MAX_BYTES {
                        m.entries.clear();
                        m.bytes = 0;
                    }
                    m.bytes += json.len();
                    m.entries.insert(key, (v.clone(), json.clone()));
                }
            });
            Ok(Value::from(json))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::template::ChatTemplate;

    /// A memo changes no output: each value and each set of options keeps its own JSON,
    /// across renders.
    #[test]
    fn memoized_json_equals_written_json() {
        let t = ChatTemplate::compile(
            "{{ x | tojson }}|{{ x | tojson(indent=2) }}|{{ x.b | tojson }}|{{ s | tojson }}|{{ s | tojson(ensure_ascii=True) }}|{{ y | tojson }}",
        )
        .unwrap();
        let long = "é\"".repeat(40);
        let context = |x: serde_json::Value| {
            vec![
                ("x", Data::from_json(&x, &mut |_| None)),
                (
                    "y",
                    Data::from_json(&serde_json::json!({"a": [3]}), &mut |_| None),
                ),
                ("s", Data::string(&long, &mut |_| None)),
            ]
        };
        let x = serde_json::json!({"a": 1, "b": [1, "two"]});
        let plain = t.render_data(context(x.clone()), None, None).unwrap();
        let mut memo = JsonMemo::default();
        let kept = context(x);
        for _ in 0..2 {
            assert_eq!(
                t.render_data(kept.clone(), None, Some(&mut memo)).unwrap(),
                plain
            );
        }
        // x twice, x.b, s twice, y.
        assert_eq!(memo.len(), 6);
        // Another value at another address: its own JSON.
        let other = context(serde_json::json!({"a": 2, "b": []}));
        let fresh = t.render_data(other.clone(), None, None).unwrap();
        assert_eq!(t.render_data(other, None, Some(&mut memo)).unwrap(), fresh);
        assert_ne!(fresh, plain);
    }
}
