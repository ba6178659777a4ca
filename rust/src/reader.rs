//! The reading of Python plain data into `Input` trees, the first stage of `prepare_desired`
//! (and the `non_plain` rule it shares). It runs with the GIL held, so it hands the GIL over
//! at pauses (`Pauses`) to other threads (the controller's, a driver's) during a long read,
//! and keeps every str it borrows alive for the call.
use std::cell::{Cell, RefCell};
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use pyo3::Borrowed;

use crate::input::{Input, Items};

/// How long converting Python data holds the GIL at a stretch, where it can let go: another
/// thread waiting for it (a driver's gRPC threads, the informer) waits about this long at
/// most, not the whole conversion of a large pool.
const HOLD: Duration = Duration::from_millis(1);

/// Reads Python plain data as `Input` trees for one call, keeping a strong reference to every
/// str it borrows from: at a pause another thread may replace or drop what the caller's
/// containers held, but not a str that a tree (or validation: device names) points into.
struct Reader<'py> {
    py: Python<'py>,
    kept: RefCell<Vec<Bound<'py, PyString>>>,
    /// Strs kept lately, direct-mapped, as (address, UTF-8 pointer, length): shared keys
    /// (`"attributes"`, `"int"`) come back in every device and are kept and converted once.
    /// An address found here is in `kept`, so it cannot have been freed and reused for
    /// another object.
    recent: [Cell<(usize, *const u8, usize)>; 256],
    pauses: Pauses<'py>,
    /// The containers around the value being read, counted from a pool (`is_plain`'s depth).
    depth: Cell<usize>,
    /// A value met that `non_plain` would call not plain (see `prepare_desired`'s
    /// `plain_only`).
    not_plain: Cell<bool>,
    /// `plain_only`: once `not_plain`, nothing more is read (the call's answer is known).
    stop_at_not_plain: bool,
}

/// Lets other threads take the GIL during a long conversion of Python data.
///
/// Releasing and retaking the GIL (`detach`) is not enough: the thread that releases it
/// takes it back before a waiting thread wakes up, and each retaking restarts that thread's
/// switch interval, so it would never ask for its turn. A call of a Python function
/// does what the interpreter does between bytecodes: it hands the GIL over when another
/// thread asked for it (after waiting the switch interval, 5 ms by default), and costs a
/// fraction of a microsecond otherwise. It also runs signal handlers: what they raise
/// (KeyboardInterrupt) is kept for the caller to raise once the call's work is done.
struct Pauses<'py> {
    py: Python<'py>,
    last: Cell<Instant>,
    raised: RefCell<Option<PyErr>>,
}

/// `lambda: None`, made once.
static NOTHING: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

impl<'py> Pauses<'py> {
    fn new(py: Python<'py>) -> Self {
        Pauses {
            py,
            last: Cell::new(Instant::now()),
            raised: RefCell::new(None),
        }
    }

    /// Lets a waiting thread have the GIL if this one held it `HOLD` since the last pause.
    /// Only where no dict is being iterated (another thread may change it meanwhile).
    fn pause_if_due(&self) {
        if self.last.get().elapsed() < HOLD {
            return;
        }
        let py = self.py;
        let nothing = NOTHING.get_or_try_init(py, || {
            py.eval(c"lambda: None", None, None).map(Bound::unbind)
        });
        if let Err(e) = nothing.and_then(|f| f.call0(py)) {
            self.raised.borrow_mut().get_or_insert(e);
        }
        self.last.set(Instant::now());
    }

    /// What a pause raised, if anything.
    fn finish(self) -> PyResult<()> {
        self.raised.into_inner().map_or(Ok(()), Err)
    }
}

impl<'py> Reader<'py> {
    fn new(py: Python<'py>, plain_only: bool) -> Self {
        Reader {
            py,
            kept: RefCell::new(Vec::new()),
            recent: std::array::from_fn(|_| Cell::new((0, std::ptr::null(), 0))),
            pauses: Pauses::new(py),
            depth: Cell::new(0),
            not_plain: Cell::new(false),
            stop_at_not_plain: plain_only,
        }
    }

    /// Whether reading goes on: false once a value that is not plain stopped a `plain_only`
    /// call.
    fn reading(&self) -> bool {
        !(self.stop_at_not_plain && self.not_plain.get())
    }

