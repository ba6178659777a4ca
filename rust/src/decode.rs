//! Raw JSON bytes from the apiserver -> `Record` (docs/core.md §6).
//!
//! Each device is canonicalised once, here, so that planning compares strings.
use std::borrow::Cow;
use std::marker::PhantomData;

use serde::de::{
    Deserialize, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor,
};
use serde_json::{Map, Value};

use crate::canonical::{self, Header, Tree, View};
use crate::fields;
use crate::strlist::StrList;
use crate::text::TextList;

/// What the store keeps of one ResourceSlice.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub name: String,
    pub uid: String,
    pub resource_version: String,
    pub driver: String,
    pub pool: String,
    pub generation: i64,
    pub resource_slice_count: i64,
    pub node_name: Option<String>,
    pub device_names: StrList,
    /// Canonical JSON of each device, in stored order, shared with the desired state's equal
    /// texts (text.rs).
    pub devices: TextList,
    /// Canonical JSON of the header (docs/core.md §1).
    pub header: String,
    /// Metadata of other clients, stored as it is: an update keeps it (upstream replaces
    /// only the spec).
    pub labels: Option<Value>,
    pub annotations: Option<Value>,
    pub owner_references: Option<Value>,
    pub finalizers: Option<Value>,
    /// `metadata.deletionTimestamp` is set: the slice is going away (a finalizer holds it),
    /// and is not written again.
    pub deleting: bool,
}

impl Record {
    /// Semantic equality of header and devices, `self` taken as the desired side.
    pub fn same_content(&self, other: &Record) -> bool {
        canonical::header_eq(&self.header, &other.header)
            && self.devices.len() == other.devices.len()
            && self
                .devices
                .iter()
                .zip(other.devices.iter())
                .all(|(d, s)| canonical::device_eq(d, s))
    }

    /// `(paths, features)`: what `self` (as sent) has and `stored` has not, and the feature
    /// gates probably off for it; empty when all of it was stored.
    pub fn dropped_fields(&self, stored: &Record) -> (Vec<String>, Vec<String>) {
        let sent: Vec<&str> = self.devices.iter().collect();
        let kept: Vec<&str> = stored.devices.iter().collect();
        canonical::dropped_fields(&self.header, &sent, &stored.header, &kept)
    }
}

fn parse(data: &[u8]) -> Result<Value, String> {
    serde_json::from_slice(data).map_err(|e| format!("not a JSON document: {e}"))
}

fn take_str(map: &mut Map<String, Value>, key: &str) -> Option<String> {
    match map.remove(key) {
        Some(Value::String(s)) => Some(s),
        _ => None,
    }
}

fn int(map: &Map<String, Value>, key: &str) -> Result<i64, String> {
    match map.get(key) {
        None => Ok(0),
        Some(v) => v
            .as_i64()
            .ok_or_else(|| format!("spec.pool.{key} is not an integer")),
    }
}

/// The devices of one slice as the store keeps them: names and canonical JSON, in order.
#[derive(Default)]
struct Devices {
    names: StrList,
    jsons: TextList,
}

impl Devices {
    fn push<T: Tree>(&mut self, device: &T) {
        if let Some((name, json)) = canonical::stored_device(device) {
            self.names.push(&name);
            self.jsons.push(&json);
        }
    }
}

/// One ResourceSlice object (its `kind` may be absent, as in list items).
pub fn record(obj: Value) -> Result<Record, String> {
    record_from(obj, None)
}

