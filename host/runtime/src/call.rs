//! Calling into a plugin: a fresh store per call, every limit armed, and
//! failures classified into [`CallError`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;
use wasmtime::component::{
    ComponentExportIndex, ComponentNamedList, Instance, Lift, Lower, TypedFunc, Val,
};
use wasmtime::{Store, Trap};

use super::engine::EPOCH_TICK;
use super::host::CallState;
use super::json;
use super::limits::LimitExceeded;
use super::load::{CONTRACT_VERSION, Plugin, World};
use crate::context::CallContext;
use custodian_base::error::ErrorKind;

/// Why a call did not return normally.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// A limit stopped the plugin; the host is unaffected.
    #[error("the plugin was stopped: it exceeded {0}")]
    Limit(#[from] LimitExceeded),
    /// The plugin trapped (a panic, an `unreachable`, a bad memory access).
    #[error("the plugin trapped: {0}")]
    Trap(String),
    /// The function asked for does not exist.
    #[error("the plugin has no function {0}")]
    NoSuchFunction(String),
    /// The JSON input does not fit the function's parameters.
    #[error("bad input: {0}")]
    Input(String),
    /// Every pooled instance slot is in use.
    #[error("every plugin instance slot is in use; retry when calls finish")]
    Busy,
    /// Instantiation failed for another reason.
    #[error("cannot instantiate the plugin: {0}")]
    Instantiate(String),
}

impl CallError {
    /// What kind of failure this is (see [`ErrorKind`]): a plugin that
    /// ran out of its time, memory or host calls spent its budget; one
    /// that trapped or could not be instantiated failed the host's
    /// deployment (internal); a function that does not exist or input that
    /// does not fit it is the caller's argument; every slot in use is busy
    /// (nothing ran; retry).
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Limit(_) => ErrorKind::BudgetExhausted,
            Self::Trap(_) | Self::Instantiate(_) => ErrorKind::Internal,
            Self::NoSuchFunction(_) | Self::Input(_) => ErrorKind::InvalidArgument,
            Self::Busy => ErrorKind::Busy,
        }
    }
}

/// A function of a plugin, resolved once and callable many times.
pub struct Function<'p> {
    plugin: &'p Plugin,
    name: String,
    index: ComponentExportIndex,
}

/// The interface export `interface` names: a policy world's name
/// (`retention`), at the `version` of the contract the plugin was built
/// against, or a full interface name (`ns:pkg/iface@1.2.3`).
fn interface_export(interface: &str, version: &str) -> String {
    match interface.parse::<World>() {
        Ok(world) => format!("custodian:policy/{}@{version}", world.interface()),
        Err(_) => interface.to_owned(),
    }
}

impl Plugin {
    /// Resolves `function` of the exported `interface` (a world name such as
    /// `retention`, or a full interface name).
    ///
    /// # Errors
    /// [`CallError::NoSuchFunction`].
    pub fn function(&self, interface: &str, function: &str) -> Result<Function<'_>, CallError> {
        let version = self.info.policy_version.as_deref();
        let export = interface_export(interface, version.unwrap_or(CONTRACT_VERSION));
        let missing = || CallError::NoSuchFunction(format!("{function} in {export}"));
        let instance = self
            .component
            .get_export_index(None, export.as_str())
            .ok_or_else(missing)?;
        let index = self
            .component
            .get_export_index(Some(&instance), function)
            .ok_or_else(missing)?;
        Ok(Function {
            plugin: self,
            name: format!("{export}#{function}"),
            index,
        })
    }

    /// A fresh store for one call, with every limit armed.
    pub(crate) fn new_store(&self, call: Arc<CallContext>) -> Store<CallState> {
        let mut store = Store::new(self.pre.engine(), CallState::new(call));
        store.limiter(|state| state);
        arm_deadline(&mut store);
        store.epoch_deadline_trap();
        store
    }
}

/// Sets the store's deadline to its call's timeout from now: at its
/// creation, and again before each call of a store that serves several.
pub(crate) fn arm_deadline(store: &mut Store<CallState>) {
    let ticks = store
        .data()
        .call
        .limits
        .timeout
        .as_nanos()
        .div_ceil(EPOCH_TICK.as_nanos());
    // One tick more than the timeout: the first tick may come at once.
    store.set_epoch_deadline(u64::try_from(ticks).unwrap_or(u64::MAX).saturating_add(1));
}

impl Plugin {
    /// A fresh store and instance for one call.
    pub(crate) fn instantiate(
        &self,
        call: Arc<CallContext>,
    ) -> Result<(Store<CallState>, Instance), CallError> {
        let mut store = self.new_store(call);
        let instance = self
            .pre
            .instantiate(&mut store)
            .map_err(|e| classify_instantiate(e, store.data()))?;
        Ok((store, instance))
    }
}

