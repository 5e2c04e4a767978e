//! The host side of every `custodian:host` interface, and the per-call
//! state a plugin's store carries.
//!
//! Every interface is implemented on [`HostView`], which borrows the
//! call's services, the plugin's grants and the meter from [`CallState`].
//! Mechanisms are reached through their traits; WIT types are converted in
//! these modules and nowhere else.
//!
//! The interfaces are implemented once, at the contract the host speaks
//! (0.2); those at 0.1, for plugins built against it, delegate to them
//! ([`v0_1`]), and a 0.1 guest's errors are [`guest_error`]'s through
//! [`error_v0_1`].

pub(crate) mod audit;
pub(crate) mod checksum;
pub(crate) mod clock;
pub(crate) mod kv;
pub(crate) mod log;
pub(crate) mod no_wait;
pub(crate) mod objects;
pub(crate) mod retention;
mod v0_1;

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use custodian_base::error::ErrorKind;
use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, component::HasData};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::bindings::host::custodian::host::types;
use super::bindings::v0_1::host::custodian::host::types as v0_1_types;
use super::limits::{Charge, LimitExceeded, Meter};
use crate::bindings::HostError;
use crate::context::CallContext;

/// Bytes of guest stderr kept per call: enough for a panic message and its
/// location, small enough that a chatty guest costs nothing.
const STDERR_BYTES: usize = 8 * 1024;
/// Table elements a guest may grow to; Rust components use a few dozen.
const MAX_TABLE_ELEMENTS: usize = 100_000;

/// The one table from a failure's kind to the WIT `error` a guest sees.
/// `Busy` has no case of its own: it travels as `unavailable`, the case a
/// guest retries later; `Internal`, the host's own failure, is `other`. A
/// 0.1 guest sees the result through [`error_v0_1`].
pub(crate) fn guest_error(kind: ErrorKind, message: String) -> types::Error {
    use types::Error;
    match kind {
        ErrorKind::NotFound => Error::NotFound(message),
        ErrorKind::PreconditionFailed => Error::PreconditionFailed(message),
        ErrorKind::Conflict => Error::Conflict(message),
        ErrorKind::ChecksumMismatch => Error::ChecksumMismatch(message),
        ErrorKind::Corrupt => Error::Corrupt(message),
        ErrorKind::Unavailable | ErrorKind::Busy => Error::Unavailable(message),
        ErrorKind::BudgetExhausted => Error::BudgetExhausted(message),
        // A guest reads content only through its grants, never the
        // serving path; should a denial reach it, it is a refusal.
        // A lock refuses a plugin as it refuses anyone.
        ErrorKind::AccessDenied | ErrorKind::TakenDown | ErrorKind::Retained => {
            Error::AccessDenied(message)
        }
        ErrorKind::InvalidArgument => Error::InvalidArgument(message),
        ErrorKind::Unsupported => Error::Unsupported(message),
        ErrorKind::Internal => Error::Other(message),
    }
}

/// The kind of a WIT `error` a guest returned, and its message. `other`
/// names no kind, so it is [`ErrorKind::Internal`]: a failure the host
/// cannot classify, answered as its own (never retried by the host, a
/// server's 500, exit status 1).
pub(crate) fn error_kind(error: types::Error) -> (ErrorKind, String) {
    use types::Error;
    match error {
        Error::NotFound(m) => (ErrorKind::NotFound, m),
        Error::PreconditionFailed(m) => (ErrorKind::PreconditionFailed, m),
        Error::Conflict(m) => (ErrorKind::Conflict, m),
        Error::ChecksumMismatch(m) => (ErrorKind::ChecksumMismatch, m),
        Error::Corrupt(m) => (ErrorKind::Corrupt, m),
        Error::Unavailable(m) => (ErrorKind::Unavailable, m),
        Error::BudgetExhausted(m) => (ErrorKind::BudgetExhausted, m),
        Error::AccessDenied(m) => (ErrorKind::AccessDenied, m),
        Error::InvalidArgument(m) => (ErrorKind::InvalidArgument, m),
        Error::Unsupported(m) => (ErrorKind::Unsupported, m),
        Error::Other(m) => (ErrorKind::Internal, m),
    }
}