/// `record`, its `spec.devices` already canonicalised when `devices` is given.
fn record_from(obj: Value, devices: Option<Devices>) -> Result<Record, String> {
    let Value::Object(mut obj) = obj else {
        return Err("a ResourceSlice must be a JSON object".into());
    };
    match obj.get("kind") {
        None => {}
        Some(Value::String(k)) if k == "ResourceSlice" => {}
        Some(other) => return Err(format!("expected kind ResourceSlice, got {other}")),
    }
    let Some(Value::Object(mut meta)) = obj.remove("metadata") else {
        return Err("missing metadata".into());
    };
    let name = take_str(&mut meta, "name")
        .filter(|n| !n.is_empty())
        .ok_or("missing metadata.name")?;
    let Some(Value::Object(mut spec)) = obj.remove("spec") else {
        return Err(format!("{name}: missing spec"));
    };
    let Some(Value::Object(mut pool)) = spec.remove("pool") else {
        return Err(format!("{name}: missing spec.pool"));
    };
    let pool_name =
        take_str(&mut pool, "name").ok_or_else(|| format!("{name}: missing spec.pool.name"))?;
    let generation = int(&pool, "generation").map_err(|e| format!("{name}: {e}"))?;
    let count = int(&pool, "resourceSliceCount").map_err(|e| format!("{name}: {e}"))?;
    let driver = match spec.get("driver") {
        Some(Value::String(d)) => d.clone(),
        _ => String::new(),
    };
    let node_name = match spec.get("nodeName") {
        Some(Value::String(n)) => Some(n.clone()),
        _ => None,
    };
    let node_selection = canonical::NODE_SELECTION_KEYS
        .iter()
        .find_map(|k| Some((*k, spec.remove(*k)?)));
    let mut devices = devices.unwrap_or_else(|| {
        let mut devices = Devices::default();
        if let Some(Value::Array(list)) = spec.remove("devices") {
            list.iter().for_each(|device| devices.push(device));
        }
        devices
    });
    devices.names.shrink_to_fit();
    devices.jsons.shrink_to_fit();
    let owner_references = meta.remove("ownerReferences");
    let h = Header {
        driver: &driver,
        pool: &pool_name,
        generation,
        count,
        node_selection,
        shared_counters: spec.remove("sharedCounters"),
        carried: fields::carried()
            .iter()
            .map(|f| spec.remove(f.name))
            .collect(),
        owner_references: owner_references.clone(),
    }
    .to_value();
    Ok(Record {
        uid: take_str(&mut meta, "uid").unwrap_or_default(),
        resource_version: take_str(&mut meta, "resourceVersion").unwrap_or_default(),
        name,
        driver,
        pool: pool_name,
        generation,
        resource_slice_count: count,
        node_name,
        device_names: devices.names,
        devices: devices.jsons,
        header: canonical::stored_header(&h),
        labels: meta.remove("labels").and_then(canonical::prune),
        annotations: meta.remove("annotations").and_then(canonical::prune),
        owner_references,
        finalizers: meta.remove("finalizers").filter(|v| !v.is_null()),
        deleting: meta.get("deletionTimestamp").is_some_and(|v| !v.is_null()),
    })
}

/// `decode_slice`: one object.
pub fn decode_slice(data: &[u8]) -> Result<Record, String> {
    let (obj, devices) = read(data, ItemSeed)?;
    record_from(obj, devices)
}

/// One JSON document read by `seed`. Its UTF-8 is checked once up front, so that the parts
/// skipped unparsed are checked too.
fn read<'de, S: DeserializeSeed<'de>>(data: &'de [u8], seed: S) -> Result<S::Value, String> {
    let not_json = |e: &dyn std::fmt::Display| format!("not a JSON document: {e}");
    let text = std::str::from_utf8(data).map_err(|e| not_json(&e))?;
    let mut de = serde_json::Deserializer::from_str(text);
    seed.deserialize(&mut de)
        .and_then(|value| de.end().map(|()| value))
        .map_err(|e| not_json(&e))
}

/// `decode_list`: `(list resourceVersion, records)`.
///
/// The items become records one at a time, straight from the bytes: a `Value` tree of a whole
/// list takes about 30 times its JSON, a record about its JSON's size. Problems are reported
/// in the order a whole-document parse would find them (the Python core's): a syntax error
/// anywhere first, then a list that is not an object, its `kind`, then its items.
pub fn decode_list(data: &[u8]) -> Result<(String, Vec<Record>), String> {
    list_result(read(data, ListSeed)?, None)
}

