//! Canonical JSON (docs/core.md §1): the device and slice-header forms, and semantic equality.
//!
//! One writer serves both trees it meets: `serde_json::Value` (stored objects) and the
//! validator's `Input` (desired data), through the `Tree` trait. Members come out sorted by
//! UTF-8 bytes (both trees keep them so), empties are skipped while writing instead of in a
//! separate pass, and strings are escaped exactly as Python's `json.dumps(ensure_ascii=False)`
//! (and `serde_json`) escape them.
use serde_json::{Map, Value};

use crate::{fields, quantity};

/// What the writer needs to know of one node.
pub enum View<'a, T> {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(&'a str),
    List(&'a [T]),
    /// An object: read its members with `Tree::for_each_member`.
    Map,
}

/// A JSON-shaped tree whose objects iterate in sorted key order.
pub trait Tree: Sized {
    fn view(&self) -> View<'_, Self>;
    fn for_each_member<'a>(&'a self, f: &mut dyn FnMut(&'a str, &'a Self));
    fn member(&self, key: &str) -> Option<&Self>;
    fn items(&self) -> &[Self] {
        match self.view() {
            View::List(items) => items,
            _ => &[],
        }
    }
}

impl Tree for Value {
    fn view(&self) -> View<'_, Self> {
        match self {
            Value::Null => View::Null,
            Value::Bool(b) => View::Bool(*b),
            Value::Number(n) => match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => View::Int(i),
                (None, Some(u)) => View::UInt(u),
                _ => View::Float(n.as_f64().unwrap_or_default()),
            },
            Value::String(s) => View::Str(s),
            Value::Array(items) => View::List(items),
            Value::Object(_) => View::Map,
        }
    }
    fn for_each_member<'a>(&'a self, f: &mut dyn FnMut(&'a str, &'a Self)) {
        if let Value::Object(map) = self {
            map.iter().for_each(|(k, v)| f(k, v));
        }
    }
    fn member(&self, key: &str) -> Option<&Self> {
        self.get(key)
    }
}

/// Nodes written differently from what the tree holds, by address: `Some(text)` writes the
/// string `text`, `None` leaves the member out. Substituting while writing spares a mutable
/// copy of every device just to canonicalise two quantities.
pub type Substitutions<T> = Vec<(*const T, Option<String>)>;

/// How `write_str` writes each byte: 0 as it is, `u` as `\u00xx`, else `\` and that byte.
/// A table: strings are most of the canonical text, and most bytes need no escape.
const ESCAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut c = 0;
    while c < 0x20 {
        table[c] = b'u';
        c += 1;
    }
    table[b'\n' as usize] = b'n';
    table[b'\r' as usize] = b'r';
    table[b'\t' as usize] = b't';
    table[0x08] = b'b';
    table[0x0c] = b'f';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

