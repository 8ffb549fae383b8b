//! Raw Node-API callbacks: the hot path, one Node-API call and nothing else.
//!
//! A `#[napi]` class method pays for `napi_unwrap`, a type-tag check and a
//! borrow-scope registration on every call — about 290 ns here, against about
//! 20 ns for a bare Node-API callback. So every method of a flow object is one
//! plain native function per JS environment, shared by every instance (one
//! call target, so V8's call sites stay monomorphic however many buckets an
//! application holds), whose callback data is that environment's [`Flow`]:
//! the slabs of core values. An instance is a slot id in a slab, passed as the
//! first argument; the call reads its numbers, borrows the slot, and answers.
//!
//! Slots are freed when the JS object that owns one is collected (a
//! finalizer on the owner, see [`own`]). An id that names no live slot —
//! possible only for a caller that forged one — is refused, never read: this
//! file has no unchecked pointer from JS.
//!
//! Every callback catches panics (a Rust panic becomes a thrown `Error`,
//! never an abort) and maps failures to the Errors Node's own APIs throw:
//! `TypeError` with `code: 'ERR_INVALID_ARG_TYPE'`, `RangeError` with
//! `code: 'ERR_OUT_OF_RANGE'`.

use std::cell::{Cell, RefCell};
use std::ffi::{CStr, CString, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;
use std::rc::Rc;

use headway_core::flow::millis::{self, OutOfRange};
use napi::sys;

use crate::flow::Flow;

/// Why a call failed; thrown into JS by [`Fail::throw`].
#[derive(Debug)]
pub enum Fail {
    /// An argument of the wrong type: its name and what it must be.
    Type(&'static str, &'static str),
    /// An argument out of range: its name and why.
    Range(String, String),
    /// An id that names no live native object.
    Gone,
    /// A failure that is no argument's fault (a Rust panic, a refusal
    /// that reached a bare callback): an `Error` with this message.
    Error(String),
    /// An answer the caller throws as an `Error` with this `code` and
    /// message (a `Pooled` acquire that gave up).
    Coded(String, String),
    /// A Node-API call failed (an exception may already be pending).
    Napi,
}

impl From<OutOfRange> for Fail {
    /// A number out of its range, as the core's `millis` words it.
    fn from(e: OutOfRange) -> Self {
        Fail::Range(e.arg.to_string(), e.why)
    }
}

impl From<headway_core::flow::Invalid> for Fail {
    /// The core's refusal, its argument named as Node spells it (the
    /// core's `Host::spell`: `evict_every` is `evictEvery`).
    fn from(e: headway_core::flow::Invalid) -> Self {
        let arg = headway_core::task::Host::Node.spell(e.arg);
        Fail::Range(arg.to_string(), e.why.to_string())
    }
}

fn cstring(s: String) -> CString {
    CString::new(s.replace('\0', " ")).unwrap_or_default()
}

impl Fail {
    /// Throws this failure as a JS error in `env`, unless one is pending.
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
                Fail::Gone => {
                    sys::napi_throw_type_error(
                        env,
                        c"ERR_INVALID_THIS".as_ptr(),
                        c"headway: no such native object (it was collected, or never made)"
                            .as_ptr(),
                    );
                }
                Fail::Error(msg) => {
                    let msg = cstring(msg);
                    sys::napi_throw_error(env, c"GenericFailure".as_ptr(), msg.as_ptr());
                }
                Fail::Coded(code, msg) => {
                    let (code, msg) = (cstring(code), cstring(msg));
                    sys::napi_throw_error(env, code.as_ptr(), msg.as_ptr());
                }
                Fail::Napi => {
                    sys::napi_throw_error(
                        env,
                        c"GenericFailure".as_ptr(),
                        c"headway: a Node-API call failed".as_ptr(),
                    );
                }
            }
        }
    }
}

/// A core refusal of a `#[napi]` constructor's argument, as the
/// `InvalidArg` error `lib/` rethrows as a `RangeError`: the core's reason
/// alone for an invalid argument, its whole text otherwise.
pub(crate) fn invalid_arg(r: headway_core::task::Refused) -> napi::Error {
    napi::Error::new(
        napi::Status::InvalidArg,
        match r {
            headway_core::task::Refused::Invalid(why) => why,
            other => other.to_string(),
        },
    )
}

/// What a callback answers.
pub type Ret = Result<sys::napi_value, Fail>;

