//! One pool's plan (docs/core.md §5): which slices to delete, update and create.
//!
//! Comparison works on the canonical JSON cached in `DeviceEntry` and `Record`; request
//! bodies are rendered only for the slices that are written.
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use serde_json::{Map, Value};

use super::pack::{self, Item};
use super::replan::{self, PlanMemo};
use super::{Change, Owner, Plan, Window};
use crate::canonical::{self, Header};
use crate::decode::Record;
use crate::model::{Desired, DesiredPool, DeviceEntry, DeviceList, PoolDevices};

/// Slice names are cut to 63 characters (a DNS label's length, so they also fit in label
/// values): the readable prefix to this many, then the hash.
const NAME_PREFIX_MAX: usize = 53;
const NAME_HASH_LEN: usize = 10;
const MAX_INDEX_HEX: usize = 8;
const BASE36: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0100_0000_01b3;

/// The name of desired slice `index` of `pool`.
///
/// Deterministic, not generateName: a create is then idempotent, so a retried create whose
/// first response was lost, or a second controller running by mistake, gets 409 instead of
/// publishing every device twice. The hash tells pools of one driver and owner apart.
fn slice_name(index: usize, driver: &str, owner: Option<&Owner>, pool: &str) -> String {
    let owner_name = owner.map_or("", |o| o.name.as_str());
    let mut name = format!("{index:05x}-{driver}-");
    if owner.is_some() {
        name.push_str(owner_name);
        name.push('-');
    }
    if let Some((cut, _)) = name.char_indices().nth(NAME_PREFIX_MAX) {
        name.truncate(cut);
    }
    let key = format!("{driver}\0{owner_name}\0{pool}\0{index}");
    let mut h = key.bytes().fold(FNV_OFFSET, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(FNV_PRIME)
    });
    for _ in 0..NAME_HASH_LEN {
        name.push(char::from(BASE36[(h % 36) as usize]));
        h /= 36;
    }
    name
}

/// The desired slice index `name` is the name of, if any; `known` holds the names of the
/// first indexes (from the last plan), so that most names are compared, not made again.
fn index_of(
    name: &str,
    known: &[String],
    driver: &str,
    owner: Option<&Owner>,
    pool: &str,
) -> Option<usize> {
    let hex_len = name
        .bytes()
        .take_while(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
        .count();
    if hex_len == 0 || hex_len > MAX_INDEX_HEX {
        return None;
    }
    let index = usize::from_str_radix(&name[..hex_len], 16).ok()?;
    let expected = match known.get(index) {
        Some(known) => known.as_str(),
        None => &slice_name(index, driver, owner, pool),
    };
    (name == expected).then_some(index)
}

/// One desired slice, borrowing from the desired state and the layout: its devices are
/// positions in `list` (indices, not entries: a plan is made again for each window of bodies).
struct SliceRef<'d> {
    list: &'d DeviceList,
    indices: &'d [usize],
    shared_counters: Option<&'d Value>,
    per_device_node_selection: bool,
    carried: &'d [Option<Value>],
}

impl<'d> SliceRef<'d> {
    fn devices(&self) -> impl ExactSizeIterator<Item = DeviceEntry<'d>> + '_ {
        self.indices.iter().map(|&i| self.list.get(i))
    }
}

fn slice_refs<'d>(pool: &'d DesiredPool, layout: &'d [Vec<usize>]) -> Vec<SliceRef<'d>> {
    match &pool.devices {
        PoolDevices::Slices(slices) => slices
            .iter()
            .zip(layout)
            .map(|(s, indices)| SliceRef {
                list: &s.devices,
                indices,
                shared_counters: s.shared_counters.as_ref(),
                per_device_node_selection: s.per_device_node_selection,
                carried: &s.carried,
            })
            .collect(),
        PoolDevices::Flat(devices) => layout
            .iter()
            .map(|indices| SliceRef {
                list: devices,
                indices,
                shared_counters: None,
                per_device_node_selection: false,
                carried: &[],
            })
            .collect(),
    }
}

/// The packing limits of a flat pool.
fn limits(pool: &DesiredPool, max_bytes: usize) -> pack::Limits {
    pack::Limits {
        max_bytes,
        max_devices: pool.max_devices_per_slice,
    }
}