/// One instance of a plugin for a short sequence of calls.
///
/// The call's limits cover the whole session: one deadline, one memory cap,
/// one budget of host calls. After a call traps or hits a limit the
/// instance cannot be re-entered, and every later call is refused.
pub struct Session<'p> {
    plugin: &'p Plugin,
    store: Store<CallState>,
    instance: Instance,
    broken: bool,
    id: u64,
}

/// A function of one session's instance with its types checked once, for
/// calls in a loop: [`Session::call_typed`] skips the lookup and the type
/// check that [`Session::call`] does every time.
pub struct TypedFunction<P, R> {
    func: TypedFunc<P, R>,
    session: u64,
}

/// Tells sessions apart, so a typed function is only ever used with the
/// store it came from (wasmtime panics on a store mismatch).
static SESSIONS: AtomicU64 = AtomicU64::new(0);

impl Plugin {
    /// Instantiates the plugin for a session of calls.
    ///
    /// # Errors
    /// [`CallError::Busy`] when every pooled slot is in use, or another
    /// instantiation failure.
    pub fn session(&self, call: Arc<CallContext>) -> Result<Session<'_>, CallError> {
        let (store, instance) = self.instantiate(call)?;
        Ok(Session {
            plugin: self,
            store,
            instance,
            broken: false,
            id: SESSIONS.fetch_add(1, Ordering::Relaxed),
        })
    }
}

fn broken() -> CallError {
    CallError::Trap(
        "an earlier call of this session trapped; its instance cannot be re-entered".into(),
    )
}

impl Session<'_> {
    fn check(&self, function: &Function<'_>) -> Result<(), CallError> {
        if !std::ptr::eq(self.plugin, function.plugin) {
            return Err(CallError::NoSuchFunction(format!(
                "{} belongs to another plugin",
                function.name
            )));
        }
        if self.broken {
            return Err(broken());
        }
        Ok(())
    }

    fn fail(&mut self, error: wasmtime::Error) -> CallError {
        self.broken = true;
        classify(error, self.store.data())
    }

    /// Looks `function` up in this session's instance and checks its types.
    ///
    /// # Errors
    /// [`CallError::NoSuchFunction`] if it does not have types `P -> R`.
    pub fn typed<P, R>(&mut self, function: &Function<'_>) -> Result<TypedFunction<P, R>, CallError>
    where
        P: ComponentNamedList + Lower + Send + Sync,
        R: ComponentNamedList + Lift + Send + Sync,
    {
        self.check(function)?;
        let func = self
            .instance
            .get_typed_func::<P, R>(&mut self.store, function.index)
            .map_err(|e| {
                CallError::NoSuchFunction(format!("{} with these types: {e:#}", function.name))
            })?;
        Ok(TypedFunction {
            func,
            session: self.id,
        })
    }

    /// Calls a function prepared with [`Session::typed`].
    ///
    /// # Errors
    /// A [`CallError`]; the host is unaffected whatever the plugin does.
    pub fn call_typed<P, R>(
        &mut self,
        function: &TypedFunction<P, R>,
        params: P,
    ) -> Result<R, CallError>
    where
        P: ComponentNamedList + Lower + Send + Sync,
        R: ComponentNamedList + Lift + Send + Sync,
    {
        if function.session != self.id {
            return Err(CallError::NoSuchFunction(
                "a typed function of another session".into(),
            ));
        }
        if self.broken {
            return Err(broken());
        }
        function
            .func
            .call(&mut self.store, params)
            .map_err(|e| self.fail(e))
    }

    /// Calls `function` with typed parameters and results.
    ///
    /// # Errors
    /// A [`CallError`]; the host is unaffected whatever the plugin does.
    pub fn call<P, R>(&mut self, function: &Function<'_>, params: P) -> Result<R, CallError>
    where
        P: ComponentNamedList + Lower + Send + Sync,
        R: ComponentNamedList + Lift + Send + Sync,
    {
        let typed = self.typed(function)?;
        self.call_typed(&typed, params)
    }

    /// Calls `function` with JSON parameters (an object keyed by parameter
    /// name) and returns its result as JSON (see `runtime/json.rs` for the
    /// mapping).
    ///
    /// # Errors
    /// A [`CallError`]; the host is unaffected whatever the plugin does.
    pub fn call_json(
        &mut self,
        function: &Function<'_>,
        input: &Value,
    ) -> Result<Value, CallError> {
        self.check(function)?;
        let func = self
            .instance
            .get_func(&mut self.store, function.index)
            .ok_or_else(|| CallError::NoSuchFunction(function.name.clone()))?;
        let ty = func.ty(&self.store);
        let params = json::params(&ty, input).map_err(CallError::Input)?;
        let mut results = vec![Val::Bool(false); ty.results().len()];
        func.call(&mut self.store, &params, &mut results)
            .map_err(|e| self.fail(e))?;
        Ok(match results.as_slice() {
            [] => Value::Null,
            [one] => json::to_json(one),
            many => Value::Array(many.iter().map(json::to_json).collect()),
        })
    }
}

impl Function<'_> {
    /// Calls the function once, on a fresh instance.
    ///
    /// # Errors
    /// A [`CallError`]; the host is unaffected whatever the plugin does.
    pub fn call<P, R>(&self, call: Arc<CallContext>, params: P) -> Result<R, CallError>
    where
        P: ComponentNamedList + Lower + Send + Sync,
        R: ComponentNamedList + Lift + Send + Sync,
    {
        self.plugin.session(call)?.call(self, params)
    }

    /// Calls the function once, on a fresh instance, with JSON in and out.
    ///
    /// # Errors
    /// A [`CallError`]; the host is unaffected whatever the plugin does.
    pub fn call_json(&self, call: Arc<CallContext>, input: &Value) -> Result<Value, CallError> {
        self.plugin.session(call)?.call_json(self, input)
    }
}

