//! The one per-message native call, `send`, as a bare Node-API callback.
//!
//! A `#[napi]` class method pays ~0.35 µs here for unwrapping `this` and its
//! borrow bookkeeping (the flow side measured the same, see `raw.rs`); a
//! send is ~2-4 µs in all, so that is a tenth of it. `NativeApp.sender()`
//! makes, once per app, a plain function whose callback data is the app:
//! `send(req, known)` reads one string and one boolean and answers as the
//! hub's calls do (a payload string, a ticket number, or a refusal).

use std::ffi::c_void;
use std::panic::catch_unwind;

use headway_core::task::App;
use napi::bindgen_prelude::ToNapiValue;
use napi::sys;

use super::app::send_answer;
use crate::raw::{E, Fail, args, bare_function, guarded};

/// What the function's data points at: the app it sends on.
struct Data {
    app: App,
}

unsafe extern "C" fn drop_data(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    // SAFETY: the one `Box::into_raw` made by `sender`, released once here.
    let _ = catch_unwind(|| unsafe { drop(Box::from_raw(data as *mut Data)) });
}

unsafe extern "C" fn send_cb(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    let refused = |e: napi::Error| Fail::Error(e.reason.clone());
    unsafe {
        guarded(env, || {
            let (argv, data) = args::<2>(env, info)?;
            // SAFETY: `data` is the `Data` `sender` boxed, alive until the
            // function's finalizer runs, which cannot happen during a call
            // of it.
            let d = &*(data as *const Data);
            let req = E(env)
                .string(argv[0], "req")
                .map_err(|_| Fail::Error("headway: send needs a request string".into()))?;
            let mut known = false;
            sys::napi_get_value_bool(env, argv[1], &mut known);
            let answer = send_answer(&d.app, &req, known).map_err(refused)?;
            ToNapiValue::to_napi_value(env, answer).map_err(refused)
        })
    }
}

/// A bare function `send(req, known)` on `app`, freed with the function.
pub(crate) fn sender(env: sys::napi_env, app: App) -> napi::Result<sys::napi_value> {
    let data = Box::into_raw(Box::new(Data { app }));
    bare_function(env, c"send", Some(send_cb), data.cast(), drop_data)
        .map_err(|_| napi::Error::from_reason("headway: could not make the send function"))
}
