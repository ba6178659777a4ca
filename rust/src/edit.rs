//! Device-level edits of a flat pool (docs/core.md §8): devices upserted and removed by
//! name, without the whole desired state being read and validated again.
use std::collections::HashSet;
use std::sync::Arc;

use crate::canonical::quote;
use crate::model::{Desired, DesiredPool, DeviceList, PoolDevices};

/// The flat device list of `pool` in `desired`, if it has the pool; `Err` for explicit slices.
fn flat<'d>(desired: &'d Desired, pool: &str) -> Result<Option<&'d DeviceList>, ()> {
    match desired.pools.get(pool).map(|p| &p.devices) {
        Some(PoolDevices::Flat(devices)) => Ok(Some(devices)),
        Some(PoolDevices::Slices(_)) => Err(()),
        None => Ok(None),
    }
}

/// A desired state after a device-level edit of one pool.
pub struct Edited {
    pub desired: Desired,
    /// When no device was added or removed, the positions of the devices replaced where
    /// they are: every position is kept, so the plan made for the pool before can be carried
    /// over (plan/replan.rs).
    pub in_place: Option<Vec<usize>>,
}

/// `desired` with `pool`'s devices named in `batch` (a desired state validated with the
/// pool's node selection, holding only the upserted devices in `pool`) replaced in place or
/// appended in batch order, and those named in `removed` left out (unknown names are no
/// error: a removal is idempotent). Other pools are shared, not copied.
pub fn with_devices(
    desired: &Desired,
    pool: &str,
    batch: &Desired,
    removed: &[String],
) -> Result<Edited, Vec<String>> {
    let wanted = desired.pools.get(pool);
    let (current, upserts) = match (wanted, flat(desired, pool), flat(batch, pool)) {
        (None, _, _) => return Err(vec![format!("pools[{}]: not desired", quote(pool))]),
        (_, Err(()), _) | (_, _, Err(())) => {
            return Err(vec![format!(
                "pools[{}]: given as slices; devices are upserted and removed by name only \
                 in a pool given as devices",
                quote(pool)
            )]);
        }
        (Some(_), Ok(current), Ok(upserts)) => (current, upserts),
    };
    let empty = DeviceList::default();
    let (current, upserts) = (current.unwrap_or(&empty), upserts.unwrap_or(&empty));
    let upserted: HashSet<&str> = upserts.iter().map(|d| d.name).collect();
    let mut both: Vec<&str> = removed
        .iter()
        .map(String::as_str)
        .filter(|n| upserted.contains(n))
        .collect();
    if !both.is_empty() {
        both.sort_unstable();
        both.dedup();
        return Err(both
            .into_iter()
            .map(|n| format!("remove[{}]: also upserted", quote(n)))
            .collect());
    }
    // Found through the list's name index: O(changed), not O(pool).
    let mut replaced = Vec::new();
    let mut appended = Vec::new();
    for device in upserts.iter() {
        match current.position(device.name) {
            Some(i) => replaced.push((i, device)),
            None => appended.push(device),
        }
    }
    let mut gone: Vec<usize> = removed.iter().filter_map(|n| current.position(n)).collect();
    gone.sort_unstable();
    gone.dedup();
    let in_place = gone.is_empty() && appended.is_empty();
    let devices = current.edited(&replaced, &gone, appended);
    let wanted = wanted.expect("checked above");
    let mut pools = desired.pools.clone();
    pools.insert(
        pool.to_owned(),
        Arc::new(DesiredPool {
            devices: PoolDevices::Flat(devices),
            node_selector: wanted.node_selector.clone(),
            all_nodes: wanted.all_nodes,
            generation: wanted.generation,
            max_devices_per_slice: wanted.max_devices_per_slice,
        }),
    );
    Ok(Edited {
        desired: Desired {
            driver: desired.driver.clone(),
            pools,
            max_slice_bytes: desired.max_slice_bytes,
        },
        in_place: in_place.then(|| replaced.iter().map(|&(i, _)| i).collect()),
    })
}
