//! The rest of jinja2's default namespace: `joiner`, `cycler`, `lipsum`, and the `self`
//! template reference. A name jinja2 defines must never be undefined here (an undefined
//! name renders as `''`, a silent difference): what cannot be reproduced exactly (random
//! text, rendering a block through `self`) raises when it is used.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use minijinja::value::{Enumerator, Object, ObjectRepr, Value};
use minijinja::{Environment, Error, ErrorKind, State};

use super::args::{bind, split_args};
use super::pyvalue::{err, kind, py_str, Kind};

/// Register the globals.
pub fn register(env: &mut Environment<'static>) {
    env.add_function("joiner", |args: &[Value]| -> Result<Value, Error> {
        let b = bind("joiner", args, &["sep"], true)?;
        let sep = match &b[0] {
            Some(v) => v.clone(),
            None => Value::from(", "),
        };
        Ok(Value::from_object(Joiner {
            sep,
            used: AtomicBool::new(false),
        }))
    });
    env.add_function("cycler", |args: &[Value]| -> Result<Value, Error> {
        let (items, kw) = split_args(args)?;
        if let Some((name, _)) = kw.first() {
            return Err(err(format!(
                "Cycler.__init__() got an unexpected keyword argument '{name}'"
            )));
        }
        if items.is_empty() {
            return Err(err("at least one item has to be provided"));
        }
        Ok(Value::from_object(Cycler {
            items,
            pos: AtomicUsize::new(0),
        }))
    });
    env.add_function("lipsum", |_: &[Value]| -> Result<Value, Error> {
        Err(err(
            "lipsum() (random text) is not supported in chat templates rendered by chatids",
        ))
    });
    env.add_global("self", Value::from_object(TemplateReference));
}

/// jinja2's `joiner(sep)`: `''` on the first call, `sep` after.
#[derive(Debug)]
struct Joiner {
    sep: Value,
    used: AtomicBool,
}

impl Object for Joiner {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Plain
    }
    fn call(self: &Arc<Self>, _state: &State<'_, '_>, args: &[Value]) -> Result<Value, Error> {
        if !args.is_empty() {
            return Err(err(format!(
                "Joiner.__call__() takes 1 positional argument but {} were given",
                args.len() + 1
            )));
        }
        Ok(if self.used.swap(true, Ordering::Relaxed) {
            self.sep.clone()
        } else {
            Value::from("")
        })
    }
}

/// jinja2's `cycler(*items)`: `next()`, `reset()`, `current`, `items`.
#[derive(Debug)]
struct Cycler {
    items: Vec<Value>,
    pos: AtomicUsize,
}

impl Object for Cycler {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Plain
    }
    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        match key.as_str()? {
            "current" => Some(self.items[self.pos.load(Ordering::Relaxed)].clone()),
            "items" => Some(super::pyvalue::new_tuple(self.items.clone())),
            _ => None,
        }
    }
    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::NonEnumerable
    }
    fn call_method(
        self: &Arc<Self>,
        _state: &State<'_, '_>,
        method: &str,
        args: &[Value],
    ) -> Result<Value, Error> {
        match method {
            "next" | "__next__" => {
                bind(method, args, &[], false)?;
                let i = self.pos.load(Ordering::Relaxed);
                self.pos
                    .store((i + 1) % self.items.len(), Ordering::Relaxed);
                Ok(self.items[i].clone())
            }
            "reset" => {
                bind(method, args, &[], false)?;
                self.pos.store(0, Ordering::Relaxed);
                Ok(Value::from(()))
            }
            _ => Err(Error::from(ErrorKind::UnknownMethod)),
        }
    }
}

/// jinja2's `self` (`TemplateReference`): prints as `<TemplateReference None>`; its blocks
/// (`self.name()`) are not reproduced and raise.
#[derive(Debug)]
pub struct TemplateReference;

impl fmt::Display for TemplateReference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<TemplateReference None>")
    }
}

impl Object for TemplateReference {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Plain
    }
    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        let name = py_str(key).unwrap_or_default();
        Some(Value::from_object(BlockRef(name)))
    }
    fn render(self: &Arc<Self>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&**self, f)
    }
}

/// `self.<name>`: a block of the template, which chatids does not render through `self`.
#[derive(Debug)]
struct BlockRef(String);

impl Object for BlockRef {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Plain
    }
    fn call(self: &Arc<Self>, _state: &State<'_, '_>, _args: &[Value]) -> Result<Value, Error> {
        Err(err(format!(
            "self.{}() (rendering a block through self) is not supported in chat templates rendered by chatids",
            self.0
        )))
    }
}

/// Whether `v` is the `self` reference (printed by [`super::pyvalue`]).
pub fn is_template_reference(v: &Value) -> bool {
    kind(v) == Kind::Other && v.downcast_object_ref::<TemplateReference>().is_some()
}