/// Which devices go in which slice: each explicit slice whole, or a flat pool packed (§4).
/// The flag: the packer kept every device where its record holds it and placed none.
fn layout(
    pool: &DesiredPool,
    current: &BTreeMap<usize, &Record>,
    max_bytes: usize,
) -> (Vec<Vec<usize>>, bool) {
    let devices = match &pool.devices {
        PoolDevices::Slices(slices) => {
            let whole = slices.iter().map(|s| (0..s.devices.len()).collect());
            return (whole.collect(), false);
        }
        PoolDevices::Flat(devices) => devices,
    };
    let slots = current.keys().next_back().map_or(0, |&i| i + 1);
    let mut held = vec![Vec::new(); slots];
    let by_name: HashMap<&str, usize> = if current.is_empty() {
        HashMap::new() // a first publish: no device is held anywhere
    } else {
        devices
            .iter()
            .enumerate()
            .map(|(i, d)| (d.name, i))
            .collect()
    };
    for (&index, record) in current {
        held[index] = record
            .device_names
            .iter()
            .filter_map(|n| by_name.get(n).copied())
            .collect();
    }
    let items: Vec<Item> = devices
        .iter()
        .map(|d| Item {
            len: d.json.len(),
            advanced: d.advanced,
        })
        .collect();
    let packed = pack::pack(&items, &held, limits(pool, max_bytes));
    let kept = packed == held;
    (packed, kept)
}

/// The slice of each device position of a layout.
fn slice_of(layout: &[Vec<usize>], devices: usize) -> Vec<u32> {
    let mut slice_of = vec![0; devices];
    for (i, slice) in layout.iter().enumerate() {
        for &p in slice {
            slice_of[p] = i as u32;
        }
    }
    slice_of
}

/// `{"k":v,...}` from members whose values are already JSON text, in canonical key order.
fn write_object(mut members: Vec<(&str, String)>) -> String {
    members.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let mut out = String::from("{");
    for (i, (key, json)) in members.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&canonical::quote(key));
        out.push(':');
        out.push_str(json);
    }
    out.push('}');
    out
}

/// Stored taint times by device name, for desired taints that name none.
struct StoredTimes<'r> {
    records: &'r [&'r Record],
    by_device: Option<HashMap<&'r str, &'r str>>,
}

impl<'r> StoredTimes<'r> {
    /// `device` with each taint lacking `timeAdded` given the stored one of the same
    /// key, value and effect, so the server's time is kept. The device as `written_over`
    /// (the record the slice replaces, when of the current generation) holds it comes first:
    /// where it stays, no other record is read (O(slice), not O(pool)).
    fn fill(&mut self, device: &DeviceEntry<'_>, written_over: Option<&'r Record>) -> String {
        if !device.untimed_taints {
            return device.json.to_owned();
        }
        let own = written_over.and_then(|r| {
            let at = r.device_names.iter().position(|n| n == device.name)?;
            Some(r.devices.get(at))
        });
        let records = self.records;
        let stored = own.or_else(|| {
            let by_device = self.by_device.get_or_insert_with(|| {
                records
                    .iter()
                    .flat_map(|r| r.device_names.iter().zip(r.devices.iter()))
                    .collect()
            });
            by_device.get(device.name).copied()
        });
        let Some(stored) = stored else {
            return device.json.to_owned();
        };
        let stored: Value = serde_json::from_str(stored).expect("canonical JSON");
        let Some(Value::Array(stored_taints)) = stored.get("taints") else {
            return device.json.to_owned();
        };
        let mut value: Value = serde_json::from_str(device.json).expect("canonical JSON");
        if let Some(Value::Array(taints)) = value.get_mut("taints") {
            for taint in taints.iter_mut().filter(|t| t.get("timeAdded").is_none()) {
                let same = |s: &&Value| {
                    ["key", "value", "effect"]
                        .iter()
                        .all(|k| s.get(k) == taint.get(k))
                };
                let time = stored_taints
                    .iter()
                    .find(same)
                    .and_then(|s| s.get("timeAdded"))
                    .cloned();
                if let (Some(time), Value::Object(t)) = (time, taint) {
                    t.insert("timeAdded".into(), time);
                }
            }
        }
        canonical::to_json(&value)
    }
}