/// What `decode_list` answers for a parsed document; `items` replaces the list's own items.
fn list_result(
    list: Option<List>,
    items: Option<Result<Vec<Record>, String>>,
) -> Result<(String, Vec<Record>), String> {
    let list = list.ok_or("a ResourceSliceList must be a JSON object")?;
    match &list.kind {
        None => {}
        Some(Value::String(k)) if k == "ResourceSliceList" => {}
        Some(other) => return Err(format!("expected kind ResourceSliceList, got {other}")),
    }
    Ok((list.version, items.unwrap_or(list.items)?))
}

/// `decode_list` of a document that arrives in chunks (an HTTP response as it is read): each
/// item becomes a record as soon as its last byte is in, and its bytes are dropped, so the
/// whole JSON and the records never coexist. It answers what `decode_list` answers for the
/// chunks joined.
///
/// A small scanner follows the top-level object and its `items` arrays; everything but the
/// items (and the commas between them) is kept as a skeleton document, parsed at the end as
/// `decode_list` parses a whole one. Items are whole JSON values taken out of a well-formed
/// array, so the skeleton is well-formed exactly when the document is; a misplaced byte
/// inside an `items` array is a syntax error found here.
#[derive(Default)]
pub struct ListStream {
    /// Bytes not scanned yet: the start of a value or item still arriving.
    pending: Vec<u8>,
    skeleton: Vec<u8>,
    at: At,
    /// The last `items` member's records (or first problem), if it was an array.
    items: Option<Result<Vec<Record>, String>>,
    /// A syntax error found while scanning an `items` array.
    broken: Option<String>,
}

