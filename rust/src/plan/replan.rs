//! Plans carried over from one sync of a flat pool to the next (docs/core.md §5,
//! "Planning in O(changed)").
//!
//! A plan reads the whole pool: the packer places every device, and every slice is compared
//! with its record. After a device-level edit that replaced devices where they are, and with
//! records that changed only where their resourceVersion says so, the last plan's answers
//! still hold for every slice that holds no replaced device and whose record did not change.
//! Then only those slices are read again: O(changed), not O(pool). The plan is the one made
//! from scratch (tests/core compares them, and the pure-Python core, which always plans from
//! scratch); whatever this cannot vouch for is planned from scratch.
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use super::pack::{self, Item, Limits};
use super::{Change, Owner};
use crate::decode::Record;
use crate::model::{Desired, DeviceList};

/// Replaced positions (and edits) collected along a chain before a plan is made from
/// scratch: past this, reading the changed slices costs about what planning the pool does.
const MAX_CARRIED: usize = 4096;

/// Edits chained before a plan is made from scratch. A replica that never plans (a standby
/// waiting for the Lease) would otherwise keep a growing chain of caches and replaced
/// positions.
const MAX_CHAIN: usize = 256;

/// The plan memo of every pool of one desired state, kept beside it (not in it: the
/// desired state says what is wanted, this what planning it found). Made with the desired
/// state, it has a `PlanCache` for each of its pools; a pool shared with another desired
/// state (an edit copies only the pool it edits) shares its cache too.
pub struct PlanMemo(BTreeMap<String, Arc<PlanCache>>);

impl PlanMemo {
    /// A new cache for each pool of `desired`: nothing planned yet.
    pub fn new(desired: &Desired) -> PlanMemo {
        PlanMemo(
            desired
                .pools
                .keys()
                .map(|name| (name.clone(), Arc::default()))
                .collect(),
        )
    }

    /// The memo of a desired state made from this one's by a device-level edit of `pool`:
    /// the other pools' caches shared, `pool`'s linked to its last one when the edit replaced
    /// devices where they are (`in_place`: the positions replaced), else new.
    pub fn after_edit(&self, pool: &str, in_place: Option<Vec<usize>>) -> PlanMemo {
        let cache = match (self.0.get(pool), in_place) {
            (Some(parent), Some(replaced)) => PlanCache::after_edit(parent, replaced),
            _ => PlanCache::default(),
        };
        let mut pools = self.0.clone();
        pools.insert(pool.to_owned(), Arc::new(cache));
        PlanMemo(pools)
    }

    /// The cache of `pool`, one of the desired state's pools.
    pub fn cache(&self, pool: &str) -> &Arc<PlanCache> {
        self.0
            .get(pool)
            .expect("the memo has a cache for every desired pool")
    }
}

/// The pools whose desired content differs from `old` to `new` (desired in only one of
/// them, or different), sorted: an update needs to sync only those again. A pool found
/// equal is linked to the old one, so that its next plan can start from the old one's last
/// (below): an `update()` that changed one pool leaves the others' plans in place.
pub fn changed_pools(
    (old, old_memos): (&Desired, &PlanMemo),
    (new, new_memos): (&Desired, &PlanMemo),
) -> Vec<String> {
    let every = old.driver != new.driver || old.max_slice_bytes != new.max_slice_bytes;
    let names: BTreeSet<&String> = old.pools.keys().chain(new.pools.keys()).collect();
    names
        .into_iter()
        .filter(|name| {
            let (before, after) = (old.pools.get(*name), new.pools.get(*name));
            if every || before != after {
                return true;
            }
            if before.is_some() && after.is_some() {
                same_as(new_memos.cache(name), old_memos.cache(name));
            }
            false
        })
        .cloned()
        .collect()
}

/// What a pool remembers of its last plan, or of the pool it was edited from.
#[derive(Default)]
pub struct PlanCache(Mutex<CacheState>);

#[derive(Default)]
struct CacheState {
    memo: Option<Arc<Memo>>,
    /// The cache of the pool this one was edited from, and the positions the edit replaced.
    edited_from: Option<(Arc<PlanCache>, Vec<usize>)>,
    /// Along `edited_from` to the nearest plan: the edits, and the positions replaced.
    chain: usize,
    carried: usize,
}

impl PlanCache {
    /// The cache of a pool made from `parent` by replacing the devices at `replaced`.
    fn after_edit(parent: &Arc<PlanCache>, replaced: Vec<usize>) -> PlanCache {
        // A parent without a plan yet may have one by the time this pool is planned (a sync
        // of it was under way): linked all the same, and `basis` looks when it is asked.
        let (chain, carried) = {
            let state = parent.state();
            match state.memo {
                Some(_) => (1, replaced.len()),
                None => (state.chain + 1, state.carried + replaced.len()),
            }
        };
        if chain > MAX_CHAIN || carried > MAX_CARRIED {
            return PlanCache::default();
        }
        PlanCache(Mutex::new(CacheState {
            memo: None,
            edited_from: Some((Arc::clone(parent), replaced)),
            chain,
            carried,
        }))
    }

    fn state(&self) -> MutexGuard<'_, CacheState> {
        // A panic while holding it leaves nothing half-written: the state is replaced whole.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[allow(clippy::type_complexity)]
    fn snapshot(&self) -> (Option<Arc<Memo>>, Option<(Arc<PlanCache>, Vec<usize>)>) {
        let state = self.state();
        (state.memo.clone(), state.edited_from.clone())
    }
}

