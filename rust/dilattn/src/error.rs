//! Errors: the C status (SPEC 7), its name and the library's message (dilattn_last_error()).
use std::ffi::CStr;
use std::fmt;

use dilattn_sys as sys;

/// A failed dilattn call, or bad input caught in Rust before the call (with the status the
/// library uses for it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    status: i32,
    message: String,
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub(crate) fn new(status: sys::dilattn_status, message: impl Into<String>) -> Error {
        Error { status, message: message.into() }
    }

    /// The dilattn_status value (sys::DILATTN_ERROR_...).
    pub fn status(&self) -> i32 {
        self.status
    }

    /// The status's C name, e.g. "DILATTN_ERROR_BAD_DILATION".
    pub fn status_name(&self) -> String {
        let text = unsafe { CStr::from_ptr(sys::dilattn_status_string(self.status)) };
        let text = text.to_string_lossy();
        text.split(':').next().unwrap_or("").trim().to_string()
    }

    /// The detail: which argument, which value.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.status_name(), self.message)
    }
}

impl std::error::Error for Error {}

/// Ok for DILATTN_SUCCESS, else the error with this thread's dilattn_last_error().
pub(crate) fn check(status: sys::dilattn_status) -> Result<()> {
    if status == sys::DILATTN_SUCCESS {
        return Ok(());
    }
    let message = unsafe { CStr::from_ptr(sys::dilattn_last_error()) };
    Err(Error::new(status, message.to_string_lossy().into_owned()))
}
