//! Typed reads of JSON config values (diffusers' `config.json` and `scheduler_config.json`):
//! each returns the value or an [`Error::Config`] naming the key and saying what was expected
//! and what came. Integers must fit `usize`; numbers must be finite.

use serde_json::Value;

use crate::{Error, Result};

fn key_err(key: &str, msg: String) -> Error {
    Error::Config {
        key: key.to_string(),
        msg,
    }
}

/// A non-negative integer.
pub(crate) fn as_usize(key: &str, v: &Value) -> Result<usize> {
    v.as_u64()
        .and_then(|x| usize::try_from(x).ok())
        .ok_or_else(|| key_err(key, format!("expected a non-negative integer, got {v}")))
}

/// A finite number.
pub(crate) fn as_f64(key: &str, v: &Value) -> Result<f64> {
    v.as_f64()
        .filter(|x| x.is_finite())
        .ok_or_else(|| key_err(key, format!("expected a finite number, got {v}")))
}

/// `true` or `false`.
pub(crate) fn as_bool(key: &str, v: &Value) -> Result<bool> {
    v.as_bool()
        .ok_or_else(|| key_err(key, format!("expected true or false, got {v}")))
}

/// A string.
pub(crate) fn as_str<'a>(key: &str, v: &'a Value) -> Result<&'a str> {
    v.as_str()
        .ok_or_else(|| key_err(key, format!("expected a string, got {v}")))
}
