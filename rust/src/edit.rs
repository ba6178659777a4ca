//! Device-level edits of a flat pool (docs/core.md §8): devices upserted and removed by
//! name, without the whole desired state being read and validated again.
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::canonical::quote;
use crate::validate::{Desired, DesiredPool, DeviceList, PoolDevices};

/// The flat device list of `pool` in `desired`, if it has the pool; `Err` for explicit slices.
fn flat<'d>(desired: &'d Desired, pool: &str) -> Result<Option<&'d DeviceList>, ()> {
    match desired.pools.get(pool).map(|p| &p.devices) {
        Some(PoolDevices::Flat(devices)) => Ok(Some(devices)),
        Some(PoolDevices::Slices(_)) => Err(()),
        None => Ok(None),
    }
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
) -> Result<Desired, Vec<String>> {
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
    let mut by_name: HashMap<&str, usize> = upserts
        .iter()
        .enumerate()
        .map(|(i, d)| (d.name, i))
        .collect();
    let gone: HashSet<&str> = removed.iter().map(String::as_str).collect();
    let mut both: Vec<&str> = gone
        .iter()
        .copied()
        .filter(|n| by_name.contains_key(n))
        .collect();
    if !both.is_empty() {
        both.sort_unstable();
        return Err(both
            .into_iter()
            .map(|n| format!("remove[{}]: also upserted", quote(n)))
            .collect());
    }
    // Sized once (the result is at most both lists): no reallocation, and none to give back.
    let mut devices = DeviceList::default();
    devices.reserve_for(&[current, upserts]);
    let kept = |name: &str| gone.is_empty() || !gone.contains(name);
    for device in current.iter().filter(|d| kept(d.name)) {
        match by_name.remove(device.name) {
            Some(i) => devices.push(upserts.get(i)),
            None => devices.push(device),
        }
    }
    for device in upserts.iter().filter(|d| by_name.contains_key(d.name)) {
        devices.push(device);
    }
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
    Ok(Desired {
        driver: desired.driver.clone(),
        pools,
        max_slice_bytes: desired.max_slice_bytes,
    })
}
