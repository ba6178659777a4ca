//! Canonical JSON (docs/core.md §1): the device and slice-header forms, and semantic equality.
//!
//! `serde_json`'s `Map` is a `BTreeMap` here (no `preserve_order`), so serialising a `Value`
//! already sorts keys by UTF-8 bytes, writes no whitespace and escapes exactly what Python's
//! `json.dumps(ensure_ascii=False)` escapes.
use serde_json::{Map, Value};

use crate::quantity;

/// Drops `null` members, empty lists and empty objects, recursively (absent == empty).
pub fn prune(v: Value) -> Option<Value> {
    match v {
        Value::Null => None,
        Value::Array(items) => {
            let items: Vec<Value> = items.into_iter().filter_map(prune).collect();
            (!items.is_empty()).then_some(Value::Array(items))
        }
        Value::Object(map) => {
            let map: Map<String, Value> = map
                .into_iter()
                .filter_map(|(k, v)| Some((k, prune(v)?)))
                .collect();
            (!map.is_empty()).then_some(Value::Object(map))
        }
        other => Some(other),
    }
}

/// The canonical JSON text of an already pruned value.
pub fn to_json(v: &Value) -> String {
    serde_json::to_string(v).expect("a Value with string keys always serialises")
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
    pub owner_references: Option<Value>,
    pub labels: Option<Value>,
    pub annotations: Option<Value>,
}

impl Header<'_> {
    /// As one pruned JSON object.
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
        for (key, v) in [
            ("sharedCounters", self.shared_counters),
            ("ownerReferences", self.owner_references),
            ("labels", self.labels),
            ("annotations", self.annotations),
        ] {
            if let Some(v) = v {
                h.insert(key.into(), v);
            }
        }
        prune(Value::Object(h)).unwrap_or_default()
    }
}

/// Calls `f` on every quantity of a device (the paths of docs/core.md §1), with its path
/// relative to the device.
pub fn device_quantities_mut(
    device: &mut Map<String, Value>,
    f: &mut dyn FnMut(&mut Value, &dyn Fn() -> String),
) {
    if let Some(Value::Object(capacity)) = device.get_mut("capacity") {
        for (name, cap) in capacity.iter_mut() {
            let Value::Object(cap) = cap else { continue };
            let base = || format!("capacity[{}]", quote(name));
            if let Some(v) = cap.get_mut("value") {
                f(v, &|| format!("{}.value", base()));
            }
            let Some(Value::Object(policy)) = cap.get_mut("requestPolicy") else {
                continue;
            };
            if let Some(v) = policy.get_mut("default") {
                f(v, &|| format!("{}.requestPolicy.default", base()));
            }
            if let Some(Value::Array(values)) = policy.get_mut("validValues") {
                for (i, v) in values.iter_mut().enumerate() {
                    f(v, &|| format!("{}.requestPolicy.validValues[{i}]", base()));
                }
            }
            if let Some(Value::Object(range)) = policy.get_mut("validRange") {
                for (key, v) in range.iter_mut() {
                    if matches!(key.as_str(), "min" | "max" | "step") {
                        f(v, &|| format!("{}.requestPolicy.validRange.{key}", base()));
                    }
                }
            }
        }
    }
    if let Some(Value::Array(consumes)) = device.get_mut("consumesCounters") {
        for (i, c) in consumes.iter_mut().enumerate() {
            counters_quantities_mut(c, &|| format!("consumesCounters[{i}]"), f);
        }
    }
}

/// Quantities of a counter set (`{"counters": {name: {"value": q}}}`).
pub fn counters_quantities_mut(
    set: &mut Value,
    base: &dyn Fn() -> String,
    f: &mut dyn FnMut(&mut Value, &dyn Fn() -> String),
) {
    let Some(Value::Object(counters)) = set.get_mut("counters") else {
        return;
    };
    for (name, counter) in counters.iter_mut() {
        if let Some(v) = counter.get_mut("value") {
            f(v, &|| format!("{}.counters[{}].value", base(), quote(name)));
        }
    }
}

/// Quantities of a slice header: `sharedCounters[*].counters.*.value`.
fn header_quantities_mut(header: &mut Value, f: &mut dyn FnMut(&mut Value, &dyn Fn() -> String)) {
    if let Some(Value::Array(sets)) = header.get_mut("sharedCounters") {
        for (i, set) in sets.iter_mut().enumerate() {
            counters_quantities_mut(set, &|| format!("sharedCounters[{i}]"), f);
        }
    }
}

/// A map key in error paths: `["x/y"]`, as Python's `json.dumps` quotes it.
pub fn quote(key: &str) -> String {
    to_json(&Value::String(key.to_owned()))
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

/// Canonical form of a device read from the apiserver: quantities and taint times that parse
/// are rewritten (the server already stores them canonically; this keeps both sides alike).
pub fn stored_device(device: Value) -> Option<Value> {
    let mut device = prune(device)?;
    if let Value::Object(map) = &mut device {
        device_quantities_mut(map, &mut |v, _| {
            if let Some(c) = v.as_str().and_then(quantity::canonical) {
                *v = Value::String(c);
            }
        });
        if let Some(Value::Array(taints)) = map.get_mut("taints") {
            for taint in taints {
                if let Some(t) = taint.get_mut("timeAdded") {
                    if let Some(n) = t.as_str().and_then(normalise_time) {
                        *t = Value::String(n);
                    }
                }
            }
        }
    }
    Some(device)
}

/// Canonical form of a stored slice header (its `sharedCounters` quantities).
pub fn stored_header(mut header: Value) -> Value {
    header_quantities_mut(&mut header, &mut |v, _| {
        if let Some(c) = v.as_str().and_then(quantity::canonical) {
            *v = Value::String(c);
        }
    });
    header
}

fn to_value_keys(v: &mut Value, _: &dyn Fn() -> String) {
    if let Some(k) = v.as_str().and_then(quantity::value_key) {
        *v = Value::String(k);
    }
}

fn parse(json: &str) -> Value {
    serde_json::from_str(json).expect("canonical JSON written by this crate")
}

/// Semantic equality of a desired device and a stored one, both as canonical JSON.
pub fn device_eq(desired: &str, stored: &str) -> bool {
    if desired == stored {
        return true;
    }
    let (mut d, mut s) = (parse(desired), parse(stored));
    for v in [&mut d, &mut s] {
        if let Value::Object(map) = v {
            device_quantities_mut(map, &mut to_value_keys);
        }
    }
    // The server fills in a taint's time: a desired taint without one accepts any.
    if let (Some(Value::Array(dt)), Some(Value::Array(st))) = (d.get("taints"), s.get_mut("taints"))
    {
        for (dtaint, staint) in dt.iter().zip(st.iter_mut()) {
            if dtaint.get("timeAdded").is_none() {
                if let Value::Object(staint) = staint {
                    staint.remove("timeAdded");
                }
            }
        }
    }
    d == s
}

/// Semantic equality of two slice headers as canonical JSON (counters by value).
pub fn header_eq(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    let (mut a, mut b) = (parse(a), parse(b));
    header_quantities_mut(&mut a, &mut to_value_keys);
    header_quantities_mut(&mut b, &mut to_value_keys);
    a == b
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn prune_drops_empty_recursively() {
        let v = json!({"a": null, "b": [], "c": {"d": {}}, "e": false, "f": 0, "g": "", "h": [{"x": null}, 1]});
        assert_eq!(
            to_json(&prune(v).unwrap()),
            r#"{"e":false,"f":0,"g":"","h":[1]}"#
        );
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
