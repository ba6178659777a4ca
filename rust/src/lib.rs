//! PyO3 glue for `resourceslice._core`. The computation lives in the sibling modules; this
//! file only moves data across the boundary (python/resourceslice/_core.pyi) and lets other
//! threads (the controller's, a driver's) have the GIL during long calls: it is released
//! around pure-Rust work (planning, decoding) and handed over at pauses while Python data is
//! read (reader.rs).
use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

pub mod canonical;
pub mod decode;
pub mod devices;
pub mod edit;
pub mod fields;
pub mod input;
pub mod model;
pub mod plan;
pub mod quantity;
pub mod reader;
pub mod strlist;
pub mod text;
pub mod validate;

use decode::{Event, Record};
use plan::replan::{self, PlanMemo};

/// A validated, canonical desired state: every pool of one driver. Immutable, but for the
/// memo of its plans kept beside it (plan/replan.rs).
#[pyclass(frozen, name = "Desired", module = "resourceslice._core")]
struct PyDesired {
    desired: model::Desired,
    memos: PlanMemo,
}

impl PyDesired {
    fn new(desired: model::Desired) -> Self {
        let memos = PlanMemo::new(&desired);
        PyDesired { desired, memos }
    }
}

#[pymethods]
impl PyDesired {
    #[getter]
    fn driver(&self) -> &str {
        &self.desired.driver
    }

    fn pool_names(&self) -> Vec<String> {
        self.desired.pools.keys().cloned().collect()
    }

    fn device_count(&self, pool: &str) -> usize {
        self.desired.pools.get(pool).map_or(0, |p| p.device_count())
    }

    fn changed_pools(&self, new: &PyDesired) -> Vec<String> {
        replan::changed_pools((&self.desired, &self.memos), (&new.desired, &new.memos))
    }

    fn with_devices(
        &self,
        py: Python<'_>,
        pool: &str,
        batch: &PyDesired,
        removed: Vec<String>,
    ) -> PyResult<(Option<Py<PyDesired>>, Vec<String>)> {
        let edited = py.detach(|| {
            let edited = edit::with_devices(&self.desired, pool, &batch.desired, &removed)?;
            let memos = self.memos.after_edit(pool, edited.in_place);
            Ok(PyDesired {
                desired: edited.desired,
                memos,
            })
        });
        match edited {
            Ok(desired) => Ok((Some(Py::new(py, desired)?), Vec::new())),
            Err(errors) => Ok((None, errors)),
        }
    }
}

/// What the store keeps of one ResourceSlice, decoded from the apiserver's JSON.
#[pyclass(frozen, name = "SliceRecord", module = "resourceslice._core")]
struct PySliceRecord(Arc<Record>);

/// Shared: a plan's memo keeps the records it compared (plan/replan.rs).
impl From<Record> for PySliceRecord {
    fn from(record: Record) -> Self {
        PySliceRecord(Arc::new(record))
    }
}

#[pymethods]
impl PySliceRecord {
    #[getter]
    fn name(&self) -> &str {
        &self.0.name
    }
    #[getter]
    fn uid(&self) -> &str {
        &self.0.uid
    }
    #[getter]
    fn resource_version(&self) -> &str {
        &self.0.resource_version
    }
    #[getter]
    fn driver(&self) -> &str {
        &self.0.driver
    }
    #[getter]
    fn pool(&self) -> &str {
        &self.0.pool
    }
    #[getter]
    fn generation(&self) -> i64 {
        self.0.generation
    }
    #[getter]
    fn resource_slice_count(&self) -> i64 {
        self.0.resource_slice_count
    }
    #[getter]
    fn node_name(&self) -> Option<&str> {
        self.0.node_name.as_deref()
    }
    #[getter]
    fn device_names(&self) -> Vec<&str> {
        self.0.device_names.iter().collect()
    }

    #[getter]
    fn deleting(&self) -> bool {
        self.0.deleting
    }

    fn same_content(&self, other: &Bound<'_, PySliceRecord>) -> bool {
        self.0.same_content(&other.get().0)
    }

    fn dropped_fields(&self, stored: &Bound<'_, PySliceRecord>) -> (Vec<String>, Vec<String>) {
        self.0.dropped_fields(&stored.get().0)
    }

    fn __repr__(&self) -> String {
        format!(
            "SliceRecord(name={:?}, pool={:?}, generation={})",
            self.0.name, self.0.pool, self.0.generation
        )
    }
}

