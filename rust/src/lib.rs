//! PyO3 glue for `resourceslice._core`. The computation lives in the sibling modules; this
//! file only moves data across the boundary (python/resourceslice/_core.pyi) and releases the
//! GIL around the pure-Rust work, since the controller's watch threads need it meanwhile.
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

pub mod canonical;
pub mod decode;
pub mod pack;
pub mod plan;
pub mod quantity;
pub mod strlist;
pub mod validate;

use decode::{Event, Record};
use validate::Input;

/// Views Python plain data as an `Input` tree (dict entries sorted by key). Strings are
/// borrowed, not copied: see `utf8`.
fn to_input<'py>(obj: &Bound<'py, PyAny>) -> Input<'py> {
    // Most frequent types first: every check is a call under the limited API.
    if let Ok(s) = obj.cast::<PyString>() {
        utf8(s).map_or(Input::BadStr, Input::Str)
    } else if let Ok(d) = obj.cast::<PyDict>() {
        let mut entries: Vec<(&str, Input<'_>)> = d.iter().map(|(k, v)| entry(&k, &v)).collect();
        entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
        Input::Dict(entries)
    } else if let Ok(b) = obj.cast::<PyBool>() {
        Input::Bool(b.is_true())
    } else if let Ok(i) = obj.cast::<PyInt>() {
        i.extract::<i64>().map_or(Input::BigInt, Input::Int)
    } else if let Ok(l) = obj.cast::<PyList>() {
        Input::List(l.iter().map(|x| to_input(&x)).collect())
    } else if obj.is_none() {
        Input::Null
    } else if obj.cast::<PyFloat>().is_ok() {
        Input::Float
    } else if let Ok(t) = obj.cast::<PyTuple>() {
        Input::List(t.iter().map(|x| to_input(&x)).collect())
    } else {
        Input::Other(type_name(obj))
    }
}

/// A pool as an `Input`, its `devices` list read one device at a time (see `Items`).
fn pool_input<'py>(pool: &Bound<'py, PyAny>) -> Input<'py> {
    let Ok(d) = pool.cast::<PyDict>() else {
        return to_input(pool);
    };
    let mut entries: Vec<(&str, Input<'_>)> = d
        .iter()
        .map(|(k, v)| {
            match (
                k.cast::<PyString>().ok().and_then(utf8),
                v.cast_into::<PyList>(),
            ) {
                (Some("devices"), Ok(list)) => ("devices", Input::Lazy(Box::new(LazyList(list)))),
                (_, Ok(list)) => entry(&k, list.as_any()),
                (_, Err(e)) => entry(&k, e.into_inner().as_any()),
            }
        })
        .collect();
    entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
    Input::Dict(entries)
}

struct LazyList<'py>(Bound<'py, PyList>);

impl<'py> validate::Items<'py> for LazyList<'py> {
    fn count(&self) -> usize {
        self.0.len()
    }
    // The item's strings stay valid after its handle is dropped: the list holds the item
    // (see `utf8`).
    fn item(&self, index: usize) -> Input<'py> {
        self.0
            .get_item(index)
            .map_or(Input::Null, |item| to_input(&item))
    }
}

fn entry<'py>(key: &Bound<'py, PyAny>, value: &Bound<'py, PyAny>) -> (&'py str, Input<'py>) {
    match key.cast::<PyString>().ok().and_then(|k| utf8(k)) {
        Some(k) => (k, to_input(value)),
        None => ("", Input::Other(format!("{} key", type_name(key)))),
    }
}

unsafe extern "C" {
    /// In the limited API only from 3.10, but exported by every CPython this wheel supports.
    fn PyUnicode_AsUTF8AndSize(
        unicode: *mut pyo3::ffi::PyObject,
        size: *mut pyo3::ffi::Py_ssize_t,
    ) -> *const std::ffi::c_char;
}

/// The UTF-8 of a str without the temporary bytes object that abi3-py39's `to_cow` makes
/// (the hot path reads tens of strings per device). None for lone surrogates.
///
/// The result outlives the `Bound` handle: it lives as long as the str object, which the
/// containers the caller passed keep alive for the whole call. That holds because the GIL is
/// kept (no `detach`) and no Python code runs while the tree is in use, so nothing can drop
/// or mutate those containers meanwhile.
fn utf8<'py>(s: &Bound<'py, PyString>) -> Option<&'py str> {
    let mut size: pyo3::ffi::Py_ssize_t = 0;
    // SAFETY: `s` is a live str; the UTF-8 buffer is cached in it and lives as long as it.
    let data = unsafe { PyUnicode_AsUTF8AndSize(s.as_ptr(), &mut size) };
    if data.is_null() {
        let _ = PyErr::take(s.py());
        return None;
    }
    // SAFETY: CPython guarantees `size` bytes of valid UTF-8 at `data`.
    Some(unsafe {
        std::str::from_utf8_unchecked(std::slice::from_raw_parts(data.cast::<u8>(), size as usize))
    })
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map_or_else(|_| "object".to_owned(), |n| n.to_string())
}

/// A validated, canonical desired state: every pool of one driver. Immutable.
#[pyclass(frozen, name = "Desired", module = "resourceslice._core")]
struct PyDesired(validate::Desired);