/// The ownerReferences of a written slice: the stored ones as they are, ours put in place of
/// the stored entry with our uid (or first when there is none), so that an update keeps what
/// other clients own, as upstream's update of a copy of the stored object does.
fn owner_references(ours: Option<&Value>, record: Option<&Record>) -> Option<Value> {
    let uid = ours.and_then(|o| o.get("uid"));
    let mut refs: Vec<Value> = match record.and_then(|r| r.owner_references.as_ref()) {
        Some(Value::Array(stored)) => stored
            .iter()
            .map(|r| match ours {
                Some(o) if r.get("uid") == uid => o.clone(),
                _ => r.clone(),
            })
            .collect(),
        _ => Vec::new(),
    };
    if let Some(o) = ours.filter(|_| !refs.iter().any(|r| r.get("uid") == uid)) {
        refs.insert(0, o.clone());
    }
    (!refs.is_empty()).then_some(Value::Array(refs))
}

/// Whether the pool's writes can go out under its current generation (docs/core.md §5).
///
/// Consumers use only the highest generation, and only once all `resourceSliceCount` slices
/// of it are there. Without a missing slot, in-place updates keep such a pool consistent at
/// every moment, in any order, when each changes only its own devices and no device moves
/// between slices (`isolated` says so; asked only when more than one update is needed).
/// Filling the empty slots of an interrupted publish (a crash, a lost response, a slice
/// deleted by hand) does too, when every slice of the generation that stays is already as
/// desired: the new slices hold only devices no other slice has. Anything else needs a new
/// generation, so that consumers never mix old and new slices.
fn keeps_generation(
    missing: usize,
    updates_needed: usize,
    kept: usize,
    drops_current: bool,
    isolated: impl FnOnce() -> bool,
) -> bool {
    if missing == 0 {
        return updates_needed <= 1 || isolated();
    }
    updates_needed == 0 && kept > 0 && !drops_current
}

/// Whether every changed slice changes only its devices, none of which another changed slice
/// holds now: then no order of the updates shows a device twice, nor hides one that stays.
///
/// A device moving in from an unchanged slice would be desired twice (rejected by validation),
/// so the stored devices of the changed slices are all there is to look at: O(changed).
fn isolated_updates(
    slices: &[SliceRef<'_>],
    current: &BTreeMap<usize, &Record>,
    changes: &[Change],
) -> bool {
    let changed = || {
        changes
            .iter()
            .enumerate()
            .filter(|(_, &c)| c != Change::None)
    };
    if changed().any(|(_, &c)| c == Change::Slice) {
        return false;
    }
    let held: HashMap<&str, usize> = changed()
        .flat_map(|(i, _)| current[&i].device_names.iter().map(move |n| (n, i)))
        .collect();
    changed().all(|(i, _)| {
        slices[i]
            .devices()
            .all(|d| held.get(d.name).is_none_or(|&j| j == i))
    })
}

/// The live records by the slot their name is the name of.
struct Slots<'r> {
    current: BTreeMap<usize, &'r Record>,
    /// The same records, as shared: the memo keeps them (replan.rs).
    shared: BTreeMap<usize, &'r Arc<Record>>,
    /// The records whose name is no slot's.
    dropped: Vec<&'r Record>,
}

impl<'r> Slots<'r> {
    fn of(
        live: impl Iterator<Item = &'r Arc<Record>>,
        index_of: impl Fn(&str) -> Option<usize>,
    ) -> Self {
        let mut slots = Slots {
            current: BTreeMap::new(),
            shared: BTreeMap::new(),
            dropped: Vec::new(),
        };
        for record in live {
            match index_of(&record.name) {
                Some(index) => {
                    slots.current.insert(index, record);
                    slots.shared.insert(index, record);
                }
                None => slots.dropped.push(record),
            }
        }
        slots
    }
}

/// The names of a pool's first `count` desired slices.
fn slice_names(count: usize, driver: &str, owner: Option<&Owner>, pool: &str) -> Vec<String> {
    (0..count)
        .map(|i| slice_name(i, driver, owner, pool))
        .collect()
}

/// The deletes of `records`, sorted.
fn deletes<'r>(records: impl Iterator<Item = &'r Record>) -> Vec<(String, String, String)> {
    let mut deletes: Vec<_> = records
        .map(|r| (r.name.clone(), r.uid.clone(), r.resource_version.clone()))
        .collect();
    deletes.sort();
    deletes
}