/// Where the scanner is (JSON whitespace between tokens is skipped, and dropped).
#[derive(Clone, Copy, Default, PartialEq)]
enum At {
    #[default]
    Start,
    /// Not an object, or a misplaced byte at the top level: the rest goes to the skeleton as
    /// it is, where the final parse reports it.
    Verbatim,
    Key {
        first: bool,
    },
    Colon {
        items: bool,
    },
    Value {
        items: bool,
    },
    AfterValue,
    Item {
        first: bool,
    },
    AfterItem,
    End,
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

/// The end of the JSON string starting at `s[0]` (a quote), if it is all in `s`.
fn string_end(s: &[u8]) -> Option<usize> {
    let mut i = 1;
    while i < s.len() {
        match s[i] {
            b'"' => return Some(i + 1),
            b'\\' => i += 2,
            _ => i += 1,
        }
    }
    None
}

/// The end of the JSON value starting at `s[0]`, if it is all in `s` (a scalar ends at a
/// delimiter, so one at the very end of `s` may go on). Well-formed or not: the parse of
/// the value, or of the skeleton, tells.
fn value_end(s: &[u8]) -> Option<usize> {
    match s[0] {
        b'"' => string_end(s),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = 0;
            while i < s.len() {
                match s[i] {
                    b'"' => i += string_end(&s[i..])? - 1,
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            None
        }
        _ => s
            .iter()
            .position(|&b| matches!(b, b',' | b'}' | b']') || is_space(b)),
    }
}

impl ListStream {
    pub fn feed(&mut self, chunk: &[u8]) {
        if self.broken.is_some() {
            return;
        }
        self.pending.extend_from_slice(chunk);
        let used = self.scan();
        self.pending.drain(..used);
    }

    /// Scans what `pending` holds; how many of its bytes are done with.
    fn scan(&mut self) -> usize {
        let s = std::mem::take(&mut self.pending);
        let mut i = 0;
        loop {
            if self.at == At::Verbatim {
                self.skeleton.extend_from_slice(&s[i..]);
                i = s.len();
            }
            while i < s.len() && is_space(s[i]) {
                i += 1;
            }
            if i == s.len() || self.broken.is_some() {
                break;
            }
            let b = s[i];
            let rest = &s[i..];
            let (next, used, copied) = match self.at {
                At::Verbatim => unreachable!("handled above"),
                At::Start if b == b'{' => (At::Key { first: true }, 1, true),
                At::Key { first: true } if b == b'}' => (At::End, 1, true),
                At::Key { .. } if b == b'"' => {
                    let Some(end) = string_end(rest) else { break };
                    let key = &rest[..end];
                    let items = key == b"\"items\""
                        || (key.contains(&b'\\')
                            && serde_json::from_slice::<String>(key).is_ok_and(|k| k == "items"));
                    (At::Colon { items }, end, true)
                }
                At::Colon { items } if b == b':' => (At::Value { items }, 1, true),
                At::Value { items: true } if b == b'[' => {
                    self.items = Some(Ok(Vec::new()));
                    (At::Item { first: true }, 1, true)
                }
                At::Value { items } => {
                    let Some(end) = value_end(rest) else { break };
                    if items {
                        self.items = None;
                    }
                    (At::AfterValue, end, true)
                }
                At::AfterValue if b == b',' => (At::Key { first: false }, 1, true),
                At::AfterValue if b == b'}' => (At::End, 1, true),
                At::Item { first: true } if b == b']' => (At::AfterValue, 1, true),
                At::Item { .. } if !matches!(b, b',' | b']' | b'}' | b':') => {
                    let Some(end) = value_end(rest) else { break };
                    self.item(&rest[..end]);
                    (At::AfterItem, end, false)
                }
                At::AfterItem if b == b',' => (At::Item { first: false }, 1, false),
                At::AfterItem if b == b']' => (At::AfterValue, 1, true),
                At::Item { .. } | At::AfterItem => {
                    self.broken = Some(format!("expected an item, ',' or ']' at {:?}", b as char));
                    break;
                }
                _ => (At::Verbatim, 0, false),
            };
            if copied {
                self.skeleton.extend_from_slice(&rest[..used]);
            }
            self.at = next;
            i += used;
        }
        self.pending = s;
        i
    }

    /// One element of an `items` array.
    fn item(&mut self, json: &[u8]) {
        let parsed = match &self.items {
            Some(Ok(_)) => read(json, ItemSeed).map(Some),
            // After a problem the rest is only checked, as `decode_list` does.
            _ => read(json, PhantomData::<IgnoredAny>).map(|_| None),
        };
        match (parsed, &mut self.items) {
            (Err(e), _) => self.broken = Some(e),
            (Ok(Some((obj, devices))), Some(Ok(records))) => match record_from(obj, devices) {
                Ok(r) => records.push(r),
                Err(e) => self.items = Some(Err(e)),
            },
            _ => {}
        }
    }

    pub fn finish(mut self) -> Result<(String, Vec<Record>), String> {
        if matches!(self.at, At::Item { .. } | At::AfterItem) && self.broken.is_none() {
            self.broken = Some("EOF while parsing a list".into());
        }
        if let Some(e) = self.broken {
            return Err(if e.starts_with("not a JSON document") {
                e
            } else {
                format!("not a JSON document: {e}")
            });
        }
        self.skeleton.extend_from_slice(&self.pending);
        list_result(read(&self.skeleton, ListSeed)?, self.items)
    }
}

/// A ResourceSliceList's members; the last of a repeated member counts, as in a `Value`.
struct List {
    kind: Option<Value>,
    version: String,
    /// The records, or the first item's problem.
    items: Result<Vec<Record>, String>,
}

/// The JSON scalars, for a visitor of any value that wants none of them: `$answer`.
macro_rules! scalars_answer {
    ($answer:expr) => {
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON value")
        }
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok($answer)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok($answer)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok($answer)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok($answer)
        }
        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok($answer)
        }
    };
}

/// `$seed`, a visitor, as the seed of any JSON value.
macro_rules! any_value_seed {
    ($seed:ty) => {
        impl<'de> DeserializeSeed<'de> for $seed {
            type Value = <$seed as Visitor<'de>>::Value;

            fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Self::Value, D::Error> {
                de.deserialize_any(self)
            }
        }
    };
}