#[pymethods]
impl PyDesired {
    #[getter]
    fn driver(&self) -> &str {
        &self.0.driver
    }

    fn pool_names(&self) -> Vec<String> {
        self.0.pools.keys().cloned().collect()
    }

    fn device_count(&self, pool: &str) -> usize {
        self.0
            .pools
            .get(pool)
            .map_or(0, validate::DesiredPool::device_count)
    }

    fn changed_pools(&self, new: &PyDesired) -> Vec<String> {
        plan::changed_pools(&self.0, &new.0)
    }
}

/// What the store keeps of one ResourceSlice, decoded from the apiserver's JSON.
#[pyclass(frozen, name = "SliceRecord", module = "resourceslice._core")]
struct PySliceRecord(Record);

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

    fn same_content(&self, other: &Bound<'_, PySliceRecord>) -> bool {
        self.0.same_content(&other.get().0)
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
}

/// Nesting the API never needs (a node selector, the deepest part, is 5 levels). Deeper
/// input is not plain: the Python conversion refuses it with its path, before anything
/// recursive (the interpreter's or `to_input`) could run out of stack on it.
const MAX_PLAIN_DEPTH: usize = 32;

/// Whether `obj` is JSON-shaped data of the exact built-in types, at most `MAX_PLAIN_DEPTH`
/// levels deep (the rule of `_pycore.non_plain`).
fn is_plain(obj: &Bound<'_, PyAny>, depth: usize) -> bool {
    if obj.is_none()
        || obj.is_exact_instance_of::<PyString>()
        || obj.is_exact_instance_of::<PyBool>()
        || obj.is_exact_instance_of::<PyInt>()
        || obj.is_exact_instance_of::<PyFloat>()
    {
        return true;
    }
    if depth >= MAX_PLAIN_DEPTH {
        return false;
    }
    if let Ok(d) = obj.cast_exact::<PyDict>() {
        d.iter()
            .all(|(k, v)| k.is_exact_instance_of::<PyString>() && is_plain(&v, depth + 1))
    } else if let Ok(l) = obj.cast_exact::<PyList>() {
        l.iter().all(|v| is_plain(&v, depth + 1))
    } else {
        false
    }
}

#[pyfunction]
fn non_plain(items: &Bound<'_, PyList>) -> Vec<usize> {
    items
        .iter()
        .enumerate()
        .filter(|(_, item)| !is_plain(item, 0))
        .map(|(i, _)| i)
        .collect()
}

#[pyfunction]
fn prepare_desired(
    py: Python<'_>,
    driver: &Bound<'_, PyAny>,
    pools: &Bound<'_, PyAny>,
    max_slice_bytes: usize,
) -> PyResult<(Option<Py<PyDesired>>, Vec<String>)> {
    // The item tuples keep each pool alive even for a Mapping that builds them on the fly.
    let items: Vec<Bound<'_, PyAny>> = pools
        .call_method0("items")?
        .try_iter()?
        .collect::<PyResult<_>>()?;
    let mut entries = Vec::with_capacity(items.len());
    for item in &items {
        let (name, pool): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item.extract()?;
        entries.push(match name.cast::<PyString>().ok().and_then(|k| utf8(k)) {
            Some(k) => (k, pool_input(&pool)),
            None => entry(&name, &pool),
        });
    }
    entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
    // Not detached: the tree borrows strings from the Python objects (see `utf8`).
    match validate::prepare_desired(&to_input(driver), &entries, max_slice_bytes) {
        Ok(desired) => Ok((Some(Py::new(py, PyDesired(desired))?), Vec::new())),
        Err(errors) => Ok((None, errors)),
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
        let records: Vec<&Record> = records.iter().map(|r| &r.get().0).collect();
        plan::plan_pool(
            desired.as_ref().map(|d| &d.get().0),
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
        .map(PySliceRecord)
        .map_err(PyValueError::new_err)
}

#[pyfunction]
fn decode_list(py: Python<'_>, data: &[u8]) -> PyResult<(String, Vec<PySliceRecord>)> {
    let (version, records) = py
        .detach(|| decode::decode_list(data))
        .map_err(PyValueError::new_err)?;
    Ok((version, records.into_iter().map(PySliceRecord).collect()))
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
                (kind, Some(PySliceRecord(*record)), version)
            }
            Event::Bookmark(version) => ("BOOKMARK".to_owned(), None, version),
            Event::Error(status) => ("ERROR".to_owned(), None, status),
        },
    )
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyDesired>()?;
    m.add_class::<PySliceRecord>()?;
    m.add_class::<PyPlan>()?;
    m.add("MAX_PLAIN_DEPTH", MAX_PLAIN_DEPTH)?;
    m.add_function(wrap_pyfunction!(non_plain, m)?)?;
    m.add_function(wrap_pyfunction!(prepare_desired, m)?)?;
    m.add_function(wrap_pyfunction!(plan_pool, m)?)?;
    m.add_function(wrap_pyfunction!(decode_slice, m)?)?;
    m.add_function(wrap_pyfunction!(decode_list, m)?)?;
    m.add_function(wrap_pyfunction!(decode_watch_event, m)?)?;
    Ok(())
}
