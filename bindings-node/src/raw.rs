//! Bound native functions: the hot path, one Node-API call and nothing else.
//!
//! A `#[napi]` class method pays for `napi_unwrap`, a type-tag check and a
//! borrow-scope registration on every call — about 290 ns here, against about
//! 20 ns for a bare Node-API callback. So every method of a flow object is a
//! plain JS function created with `napi_create_function` whose callback data
//! is an `Rc<Slot<S>>` (a `RefCell` of the core value): the call finds its state without
//! unwrapping anything, reads its numbers, and answers. The JS wrapper keeps
//! the functions in private fields; a finalizer drops each function's `Rc`, so
//! the core value lives exactly as long as the JS object that holds it.
//!
//! Every callback catches panics (a Rust panic becomes a thrown `Error`, never
//! an abort) and maps failures to the Errors Node's own APIs throw:
//! `TypeError` with `code: 'ERR_INVALID_ARG_TYPE'`, `RangeError` with
//! `code: 'ERR_OUT_OF_RANGE'`.

use std::cell::{Cell, RefCell};
use std::ffi::{CStr, CString, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;
use std::rc::Rc;

use napi::sys;

/// Why a call failed; thrown into JS by [`call`] (and [`Fail::throw`]).
#[derive(Debug)]
pub enum Fail {
    /// An argument of the wrong type: its name and what it must be.
    Type(&'static str, &'static str),
    /// An argument out of range: its name and why.
    Range(String, String),
    /// A Rust panic, with its message.
    Panic(String),
    /// A Node-API call failed (an exception may already be pending).
    Napi,
}

impl From<headway_core::flow::Invalid> for Fail {
    fn from(e: headway_core::flow::Invalid) -> Self {
        Fail::Range(e.arg.to_string(), e.why.to_string())
    }
}

fn cstring(s: String) -> CString {
    CString::new(s.replace('\0', " ")).unwrap_or_default()
}

impl Fail {
    /// Throws this failure as a JS error in `env`.
    ///
    /// # Safety
    /// `env` must be the live environment of the current callback.
    pub unsafe fn throw(self, env: sys::napi_env) {
        unsafe {
            let mut pending = false;
            sys::napi_is_exception_pending(env, &mut pending);
            if pending {
                return;
            }
            match self {
                Fail::Type(arg, expected) => {
                    let msg = cstring(format!("The \"{arg}\" argument must be {expected}"));
                    sys::napi_throw_type_error(env, c"ERR_INVALID_ARG_TYPE".as_ptr(), msg.as_ptr());
                }
                Fail::Range(arg, why) => {
                    let msg = cstring(format!("The value of \"{arg}\" is out of range: it {why}"));
                    sys::napi_throw_range_error(env, c"ERR_OUT_OF_RANGE".as_ptr(), msg.as_ptr());
                }
                Fail::Panic(msg) => {
                    let msg = cstring(msg);
                    sys::napi_throw_error(env, c"GenericFailure".as_ptr(), msg.as_ptr());
                }
                Fail::Napi => {
                    sys::napi_throw_error(
                        env,
                        c"GenericFailure".as_ptr(),
                        c"a Node-API call failed".as_ptr(),
                    );
                }
            }
        }
    }
}

thread_local! {
    /// How many bound states are alive on this thread, for the test that
    /// proves finalizers free them.
    static ALIVE: Cell<i64> = const { Cell::new(0) };
}

/// How many bound states are alive on this thread.
pub fn alive() -> i64 {
    ALIVE.with(Cell::get)
}

/// One core value shared by the functions bound to it, counted while alive.
pub struct Slot<S> {
    pub cell: RefCell<S>,
}

impl<S> Slot<S> {
    fn new(state: S) -> Self {
        ALIVE.with(|a| a.set(a.get() + 1));
        Slot {
            cell: RefCell::new(state),
        }
    }
}

impl<S> Drop for Slot<S> {
    fn drop(&mut self) {
        ALIVE.with(|a| a.set(a.get() - 1));
    }
}

/// What a bound callback answers.
pub type Ret = Result<sys::napi_value, Fail>;

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else {
        "a Rust panic".to_string()
    }
}

#[inline(always)]
fn ok(status: sys::napi_status) -> Result<(), Fail> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(Fail::Napi)
    }
}

/// The environment of one callback, with the conversions a bound function
/// needs. `Copy`, and valid only for the callback it was made in.
#[derive(Clone, Copy)]
pub struct E(pub sys::napi_env);