fn skip_elements<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

/// The top level: `Some` for an object.
struct ListSeed;

any_value_seed!(ListSeed);

impl<'de> Visitor<'de> for ListSeed {
    type Value = Option<List>;

    scalars_answer!(None);

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        skip_elements(seq).map(|()| None)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut list = List {
            kind: None,
            version: String::new(),
            items: Ok(Vec::new()),
        };
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "kind" => list.kind = Some(map.next_value()?),
                "metadata" => {
                    list.version = match map.next_value()? {
                        Value::Object(mut meta) => {
                            take_str(&mut meta, "resourceVersion").unwrap_or_default()
                        }
                        _ => String::new(),
                    }
                }
                "items" => list.items = map.next_value_seed(ItemsSeed)?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Some(list))
    }
}

/// The `items` member: each element parsed on its own and turned into a record at once.
struct ItemsSeed;

any_value_seed!(ItemsSeed);

impl<'de> Visitor<'de> for ItemsSeed {
    type Value = Result<Vec<Record>, String>;

    scalars_answer!(Err("items is not a list".into()));

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Err("items is not a list".into()))
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Ok(Vec::new()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut records = Vec::new();
        while let Some((obj, devices)) = seq.next_element_seed(ItemSeed)? {
            match record_from(obj, devices) {
                Ok(r) => records.push(r),
                // The rest is still parsed: a syntax error after it is reported first.
                Err(e) => return skip_elements(seq).map(|()| Err(e)),
            }
        }
        Ok(Ok(records))
    }
}

/// One slice: a `Value` of all but its `spec.devices`, which are canonicalised one by one as
/// they are parsed (see `Node`). Anything but an object comes back as `null`, which `record`
/// refuses as it refuses any non-object.
#[derive(Clone, Copy)]
struct ItemSeed;

any_value_seed!(ItemSeed);

impl<'de> Visitor<'de> for ItemSeed {
    type Value = (Value, Option<Devices>);

    scalars_answer!((Value::Null, None));

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok((Value::Null, None))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        skip_elements(seq).map(|()| (Value::Null, None))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let (mut obj, spec) = members_but(map, "spec", SpecSeed)?;
        let devices = spec.and_then(|(spec, devices)| {
            obj.insert("spec".into(), spec);
            devices
        });
        Ok((Value::Object(obj), devices))
    }
}

/// A slice's `spec`: a `Value` of all but its `devices`, and those (when a list).
#[derive(Clone, Copy)]
struct SpecSeed;

any_value_seed!(SpecSeed);

impl<'de> Visitor<'de> for SpecSeed {
    type Value = (Value, Option<Devices>);

    scalars_answer!((Value::Null, None));

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok((Value::Null, None))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        skip_elements(seq).map(|()| (Value::Null, None))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let (spec, devices) = members_but(map, "devices", DevicesSeed)?;
        Ok((Value::Object(spec), devices.flatten()))
    }
}

/// `spec.devices`: each device canonicalised as soon as it is parsed; `None` if not a list.
#[derive(Clone, Copy)]
struct DevicesSeed;

any_value_seed!(DevicesSeed);

impl<'de> Visitor<'de> for DevicesSeed {
    type Value = Option<Devices>;

    scalars_answer!(None);

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut devices = Devices::default();
        while let Some(device) = seq.next_element::<Node<'de>>()? {
            devices.push(&device);
        }
        Ok(Some(devices))
    }
}

/// A device as parsed: lighter than a `Value` (strings borrowed from the input where they
/// have no escapes, members in one sorted vector), since a relist builds one per device only
/// to write its canonical JSON.
enum Node<'de> {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(Cow<'de, str>),
    List(Vec<Node<'de>>),
    /// Sorted by key; of a repeated key the last value, as in a `Value`.
    Map(Vec<(Cow<'de, str>, Node<'de>)>),
}