    /// Reads a container's members at one level deeper, or nothing (`Input::Null`) when it
    /// sits as deep as `is_plain` allows: then it is not plain, and a `plain_only` call stops.
    fn nested<'r>(&'r self, read: impl FnOnce() -> Input<'r>) -> Input<'r> {
        let depth = self.depth.get();
        if depth >= MAX_PLAIN_DEPTH {
            self.not_plain.set(true);
        }
        if !self.reading() {
            return Input::Null;
        }
        self.depth.set(depth + 1);
        let input = read();
        self.depth.set(depth);
        input
    }

    /// The UTF-8 of a str without the temporary bytes object that abi3-py39's `to_cow`
    /// makes (the hot path reads tens of strings per device). None for lone surrogates.
    ///
    /// Keys (`"attributes"`, `"int"`) and shared values come back in every device: a hit in
    /// `recent` gives their UTF-8 without asking CPython again.
    fn str(&self, s: &Bound<'py, PyString>) -> Option<&str> {
        let address = s.as_ptr() as usize;
        let slot = &self.recent
            [((address as u64 >> 4).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as usize];
        let (kept_address, data, size) = slot.get();
        if kept_address == address {
            // SAFETY: the slot was filled from this str, which `kept` keeps alive, so its
            // cached UTF-8 buffer is still there (CPython never changes it once made).
            return Some(unsafe { utf8(data, size) });
        }
        let mut size: pyo3::ffi::Py_ssize_t = 0;
        // SAFETY: `s` is a live str; its UTF-8 buffer is cached in it and lives as long as
        // it, which `kept` (below) makes at least as long as `self`.
        let data = unsafe { PyUnicode_AsUTF8AndSize(s.as_ptr(), &mut size) };
        if data.is_null() {
            let _ = PyErr::take(self.py);
            return None;
        }
        self.kept.borrow_mut().push(s.clone());
        slot.set((address, data.cast::<u8>(), size as usize));
        // SAFETY: CPython guarantees `size` bytes of valid UTF-8 at `data`.
        Some(unsafe { utf8(data.cast::<u8>(), size as usize) })
    }

    /// Views Python plain data as an `Input` tree (dict entries sorted by key).
    ///
    /// The exact built-in types, nearly all the input, are told apart by their type pointer
    /// (inline under the limited API, where each `cast` is a call), and dicts are read with
    /// borrowed references: a device is read without one reference count change per member.
    fn input<'r>(&'r self, obj: &Bound<'py, PyAny>) -> Input<'r> {
        if let Ok(s) = obj.cast_exact::<PyString>() {
            self.str(s).map_or(Input::BadStr, Input::Str)
        } else if let Ok(d) = obj.cast_exact::<PyDict>() {
            self.dict(d)
        } else if obj.is_exact_instance_of::<PyInt>() {
            let mut overflow: std::ffi::c_int = 0;
            // SAFETY: `obj` is an int; an exact int converts without running Python code.
            let i = unsafe { pyo3::ffi::PyLong_AsLongLongAndOverflow(obj.as_ptr(), &mut overflow) };
            if overflow != 0 {
                Input::BigInt
            } else {
                Input::Int(i)
            }
        } else if let Ok(l) = obj.cast_exact::<PyList>() {
            self.list(l)
        } else if obj.is_none() {
            Input::Null
        } else if obj.is_exact_instance_of::<PyBool>() {
            Input::Bool(obj.is(PyBool::new(self.py, true)))
        } else {
            self.input_other(obj)
        }
    }

    /// The types `input` does not tell at once: subclasses, floats, tuples, anything else.
    fn input_other<'r>(&'r self, obj: &Bound<'py, PyAny>) -> Input<'r> {
        if !obj.is_exact_instance_of::<PyFloat>() {
            self.not_plain.set(true);
        }
        if let Ok(s) = obj.cast::<PyString>() {
            self.str(s).map_or(Input::BadStr, Input::Str)
        } else if let Ok(d) = obj.cast::<PyDict>() {
            self.dict(d)
        } else if let Ok(b) = obj.cast::<PyBool>() {
            Input::Bool(b.is_true())
        } else if let Ok(i) = obj.cast::<PyInt>() {
            i.extract::<i64>().map_or(Input::BigInt, Input::Int)
        } else if let Ok(l) = obj.cast::<PyList>() {
            self.list(l)
        } else if obj.cast::<PyFloat>().is_ok() {
            Input::Float
        } else if let Ok(t) = obj.cast::<PyTuple>() {
            self.nested(|| Input::List(t.iter().map(|x| self.input(&x)).collect()))
        } else {
            Input::Other(type_name(obj))
        }
    }

    fn list<'r>(&'r self, l: &Bound<'py, PyList>) -> Input<'r> {
        self.nested(|| Input::List(l.iter().map(|x| self.input(&x)).collect()))
    }

    /// A dict's entries sorted by key.
    fn dict<'r>(&'r self, d: &Bound<'py, PyDict>) -> Input<'r> {
        self.nested(|| {
            let mut entries: Vec<(&str, Input<'_>)> = Vec::with_capacity(d.len());
            all_entries(d, |k, v| {
                entries.push(self.entry(k, v));
                true
            });
            if !entries.is_sorted_by(|a, b| a.0 <= b.0) {
                entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            }
            Input::Dict(entries)
        })
    }

    fn entry<'r>(
        &'r self,
        key: &Bound<'py, PyAny>,
        value: &Bound<'py, PyAny>,
    ) -> (&'r str, Input<'r>) {
        let name = match key.cast_exact::<PyString>() {
            Ok(k) => self.str(k),
            Err(_) => {
                self.not_plain.set(true);
                key.cast::<PyString>().ok().and_then(|k| self.str(k))
            }
        };
        match name {
            Some(k) => (k, self.input(value)),
            None => ("", Input::Other(format!("{} key", type_name(key)))),
        }
    }

    /// A pool as an `Input`: its `devices` list read one device at a time as validation asks
    /// for them (see `LazyList`), its `slices` with pauses between them.
    fn pool<'r>(&'r self, pool: &Bound<'py, PyAny>) -> Input<'r> {
        let Ok(d) = pool.cast::<PyDict>() else {
            return self.input(pool);
        };
        if !pool.is_exact_instance_of::<PyDict>() {
            self.not_plain.set(true);
        }
        // Collected first: a pause must not fall inside the iteration of a dict.
        let members: Vec<(Bound<'py, PyAny>, Bound<'py, PyAny>)> = d.iter().collect();
        self.depth.set(1);
        let mut entries: Vec<(&str, Input<'_>)> = members
            .iter()
            .map(|(k, v)| {
                let key = k.cast::<PyString>().ok().and_then(|k| self.str(k));
                let list = v.cast::<PyList>();
                if key.is_some() && !k.is_exact_instance_of::<PyString>()
                    || list.is_ok() && !v.is_exact_instance_of::<PyList>()
                {
                    self.not_plain.set(true);
                }
                match (key, list) {
                    (Some("devices"), Ok(list)) => {
                        let list = LazyList {
                            reader: self,
                            list: list.clone(),
                        };
                        ("devices", Input::Lazy(Box::new(list)))
                    }
                    (Some("slices"), Ok(list)) => {
                        self.depth.set(2);
                        let slices = list.iter().map(|slice| {
                            let slice = self.input(&slice);
                            self.pauses.pause_if_due();
                            slice
                        });
                        let slices = Input::List(slices.collect());
                        self.depth.set(1);
                        ("slices", slices)
                    }
                    _ => self.entry(k, v),
                }
            })
            .collect();
        self.depth.set(0);
        entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
        Input::Dict(entries)
    }
}

/// A list converted one item at a time as validation asks for it, with pauses between items.
/// Validation asks for every item, even of a pool it refuses: so `plain_only` meets every
/// device `non_plain` would have walked (tests/core/test_plain.py).
struct LazyList<'r, 'py> {
    reader: &'r Reader<'py>,
    list: Bound<'py, PyList>,
}

impl<'r> Items<'r> for LazyList<'r, '_> {
    fn count(&self) -> usize {
        self.list.len()
    }

    fn item(&self, index: usize) -> Input<'r> {
        self.reader.pauses.pause_if_due();
        if !self.reader.reading() {
            return Input::Null;
        }
        // A pool's device: inside the pool and its list (`is_plain`'s depth).
        let depth = self.reader.depth.replace(2);
        // An item another thread removed during a pause reads as None.
        let item = self
            .list
            .get_item(index)
            .map_or(Input::Null, |item| self.reader.input(&item));
        self.reader.depth.set(depth);
        item
    }
}

unsafe extern "C" {
    /// In the limited API only from 3.10, but exported by every CPython this wheel supports.
    fn PyUnicode_AsUTF8AndSize(
        unicode: *mut pyo3::ffi::PyObject,
        size: *mut pyo3::ffi::Py_ssize_t,
    ) -> *const std::ffi::c_char;
}

/// Calls `f` on each (key, value) of `d` while it returns true; whether it always did.
///
/// Borrowed references from `PyDict_Next`: reading a device does not change two reference
/// counts per member. `f` uses each before the next step, and `d` is held meanwhile: were
/// Python code to run inside `f` (a metaclass's `__name__` in `type_name`, a finaliser of
/// the garbage collector) and remove `d` from its parent, `d` would still be there.
fn all_entries<'py>(
    d: &Bound<'py, PyDict>,
    mut f: impl FnMut(&Bound<'py, PyAny>, &Bound<'py, PyAny>) -> bool,
) -> bool {
    let d = d.clone();
    let mut pos: pyo3::ffi::Py_ssize_t = 0;
    let mut key: *mut pyo3::ffi::PyObject = std::ptr::null_mut();
    let mut value: *mut pyo3::ffi::PyObject = std::ptr::null_mut();
    // SAFETY: `d` is a live dict, and what it hands out is used before the next step.
    while unsafe { pyo3::ffi::PyDict_Next(d.as_ptr(), &mut pos, &mut key, &mut value) } != 0 {
        // SAFETY: live objects, borrowed from `d`.
        let (k, v) = unsafe {
            (
                Borrowed::from_ptr(d.py(), key),
                Borrowed::from_ptr(d.py(), value),
            )
        };
        if !f(&k, &v) {
            return false;
        }
    }
    true
}

