//! Panic isolation for the parquet and arrow decoders.
//!
//! The `parquet` crate panics on some corrupt files instead of returning an error (a byte
//! flip in a dictionary page gave `bit_util.rs: range end index 4 out of range for slice of
//! length 0`). A file is input, and input must not end the run: every call into the decoders
//! on data read from a file goes through [`isolate`], which turns such a panic into an error
//! for that file or row group.
//!
//! While a call is isolated, the panic message is logged through `tracing` (at `debug`)
//! instead of being printed by the default hook, so a caught panic does not look like a
//! crash; panics anywhere else still reach the previous hook unchanged.

use std::cell::Cell;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    /// Depth of [`isolate`] calls on this thread (they may nest).
    static ISOLATED: Cell<u32> = const { Cell::new(0) };
}

static HOOK: Once = Once::new();

/// Install, once per process, a panic hook that stays quiet for isolated calls.
fn install_hook() {
    HOOK.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if ISOLATED.with(Cell::get) > 0 {
                tracing::debug!("decoder panicked (isolated): {info}");
            } else {
                previous(info);
            }
        }));
    });
}

/// Run `f`; a panic inside it becomes `Err` with the panic message (prefixed with
/// `decoder panicked:`), and the caller reports it as an error of the file or row group it was
/// decoding. `f` must not leave shared state half-updated when it panics: callers pass
/// closures that only read a file and build fresh values.
///
/// Errors: the panic message as a string.
pub fn isolate<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    install_hook();
    ISOLATED.with(|d| d.set(d.get() + 1));
    let result = panic::catch_unwind(AssertUnwindSafe(f));
    ISOLATED.with(|d| d.set(d.get().saturating_sub(1)));
    result.map_err(|payload| {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(no message)".to_string());
        format!("decoder panicked: {message}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_an_error_with_its_message() {
        let r: Result<u8, String> = isolate(|| {
            let v: Vec<u8> = Vec::new();
            let i = v.len() + 4;
            v[i]
        });
        let e = r.unwrap_err();
        assert!(e.starts_with("decoder panicked: "), "{e}");
        assert!(e.contains("index out of bounds"), "{e}");
        assert_eq!(isolate(|| 7), Ok(7));
        assert_eq!(ISOLATED.with(Cell::get), 0);
    }
}
