//! Calls that must not wait: a plugin call made on an async runtime's
//! worker thread, where blocking would stall every task of that worker
//! and where wasmtime-wasi's synchronous WASI (which drives its futures
//! with the runtime's `block_on`) panics.
//!
//! [`without_waiting`] marks the thread for the length of one call. Under
//! the mark, the host refuses whatever would wait instead of waiting, and
//! remembers that it did:
//! - a mechanism call (KV, object store, audit: everything that goes
//!   through `HostView::wait`) is refused *before* it starts, so a refused
//!   call has had no effect;
//! - WASI's streams and pollables (a guest's stderr, a sleep) are polled
//!   once; what is ready at once (stderr is an in-memory pipe) goes
//!   through, what is not traps the call.
//!
//! The caller then discards whatever the call answered and makes it again
//! where it may wait. Off the mark every WASI call behaves exactly as
//! wasmtime-wasi's own synchronous bindings do.

use std::cell::Cell;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use wasmtime::component::{Resource, ResourceTable};
use wasmtime_wasi::p2::bindings::sync::io::poll as sync_poll;
use wasmtime_wasi::p2::bindings::sync::io::streams as sync_streams;
use wasmtime_wasi::p2::{StreamError, StreamResult};
use wasmtime_wasi::runtime::in_tokio;
use wasmtime_wasi_io::bindings::wasi::io::poll as async_poll;
use wasmtime_wasi_io::bindings::wasi::io::streams::{
    HostInputStream as AsyncInput, HostOutputStream as AsyncOutput,
};
use wasmtime_wasi_io::poll::DynPollable;
use wasmtime_wasi_io::streams::{DynInputStream, DynOutputStream};

/// This thread's mark.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mark {
    /// Calls may wait.
    Off,
    /// A call that must not wait is running.
    On,
    /// ... and it wanted to.
    Wanted,
}

thread_local! {
    static MARK: Cell<Mark> = const { Cell::new(Mark::Off) };
}

/// Runs `call` with this thread marked as one that must not wait: its
/// answer, or `None` if the plugin wanted to wait (its answer, whatever it
/// was, is then worthless: the caller makes the call again where it may
/// wait).
pub(crate) fn without_waiting<R>(call: impl FnOnce() -> R) -> Option<R> {
    let before = MARK.replace(Mark::On);
    // Restored even if `call` unwinds, so the thread's later calls wait
    // as usual.
    struct Restore(Mark);
    impl Drop for Restore {
        fn drop(&mut self) {
            MARK.set(self.0);
        }
    }
    let restore = Restore(before);
    let answer = call();
    let wanted = MARK.get() == Mark::Wanted;
    drop(restore);
    (!wanted).then_some(answer)
}

/// Whether the running call must not wait; if so, records that it wanted
/// to.
pub(crate) fn refuse_to_wait() -> bool {
    let refused = MARK.get() != Mark::Off;
    if refused {
        MARK.set(Mark::Wanted);
    }
    refused
}

/// Why a call that must not wait was stopped.
const WANTED_TO_WAIT: &str =
    "the plugin waited on I/O during a call that must not wait; it is made again where it may";

/// Runs a WASI future: as wasmtime-wasi does off the mark; under it, one
/// poll, and `Err` if that is not enough.
fn settle<F: Future>(future: F) -> wasmtime::Result<F::Output> {
    if MARK.get() == Mark::Off {
        return Ok(in_tokio(future));
    }
    let mut future = pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(output) => Ok(output),
        Poll::Pending => {
            refuse_to_wait();
            Err(wasmtime::Error::msg(WANTED_TO_WAIT))
        }
    }
}

/// [`settle`] for a stream operation: not settling traps.
fn settle_stream<T, F: Future<Output = StreamResult<T>>>(future: F) -> StreamResult<T> {
    settle(future).unwrap_or_else(|trap| Err(StreamError::Trap(trap)))
}

/// The resource table, seen through `wasi:io/streams` and `wasi:io/poll`
/// implementations that respect the mark. Registered over wasmtime-wasi's
/// own (which call `in_tokio` unconditionally for the blocking
/// operations); the non-blocking ones are theirs unchanged.
pub(crate) struct Io<'a>(pub(crate) &'a mut ResourceTable);

impl sync_streams::Host for Io<'_> {
    fn convert_stream_error(
        &mut self,
        error: StreamError,
    ) -> wasmtime::Result<sync_streams::StreamError> {
        sync_streams::Host::convert_stream_error(self.0, error)
    }
}