/// # Safety
/// `size` bytes of valid UTF-8 at `data`, alive for `'a`.
unsafe fn utf8<'a>(data: *const u8, size: usize) -> &'a str {
    // SAFETY: as the caller promises.
    unsafe { std::str::from_utf8_unchecked(std::slice::from_raw_parts(data, size)) }
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map_or_else(|_| "object".to_owned(), |n| n.to_string())
}

/// Nesting the API never needs (a node selector, the deepest part, is 5 levels). Deeper
/// input is not plain: the Python conversion refuses it with its path, before anything
/// recursive (the interpreter's or `Reader::input`) could run out of stack on it.
pub const MAX_PLAIN_DEPTH: usize = 32;

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
        all_entries(d, |k, v| {
            k.is_exact_instance_of::<PyString>() && is_plain(v, depth + 1)
        })
    } else if let Ok(l) = obj.cast_exact::<PyList>() {
        l.iter().all(|v| is_plain(&v, depth + 1))
    } else {
        false
    }
}

/// Indexes of the items of `items` that are not plain (`is_plain`).
pub fn non_plain(py: Python<'_>, items: &Bound<'_, PyList>) -> PyResult<Vec<usize>> {
    let pauses = Pauses::new(py);
    let found = items
        .iter()
        .enumerate()
        .filter(|(_, item)| {
            pauses.pause_if_due();
            !is_plain(item, 0)
        })
        .map(|(i, _)| i)
        .collect();
    pauses.finish().map(|()| found)
}