/// The WIT `error` as a plugin built against the 0.1 contract sees it: the
/// two cases 0.1 lacks travel as the case such a guest can act on, the
/// message naming what they were — `unsupported` as `invalid-argument`
/// prefixed `unsupported: ` (a call it must not repeat as it is), `other`
/// as `unavailable` (one to retry later, as 0.1 hosts answered their own
/// failures).
pub(crate) fn error_v0_1(error: types::Error) -> v0_1_types::Error {
    use types::Error;
    use v0_1_types::Error as Old;
    match error {
        Error::NotFound(m) => Old::NotFound(m),
        Error::PreconditionFailed(m) => Old::PreconditionFailed(m),
        Error::Conflict(m) => Old::Conflict(m),
        Error::ChecksumMismatch(m) => Old::ChecksumMismatch(m),
        Error::Corrupt(m) => Old::Corrupt(m),
        Error::Unavailable(m) => Old::Unavailable(m),
        Error::BudgetExhausted(m) => Old::BudgetExhausted(m),
        Error::AccessDenied(m) => Old::AccessDenied(m),
        Error::InvalidArgument(m) => Old::InvalidArgument(m),
        Error::Unsupported(m) => Old::InvalidArgument(format!("unsupported: {m}")),
        Error::Other(m) => Old::Unavailable(m),
    }
}

/// What a store carries for one call.
pub(crate) struct CallState {
    pub(crate) call: Arc<CallContext>,
    pub(crate) meter: Meter,
    pub(crate) stderr: MemoryOutputPipe,
    /// The first limit that stopped the call, kept so the call's error can
    /// name it even when the trap itself carries no payload.
    pub(crate) stopped_by: Option<LimitExceeded>,
    /// The guest's linear memory as last grown, in bytes (0 until its
    /// first growth): what it can still take is the limit less this. Kept
    /// across calls of a reused store, whose memory persists.
    memory_now: usize,
    wasi: WasiCtx,
    table: ResourceTable,
}

impl CallState {
    pub(crate) fn new(call: Arc<CallContext>) -> Self {
        let stderr = MemoryOutputPipe::new(STDERR_BYTES);
        // Nothing is granted through WASI: no environment, arguments,
        // preopened directories or network; stdin is closed. Only stderr is
        // captured, for the guest's panic message.
        let wasi = WasiCtx::builder()
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        Self {
            meter: Meter::new(&call.limits),
            call,
            stderr,
            stopped_by: None,
            memory_now: 0,
            wasi,
            table: ResourceTable::new(),
        }
    }

    /// Whether a store that answered a call may serve another: not after a
    /// limit stopped it, nor once the guest wrote to stderr (the pipe is
    /// bounded per store, and a full one would fail a later call's write).
    pub(crate) fn reusable(&self) -> bool {
        self.stopped_by.is_none() && self.stderr.contents().is_empty()
    }

    /// Readies the store for its next call, made under `call`: that call's
    /// services and grants, a fresh budget of host calls and log lines, and
    /// a deadline for host calls from now. (The epoch deadline is the
    /// store's: see `crate::call::arm_deadline`.)
    pub(crate) fn rebind(&mut self, call: Arc<CallContext>) {
        self.meter = Meter::new(&call.limits);
        self.call = call;
    }