impl E {
    /// A number argument. The JS wrapper has checked its type; this is the
    /// guard for a caller that reached the bound function some other way.
    #[inline(always)]
    pub fn f64(self, v: sys::napi_value, name: &'static str) -> Result<f64, Fail> {
        let mut x = 0.0;
        if unsafe { sys::napi_get_value_double(self.0, v, &mut x) } == sys::Status::napi_ok {
            Ok(x)
        } else {
            Err(Fail::Type(name, "of type number"))
        }
    }

    /// An integer argument that fits in an `i32`.
    #[inline(always)]
    pub fn i32(self, v: sys::napi_value, name: &'static str) -> Result<i32, Fail> {
        let x = self.f64(v, name)?;
        let i = x as i32;
        if i as f64 == x {
            Ok(i)
        } else {
            Err(Fail::Range(
                name.to_string(),
                format!("must be an integer in the 32-bit range (received {x})"),
            ))
        }
    }

    /// An integer id.
    #[inline(always)]
    pub fn u32(self, v: sys::napi_value, name: &'static str) -> Result<u32, Fail> {
        let x = self.f64(v, name)?;
        let i = x as u32;
        if i as f64 == x {
            Ok(i)
        } else {
            Err(Fail::Range(
                name.to_string(),
                "must be a non-negative 32-bit integer".to_string(),
            ))
        }
    }

    #[inline(always)]
    pub fn bool(self, b: bool) -> Ret {
        let mut out = ptr::null_mut();
        ok(unsafe { sys::napi_get_boolean(self.0, b, &mut out) })?;
        Ok(out)
    }

    #[inline(always)]
    pub fn num(self, x: f64) -> Ret {
        let mut out = ptr::null_mut();
        ok(unsafe { sys::napi_create_double(self.0, x, &mut out) })?;
        Ok(out)
    }

    #[inline(always)]
    pub fn int(self, x: i32) -> Ret {
        let mut out = ptr::null_mut();
        ok(unsafe { sys::napi_create_int32(self.0, x, &mut out) })?;
        Ok(out)
    }

    #[inline(always)]
    pub fn undefined(self) -> Ret {
        let mut out = ptr::null_mut();
        ok(unsafe { sys::napi_get_undefined(self.0, &mut out) })?;
        Ok(out)
    }

    /// A JS array of numbers.
    pub fn nums(self, xs: impl ExactSizeIterator<Item = f64>) -> Ret {
        let mut arr = ptr::null_mut();
        ok(unsafe { sys::napi_create_array_with_length(self.0, xs.len(), &mut arr) })?;
        for (i, x) in xs.enumerate() {
            let v = self.num(x)?;
            ok(unsafe { sys::napi_set_element(self.0, arr, i as u32, v) })?;
        }
        Ok(arr)
    }

    /// The numbers of a JS array (an array-like of numbers).
    pub fn f64s(self, v: sys::napi_value, name: &'static str) -> Result<Vec<f64>, Fail> {
        let mut is_array = false;
        ok(unsafe { sys::napi_is_array(self.0, v, &mut is_array) })?;
        if !is_array {
            return Err(Fail::Type(name, "an array of numbers"));
        }
        let mut len = 0u32;
        ok(unsafe { sys::napi_get_array_length(self.0, v, &mut len) })?;
        let mut out = Vec::with_capacity(len as usize);
        for i in 0..len {
            let mut el = ptr::null_mut();
            ok(unsafe { sys::napi_get_element(self.0, v, i, &mut el) })?;
            out.push(self.f64(el, name)?);
        }
        Ok(out)
    }
}

/// Runs one bound callback: fetches `N` arguments and the state the function
/// was bound to, runs `f` with the state borrowed, catches a panic, and throws
/// a failure. Missing arguments arrive as `undefined` (Node-API fills them).
///
/// # Safety
/// `env` and `info` come from Node-API for this call, and the function's data
/// was set by [`Bound::func`] to an `Rc<Slot<S>>` of this same `S`.
#[inline(always)]
pub unsafe fn call<S: 'static, const N: usize>(
    env: sys::napi_env,
    info: sys::napi_callback_info,
    f: impl FnOnce(&mut S, E, &[sys::napi_value; N]) -> Ret,
) -> sys::napi_value {
    let mut argc = N;
    let mut argv = [ptr::null_mut(); N];
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
        unsafe { Fail::Napi.throw(env) };
        return ptr::null_mut();
    }
    // SAFETY: `data` is the `Rc::into_raw` that `Bound::func` stored, kept
    // alive until this function's finalizer runs.
    let cell = unsafe { &(*(data as *const Slot<S>)).cell };
    let result = catch_unwind(AssertUnwindSafe(|| match cell.try_borrow_mut() {
        Ok(mut state) => f(&mut state, E(env), &argv),
        Err(_) => Err(Fail::Panic("headway: re-entrant call on one object".into())),
    }));
    match result {
        Ok(Ok(v)) => v,
        Ok(Err(fail)) => {
            unsafe { fail.throw(env) };
            ptr::null_mut()
        }
        Err(payload) => {
            unsafe { Fail::Panic(panic_message(payload)).throw(env) };
            ptr::null_mut()
        }
    }
}

