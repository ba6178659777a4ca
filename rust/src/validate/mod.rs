//! Validation (docs/core.md §3): the limits and formats of `resource.k8s.io/v1` that the
//! apiserver would apply, checked on the `Input` tree before anything is written, and the
//! canonical desired state (model.rs) made of what passes. Every problem is collected with
//! its path, in traversal order, and a device's canonical JSON is rendered only once it is
//! known to be valid.
//!
//! This file holds what every check uses: the error list with its path (`Errors`), the type
//! checks, the generic rules for members passed through, and the limits and messages that
//! more than one file needs. The rules themselves are in the files that use it, each using
//! only those before it: scalars.rs (names and formats of single values), slice.rs (what a
//! slice sets: node selection, counters, partitions), device.rs (a device and a list of
//! them), pool.rs (a pool, and `prepare_desired`, the entry).
mod device;
pub mod pool;
mod scalars;
mod slice;

use serde_json::Value;

use crate::canonical;
use crate::input::{present, Input};
use crate::quantity;

const MAX_DRIVER_LENGTH: usize = 63;
const MAX_POOL_NAME_LENGTH: usize = 253;
/// Quantities in the rules of a request policy are counted in nano units; the policy's
/// numbers must be below 10^20 (a client-side limit: exact arithmetic in 128 bits).
const NANO: i128 = 1_000_000_000;
const POLICY_LIMIT: i128 = 100_000_000_000_000_000_000 * NANO;

// The messages (the same words as the pure-Python core).
const NOT_UTF8: &str = "not valid UTF-8";
const REQUIRED: &str = "is required";
const BAD_LABEL_NAME: &str = "must be a label name";
const BAD_LABEL_VALUE: &str = "must be a label value";
const BAD_DNS_LABEL: &str = "must be a DNS label";
const DUPLICATE: &str = "duplicate";
const NEGATIVE: &str = "must not be negative";

/// An error path: rendered only when a problem is reported.
#[derive(Clone, Copy)]
enum Seg<'a> {
    Field(&'a str),
    Key(&'a str),
    Index(usize),
}

struct Errors<'a> {
    path: Vec<Seg<'a>>,
    list: Vec<String>,
    /// Attribute and capacity names found valid, by address and length. Keys of Python
    /// dicts are shared objects (literals are interned, `json.loads` reuses equal keys), so
    /// a pool's devices name the same few strs over and over: each is checked once. Sound
    /// for one call: every str of the input outlives it, so an address is never reused.
    good_names: rustc_hash::FxHashSet<(usize, usize)>,
}

impl<'a> Errors<'a> {
    fn report(&mut self, problem: impl AsRef<str>) {
        let mut s = String::new();
        for (i, seg) in self.path.iter().enumerate() {
            match seg {
                Seg::Field(f) if i == 0 => s.push_str(f),
                Seg::Field(f) => {
                    s.push('.');
                    s.push_str(f);
                }
                Seg::Key(k) => {
                    s.push('[');
                    s.push_str(&canonical::quote(k));
                    s.push(']');
                }
                Seg::Index(n) => s.push_str(&format!("[{n}]")),
            }
        }
        s.push_str(": ");
        s.push_str(problem.as_ref());
        self.list.push(s);
    }

    fn at<R>(&mut self, seg: Seg<'a>, f: impl FnOnce(&mut Self) -> R) -> R {
        self.path.push(seg);
        let r = f(self);
        self.path.pop();
        r
    }

    fn field<R>(&mut self, name: &'a str, f: impl FnOnce(&mut Self) -> R) -> R {
        self.at(Seg::Field(name), f)
    }

    fn report_at(&mut self, name: &'a str, problem: impl AsRef<str>) {
        self.field(name, |e| e.report(problem));
    }

    fn count(&self) -> usize {
        self.list.len()
    }
}

fn check_str<'i>(e: &mut Errors<'_>, v: &Input<'i>) -> Option<&'i str> {
    match v {
        Input::Str(s) => Some(*s),
        Input::BadStr => {
            e.report(NOT_UTF8);
            None
        }
        _ => {
            e.report("must be a string");
            None
        }
    }
}

fn check_bool(e: &mut Errors<'_>, v: &Input<'_>) -> Option<bool> {
    match v {
        Input::Bool(b) => Some(*b),
        _ => {
            e.report("must be a boolean");
            None
        }
    }
}

fn check_int(e: &mut Errors<'_>, v: &Input<'_>) -> Option<i64> {
    match v {
        Input::Int(i) => Some(*i),
        Input::BigInt => {
            e.report("out of range for a 64-bit integer");
            None
        }
        Input::Float => {
            e.report("must not be a float");
            None
        }
        _ => {
            e.report("must be an integer");
            None
        }
    }
}

fn check_dict<'x, 'i>(e: &mut Errors<'_>, v: &'x Input<'i>) -> Option<&'x [(&'i str, Input<'i>)]> {
    match v {
        Input::Dict(d) => Some(d),
        _ => {
            e.report("must be an object");
            None
        }
    }
}

fn check_list<'x, 'i>(e: &mut Errors<'_>, v: &'x Input<'i>) -> Option<&'x [Input<'i>]> {
    match v {
        Input::List(l) => Some(l),
        _ => {
            e.report("must be a list");
            None
        }
    }
}

/// The generic rules, for members passed through as they are.
fn check_generic<'i>(e: &mut Errors<'i>, v: &Input<'i>) {
    match v {
        Input::Null | Input::Bool(_) | Input::Int(_) | Input::Str(_) => {}
        Input::BigInt | Input::Float => {
            check_int(e, v);
        }
        Input::BadStr => e.report(NOT_UTF8),
        Input::List(items) => {
            for (i, item) in items.iter().enumerate() {
                e.at(Seg::Index(i), |e| check_generic(e, item));
            }
        }
        Input::Lazy(items) => {
            for i in 0..items.count() {
                e.at(Seg::Index(i), |e| check_generic(e, &items.item(i)));
            }
        }
        Input::Dict(entries) => {
            for (k, item) in entries {
                e.at(Seg::Key(k), |e| check_generic(e, item));
            }
        }
        Input::Other(t) => e.report(format!("unsupported type {t}")),
    }
}

/// The generic rules for every member not in `known`.
fn check_others<'i>(e: &mut Errors<'i>, entries: &[(&'i str, Input<'i>)], known: &[&str]) {
    for (k, x) in present(entries) {
        if !known.contains(&k) {
            e.field(k, |e| check_generic(e, x));
        }
    }
}

fn check_max<T>(e: &mut Errors<'_>, items: &[T], max: usize, what: &str) -> bool {
    if items.len() > max {
        e.report(format!("at most {max} {what}, got {}", items.len()));
        return false;
    }
    true
}

/// Walks the quantities of a subtree.
type QuantityWalk<'x, 'i> = dyn Fn(&'x Input<'i>, &mut dyn FnMut(&'x Input<'i>));

/// A checked subtree as a pruned JSON value, its quantities (`quantities`) canonical.
fn to_value<'x, 'i>(v: &'x Input<'i>, quantities: &QuantityWalk<'x, 'i>) -> Option<Value> {
    let mut subs = Vec::new();
    quantities(v, &mut |q| {
        canonical::quantity_sub(&mut subs, q, &mut quantity::canonical)
    });
    let json = canonical::to_json_with(v, &subs);
    canonical::prune(serde_json::from_str(&json).expect("JSON written by this crate"))
}