    /// Charges one capability call against the budget.
    pub(crate) fn charge(meter: &mut Meter) -> Result<(), HostError> {
        match meter.charge() {
            Charge::Granted => Ok(()),
            Charge::Exhausted => Err(HostError::Guest(types::Error::BudgetExhausted(format!(
                "this call's budget of {} host calls is spent",
                meter.limits.host_calls
            )))),
            Charge::Stop(limit) => Err(HostError::Stop(limit)),
        }
    }
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl ResourceLimiter for CallState {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.memory_now = self.memory_now.max(current);
        let limit = self.meter.limits.memory_bytes;
        if desired > limit {
            // Trap rather than fail the grow: a guest allocator that sees a
            // failed grow aborts with a message about allocation, which
            // would hide which limit it hit.
            let hit = LimitExceeded::Memory {
                limit,
                requested: desired,
            };
            self.stopped_by.get_or_insert(hit.clone());
            return Err(wasmtime::Error::new(hit));
        }
        self.memory_now = desired;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}

/// Turns a stop into the trap that ends the call, remembering the limit.
fn stop(stopped_by: &mut Option<LimitExceeded>, limit: LimitExceeded) -> wasmtime::Error {
    stopped_by.get_or_insert(limit.clone());
    wasmtime::Error::new(limit)
}

/// Runs a mechanism's future from inside a synchronous host call.
///
/// In-process backends finish on the first poll, which is all this costs
/// them. A future that has to wait (network backends) is driven on the
/// I/O runtime until the call's deadline; past it the call stops with the
/// time limit, so a hung backend cannot hold a plugin call forever.
pub(crate) fn block_on<F: Future>(
    future: F,
    io: &tokio::runtime::Handle,
    meter: &Meter,
) -> Result<F::Output, HostError> {
    let mut future = pin!(future);
    {
        // Network clients expect a runtime context even on their first poll.
        let _context = io.enter();
        if let Poll::Ready(output) = future
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
        {
            return Ok(output);
        }
    }
    let deadline = meter.deadline.into();
    // The timer is created inside the runtime, which it needs.
    io.block_on(async { tokio::time::timeout_at(deadline, future).await })
        .map_err(|_| HostError::Stop(meter.time_limit()))
}

/// What a host interface implementation sees of the store: the call's
/// services and grants, its meter, and where a stop is recorded. One view
/// serves every interface; each interface's implementation lives in its own
/// module.
pub(crate) struct HostView<'a> {
    pub(crate) call: &'a CallContext,
    pub(crate) meter: &'a mut Meter,
    stopped_by: &'a mut Option<LimitExceeded>,
    /// The guest's memory when the host call began, in bytes.
    memory_now: usize,
}

/// The view of a store's state that every host interface is given.
fn view(state: &mut CallState) -> HostView<'_> {
    HostView {
        call: &state.call,
        meter: &mut state.meter,
        stopped_by: &mut state.stopped_by,
        memory_now: state.memory_now,
    }
}

impl HostView<'_> {
    /// Charges one capability call against the budget.
    pub(crate) fn charge(&mut self) -> Result<(), HostError> {
        CallState::charge(self.meter)
    }

    /// Bytes the guest's memory can still grow by: the most an answer of
    /// this call may hold, since an answer is copied into that memory
    /// (a larger one could only trap the guest after the host had built
    /// it whole).
    pub(crate) fn answer_room(&self) -> usize {
        self.meter
            .limits
            .memory_bytes
            .saturating_sub(self.memory_now)
    }

    /// Runs a mechanism future under this call's deadline.
    /// Refused, before `future` is first polled (so it has had no effect),
    /// during a call that must not wait ([`no_wait`]).
    pub(crate) fn wait<F: Future>(&self, future: F) -> Result<F::Output, HostError> {
        if no_wait::refuse_to_wait() {
            return Err(HostError::Guest(types::Error::Unavailable(
                "this call may not wait on the host's mechanisms here; it is made again where it \
                 may"
                .into(),
            )));
        }
        block_on(future, &self.call.services.io, self.meter)
    }
}

struct HostData;

/// `wasi:io` through [`no_wait::Io`].
struct WasiIo;

impl HasData for WasiIo {
    type Data<'a> = no_wait::Io<'a>;
}

impl HasData for HostData {
    type Data<'a> = HostView<'a>;
}

impl types::Host for HostView<'_> {
    fn convert_error(&mut self, error: HostError) -> wasmtime::Result<types::Error> {
        match error {
            HostError::Guest(error) => Ok(error),
            HostError::Stop(limit) => Err(stop(self.stopped_by, limit)),
        }
    }
}