impl Tree for Node<'_> {
    fn view(&self) -> View<'_, Self> {
        match self {
            Node::Null => View::Null,
            Node::Bool(b) => View::Bool(*b),
            Node::Int(i) => View::Int(*i),
            Node::UInt(u) => View::UInt(*u),
            Node::Float(f) => View::Float(*f),
            Node::Str(s) => View::Str(s),
            Node::List(items) => View::List(items),
            Node::Map(_) => View::Map,
        }
    }
    fn for_each_member<'a>(&'a self, f: &mut dyn FnMut(&'a str, &'a Self)) {
        if let Node::Map(members) = self {
            members.iter().for_each(|(k, v)| f(k, v));
        }
    }
    fn member(&self, key: &str) -> Option<&Self> {
        let Node::Map(members) = self else {
            return None;
        };
        let i = members.binary_search_by(|(k, _)| (**k).cmp(key)).ok()?;
        Some(&members[i].1)
    }
}

impl<'de> Deserialize<'de> for Node<'de> {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        de.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Node::Null)
    }
    fn visit_bool<E>(self, b: bool) -> Result<Self::Value, E> {
        Ok(Node::Bool(b))
    }
    fn visit_i64<E>(self, i: i64) -> Result<Self::Value, E> {
        Ok(Node::Int(i))
    }
    // As a `Value` shows it: an int when it fits in i64.
    fn visit_u64<E>(self, u: u64) -> Result<Self::Value, E> {
        Ok(i64::try_from(u).map_or(Node::UInt(u), Node::Int))
    }
    fn visit_f64<E>(self, f: f64) -> Result<Self::Value, E> {
        Ok(Node::Float(f))
    }
    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Self::Value, E> {
        Ok(Node::Str(Cow::Borrowed(s)))
    }
    fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
        Ok(Node::Str(Cow::Owned(s.to_owned())))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::List(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut members = Vec::new();
        while let Some(key) = map.next_key::<Node<'de>>()? {
            let Node::Str(key) = key else {
                unreachable!("JSON object keys are strings");
            };
            members.push((key, map.next_value()?));
        }
        // Stable, so that after reversing the last of equal keys comes first and is kept.
        members.reverse();
        members.sort_by(|a, b| a.0.cmp(&b.0));
        members.dedup_by(|later, first| later.0 == first.0);
        Ok(Node::Map(members))
    }
}

/// An object's members but one, and that one read otherwise (see `members_but`).
type MembersBut<T> = (Map<String, Value>, Option<T>);

/// An object's members as a `Map`, except `key`, read with `seed` (the last one, if repeated).
fn members_but<'de, A: MapAccess<'de>, S: DeserializeSeed<'de> + Copy>(
    mut map: A,
    key: &str,
    seed: S,
) -> Result<MembersBut<S::Value>, A::Error> {
    let mut members = Map::new();
    let mut special = None;
    while let Some(k) = map.next_key::<String>()? {
        if k == key {
            special = Some(map.next_value_seed(seed)?);
        } else {
            members.insert(k, map.next_value()?);
        }
    }
    Ok((members, special))
}

/// A decoded watch event.
pub enum Event {
    /// `ADDED` / `MODIFIED` / `DELETED` with its object.
    Object(String, Box<Record>),
    /// The bookmark's resourceVersion.
    Bookmark(String),
    /// The Status object as canonical JSON.
    Error(String),
}