/// What a caught panic said.
pub(crate) fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    headway_core::runtime::panic_message(&*payload)
}

#[inline(always)]
pub fn ok(status: sys::napi_status) -> Result<(), Fail> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(Fail::Napi)
    }
}

/// The value a Node-API call `f` writes through the out-pointer it is
/// handed, or [`Fail::Napi`] when the call failed.
#[inline(always)]
fn made(f: impl FnOnce(*mut sys::napi_value) -> sys::napi_status) -> Ret {
    let mut out = ptr::null_mut();
    ok(f(&mut out))?;
    Ok(out)
}

// ---------------------------------------------------------------- values

/// The environment of one callback, with the conversions the callbacks
/// need. `Copy`, and valid only for the callback it was made in.
#[derive(Clone, Copy)]
pub struct E(pub sys::napi_env);

impl E {
    /// A number argument. The JS wrapper has checked its type; this is the
    /// guard for a caller that reached the native function some other way.
    #[inline(always)]
    pub fn f64(self, v: sys::napi_value, name: &'static str) -> Result<f64, Fail> {
        let mut x = 0.0;
        if unsafe { sys::napi_get_value_double(self.0, v, &mut x) } == sys::Status::napi_ok {
            Ok(x)
        } else {
            Err(Fail::Type(name, "of type number"))
        }
    }

    /// A `now` argument: finite milliseconds, as core nanoseconds (the
    /// core's `millis::now` refuses the rest).
    #[inline(always)]
    pub fn now(self, v: sys::napi_value) -> Result<i64, Fail> {
        Ok(millis::now(self.f64(v, "now")?)?)
    }

    /// An integer argument that fits in an `i32` (the core's
    /// `millis::exact_i32`).
    #[inline(always)]
    pub fn i32(self, v: sys::napi_value, name: &'static str) -> Result<i32, Fail> {
        Ok(millis::exact_i32(name, self.f64(v, name)?)?)
    }

    /// A slot id (any number; one that names no live slot is refused later).
    #[inline(always)]
    pub fn id(self, v: sys::napi_value) -> Result<u32, Fail> {
        let mut id = 0u32;
        if unsafe { sys::napi_get_value_uint32(self.0, v, &mut id) } == sys::Status::napi_ok {
            Ok(id)
        } else {
            Err(Fail::Gone)
        }
    }

    /// A number argument that may be `undefined` (or `null`): `None` then.
    pub fn opt_f64(self, v: sys::napi_value, name: &'static str) -> Result<Option<f64>, Fail> {
        if self.absent(v)? {
            Ok(None)
        } else {
            self.f64(v, name).map(Some)
        }
    }

    /// A string argument that may be `undefined` (or `null`).
    pub fn opt_str(self, v: sys::napi_value, name: &'static str) -> Result<Option<String>, Fail> {
        if self.absent(v)? {
            return Ok(None);
        }
        self.string(v, name).map(Some)
    }

    /// A string argument.
    pub fn string(self, v: sys::napi_value, name: &'static str) -> Result<String, Fail> {
        let mut len = 0usize;
        if unsafe { sys::napi_get_value_string_utf8(self.0, v, ptr::null_mut(), 0, &mut len) }
            != sys::Status::napi_ok
        {
            return Err(Fail::Type(name, "of type string"));
        }
        let mut buf = vec![0u8; len + 1];
        let mut got = 0usize;
        ok(unsafe {
            sys::napi_get_value_string_utf8(self.0, v, buf.as_mut_ptr().cast(), len + 1, &mut got)
        })?;
        buf.truncate(got);
        String::from_utf8(buf).map_err(|_| Fail::Type(name, "valid UTF-8"))
    }

    /// Whether an argument is `undefined` or `null` (an omitted option).
    pub fn absent(self, v: sys::napi_value) -> Result<bool, Fail> {
        let mut t = 0;
        ok(unsafe { sys::napi_typeof(self.0, v, &mut t) })?;
        Ok(t == sys::ValueType::napi_undefined || t == sys::ValueType::napi_null)
    }

    #[inline(always)]
    pub fn bool(self, b: bool) -> Ret {
        made(|out| unsafe { sys::napi_get_boolean(self.0, b, out) })
    }

    #[inline(always)]
    pub fn num(self, x: f64) -> Ret {
        made(|out| unsafe { sys::napi_create_double(self.0, x, out) })
    }