/// The writes that make one pool's slices equal to the desired state.
///
/// Bodies are Python bytes from the start: each is copied out of Rust once, and every
/// access of `creates` / `updates` shares them instead of copying a pool's worth again.
#[pyclass(frozen, name = "Plan", module = "resourceslice._core")]
struct PyPlan {
    generation: i64,
    slice_count: usize,
    device_count: usize,
    deletes: Vec<(String, String, String)>,
    writes: Vec<String>,
    next_write: usize,
    updates: Vec<(String, Py<PyBytes>)>,
    creates: Vec<Py<PyBytes>>,
    waiting: Vec<String>,
    compared: usize,
}

impl PyPlan {
    fn new(py: Python<'_>, plan: plan::Plan) -> Self {
        PyPlan {
            generation: plan.generation,
            slice_count: plan.slice_count,
            device_count: plan.device_count,
            deletes: plan.deletes,
            writes: plan.writes,
            next_write: plan.next_write,
            updates: plan
                .updates
                .into_iter()
                .map(|(name, body)| (name, PyBytes::new(py, &body).unbind()))
                .collect(),
            creates: plan
                .creates
                .into_iter()
                .map(|body| PyBytes::new(py, &body).unbind())
                .collect(),
            waiting: plan.waiting,
            compared: plan.compared,
        }
    }
}

#[pymethods]
impl PyPlan {
    #[getter]
    fn generation(&self) -> i64 {
        self.generation
    }
    #[getter]
    fn slice_count(&self) -> usize {
        self.slice_count
    }
    #[getter]
    fn device_count(&self) -> usize {
        self.device_count
    }
    #[getter]
    fn deletes(&self) -> Vec<(String, String, String)> {
        self.deletes.clone()
    }
    #[getter]
    fn writes(&self) -> Vec<String> {
        self.writes.clone()
    }
    #[getter]
    fn next_write(&self) -> usize {
        self.next_write
    }
    #[getter]
    fn updates(&self, py: Python<'_>) -> Vec<(String, Py<PyBytes>)> {
        self.updates
            .iter()
            .map(|(name, body)| (name.clone(), body.clone_ref(py)))
            .collect()
    }
    #[getter]
    fn creates(&self, py: Python<'_>) -> Vec<Py<PyBytes>> {
        self.creates.iter().map(|body| body.clone_ref(py)).collect()
    }
    #[getter]
    fn waiting(&self) -> Vec<String> {
        self.waiting.clone()
    }
    #[getter]
    fn compared(&self) -> usize {
        self.compared
    }
}

#[pyfunction]
fn non_plain(py: Python<'_>, items: &Bound<'_, PyList>) -> PyResult<Vec<usize>> {
    reader::non_plain(py, items)
}

/// `(desired, errors)`: `(None, None)` only for `plain_only`.
type Prepared = (Option<Py<PyDesired>>, Option<Vec<String>>);

/// `plain_only`: the caller hands devices over as they came, without `non_plain`'s walk;
/// when the reading meets a value that `non_plain` would call not plain (anywhere in `driver`
/// or `pools`, a pool counting as depth 0), the answer is `(None, None)`, and the caller
/// converts and asks again. So plain devices, nearly always the case, are walked once.
#[pyfunction]
#[pyo3(signature = (driver, pools, max_slice_bytes, plain_only=false))]
fn prepare_desired(
    py: Python<'_>,
    driver: &Bound<'_, PyAny>,
    pools: &Bound<'_, PyAny>,
    max_slice_bytes: usize,
    plain_only: bool,
) -> PyResult<Prepared> {
    let read = reader::read_desired(py, driver, pools, plain_only, |driver, pools| {
        validate::pool::prepare_desired(driver, pools, max_slice_bytes)
    })?;
    match read {
        None => Ok((None, None)),
        Some(Ok(desired)) => Ok((
            Some(Py::new(py, PyDesired::new(desired))?),
            Some(Vec::new()),
        )),
        Some(Err(errors)) => Ok((None, Some(errors))),
    }
}