/// `driver` and the pools of the Mapping `pools` read as `Input` trees (pools sorted by
/// name) and handed to `validate`; None when `plain_only` and a value met is not plain (see
/// the `prepare_desired` of lib.rs).
pub fn read_desired<R>(
    py: Python<'_>,
    driver: &Bound<'_, PyAny>,
    pools: &Bound<'_, PyAny>,
    plain_only: bool,
    validate: impl for<'r> FnOnce(&Input<'r>, &[(&'r str, Input<'r>)]) -> R,
) -> PyResult<Option<R>> {
    // The item tuples keep each pool alive even for a Mapping that builds them on the fly.
    let items: Vec<Bound<'_, PyAny>> = pools
        .call_method0("items")?
        .try_iter()?
        .collect::<PyResult<_>>()?;
    let reader = Reader::new(py, plain_only);
    let mut entries = Vec::with_capacity(items.len());
    for item in &items {
        let (name, pool): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item.extract()?;
        if !name.is_exact_instance_of::<PyString>() {
            reader.not_plain.set(true);
        }
        entries.push(
            match name.cast::<PyString>().ok().and_then(|k| reader.str(k)) {
                Some(k) => (k, reader.pool(&pool)),
                None => reader.entry(&name, &pool),
            },
        );
        reader.pauses.pause_if_due();
    }
    entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let driver = reader.input(driver);
    let result = reader.reading().then(|| validate(&driver, &entries));
    drop((entries, driver));
    let not_plain = reader.not_plain.get();
    reader.pauses.finish()?;
    if plain_only && not_plain {
        return Ok(None);
    }
    Ok(Some(
        result.expect("read to the end unless plain_only stopped it"),
    ))
}