/// A JSON string as Python's `json.dumps(ensure_ascii=False)` writes it: only `"`, `\\` and
/// controls escaped (the short forms where JSON has them, else `\u00xx`).
fn write_str(s: &str, out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.reserve(s.len() + 2);
    out.push(b'"');
    let bytes = s.as_bytes();
    // Nearly every string has nothing to escape: one pass of plain comparisons tells, and
    // it is copied whole. A fold, not `all`: without an early exit it is vectorised.
    let plain = !bytes.iter().fold(false, |bad, &c| {
        bad | (c < 0x20) | (c == b'"') | (c == b'\\')
    });
    if plain {
        out.extend_from_slice(bytes);
        out.push(b'"');
        return;
    }
    let mut start = 0;
    for (i, &c) in bytes.iter().enumerate() {
        let short = ESCAPE[usize::from(c)];
        if short == 0 {
            continue;
        }
        out.extend_from_slice(&bytes[start..i]);
        start = i + 1;
        if short == b'u' {
            out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(c >> 4)],
                HEX[usize::from(c & 0xf)],
            ]);
        } else {
            out.extend_from_slice(&[b'\\', short]);
        }
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Appends the canonical JSON of `v`; false (nothing appended) when it prunes to nothing.
pub fn write<T: Tree>(v: &T, subs: &Substitutions<T>, out: &mut Vec<u8>) -> bool {
    if !subs.is_empty() {
        if let Some((_, sub)) = subs.iter().find(|(p, _)| std::ptr::eq(*p, v)) {
            let Some(s) = sub else { return false };
            write_str(s, out);
            return true;
        }
    }
    let start = out.len();
    let mut any = false;
    let mut member = |out: &mut Vec<u8>, key: Option<&str>, item: &T| {
        let mark = out.len();
        if any {
            out.push(b',');
        }
        if let Some(k) = key {
            write_str(k, out);
            out.push(b':');
        }
        if write(item, subs, out) {
            any = true;
        } else {
            out.truncate(mark);
        }
    };
    match v.view() {
        View::Null => return false,
        View::Bool(b) => out.extend_from_slice(if b { b"true" } else { b"false" }),
        View::Int(i) => out.extend_from_slice(itoa::Buffer::new().format(i).as_bytes()),
        View::UInt(u) => out.extend_from_slice(itoa::Buffer::new().format(u).as_bytes()),
        View::Float(f) => {
            serde_json::to_writer(&mut *out, &f).expect("writing to a Vec cannot fail")
        }
        View::Str(s) => write_str(s, out),
        View::List(items) => {
            out.push(b'[');
            items.iter().for_each(|item| member(out, None, item));
            out.push(b']');
        }
        View::Map => {
            out.push(b'{');
            v.for_each_member(&mut |k, item| member(out, Some(k), item));
            out.push(b'}');
        }
    }
    if matches!(v.view(), View::List(_) | View::Map) && !any {
        out.truncate(start);
        return false;
    }
    true
}

/// Canonical JSON text of `v` with `subs` (`null` when nothing is left of it).
pub fn to_json_with<T: Tree>(v: &T, subs: &Substitutions<T>) -> String {
    let mut out = Vec::with_capacity(512);
    if !write(v, subs, &mut out) {
        out.extend_from_slice(b"null");
    }
    String::from_utf8(out).expect("JSON written from str is UTF-8")
}

/// Canonical JSON text of `v`.
pub fn to_json<T: Tree>(v: &T) -> String {
    to_json_with(v, &Vec::new())
}

/// Drops `null` members, empty lists and empty objects, recursively (absent == empty).
pub fn prune(mut v: Value) -> Option<Value> {
    fn keep(v: &mut Value) -> bool {
        match v {
            Value::Null => false,
            Value::Array(items) => {
                items.retain_mut(keep);
                !items.is_empty()
            }
            Value::Object(map) => {
                map.retain(|_, v| keep(v));
                !map.is_empty()
            }
            _ => true,
        }
    }
    keep(&mut v).then_some(v)
}

/// The node selection members of a slice spec; the API allows one of them.
pub const NODE_SELECTION_KEYS: [&str; 4] = [
    "nodeName",
    "nodeSelector",
    "allNodes",
    "perDeviceNodeSelection",
];

/// The part of a slice that is not its device list nor its identity (docs/core.md §1).
pub struct Header<'a> {
    pub driver: &'a str,
    pub pool: &'a str,
    pub generation: i64,
    pub count: i64,
    pub node_selection: Option<(&'static str, Value)>,
    pub shared_counters: Option<Value>,
    /// The values of `fields::carried()`, by its index (shorter: the rest are absent).
    pub carried: Vec<Option<Value>>,
    pub owner_references: Option<Value>,
}

/// The entries of `ownerReferences` with `controller: true`.
///
/// The API allows one controller reference per object: that one is the controller's (its
/// owner's). Other owner references, labels, annotations and finalizers belong to other
/// clients: an update keeps them as stored, and a change of them alone is no change.
pub fn controller_references(owner_references: Option<Value>) -> Option<Value> {
    match owner_references {
        Some(Value::Array(refs)) => Some(Value::Array(
            refs.into_iter()
                .filter(|r| r.get("controller") == Some(&Value::Bool(true)))
                .collect(),
        )),
        other => other,
    }
}

