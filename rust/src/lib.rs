//! PyO3 glue for `resourceslice._core`. The computation lives in the sibling modules.
use pyo3::prelude::*;

pub mod canonical;
pub mod decode;
pub mod quantity;

#[pymodule]
fn _core(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
