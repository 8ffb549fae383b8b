//! The one per-message native call, `send`, as a bare Node-API callback.
//!
//! A `#[napi]` class method pays ~0.35 µs here for unwrapping `this` and its
//! borrow bookkeeping (the flow side measured the same, see `raw.rs`); a
//! send is ~2-4 µs in all, so that is a tenth of it. `NativeApp.sender()`
//! makes, once per app, a plain function whose callback data is the app:
//! `send(req, known)` reads one string and one boolean and answers like
//! `NativeApp.send` (a payload string, a ticket number, or a refusal).

use std::ffi::c_void;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;

use headway_core::task::App;
use napi::bindgen_prelude::ToNapiValue;
use napi::sys;

use super::app::send_answer;

/// What the function's data points at: the app it sends on.
struct Data {
    app: App,
}

unsafe extern "C" fn drop_data(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    // SAFETY: the one `Box::into_raw` made by `sender`, released once here.
    let _ = catch_unwind(|| unsafe { drop(Box::from_raw(data as *mut Data)) });
}

fn throw(env: sys::napi_env, msg: &str) {
    let text = std::ffi::CString::new(msg.replace('\0', " ")).unwrap_or_default();
    // SAFETY: `env` is the live environment of the current callback.
    unsafe {
        let mut pending = false;
        sys::napi_is_exception_pending(env, &mut pending);
        if !pending {
            sys::napi_throw_error(env, c"GenericFailure".as_ptr(), text.as_ptr());
        }
    }
}

/// Reads a JS string argument into a Rust `String`.
///
/// # Safety
/// `env` and `v` come from Node-API for this call.
unsafe fn string(env: sys::napi_env, v: sys::napi_value) -> Option<String> {
    let mut len = 0usize;
    if unsafe { sys::napi_get_value_string_utf8(env, v, ptr::null_mut(), 0, &mut len) }
        != sys::Status::napi_ok
    {
        return None;
    }
    let mut buf = vec![0u8; len + 1];
    let mut got = 0usize;
    if unsafe {
        sys::napi_get_value_string_utf8(env, v, buf.as_mut_ptr().cast(), len + 1, &mut got)
    } != sys::Status::napi_ok
    {
        return None;
    }
    buf.truncate(got);
    String::from_utf8(buf).ok()
}

unsafe extern "C" fn send_cb(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    let mut argc = 2usize;
    let mut argv = [ptr::null_mut(); 2];
    let mut data: *mut c_void = ptr::null_mut();
    let status = unsafe {
        sys::napi_get_cb_info(
            env,
            info,
            &mut argc,
            argv.as_mut_ptr(),
            ptr::null_mut(),
            &mut data,
        )
    };
    if status != sys::Status::napi_ok || data.is_null() {
        throw(env, "headway: a Node-API call failed");
        return ptr::null_mut();
    }
    // SAFETY: `data` is the `Data` `sender` boxed, alive until the function's
    // finalizer runs, which cannot happen during a call of it.
    let d = unsafe { &*(data as *const Data) };
    let run = || -> Result<sys::napi_value, String> {
        let req = unsafe { string(env, argv[0]) }
            .ok_or_else(|| "headway: send needs a request string".to_string())?;
        let mut known = false;
        unsafe { sys::napi_get_value_bool(env, argv[1], &mut known) };
        let answer = send_answer(&d.app, &req, known).map_err(|e| e.reason.clone())?;
        // SAFETY: `env` is this callback's environment.
        unsafe { ToNapiValue::to_napi_value(env, answer) }.map_err(|e| e.reason.clone())
    };
    match catch_unwind(AssertUnwindSafe(run)) {
        Ok(Ok(v)) => v,
        Ok(Err(msg)) => {
            throw(env, &msg);
            ptr::null_mut()
        }
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a Rust panic".into());
            throw(env, &msg);
            ptr::null_mut()
        }
    }
}

/// A bare function `send(req, known)` on `app`, freed with the function.
pub(crate) fn sender(env: sys::napi_env, app: App) -> napi::Result<sys::napi_value> {
    let data = Box::into_raw(Box::new(Data { app }));
    let mut f = ptr::null_mut();
    let made = unsafe {
        sys::napi_create_function(env, c"send".as_ptr(), 4, Some(send_cb), data.cast(), &mut f)
    };
    if made != sys::Status::napi_ok {
        // SAFETY: not handed to Node, so still ours.
        drop(unsafe { Box::from_raw(data) });
        return Err(napi::Error::from_reason(
            "headway: could not make the send function",
        ));
    }
    let tied = unsafe {
        sys::napi_add_finalizer(
            env,
            f,
            data.cast(),
            Some(drop_data),
            ptr::null_mut(),
            ptr::null_mut(),
        )
    };
    if tied != sys::Status::napi_ok {
        // The function exists but cannot free its data: leak one app handle
        // rather than risk a use after free.
        return Err(napi::Error::from_reason(
            "headway: could not tie the send function's data",
        ));
    }
    Ok(f)
}