impl Header<'_> {
    /// As one pruned JSON object: what the controller owns of a slice, the spec and the
    /// controller reference (`controller_references`).
    pub fn to_value(self) -> Value {
        let mut h = Map::new();
        h.insert("driver".into(), Value::from(self.driver));
        let mut p = Map::new();
        p.insert("name".into(), Value::from(self.pool));
        p.insert("generation".into(), Value::from(self.generation));
        p.insert("resourceSliceCount".into(), Value::from(self.count));
        h.insert("pool".into(), Value::Object(p));
        if let Some((key, v)) = self.node_selection {
            h.insert(key.into(), v);
        }
        let carried = fields::carried().iter().map(|f| f.name).zip(self.carried);
        let owner_references = controller_references(self.owner_references);
        for (key, v) in std::iter::once(("sharedCounters", self.shared_counters))
            .chain(carried)
            .chain([("ownerReferences", owner_references)])
        {
            if let Some(v) = v {
                h.insert(key.into(), v);
            }
        }
        prune(Value::Object(h)).unwrap_or_default()
    }
}

/// Calls `f` on every quantity of a device (the paths of docs/core.md §1).
pub fn device_quantities<'a, T: Tree>(device: &'a T, f: &mut dyn FnMut(&'a T)) {
    if let Some(capacity) = device.member("capacity") {
        capacity.for_each_member(&mut |_, cap| {
            if let Some(v) = cap.member("value") {
                f(v);
            }
            let Some(policy) = cap.member("requestPolicy") else {
                return;
            };
            if let Some(v) = policy.member("default") {
                f(v);
            }
            if let Some(values) = policy.member("validValues") {
                values.items().iter().for_each(&mut *f);
            }
            if let Some(range) = policy.member("validRange") {
                range.for_each_member(&mut |key, v| {
                    if matches!(key, "min" | "max" | "step") {
                        f(v);
                    }
                });
            }
        });
    }
    if let Some(consumes) = device.member("consumesCounters") {
        for set in consumes.items() {
            counter_quantities(set, f);
        }
    }
    if let Some(allocatable) = device.member("nodeAllocatableResources") {
        allocatable.for_each_member(&mut |_, resource| {
            for (part, keys) in ALLOCATABLE_QUANTITIES {
                if let Some(holder) = resource.member(part) {
                    for key in keys {
                        if let Some(v) = holder.member(key) {
                            f(v);
                        }
                    }
                }
            }
        });
    }
}

/// The quantities of a `nodeAllocatableResources` entry, by member.
const ALLOCATABLE_QUANTITIES: [(&str, [&str; 2]); 2] = [
    ("mapping", ["capacityMultiplier", "deviceMultiplier"]),
    ("overhead", ["perContainer", "perPod"]),
];

/// Quantities of a counter set (`{"counters": {name: {"value": q}}}`).
pub fn counter_quantities<'a, T: Tree>(set: &'a T, f: &mut dyn FnMut(&'a T)) {
    let Some(counters) = set.member("counters") else {
        return;
    };
    counters.for_each_member(&mut |_, counter| {
        if let Some(v) = counter.member("value") {
            f(v);
        }
    });
}

/// Quantities of a slice header or slice: `sharedCounters[*].counters.*.value`.
pub fn header_quantities<'a, T: Tree>(header: &'a T, f: &mut dyn FnMut(&'a T)) {
    if let Some(sets) = header.member("sharedCounters") {
        for set in sets.items() {
            counter_quantities(set, f);
        }
    }
}

/// How a quantity node is written: `rewrite` maps its string (an int as its decimal string).
pub fn quantity_sub<T: Tree>(
    subs: &mut Substitutions<T>,
    v: &T,
    rewrite: &mut dyn FnMut(&str) -> Option<String>,
) {
    let new = match v.view() {
        View::Str(s) => rewrite(s).filter(|n| n != s),
        View::Int(i) => rewrite(&i.to_string()),
        _ => None,
    };
    if new.is_some() {
        subs.push((v, new));
    }
}