/// What a plan of a flat pool found, when the packer kept every device where its record
/// holds it: the layout is then the records' own, slice by slice.
pub struct Memo {
    /// The other inputs of the plan (driver, owner, node name, slice size, pool name).
    pub key: String,
    /// The desired slice names by index.
    pub names: Arc<Vec<String>>,
    pub max_gen: i64,
    /// The record each slice was compared with, if it had one. Kept, so that the same object
    /// tells the same content: a resourceVersion would too, but only from the apiserver.
    pub records: Vec<Option<Arc<Record>>>,
    /// Device positions per slice.
    pub layout: Arc<Vec<Vec<usize>>>,
    /// The slice of each device position.
    pub slice_of: Arc<Vec<u32>>,
    pub changes: Vec<Change>,
}

/// The inputs of a plan besides the pool's devices and the records.
pub fn key(
    desired: &Desired,
    pool: &str,
    owner: Option<&Owner>,
    node_name: Option<&str>,
) -> String {
    let owner = owner.map_or(String::new(), |o| {
        format!("{}\0{}\0{}\0{}", o.api_version, o.kind, o.name, o.uid)
    });
    format!(
        "{}\0{}\0{}\0{:?}\0{}",
        desired.driver, pool, owner, node_name, desired.max_slice_bytes
    )
}

/// The last plan made of the pool of `cache` or of a pool it was edited from, for the same
/// `key`, with the positions replaced since.
pub fn basis(cache: &PlanCache, key: &str) -> Option<(Arc<Memo>, Vec<usize>)> {
    let mut replaced = Vec::new();
    let (mut memo, mut edited_from) = cache.snapshot();
    for _ in 0..=MAX_CHAIN {
        if let Some(memo) = memo {
            return (memo.key == key).then_some((memo, replaced));
        }
        let (parent, positions) = edited_from?;
        replaced.extend_from_slice(&positions);
        if replaced.len() > MAX_CARRIED {
            return None;
        }
        (memo, edited_from) = parent.snapshot();
    }
    None
}

/// The pool of `pool` (its cache) has the content of that of `earlier`: unless it has a plan
/// or an edit to go by already, its next plan may start from `earlier`'s last, every position
/// kept. Only a pool that has a plan is linked to: a chain never loops back, whichever way
/// pools are compared.
pub fn same_as(pool: &Arc<PlanCache>, earlier: &Arc<PlanCache>) {
    if Arc::ptr_eq(pool, earlier) || earlier.state().memo.is_none() {
        return;
    }
    let mut state = pool.state();
    if state.memo.is_none() && state.edited_from.is_none() {
        state.edited_from = Some((Arc::clone(earlier), Vec::new()));
        state.chain = 1;
    }
}

/// Keeps `memo` as the last plan of the pool of `cache`; the pools it was edited from are no
/// longer needed.
pub fn remember(cache: &PlanCache, memo: Memo) {
    let mut state = cache.state();
    state.memo = Some(Arc::new(memo));
    state.edited_from = None;
    (state.chain, state.carried) = (0, 0);
}

/// The layout, and each slice's change where the memo still knows it.
pub struct Reused {
    pub layout: Arc<Vec<Vec<usize>>>,
    pub slice_of: Arc<Vec<u32>>,
    pub known: Vec<Option<Change>>,
}

/// The memo's layout for `devices` (the memo's pool with the devices at `replaced` replaced)
/// against `current` (the records by slice index), when the packer would keep it: each
/// slice's record is the very one compared before, or holds exactly the slice's devices; no slice
/// with a replaced device breaks its limits; and the pool is not so much larger than a
/// fresh packing that the packer would repack it (§4).
pub fn reuse(
    memo: &Memo,
    replaced: &[usize],
    devices: &DeviceList,
    current: &BTreeMap<usize, &Arc<Record>>,
    max_gen: i64,
    limits: Limits,
) -> Option<Reused> {
    let layout = &memo.layout;
    let count = layout.len();
    let recorded = memo.records.iter().flatten().count();
    if max_gen != memo.max_gen
        || current.len() != recorded
        || current
            .keys()
            .any(|&i| memo.records.get(i).is_none_or(Option::is_none))
    {
        return None;
    }
    let mut dirty = vec![false; count];
    for (&i, record) in current {
        if memo.records[i]
            .as_ref()
            .is_some_and(|r| Arc::ptr_eq(r, record))
        {
            continue;
        }
        let slice = &layout[i];
        let holds_slice = record.device_names.len() == slice.len()
            && slice
                .iter()
                .zip(record.device_names.iter())
                .all(|(&p, name)| devices.get(p).name == name);
        if !holds_slice {
            return None;
        }
        dirty[i] = true;
    }
    if memo.slice_of.len() != devices.len() {
        return None;
    }
    // Positions are stable under in-place edits: each replaced device is in its slice.
    for &p in replaced {
        let i = memo.slice_of[p] as usize;
        if !dirty[i] && pack::breaks_limits(layout[i].iter().map(|&p| item(devices, p)), limits) {
            return None;
        }
        dirty[i] = true;
    }
    // The packer repacks from scratch a pool more than a tenth (at least one slice) over a
    // fresh packing; a fresh packing has at least this many slices.
    let fewest = devices.len().div_ceil(limits.max_devices);
    if count > fewest + (fewest / 10).max(1) {
        return None;
    }
    Some(Reused {
        layout: Arc::clone(layout),
        slice_of: Arc::clone(&memo.slice_of),
        known: (0..count)
            .map(|i| (!dirty[i]).then_some(memo.changes[i]))
            .collect(),
    })
}

fn item(devices: &DeviceList, position: usize) -> Item {
    let d = devices.get(position);
    Item {
        len: d.json.len(),
        advanced: d.advanced,
    }
}