/// `decode_watch_event`.
pub fn decode_watch_event(data: &[u8]) -> Result<Event, String> {
    let Value::Object(mut event) = parse(data)? else {
        return Err("a watch event must be a JSON object".into());
    };
    let kind = take_str(&mut event, "type").ok_or("watch event without type")?;
    let object = event.remove("object").ok_or("watch event without object")?;
    match kind.as_str() {
        "ADDED" | "MODIFIED" | "DELETED" => Ok(Event::Object(kind, Box::new(record(object)?))),
        "BOOKMARK" => {
            let version = object
                .get("metadata")
                .and_then(|m| m.get("resourceVersion"))
                .and_then(Value::as_str);
            Ok(Event::Bookmark(version.unwrap_or_default().to_owned()))
        }
        "ERROR" => Ok(Event::Error(canonical::to_json(
            &canonical::prune(object).unwrap_or_default(),
        ))),
        other => Err(format!("unknown watch event type {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Devices that exercise what the two trees must agree on: escapes, repeated keys, every
    /// kind of number, empties, quantities and taint times.
    const DEVICES: &str = r#"[
        {"name": "a"},
        {"name": "b\u00e9\"\n", "attributes": {"z": {"string": "x\u2028<&>"}, "a": {"int": -3}},
         "capacity": {"m": {"value": "1024Mi"}, "n": {"value": 2048}, "o": {"value": "x"}},
         "taints": [{"key": "k", "effect": "NoSchedule", "timeAdded": "2026-01-02T05:04:05+02:00"}],
         "x": {"big": 18446744073709551615, "f": 1.5, "e": 1e3, "null": null, "empty": {}, "l": [[], {}, null, 0]},
         "dup": 1, "dup": 2, "attributes": {"only": {"bool": true}}},
        null, 3, "s", [], {}
    ]"#;

    fn item(i: usize) -> String {
        format!(
            r#"{{"metadata": {{"name": "s-{i}", "uid": "u", "resourceVersion": "{i}",
                 "labels": {{"a": "b"}}, "managedFields": [{{"f": {{}}}}]}},
               "spec": {{"driver": "d", "pool": {{"name": "p", "generation": 2}},
                         "nodeName": "n", "devices": {DEVICES}, "other": [1]}},
               "status": {{}}}}"#
        )
    }

    #[test]
    fn a_list_decodes_as_its_items_one_by_one_whole_or_in_chunks() {
        let items: Vec<String> = (0..3).map(item).collect();
        let list = format!(
            r#"{{"kind": "ResourceSliceList", "metadata": {{"resourceVersion": "9"}},
                 "items": [{}]}}"#,
            items.join(",")
        );
        let (version, records) = decode_list(list.as_bytes()).unwrap();
        assert_eq!(version, "9");
        assert_eq!(records.len(), 3);
        for (rec, text) in records.iter().zip(&items) {
            // The `Value` path (watch events) and the streaming one give the same record.
            let value: Value = serde_json::from_str(text).unwrap();
            assert_eq!(rec, &record(value).unwrap());
            assert_eq!(rec, &decode_slice(text.as_bytes()).unwrap());
        }
        // Non-object devices are kept as they are (the apiserver never sends them), empty
        // ones dropped: as before, in both paths.
        let names: Vec<&str> = records[0].device_names.iter().collect();
        assert_eq!(names, ["a", "bé\"\n", "", ""]);
        for size in [1, 7, 4096] {
            let mut stream = ListStream::default();
            list.as_bytes().chunks(size).for_each(|c| stream.feed(c));
            assert_eq!(stream.finish().unwrap(), (version.clone(), records.clone()));
        }
        let dup = records[0].devices.get(1);
        assert!(dup.contains(r#""dup":2"#) && dup.contains(r#""attributes":{"only""#));
        assert!(dup.contains(r#""value":"1Gi""#) && dup.contains("18446744073709551615"));
    }

    #[test]
    fn repeated_spec_and_devices_keep_the_last() {
        let text = r#"{"metadata": {"name": "x"},
            "spec": {"pool": {"name": "old"}, "devices": [{"name": "old"}]},
            "spec": {"pool": {"name": "p"}, "devices": [{"name": "a"}], "devices": 3}}"#;
        let rec = decode_slice(text.as_bytes()).unwrap();
        assert_eq!((rec.pool.as_str(), rec.devices.len()), ("p", 0));
        let value: Value = serde_json::from_str(text).unwrap();
        assert_eq!(rec, record(value).unwrap());
    }
}