    #[inline(always)]
    pub fn int(self, x: i32) -> Ret {
        made(|out| unsafe { sys::napi_create_int32(self.0, x, out) })
    }

    #[inline(always)]
    pub fn undefined(self) -> Ret {
        made(|out| unsafe { sys::napi_get_undefined(self.0, out) })
    }

    pub fn str(self, s: &str) -> Ret {
        let len = s.len() as isize;
        made(|out| unsafe { sys::napi_create_string_utf8(self.0, s.as_ptr().cast(), len, out) })
    }

    /// A JS array of numbers.
    pub fn nums(self, xs: impl ExactSizeIterator<Item = f64>) -> Ret {
        let len = xs.len();
        let arr = made(|out| unsafe { sys::napi_create_array_with_length(self.0, len, out) })?;
        for (i, x) in xs.enumerate() {
            let v = self.num(x)?;
            ok(unsafe { sys::napi_set_element(self.0, arr, i as u32, v) })?;
        }
        Ok(arr)
    }

    /// The numbers of a JS array.
    pub fn f64s(self, v: sys::napi_value, name: &'static str) -> Result<Vec<f64>, Fail> {
        let len = self.len(v, name, "an array of numbers")?;
        let mut out = Vec::with_capacity(len as usize);
        for i in 0..len {
            out.push(self.f64(self.at(v, i)?, name)?);
        }
        Ok(out)
    }

    /// The length of a JS array.
    pub fn len(
        self,
        v: sys::napi_value,
        name: &'static str,
        expected: &'static str,
    ) -> Result<u32, Fail> {
        let mut is_array = false;
        ok(unsafe { sys::napi_is_array(self.0, v, &mut is_array) })?;
        if !is_array {
            return Err(Fail::Type(name, expected));
        }
        let mut len = 0u32;
        ok(unsafe { sys::napi_get_array_length(self.0, v, &mut len) })?;
        Ok(len)
    }

    /// Element `i` of a JS array.
    pub fn at(self, arr: sys::napi_value, i: u32) -> Ret {
        made(|out| unsafe { sys::napi_get_element(self.0, arr, i, out) })
    }

    /// A plain object with numeric (and other) properties, for a factory's
    /// answer.
    pub fn object(self, props: &[(&CStr, sys::napi_value)]) -> Ret {
        let obj = made(|out| unsafe { sys::napi_create_object(self.0, out) })?;
        for (name, v) in props {
            ok(unsafe { sys::napi_set_named_property(self.0, obj, name.as_ptr(), *v) })?;
        }
        Ok(obj)
    }
}

// ---------------------------------------------------------------- slabs

/// Core values of one kind, by slot id. Ids of collected owners are reused.
pub struct Slab<S> {
    store: RefCell<Store<S>>,
    /// Ids whose owner was collected while the store was borrowed; freed at
    /// the next insert. A `Cell` so that a finalizer can never panic on it.
    dead: Cell<Vec<u32>>,
}

struct Store<S> {
    slots: Vec<Option<S>>,
    free: Vec<u32>,
    live: usize,
}

impl<S> Default for Slab<S> {
    fn default() -> Self {
        Slab {
            store: RefCell::new(Store {
                slots: Vec::new(),
                free: Vec::new(),
                live: 0,
            }),
            dead: Cell::new(Vec::new()),
        }
    }
}

impl<S> Store<S> {
    fn remove(&mut self, id: u32) {
        if let Some(slot) = self.slots.get_mut(id as usize)
            && slot.take().is_some()
        {
            self.free.push(id);
            self.live -= 1;
        }
    }
}

impl<S> Slab<S> {
    /// Stores a value and answers its id.
    pub fn insert(&self, value: S) -> Result<u32, Fail> {
        let mut st = self.store.try_borrow_mut().map_err(|_| reentrant())?;
        for id in self.dead.take() {
            st.remove(id);
        }
        st.live += 1;
        if let Some(id) = st.free.pop() {
            st.slots[id as usize] = Some(value);
            Ok(id)
        } else {
            let id = u32::try_from(st.slots.len())
                .map_err(|_| Fail::Error("headway: too many native objects".into()))?;
            st.slots.push(Some(value));
            Ok(id)
        }
    }