pub(crate) fn classify_instantiate(error: wasmtime::Error, state: &CallState) -> CallError {
    if error.is::<wasmtime::PoolConcurrencyLimitError>() {
        return CallError::Busy;
    }
    match classify(error, state) {
        CallError::Trap(message) => CallError::Instantiate(message),
        other => other,
    }
}

pub(crate) fn classify(error: wasmtime::Error, state: &CallState) -> CallError {
    if let Some(limit) = &state.stopped_by {
        return CallError::Limit(limit.clone());
    }
    if let Some(limit) = error.downcast_ref::<LimitExceeded>() {
        return CallError::Limit(limit.clone());
    }
    if error.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
        return CallError::Limit(LimitExceeded::Time(state.meter.limits.timeout));
    }
    let stderr = state.stderr.contents();
    let stderr = String::from_utf8_lossy(&stderr);
    let trap = error
        .downcast_ref::<Trap>()
        .map_or_else(|| format!("{error:#}"), ToString::to_string);
    CallError::Trap(match guest_panic(&stderr) {
        Some(panic) => format!("{panic} ({trap})"),
        None if !stderr.trim().is_empty() => format!("{trap}; the guest wrote: {}", tail(&stderr)),
        None => trap,
    })
}

/// The message of a Rust guest's panic, from what its default panic hook
/// wrote to stderr: `thread '…' panicked at FILE:LINE:COL:\nMESSAGE\nnote: …`.
fn guest_panic(stderr: &str) -> Option<String> {
    let start = stderr.rfind("panicked at ")?;
    let rest = &stderr[start + "panicked at ".len()..];
    let (location, message) = rest.split_once(":\n")?;
    let message: Vec<&str> = message
        .lines()
        .take_while(|line| !line.starts_with("note: "))
        .collect();
    Some(format!(
        "guest panicked at {location}: {}",
        message.join("\n").trim()
    ))
}

/// The last kilobyte of `text`, at a character boundary.
fn tail(text: &str) -> &str {
    let text = text.trim();
    let mut start = text.len().saturating_sub(1024);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_call_error_says_its_kind_busy_only_when_nothing_ran() {
        let cases = [
            (
                CallError::Limit(LimitExceeded::HostCalls(3)),
                ErrorKind::BudgetExhausted,
            ),
            (CallError::Trap("x".into()), ErrorKind::Internal),
            (CallError::Instantiate("x".into()), ErrorKind::Internal),
            (
                CallError::NoSuchFunction("x".into()),
                ErrorKind::InvalidArgument,
            ),
            (CallError::Input("x".into()), ErrorKind::InvalidArgument),
            (CallError::Busy, ErrorKind::Busy),
        ];
        for (error, kind) in cases {
            assert_eq!(error.kind(), kind, "{error:?}");
        }
    }

    #[test]
    fn a_rust_panic_message_is_recovered_from_stderr() {
        let stderr = "thread '<unnamed>' panicked at src/lib.rs:12:9:\nboom: the \
                      policy broke\nnote: run with `RUST_BACKTRACE=1` environment variable\n";
        assert_eq!(
            guest_panic(stderr).as_deref(),
            Some("guest panicked at src/lib.rs:12:9: boom: the policy broke")
        );
    }

    #[test]
    fn stderr_without_a_panic_yields_no_panic_message() {
        assert_eq!(guest_panic("just some logging\n"), None);
    }

    #[test]
    fn a_world_name_names_its_policy_export_at_the_plugins_contract_version() {
        assert_eq!(
            interface_export("retention", "0.2.0"),
            "custodian:policy/retention-rules@0.2.0"
        );
        assert_eq!(
            interface_export("retention", "0.1.0"),
            "custodian:policy/retention-rules@0.1.0"
        );
        assert_eq!(interface_export("a:b/c@1.0.0", "0.2.0"), "a:b/c@1.0.0");
    }
}