#[pyfunction]
#[pyo3(signature = (desired, pool, existing, owner, node_name, first_write=0, max_body_bytes=None))]
#[allow(clippy::too_many_arguments)] // the Python signature, one argument each
fn plan_pool(
    py: Python<'_>,
    desired: Option<Py<PyDesired>>,
    pool: &str,
    existing: &Bound<'_, PyAny>,
    owner: Option<(String, String, String, String)>,
    node_name: Option<&str>,
    first_write: usize,
    max_body_bytes: Option<usize>,
) -> PyResult<PyPlan> {
    let records: Vec<Py<PySliceRecord>> = existing
        .try_iter()?
        .map(|r| Ok(r?.cast_into::<PySliceRecord>()?.unbind()))
        .collect::<PyResult<_>>()?;
    let owner = owner.map(|(api_version, kind, name, uid)| plan::Owner {
        api_version,
        kind,
        name,
        uid,
    });
    let plan = py.detach(|| {
        let records: Vec<Arc<Record>> = records.iter().map(|r| Arc::clone(&r.get().0)).collect();
        plan::pool::plan_pool(
            desired.as_ref().map(|d| (&d.get().desired, &d.get().memos)),
            pool,
            &records,
            owner.as_ref(),
            node_name,
            plan::Window {
                first_write,
                max_body_bytes,
            },
        )
    });
    Ok(PyPlan::new(py, plan))
}

#[pyfunction]
fn decode_slice(py: Python<'_>, data: &[u8]) -> PyResult<PySliceRecord> {
    py.detach(|| decode::decode_slice(data))
        .map(PySliceRecord::from)
        .map_err(PyValueError::new_err)
}

#[pyfunction]
fn decode_list(py: Python<'_>, data: &[u8]) -> PyResult<(String, Vec<PySliceRecord>)> {
    let (version, records) = py
        .detach(|| decode::decode_list(data))
        .map_err(PyValueError::new_err)?;
    Ok((
        version,
        records.into_iter().map(PySliceRecord::from).collect(),
    ))
}

/// Bytes of a list response decoded per release of the GIL: a few milliseconds of work.
const FEED_BYTES: usize = 1 << 20;

/// The informer's relist, fed from the response as it is read (see `decode::ListStream`).
#[pyfunction]
fn decode_list_chunks(
    py: Python<'_>,
    chunks: &Bound<'_, PyAny>,
) -> PyResult<(String, Vec<PySliceRecord>)> {
    let mut stream = decode::ListStream::default();
    // Chunks are fed a batch at a time: releasing the GIL for each small chunk and taking it
    // back at once would keep a waiting thread from ever getting it (see `reader::Pauses`).
    let mut batch = Vec::with_capacity(FEED_BYTES);
    for chunk in chunks.try_iter()? {
        batch.extend_from_slice(chunk?.cast::<PyBytes>()?.as_bytes());
        if batch.len() >= FEED_BYTES {
            py.detach(|| stream.feed(&batch));
            batch.clear();
        }
    }
    let (version, records) = py
        .detach(|| {
            stream.feed(&batch);
            stream.finish()
        })
        .map_err(PyValueError::new_err)?;
    Ok((
        version,
        records.into_iter().map(PySliceRecord::from).collect(),
    ))
}

#[pyfunction]
fn decode_watch_event(
    py: Python<'_>,
    data: &[u8],
) -> PyResult<(String, Option<PySliceRecord>, String)> {
    Ok(
        match py
            .detach(|| decode::decode_watch_event(data))
            .map_err(PyValueError::new_err)?
        {
            Event::Object(kind, record) => {
                let version = record.resource_version.clone();
                (kind, Some(PySliceRecord::from(*record)), version)
            }
            Event::Bookmark(version) => ("BOOKMARK".to_owned(), None, version),
            Event::Error(status) => ("ERROR".to_owned(), None, status),
        },
    )
}

/// `(texts, bytes)`: the device texts the Rust core holds now, each distinct text once
/// however many desired states and records share it (text.rs). A diagnostic for tests and
/// benches; the pure-Python core shares its strings through `sys.intern` and has no count.
#[pyfunction]
fn held_texts() -> (usize, usize) {
    text::held()
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyDesired>()?;
    m.add_class::<PySliceRecord>()?;
    m.add_class::<PyPlan>()?;
    m.add("MAX_PLAIN_DEPTH", reader::MAX_PLAIN_DEPTH)?;
    m.add_function(wrap_pyfunction!(non_plain, m)?)?;
    m.add_function(wrap_pyfunction!(prepare_desired, m)?)?;
    m.add_function(wrap_pyfunction!(plan_pool, m)?)?;
    m.add_function(wrap_pyfunction!(decode_slice, m)?)?;
    m.add_function(wrap_pyfunction!(decode_list, m)?)?;
    m.add_function(wrap_pyfunction!(decode_list_chunks, m)?)?;
    m.add_function(wrap_pyfunction!(decode_watch_event, m)?)?;
    m.add_function(wrap_pyfunction!(held_texts, m)?)?;
    Ok(())
}