    /// Runs `f` on the value at `id`.
    #[inline(always)]
    pub fn with_mut<R>(
        &self,
        id: u32,
        f: impl FnOnce(&mut S) -> Result<R, Fail>,
    ) -> Result<R, Fail> {
        let mut st = self.store.try_borrow_mut().map_err(|_| reentrant())?;
        match st.slots.get_mut(id as usize) {
            Some(Some(s)) => f(s),
            _ => Err(Fail::Gone),
        }
    }

    /// Runs `f` on the value at `id`, read-only (several may be read at once).
    pub fn with<R>(&self, id: u32, f: impl FnOnce(&S) -> R) -> Result<R, Fail> {
        let st = self.store.try_borrow().map_err(|_| reentrant())?;
        match st.slots.get(id as usize) {
            Some(Some(s)) => Ok(f(s)),
            _ => Err(Fail::Gone),
        }
    }

    /// Frees the slot of a collected owner, now or (if the store is busy) at
    /// the next insert.
    fn release(&self, id: u32) {
        match self.store.try_borrow_mut() {
            Ok(mut st) => st.remove(id),
            Err(_) => {
                let mut dead = self.dead.take();
                dead.push(id);
                self.dead.set(dead);
            }
        }
    }

    /// How many values are alive.
    pub fn live(&self) -> usize {
        self.store.try_borrow().map_or(0, |st| st.live)
    }
}

fn reentrant() -> Fail {
    Fail::Error("headway: re-entrant call on native state".into())
}

struct Reaper<S: 'static> {
    flow: Rc<Flow>,
    slab: fn(&Flow) -> &Slab<S>,
    id: u32,
}

unsafe extern "C" fn reap<S: 'static>(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: `data` is the `Box<Reaper<S>>` that `own` leaked, passed
        // back exactly once by this finalizer.
        let r = unsafe { Box::from_raw(data as *mut Reaper<S>) };
        (r.slab)(&r.flow).release(r.id);
    }));
}

/// Stores `value` in `slab` tied to the JS object `owner` (when `owner` is
/// collected, the slot is freed): its slot id.
pub fn own<S: 'static>(
    env: sys::napi_env,
    owner: sys::napi_value,
    flow: &Rc<Flow>,
    slab: fn(&Flow) -> &Slab<S>,
    value: S,
) -> Result<u32, Fail> {
    let id = slab(flow).insert(value)?;
    let reaper = Box::into_raw(Box::new(Reaper {
        flow: flow.clone(),
        slab,
        id,
    }));
    let status = unsafe {
        sys::napi_add_finalizer(
            env,
            owner,
            reaper.cast(),
            Some(reap::<S>),
            ptr::null_mut(),
            ptr::null_mut(),
        )
    };
    if status != sys::Status::napi_ok {
        // SAFETY: not handed to Node, so still ours.
        drop(unsafe { Box::from_raw(reaper) });
        slab(flow).release(id);
        return Err(Fail::Type("owner", "an object"));
    }
    Ok(id)
}

// ---------------------------------------------------------------- calls

/// A callback's `N` arguments (missing ones arrive as `undefined`: Node-API
/// fills them) and its function's data.
///
/// # Safety
/// `env` and `info` come from Node-API for this call.
#[inline(always)]
pub unsafe fn args<const N: usize>(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> Result<([sys::napi_value; N], *mut c_void), Fail> {
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
        return Err(Fail::Napi);
    }
    Ok((argv, data))
}

/// Runs a callback's body: answers its value, or throws its failure (a
/// panic is thrown as an `Error`, never an abort) and answers null.
///
/// # Safety
/// `env` is the live environment of the current callback.
#[inline(always)]
pub unsafe fn guarded(env: sys::napi_env, f: impl FnOnce() -> Ret) -> sys::napi_value {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(fail)) => {
            unsafe { fail.throw(env) };
            ptr::null_mut()
        }
        Err(payload) => {
            unsafe { Fail::Error(panic_message(payload)).throw(env) };
            ptr::null_mut()
        }
    }
}

/// Runs one callback with `N` arguments and its environment's [`Flow`]:
/// catches a panic, throws a failure.
///
/// # Safety
/// `env` and `info` come from Node-API for this call, and the function's data
/// is the `Rc<Flow>` that [`Funcs::add`] stored.
#[inline(always)]
pub unsafe fn call_flow<const N: usize>(
    env: sys::napi_env,
    info: sys::napi_callback_info,
    f: impl FnOnce(&Rc<Flow>, E, &[sys::napi_value; N]) -> Ret,
) -> sys::napi_value {
    unsafe {
        guarded(env, || {
            let (argv, data) = args::<N>(env, info)?;
            // SAFETY: `data` is an `Rc::into_raw(Rc<Flow>)` kept alive until
            // this function's finalizer runs; `ManuallyDrop` borrows it
            // without touching the count.
            let flow = std::mem::ManuallyDrop::new(Rc::from_raw(data as *const Flow));
            f(&flow, E(env), &argv)
        })
    }
}