impl sync_streams::HostOutputStream for Io<'_> {
    fn drop(&mut self, stream: Resource<DynOutputStream>) -> wasmtime::Result<()> {
        settle(AsyncOutput::drop(self.0, stream))?
    }

    fn check_write(&mut self, stream: Resource<DynOutputStream>) -> StreamResult<u64> {
        sync_streams::HostOutputStream::check_write(self.0, stream)
    }

    fn write(&mut self, stream: Resource<DynOutputStream>, bytes: Vec<u8>) -> StreamResult<()> {
        sync_streams::HostOutputStream::write(self.0, stream, bytes)
    }

    fn blocking_write_and_flush(
        &mut self,
        stream: Resource<DynOutputStream>,
        bytes: Vec<u8>,
    ) -> StreamResult<()> {
        settle_stream(AsyncOutput::blocking_write_and_flush(self.0, stream, bytes))
    }

    fn blocking_write_zeroes_and_flush(
        &mut self,
        stream: Resource<DynOutputStream>,
        len: u64,
    ) -> StreamResult<()> {
        settle_stream(AsyncOutput::blocking_write_zeroes_and_flush(
            self.0, stream, len,
        ))
    }

    fn subscribe(
        &mut self,
        stream: Resource<DynOutputStream>,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        sync_streams::HostOutputStream::subscribe(self.0, stream)
    }

    fn write_zeroes(&mut self, stream: Resource<DynOutputStream>, len: u64) -> StreamResult<()> {
        sync_streams::HostOutputStream::write_zeroes(self.0, stream, len)
    }

    fn flush(&mut self, stream: Resource<DynOutputStream>) -> StreamResult<()> {
        sync_streams::HostOutputStream::flush(self.0, stream)
    }

    fn blocking_flush(&mut self, stream: Resource<DynOutputStream>) -> StreamResult<()> {
        settle_stream(AsyncOutput::blocking_flush(self.0, stream))
    }

    fn splice(
        &mut self,
        destination: Resource<DynOutputStream>,
        source: Resource<DynInputStream>,
        len: u64,
    ) -> StreamResult<u64> {
        sync_streams::HostOutputStream::splice(self.0, destination, source, len)
    }

    fn blocking_splice(
        &mut self,
        destination: Resource<DynOutputStream>,
        source: Resource<DynInputStream>,
        len: u64,
    ) -> StreamResult<u64> {
        settle_stream(AsyncOutput::blocking_splice(
            self.0,
            destination,
            source,
            len,
        ))
    }
}

impl sync_streams::HostInputStream for Io<'_> {
    fn drop(&mut self, stream: Resource<DynInputStream>) -> wasmtime::Result<()> {
        settle(AsyncInput::drop(self.0, stream))?
    }

    fn read(&mut self, stream: Resource<DynInputStream>, len: u64) -> StreamResult<Vec<u8>> {
        sync_streams::HostInputStream::read(self.0, stream, len)
    }

    fn blocking_read(
        &mut self,
        stream: Resource<DynInputStream>,
        len: u64,
    ) -> StreamResult<Vec<u8>> {
        settle_stream(AsyncInput::blocking_read(self.0, stream, len))
    }

    fn skip(&mut self, stream: Resource<DynInputStream>, len: u64) -> StreamResult<u64> {
        sync_streams::HostInputStream::skip(self.0, stream, len)
    }

    fn blocking_skip(&mut self, stream: Resource<DynInputStream>, len: u64) -> StreamResult<u64> {
        settle_stream(AsyncInput::blocking_skip(self.0, stream, len))
    }

    fn subscribe(
        &mut self,
        stream: Resource<DynInputStream>,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        sync_streams::HostInputStream::subscribe(self.0, stream)
    }
}

impl sync_poll::Host for Io<'_> {
    fn poll(&mut self, pollables: Vec<Resource<DynPollable>>) -> wasmtime::Result<Vec<u32>> {
        settle(async_poll::Host::poll(self.0, pollables))?
    }
}

impl sync_poll::HostPollable for Io<'_> {
    fn ready(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<bool> {
        settle(async_poll::HostPollable::ready(self.0, pollable))?
    }

    fn block(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<()> {
        settle(async_poll::HostPollable::block(self.0, pollable))?
    }

    fn drop(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<()> {
        sync_poll::HostPollable::drop(self.0, pollable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mark_lasts_one_call_and_says_whether_it_wanted_to_wait() {
        assert!(!refuse_to_wait(), "unmarked, calls may wait");
        assert_eq!(without_waiting(|| 7), Some(7));
        assert_eq!(without_waiting(refuse_to_wait), None);
        assert!(!refuse_to_wait(), "the mark ends with its call");
        let unwound = std::panic::catch_unwind(|| without_waiting(|| panic!("boom")));
        assert!(unwound.is_err());
        assert!(
            !refuse_to_wait(),
            "the mark ends even when its call unwinds"
        );
    }
}