/// Substitutions that canonicalise a device: quantities, and taint times in UTC.
pub fn device_subs<T: Tree>(
    device: &T,
    rewrite: &mut dyn FnMut(&str) -> Option<String>,
) -> Substitutions<T> {
    let mut subs = Vec::new();
    device_quantities(device, &mut |v| quantity_sub(&mut subs, v, &mut *rewrite));
    if let Some(taints) = device.member("taints") {
        for time in taints.items().iter().filter_map(|t| t.member("timeAdded")) {
            if let View::Str(s) = time.view() {
                if let Some(n) = normalise_time(s).filter(|n| n != s) {
                    subs.push((time, Some(n)));
                }
            }
        }
    }
    subs
}

/// A map key in error paths: `["x/y"]`, as Python's `json.dumps` quotes it.
pub fn quote(key: &str) -> String {
    let mut out = Vec::with_capacity(key.len() + 2);
    write_str(key, &mut out);
    String::from_utf8(out).expect("JSON written from str is UTF-8")
}

/// RFC 3339 (`Z` or `±HH:MM`, optional fraction) to `YYYY-MM-DDTHH:MM:SSZ` in UTC.
pub fn normalise_time(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = b.get(r)?;
        part.iter().all(u8::is_ascii_digit).then(|| {
            part.iter()
                .fold(0, |acc, &d| acc * 10 + i64::from(d - b'0'))
        })
    };
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let mut pos = 19;
    if b[pos] == b'.' {
        pos += 1;
        let start = pos;
        while pos < b.len() && b[pos].is_ascii_digit() {
            pos += 1;
        }
        if pos == start {
            return None;
        }
    }
    let offset_minutes = match b.get(pos..)? {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let digits = [*h1, *h2, *m1, *m2];
            if !digits.iter().all(u8::is_ascii_digit) {
                return None;
            }
            let (h, m) = (
                i64::from(h1 - b'0') * 10 + i64::from(h2 - b'0'),
                i64::from(m1 - b'0') * 10 + i64::from(m2 - b'0'),
            );
            if h > 23 || m > 59 {
                return None;
            }
            if *sign == b'+' {
                h * 60 + m
            } else {
                -(h * 60 + m)
            }
        }
        _ => return None,
    };
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let days_in_month = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month[(month - 1) as usize]
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    let seconds = days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second
        - offset_minutes * 60;
    let (days, rem) = (seconds.div_euclid(86400), seconds.rem_euclid(86400));
    let (y, mo, d) = civil_from_days(days);
    if !(1..=9999).contains(&y) {
        return None;
    }
    Some(format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    ))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (
        if m <= 2 {
            yoe + era * 400 + 1
        } else {
            yoe + era * 400
        },
        m,
        d,
    )
}

/// A device read from the apiserver as `(name, canonical JSON)`; None when it is empty.
/// Quantities and times that parse are rewritten (the server stores them canonically
/// already; this keeps both sides alike).
pub fn stored_device<T: Tree>(device: &T) -> Option<(String, String)> {
    let subs = device_subs(device, &mut quantity::canonical);
    let name = match device.member("name").map(Tree::view) {
        Some(View::Str(name)) => name.to_owned(),
        _ => String::new(),
    };
    let mut out = Vec::with_capacity(512);
    write(device, &subs, &mut out).then(|| {
        (
            name,
            String::from_utf8(out).expect("JSON written from str is UTF-8"),
        )
    })
}

/// Canonical JSON of a stored slice header (its `sharedCounters` quantities).
pub fn stored_header(header: &Value) -> String {
    let mut subs = Vec::new();
    header_quantities(header, &mut |v| {
        quantity_sub(&mut subs, v, &mut quantity::canonical)
    });
    to_json_with(header, &subs)
}

fn parse(json: &str) -> Value {
    serde_json::from_str(json).expect("canonical JSON written by this crate")
}

