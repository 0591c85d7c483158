//! The renderers of the transformers route, in one wing: what turns messages into pieces.
//!
//! * [`native`]: the native formats, small Rust renderers of the official templates, each
//!   declaring what it accepts (template arguments, system slot) so the checks run once;
//! * [`jinja`]: the Jinja path, any template rendered by chatids' own engine;
//! * [`probes`]: the probe conversations that prove a native format renders what the
//!   checkpoint's template renders;
//! * [`choose`]: the format choice built on them.

pub mod choose;
pub mod jinja;
pub mod native;
pub mod probes;