/// The controller's entry of `ownerReferences`, for an owner with a uid.
fn owner_reference(owner: Option<&Owner>) -> Option<Value> {
    owner.filter(|o| !o.uid.is_empty()).map(|o| {
        let mut r = Map::new();
        r.insert("apiVersion".into(), Value::from(o.api_version.as_str()));
        r.insert("kind".into(), Value::from(o.kind.as_str()));
        r.insert("name".into(), Value::from(o.name.as_str()));
        r.insert("uid".into(), Value::from(o.uid.as_str()));
        r.insert("controller".into(), Value::Bool(true));
        Value::Object(r)
    })
}

/// What the slices of one plan share: their pool and how many there are, the node name and
/// owner they are published for, and the highest generation stored (`max_gen`).
struct Context<'a> {
    driver: &'a str,
    pool: &'a str,
    wanted: &'a DesiredPool,
    count: usize,
    node_name: Option<&'a str>,
    owner_ref: Option<Value>,
    max_gen: i64,
}

impl Context<'_> {
    fn node_selection(&self, s: &SliceRef<'_>) -> (&'static str, Value) {
        if let Some(ns) = &self.wanted.node_selector {
            ("nodeSelector", ns.clone())
        } else if self.wanted.all_nodes {
            ("allNodes", Value::Bool(true))
        } else if s.per_device_node_selection {
            ("perDeviceNodeSelection", Value::Bool(true))
        } else if let Some(n) = self.node_name {
            ("nodeName", Value::from(n))
        } else {
            ("allNodes", Value::Bool(true))
        }
    }

    fn header(&self, s: &SliceRef<'_>, generation: i64, record: Option<&Record>) -> Header<'_> {
        Header {
            driver: self.driver,
            pool: self.pool,
            generation,
            count: self.count as i64,
            node_selection: Some(self.node_selection(s)),
            shared_counters: s.shared_counters.cloned(),
            carried: s.carried.to_vec(),
            owner_references: owner_references(self.owner_ref.as_ref(), record),
        }
    }

    /// How slice `s` differs from `record`, the one stored in its slot if any.
    fn change(&self, s: &SliceRef<'_>, record: Option<&Record>) -> Change {
        match record {
            Some(r) if r.generation == self.max_gen => {
                let same_devices = r.devices.len() == s.indices.len()
                    && s.devices()
                        .zip(r.devices.iter())
                        .all(|(d, stored)| canonical::device_eq(d.json, stored));
                let same_header = || {
                    canonical::header_eq(
                        &canonical::to_json(&self.header(s, r.generation, Some(r)).to_value()),
                        &r.header,
                    )
                };
                match (same_devices, same_header()) {
                    (true, true) => Change::None,
                    (false, true) => Change::Devices,
                    (_, false) => Change::Slice,
                }
            }
            _ => Change::Slice,
        }
    }

    /// The generation the writes go out under, and whether every slice is written.
    fn generation(
        &self,
        slices: &[SliceRef<'_>],
        current: &BTreeMap<usize, &Record>,
        changes: &[Change],
        dropped: &[&Record],
    ) -> (i64, bool) {
        let (count, max_gen) = (self.count, self.max_gen);
        let changed = changes.iter().filter(|&&c| c != Change::None).count();
        // A slot without a slice of the current generation (none, or an obsolete one to be
        // overwritten) changes what consumers see of the pool, as a create would.
        let missing = (0..count)
            .filter(|i| current.get(i).is_none_or(|r| r.generation < max_gen))
            .count();
        let updates_needed = changed - missing;
        let kept = count - missing - updates_needed;
        let drops_current = dropped.iter().any(|r| r.generation == max_gen);
        if self.wanted.generation > max_gen {
            (self.wanted.generation, true)
        } else if keeps_generation(missing, updates_needed, kept, drops_current, || {
            isolated_updates(slices, current, changes)
        }) {
            (max_gen, false)
        } else {
            (max_gen + 1, true)
        }
    }

    /// The request body that writes slice `s` as `name` under `generation`, over `record`
    /// when there is one (an update).
    fn body<'r>(
        &self,
        s: &SliceRef<'_>,
        name: &str,
        record: Option<&'r Record>,
        generation: i64,
        times: &mut StoredTimes<'r>,
    ) -> Vec<u8> {
        let mut h = self.header(s, generation, record).to_value();
        let Value::Object(spec) = &mut h else {
            unreachable!("a header is an object")
        };
        spec.remove("ownerReferences"); // the controller's alone: all go in metadata
        let mut metadata = Map::new();
        metadata.insert("name".into(), Value::from(name));
        if let Some(refs) = owner_references(self.owner_ref.as_ref(), record) {
            metadata.insert("ownerReferences".into(), refs);
        }
        if let Some(r) = record {
            // Others' metadata as stored: a PUT replaces the whole object.
            for (key, value) in [
                ("labels", &r.labels),
                ("annotations", &r.annotations),
                ("finalizers", &r.finalizers),
            ] {
                if let Some(v) = value {
                    metadata.insert(key.into(), v.clone());
                }
            }
            metadata.insert(
                "resourceVersion".into(),
                Value::from(r.resource_version.as_str()),
            );
        }
        let mut spec_members: Vec<(&str, String)> = spec
            .iter()
            .map(|(k, v)| (k.as_str(), canonical::to_json(v)))
            .collect();
        if !s.indices.is_empty() {
            let written_over = record.filter(|r| r.generation == self.max_gen);
            let devices: Vec<String> = s.devices().map(|d| times.fill(&d, written_over)).collect();
            spec_members.push(("devices", format!("[{}]", devices.join(","))));
        }
        write_object(vec![
            ("apiVersion", canonical::quote("resource.k8s.io/v1")),
            ("kind", canonical::quote("ResourceSlice")),
            ("metadata", canonical::to_json(&Value::Object(metadata))),
            ("spec", write_object(spec_members)),
        ])
        .into_bytes()
    }
}