/// Registers every host interface (and WASI, with nothing granted) on the
/// linker.
pub(crate) fn add_to_linker(
    linker: &mut wasmtime::component::Linker<CallState>,
) -> wasmtime::Result<()> {
    use super::bindings::host::custodian::host as wit;
    wasmtime_wasi::p2::add_to_linker_sync(linker)?;
    // WASI's streams and pollables again, over wasmtime-wasi's: the same
    // but for calls that must not wait (`no_wait`).
    linker.allow_shadowing(true);
    {
        use wasmtime_wasi::p2::bindings::sync::io::{poll, streams};
        streams::add_to_linker::<CallState, WasiIo>(linker, |state| no_wait::Io(&mut state.table))?;
        poll::add_to_linker::<CallState, WasiIo>(linker, |state| no_wait::Io(&mut state.table))?;
    }
    linker.allow_shadowing(false);
    wit::types::add_to_linker::<_, HostData>(linker, view)?;
    wit::kv::add_to_linker::<_, HostData>(linker, view)?;
    wit::objects::add_to_linker::<_, HostData>(linker, view)?;
    wit::checksum::add_to_linker::<_, HostData>(linker, view)?;
    wit::clock::add_to_linker::<_, HostData>(linker, view)?;
    wit::audit::add_to_linker::<_, HostData>(linker, view)?;
    wit::log::add_to_linker::<_, HostData>(linker, view)?;
    super::bindings::policy::takedown::custodian::policy::retention_oracle::add_to_linker::<
        _,
        HostData,
    >(linker, view)?;
    for interface in custodian_contract::version::POLICY_TYPE_INTERFACES {
        linker.instance(&format!(
            "custodian:policy/{interface}@{}",
            custodian_contract::version::CONTRACT_VERSION
        ))?;
    }
    // The same capabilities at 0.1, for plugins built against it (the
    // linker tells `@0.1.0` and `@0.2.0` apart: before 1.0 each minor is
    // its own series).
    v0_1::add_to_linker(linker)
}

#[cfg(test)]
mod tests {
    use super::{ErrorKind, error_kind, error_v0_1, guest_error, types, v0_1_types};

    #[test]
    fn a_kind_the_wit_error_has_crosses_to_the_guest_and_back_unchanged() {
        for kind in [
            ErrorKind::NotFound,
            ErrorKind::PreconditionFailed,
            ErrorKind::Conflict,
            ErrorKind::ChecksumMismatch,
            ErrorKind::Corrupt,
            ErrorKind::Unavailable,
            ErrorKind::BudgetExhausted,
            ErrorKind::AccessDenied,
            ErrorKind::InvalidArgument,
            ErrorKind::Unsupported,
            ErrorKind::Internal,
        ] {
            assert_eq!(
                error_kind(guest_error(kind, "m".into())),
                (kind, "m".into())
            );
        }
    }

    #[test]
    fn unsupported_and_the_hosts_own_failure_have_cases_of_their_own() {
        assert!(matches!(
            guest_error(ErrorKind::Unsupported, "m".into()),
            types::Error::Unsupported(m) if m == "m"
        ));
        assert!(matches!(
            guest_error(ErrorKind::Internal, "m".into()),
            types::Error::Other(m) if m == "m"
        ));
        assert_eq!(
            error_kind(types::Error::Other("m".into())),
            (ErrorKind::Internal, "m".into())
        );
    }

    #[test]
    fn busy_reaches_the_guest_as_unavailable() {
        assert_eq!(
            error_kind(guest_error(ErrorKind::Busy, "m".into())),
            (ErrorKind::Unavailable, "m".into())
        );
    }

    #[test]
    fn a_0_1_guest_sees_unsupported_as_a_prefixed_invalid_argument_and_other_as_unavailable() {
        assert!(matches!(
            error_v0_1(types::Error::Unsupported("m".into())),
            v0_1_types::Error::InvalidArgument(m) if m == "unsupported: m"
        ));
        assert!(matches!(
            error_v0_1(types::Error::Other("m".into())),
            v0_1_types::Error::Unavailable(m) if m == "m"
        ));
        assert!(matches!(
            error_v0_1(types::Error::NotFound("m".into())),
            v0_1_types::Error::NotFound(m) if m == "m"
        ));
    }
}
