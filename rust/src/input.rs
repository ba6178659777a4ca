//! The input of validation: plain data as Python handed it over, as a tree that the reader
//! (reader.rs) builds over the Python objects without copying their strings. Validation
//! walks it; canonical.rs renders it (`Tree`).
use crate::canonical::{Tree, View};

/// A list that the reader converts one item at a time: a flat pool's devices. Why: the input
/// tree of 100,000 devices at once takes several times the memory of the desired state.
pub trait Items<'a> {
    fn count(&self) -> usize;
    fn item(&self, index: usize) -> Input<'a>;
}

/// Plain data as Python handed it over. Dict entries are sorted by key.
pub enum Input<'a> {
    Null,
    Bool(bool),
    Int(i64),
    /// An int outside int64.
    BigInt,
    Float,
    Str(&'a str),
    /// A str that does not encode as UTF-8 (lone surrogates).
    BadStr,
    List(Vec<Input<'a>>),
    /// A list read item by item (see `Items`).
    Lazy(Box<dyn Items<'a> + 'a>),
    Dict(Vec<(&'a str, Input<'a>)>),
    /// Any other type, by its Python type name.
    Other(String),
}

/// The member `key`, when present and not null.
pub fn get<'i, 'a>(entries: &'i [(&'a str, Input<'a>)], key: &str) -> Option<&'i Input<'a>> {
    entries
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
        .filter(|v| !matches!(v, Input::Null))
}

/// The members that are not null.
pub fn present<'x, 'a>(
    entries: &'x [(&'a str, Input<'a>)],
) -> impl Iterator<Item = (&'a str, &'x Input<'a>)> {
    entries
        .iter()
        .filter(|(_, v)| !matches!(v, Input::Null))
        .map(|(k, v)| (*k, v))
}

/// The length of a list member; 0 for anything else.
pub fn list_len(v: Option<&Input<'_>>) -> usize {
    match v {
        Some(Input::List(l)) => l.len(),
        _ => 0,
    }
}

impl Tree for Input<'_> {
    fn view(&self) -> View<'_, Self> {
        match self {
            Input::Bool(b) => View::Bool(*b),
            Input::Int(i) => View::Int(*i),
            Input::Str(s) => View::Str(s),
            Input::List(items) => View::List(items),
            Input::Dict(_) => View::Map,
            // Reported as errors; nothing is written from an invalid state. A lazy list is
            // a flat pool's devices, which are rendered one by one, never as a whole.
            Input::Null
            | Input::BigInt
            | Input::Float
            | Input::BadStr
            | Input::Other(_)
            | Input::Lazy(_) => View::Null,
        }
    }
    fn for_each_member<'a>(&'a self, f: &mut dyn FnMut(&'a str, &'a Self)) {
        if let Input::Dict(entries) = self {
            entries.iter().for_each(|(k, v)| f(k, v));
        }
    }
    fn member(&self, key: &str) -> Option<&Self> {
        match self {
            Input::Dict(entries) => get(entries, key),
            _ => None,
        }
    }
}