/// Which devices go in which slice, the slice of each device position when the layout is the
/// records' own (see `layout`), and each slice's change where a plan made before still
/// knows it (replan.rs).
#[allow(clippy::type_complexity)]
fn layout_of(
    wanted: &DesiredPool,
    max_bytes: usize,
    basis: Option<&(Arc<replan::Memo>, Vec<usize>)>,
    current: &BTreeMap<usize, &Record>,
    slot_records: &BTreeMap<usize, &Arc<Record>>,
    max_gen: i64,
) -> (
    Arc<Vec<Vec<usize>>>,
    Option<Arc<Vec<u32>>>,
    Vec<Option<Change>>,
) {
    let limits = limits(wanted, max_bytes);
    let reused = match (&wanted.devices, basis) {
        (PoolDevices::Flat(devices), Some((memo, changed))) => {
            replan::reuse(memo, changed, devices, slot_records, max_gen, limits)
        }
        _ => None,
    };
    match reused {
        Some(r) => (r.layout, Some(r.slice_of), r.known),
        None => {
            let (layout, held_as_is) = layout(wanted, current, max_bytes);
            let slice_of = held_as_is.then(|| Arc::new(slice_of(&layout, wanted.device_count())));
            let unknown = vec![None; layout.len()];
            (Arc::new(layout), slice_of, unknown)
        }
    }
}

/// The slots to write, updates before creates (docs/core.md §5), each in index order; and
/// the names of the creates that wait: a slice being deleted still holds their name.
fn slots_to_write(
    names: &[String],
    current: &BTreeMap<usize, &Record>,
    existing: &[Arc<Record>],
    written: impl Fn(usize) -> bool,
) -> (Vec<usize>, Vec<String>) {
    let going: BTreeSet<&str> = existing
        .iter()
        .filter(|r| r.deleting)
        .map(|r| r.name.as_str())
        .collect();
    let mut to_write = Vec::new();
    let mut waiting = Vec::new();
    for i in (0..names.len()).filter(|&i| written(i)) {
        let name = names[i].clone();
        // A create whose name a slice being deleted holds waits until it is gone.
        if !current.contains_key(&i) && going.contains(name.as_str()) {
            waiting.push(name);
        } else {
            to_write.push(i);
        }
    }
    to_write.sort_by_key(|i| !current.contains_key(i));
    (to_write, waiting)
}