/// Semantic equality of a desired device and a stored one, both as canonical JSON.
pub fn device_eq(desired: &str, stored: &str) -> bool {
    // One shared text (text.rs) is equal without reading it.
    if std::ptr::eq(desired, stored) || desired == stored {
        return true;
    }
    let (d, s) = (parse(desired), parse(stored));
    let mut s_subs = device_subs(&s, &mut quantity::value_key);
    // The server fills in a taint's time: a desired taint without one accepts any.
    let (dt, st) = (
        d.member("taints").map(Tree::items),
        s.member("taints").map(Tree::items),
    );
    for (dtaint, staint) in dt.unwrap_or_default().iter().zip(st.unwrap_or_default()) {
        if dtaint.get("timeAdded").is_none() {
            if let Some(time) = staint.get("timeAdded") {
                s_subs.push((time, None));
            }
        }
    }
    to_json_with(&d, &device_subs(&d, &mut quantity::value_key)) == to_json_with(&s, &s_subs)
}

/// Semantic equality of two slice headers as canonical JSON (counters by value).
pub fn header_eq(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    let by_value = |json: &str| {
        let v = parse(json);
        let mut subs = Vec::new();
        header_quantities(&v, &mut |q| {
            quantity_sub(&mut subs, q, &mut quantity::value_key)
        });
        to_json_with(&v, &subs)
    };
    by_value(a) == by_value(b)
}

/// Members whose keys are names (written `["key"]` in a path), not field names.
const MAP_FIELDS: [&str; 4] = [
    "attributes",
    "capacity",
    "counters",
    "nodeAllocatableResources",
];

#[derive(Clone)]
enum Segment {
    Key(String),
    Index(usize),
}

fn feature(path: &[Segment]) -> Option<&'static str> {
    let names: Vec<&str> = path
        .iter()
        .filter_map(|s| match s {
            Segment::Key(k) => Some(k.as_str()),
            Segment::Index(_) => None,
        })
        .collect();
    // The last of the gated names in the path decides
    // (`consumesCounters[0].compatibilityGroups` is DRADeviceCompatibilityGroups); Go's
    // `DroppedFieldsError.DisabledFeatures()` makes the same guesses, from counts.
    if let Some(f) = names.iter().rev().find_map(|n| fields::gate(n)) {
        return Some(f);
    }
    // A device's own node selection (spec.devices[i].nodeName...).
    (names.len() >= 3 && names[1] == "devices")
        .then(|| fields::device_gate(names[2]))
        .flatten()
}

fn path_text(path: &[Segment]) -> String {
    let mut out = String::new();
    for (i, segment) in path.iter().enumerate() {
        match segment {
            Segment::Index(n) => out.push_str(&format!("[{n}]")),
            Segment::Key(k) => {
                let in_map = i > 0
                    && matches!(&path[i - 1], Segment::Key(p) if MAP_FIELDS.contains(&p.as_str()));
                if in_map {
                    out.push_str(&format!("[{}]", quote(k)));
                } else {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(k);
                }
            }
        }
    }
    out
}

/// Appends the paths of what `sent` has and `stored` has not, or has otherwise.
fn not_contained(
    sent: &Value,
    stored: &Value,
    path: &mut Vec<Segment>,
    out: &mut Vec<Vec<Segment>>,
) {
    match (sent, stored) {
        (Value::Object(s), Value::Object(t)) => {
            for (key, v) in s {
                path.push(Segment::Key(key.clone()));
                match t.get(key) {
                    Some(w) => not_contained(v, w, path, out),
                    None => out.push(path.clone()),
                }
                path.pop();
            }
        }
        (Value::Array(s), Value::Array(t)) => {
            for (i, v) in s.iter().enumerate() {
                path.push(Segment::Index(i));
                match t.get(i) {
                    Some(w) => not_contained(v, w, path, out),
                    None => out.push(path.clone()),
                }
                path.pop();
            }
        }
        (Value::Object(_) | Value::Array(_), _) => out.push(path.clone()),
        _ if sent != stored => out.push(path.clone()),
        _ => {}
    }
}