/// Declares a method callback: `method!(name, slab, N, |s, e, a| body)` runs
/// `body` with `s` the value whose id is the first of the `N` arguments `a`.
macro_rules! method {
    ($name:ident, $slab:ident, $n:literal, |$s:ident, $e:ident, $a:ident| $body:expr) => {
        unsafe extern "C" fn $name(
            env: ::napi::sys::napi_env,
            info: ::napi::sys::napi_callback_info,
        ) -> ::napi::sys::napi_value {
            #[allow(unused_variables)]
            unsafe {
                $crate::raw::call_flow::<$n>(env, info, |flow, $e, $a| {
                    let id = $e.id($a[0])?;
                    flow.$slab.with_mut(id, |$s| $body)
                })
            }
        }
    };
}
pub(crate) use method;

/// Declares a callback that is handed the [`Flow`] itself (a factory).
macro_rules! function {
    ($name:ident, $n:literal, |$f:ident, $e:ident, $a:ident| $body:expr) => {
        unsafe extern "C" fn $name(
            env: ::napi::sys::napi_env,
            info: ::napi::sys::napi_callback_info,
        ) -> ::napi::sys::napi_value {
            #[allow(unused_variables)]
            unsafe {
                $crate::raw::call_flow::<$n>(env, info, |$f, $e, $a| $body)
            }
        }
    };
}
pub(crate) use function;

unsafe extern "C" fn drop_flow(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    // SAFETY: one `Rc::into_raw` made by `Funcs::add`, released once here.
    let _ = catch_unwind(|| unsafe { drop(Rc::from_raw(data as *const Flow)) });
}

/// A bare JS function `name` calling `cb` with `data`, which `free`
/// releases once the function is collected (or at once, when it cannot be
/// made).
pub fn bare_function(
    env: sys::napi_env,
    name: &CStr,
    cb: sys::napi_callback,
    data: *mut c_void,
    free: unsafe extern "C" fn(sys::napi_env, *mut c_void, *mut c_void),
) -> Ret {
    let mut f = ptr::null_mut();
    let made = unsafe {
        sys::napi_create_function(
            env,
            name.as_ptr(),
            name.to_bytes().len() as isize,
            cb,
            data,
            &mut f,
        )
    };
    if made != sys::Status::napi_ok {
        // SAFETY: the function was not made, so nobody else owns `data`.
        unsafe { free(env, data, ptr::null_mut()) };
        return Err(Fail::Napi);
    }
    if unsafe {
        sys::napi_add_finalizer(env, f, data, Some(free), ptr::null_mut(), ptr::null_mut())
    } != sys::Status::napi_ok
    {
        // The function exists but cannot free its data: leak it rather
        // than risk a use after free.
        return Err(Fail::Napi);
    }
    Ok(f)
}

/// Builds the object of native functions `lib/flow.js` calls, every one bound
/// to the same [`Flow`].
pub struct Funcs {
    env: sys::napi_env,
    obj: sys::napi_value,
    flow: Rc<Flow>,
}

impl Funcs {
    pub fn new(env: sys::napi_env, flow: Flow) -> Result<Self, Fail> {
        let obj = made(|out| unsafe { sys::napi_create_object(env, out) })?;
        Ok(Funcs {
            env,
            obj,
            flow: Rc::new(flow),
        })
    }

    /// Adds a function under `name`.
    pub fn add(self, name: &CStr, cb: sys::napi_callback) -> Result<Self, Fail> {
        let data = Rc::into_raw(self.flow.clone()) as *mut c_void;
        let f = bare_function(self.env, name, cb, data, drop_flow)?;
        ok(unsafe { sys::napi_set_named_property(self.env, self.obj, name.as_ptr(), f) })?;
        Ok(self)
    }

    pub fn finish(self) -> sys::napi_value {
        self.obj
    }
}

/// Runs a `#[napi]` function body that answers a raw value, converting its
/// failure into a thrown error.
pub fn napi_ret<'env>(
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