/// Plans `pool`; see docs/core.md §5.
pub fn plan_pool(
    desired: Option<(&Desired, &PlanMemo)>,
    pool: &str,
    existing: &[Arc<Record>],
    owner: Option<&Owner>,
    node_name: Option<&str>,
    window: Window,
) -> Plan {
    // A slice being deleted is going away: never deleted again nor updated, and its name is
    // taken until it is gone. Its generation still counts: consumers see it until then.
    let live = existing.iter().filter(|r| !r.deleting);
    let Some((desired, memos, wanted)) =
        desired.and_then(|(d, memos)| Some((d, memos, d.pools.get(pool)?)))
    else {
        return Plan {
            deletes: deletes(live.map(|r| &**r)),
            ..Plan::default()
        };
    };
    let driver = desired.driver.as_str();
    let key = replan::key(desired, pool, owner, node_name);
    let cache = memos.cache(pool);
    let basis = match &wanted.devices {
        PoolDevices::Flat(_) => replan::basis(cache, &key),
        PoolDevices::Slices(_) => None,
    };
    let known_names = basis.as_ref().map_or(&[][..], |(memo, _)| &memo.names[..]);
    let max_gen = existing.iter().map(|r| r.generation).max().unwrap_or(0);
    let Slots {
        current,
        shared: slot_records,
        mut dropped,
    } = Slots::of(live, |name| {
        index_of(name, known_names, driver, owner, pool)
    });
    let (layout, slice_of, mut known) = layout_of(
        wanted,
        desired.max_slice_bytes,
        basis.as_ref(),
        &current,
        &slot_records,
        max_gen,
    );
    let slices = slice_refs(wanted, &layout);
    let count = slices.len();
    dropped.extend(current.range(count..).map(|(_, &r)| r));
    let deletes = deletes(dropped.iter().copied());

    let context = Context {
        driver,
        pool,
        wanted,
        count,
        node_name,
        owner_ref: owner_reference(owner),
        max_gen,
    };
    let mut compared = 0;
    for (i, s) in slices.iter().enumerate() {
        if known[i].is_none() {
            known[i] = Some(context.change(s, current.get(&i).copied()));
            compared += 1;
        }
    }
    let changes: Vec<Change> = known.into_iter().flatten().collect();
    let names = match basis.filter(|(memo, _)| memo.names.len() == count) {
        Some((memo, _)) => Arc::clone(&memo.names),
        None => Arc::new(slice_names(count, driver, owner, pool)),
    };
    if let Some(slice_of) = slice_of {
        let memo = replan::Memo {
            key,
            names: Arc::clone(&names),
            max_gen,
            records: (0..count)
                .map(|i| slot_records.get(&i).map(|&r| Arc::clone(r)))
                .collect(),
            layout: Arc::clone(&layout),
            slice_of,
            changes: changes.clone(),
        };
        replan::remember(cache, memo);
    }
    let (generation, write_all) = context.generation(&slices, &current, &changes, &dropped);

    let (to_write, waiting) = slots_to_write(&names, &current, existing, |i| {
        write_all || changes[i] != Change::None
    });
    let writes: Vec<String> = to_write.iter().map(|&i| names[i].clone()).collect();
    let current_records: Vec<&Record> = existing
        .iter()
        .map(|r| &**r)
        .filter(|r| r.generation == max_gen)
        .collect();
    let mut times = StoredTimes {
        records: &current_records,
        by_device: None,
    };
    let mut updates = Vec::new();
    let mut creates = Vec::new();
    let mut rendered = 0;
    let mut next_write = window.first_write;
    for (&i, name) in to_write.iter().zip(&writes).skip(window.first_write) {
        if window
            .max_body_bytes
            .is_some_and(|max| next_write > window.first_write && rendered >= max)
        {
            break;
        }
        let record = current.get(&i).copied();
        let body = context.body(&slices[i], name, record, generation, &mut times);
        rendered += body.len();
        next_write += 1;
        match record {
            Some(_) => updates.push((name.clone(), body)),
            None => creates.push(body),
        }
    }
    Plan {
        generation,
        slice_count: count,
        device_count: wanted.device_count(),
        deletes,
        writes,
        next_write,
        updates,
        creates,
        waiting,
        compared,
    }
}