/// A slice as `{"metadata": {"ownerReferences"}, "spec": {...}}`, quantities as value keys; a
/// device not `compared` is 0 (on both sides: equal, or not stored at all).
fn by_value(header: &str, devices: &[&str], compared: &[bool]) -> Value {
    let rewrite = |json: &str, spec: bool| {
        let v = parse(json);
        let mut subs = Vec::new();
        if spec {
            header_quantities(&v, &mut |q| {
                quantity_sub(&mut subs, q, &mut quantity::value_key)
            });
        } else {
            device_quantities(&v, &mut |q| {
                quantity_sub(&mut subs, q, &mut quantity::value_key)
            });
        }
        parse(&to_json_with(&v, &subs))
    };
    let Value::Object(mut spec) = rewrite(header, true) else {
        unreachable!("a header is an object")
    };
    let devices: Vec<Value> = devices
        .iter()
        .enumerate()
        .map(|(i, d)| match compared.get(i) {
            Some(true) => rewrite(d, false),
            _ => Value::from(0),
        })
        .collect();
    if !devices.is_empty() {
        spec.insert("devices".into(), Value::Array(devices));
    }
    let mut slice = Map::new();
    if let Some(owners) = spec.remove("ownerReferences") {
        let mut meta = Map::new();
        meta.insert("ownerReferences".into(), owners);
        slice.insert("metadata".into(), Value::Object(meta));
    }
    slice.insert("spec".into(), Value::Object(spec));
    Value::Object(slice)
}

/// `(paths, features)`: what was sent and is not in what was stored, and the feature gates
/// that are probably off for it (sorted). What the server or a webhook added (a label, a
/// taint's time, a default) is no drop; quantities compare by value.
pub fn dropped_fields(
    sent_header: &str,
    sent_devices: &[&str],
    stored_header: &str,
    stored_devices: &[&str],
) -> (Vec<String>, Vec<String>) {
    if sent_header == stored_header && sent_devices == stored_devices {
        return (Vec::new(), Vec::new());
    }
    // Only devices stored at the same position with other JSON are parsed and compared.
    let compared: Vec<bool> = sent_devices
        .iter()
        .enumerate()
        .map(|(i, d)| stored_devices.get(i).is_some_and(|s| s != d))
        .collect();
    let mut missing = Vec::new();
    not_contained(
        &by_value(sent_header, sent_devices, &compared),
        &by_value(stored_header, stored_devices, &compared),
        &mut Vec::new(),
        &mut missing,
    );
    let features: std::collections::BTreeSet<&str> =
        missing.iter().filter_map(|p| feature(p)).collect();
    (
        missing.iter().map(|p| path_text(p)).collect(),
        features.into_iter().map(String::from).collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn prune_drops_empty_recursively() {
        let v = json!({"a": null, "b": [], "c": {"d": {}}, "e": false, "f": 0, "g": "", "h": [{"x": null}, 1]});
        assert_eq!(to_json(&v), r#"{"e":false,"f":0,"g":"","h":[1]}"#);
    }

    #[test]
    fn escapes_like_python() {
        let v = json!({"é": "a\u{1f}\"\\\n\u{7f}"});
        assert_eq!(to_json(&v), "{\"é\":\"a\\u001f\\\"\\\\\\n\u{7f}\"}");
    }

    #[test]
    fn times() {
        assert_eq!(
            normalise_time("2024-02-29T23:30:00.999+01:00").as_deref(),
            Some("2024-02-29T22:30:00Z")
        );
        assert_eq!(
            normalise_time("2024-12-31T23:30:00-01:00").as_deref(),
            Some("2025-01-01T00:30:00Z")
        );
        assert_eq!(
            normalise_time("2024-01-01T00:00:00Z").as_deref(),
            Some("2024-01-01T00:00:00Z")
        );
        assert_eq!(normalise_time("2023-02-29T00:00:00Z"), None);
        assert_eq!(normalise_time("2024-01-01 00:00:00Z"), None);
    }

    #[test]
    fn semantic_device_equality() {
        let d = r#"{"capacity":{"mem":{"value":"1Gi"}},"name":"a","taints":[{"effect":"NoSchedule","key":"k"}]}"#;
        let s = r#"{"capacity":{"mem":{"value":"1073741824"}},"name":"a","taints":[{"effect":"NoSchedule","key":"k","timeAdded":"2024-01-01T00:00:00Z"}]}"#;
        assert!(device_eq(d, s));
        assert!(!device_eq(s, d));
    }
}