/// Declares a bound callback: `bound!(name, State, N, |state, env, args| body)`.
macro_rules! bound {
    ($name:ident, $state:ty, $n:literal, |$s:ident, $e:ident, $a:ident| $body:expr) => {
        unsafe extern "C" fn $name(
            env: ::napi::sys::napi_env,
            info: ::napi::sys::napi_callback_info,
        ) -> ::napi::sys::napi_value {
            #[allow(unused_variables)]
            unsafe {
                $crate::raw::call::<$state, $n>(env, info, |$s, $e, $a| $body)
            }
        }
    };
}
pub(crate) use bound;

unsafe extern "C" fn drop_rc<S>(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    // SAFETY: `data` is one `Rc::into_raw` made by `Bound::func`.
    let _ = catch_unwind(|| unsafe { drop(Rc::from_raw(data as *const Slot<S>)) });
}

/// Builds the plain object a factory hands to the JS wrapper: one bound
/// function per method, all sharing one core value.
pub struct Bound<S: 'static> {
    env: sys::napi_env,
    obj: sys::napi_value,
    state: Rc<Slot<S>>,
}

impl<S: 'static> Bound<S> {
    pub fn new(env: sys::napi_env, state: S) -> Result<Self, Fail> {
        let mut obj = ptr::null_mut();
        ok(unsafe { sys::napi_create_object(env, &mut obj) })?;
        Ok(Bound {
            env,
            obj,
            state: Rc::new(Slot::new(state)),
        })
    }

    /// The shared state, for a handle that another native call reads.
    pub fn state(&self) -> &Rc<Slot<S>> {
        &self.state
    }

    /// Adds a function bound to the state under `name`.
    pub fn func(self, name: &CStr, cb: sys::napi_callback) -> Result<Self, Fail> {
        let data = Rc::into_raw(self.state.clone()) as *mut c_void;
        let mut f = ptr::null_mut();
        let bytes = name.to_bytes();
        let made = unsafe {
            sys::napi_create_function(
                self.env,
                name.as_ptr(),
                bytes.len() as isize,
                cb,
                data,
                &mut f,
            )
        };
        if made != sys::Status::napi_ok {
            // SAFETY: the function was not made, so nobody else owns `data`.
            unsafe { drop(Rc::from_raw(data as *const Slot<S>)) };
            return Err(Fail::Napi);
        }
        let fin = unsafe {
            sys::napi_add_finalizer(
                self.env,
                f,
                data,
                Some(drop_rc::<S>),
                ptr::null_mut(),
                ptr::null_mut(),
            )
        };
        if fin != sys::Status::napi_ok {
            // The function exists but cannot free its state: leak one Rc
            // rather than risk a use after free.
            return Err(Fail::Napi);
        }
        self.set(name, f)
    }

    /// Adds a plain value under `name`.
    pub fn set(self, name: &CStr, v: sys::napi_value) -> Result<Self, Fail> {
        ok(unsafe { sys::napi_set_named_property(self.env, self.obj, name.as_ptr(), v) })?;
        Ok(self)
    }

    /// Adds a number under `name`.
    pub fn number(self, name: &CStr, x: f64) -> Result<Self, Fail> {
        let v = E(self.env).num(x)?;
        self.set(name, v)
    }

    pub fn finish(self) -> sys::napi_value {
        self.obj
    }
}

/// Runs a factory body and converts its failure into a thrown error, for the
/// `#[napi]` factories that build [`Bound`] objects.
pub fn factory<'env>(
    env: &'env napi::Env,
    f: impl FnOnce(sys::napi_env) -> Ret,
) -> napi::Result<napi::Unknown<'env>> {
    match f(env.raw()) {
        Ok(v) => Ok(unsafe { napi::Unknown::from_raw_unchecked(env.raw(), v) }),
        Err(fail) => {
            unsafe { fail.throw(env.raw()) };
            Err(napi::Error::from_status(napi::Status::PendingException))
        }
    }
}
