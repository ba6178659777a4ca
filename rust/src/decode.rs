//! Raw JSON bytes from the apiserver -> `Record` (docs/core.md §6).
//!
//! Each device is canonicalised once, here, so that planning compares strings.
use serde_json::{Map, Value};

use crate::canonical::{self, Header};
use crate::strlist::StrList;

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
    /// Canonical JSON of each device, in stored order.
    pub devices: StrList,
    /// Canonical JSON of the header (docs/core.md §1).
    pub header: String,
    pub labels: Option<Value>,
    pub annotations: Option<Value>,
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

/// One ResourceSlice object (its `kind` may be absent, as in list items).
pub fn record(obj: Value) -> Result<Record, String> {
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
    let mut device_names = StrList::default();
    let mut devices = StrList::default();
    if let Some(Value::Array(list)) = spec.remove("devices") {
        for device in list {
            let Some((name, json)) = canonical::stored_device(&device) else {
                continue;
            };
            device_names.push(&name);
            devices.push(&json);
        }
    }
    device_names.shrink_to_fit();
    devices.shrink_to_fit();
    let labels = meta.remove("labels");
    let annotations = meta.remove("annotations");
    let h = Header {
        driver: &driver,
        pool: &pool_name,
        generation,
        count,
        node_selection,
        shared_counters: spec.remove("sharedCounters"),
        partition_type_attribute: spec.remove("partitionTypeAttribute"),
        skip_node_operations: spec.remove("skipNodeOperations"),
        owner_references: meta.remove("ownerReferences"),
        labels: labels.clone(),
        annotations: annotations.clone(),
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
        device_names,
        devices,
        header: canonical::stored_header(&h),
        labels: labels.and_then(canonical::prune),
        annotations: annotations.and_then(canonical::prune),
    })
}

/// `decode_slice`: one object.
pub fn decode_slice(data: &[u8]) -> Result<Record, String> {
    record(parse(data)?)
}

/// `decode_list`: `(list resourceVersion, records)`.
pub fn decode_list(data: &[u8]) -> Result<(String, Vec<Record>), String> {
    let Value::Object(mut list) = parse(data)? else {
        return Err("a ResourceSliceList must be a JSON object".into());
    };
    match list.get("kind") {
        None => {}
        Some(Value::String(k)) if k == "ResourceSliceList" => {}
        Some(other) => return Err(format!("expected kind ResourceSliceList, got {other}")),
    }
    let version = match list.get_mut("metadata") {
        Some(Value::Object(meta)) => take_str(meta, "resourceVersion").unwrap_or_default(),
        _ => String::new(),
    };
    let records = match list.remove("items") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items.into_iter().map(record).collect::<Result<_, _>>()?,
        Some(_) => return Err("items is not a list".into()),
    };
    Ok((version, records))
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
