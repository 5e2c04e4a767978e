//! Bodies that arrive in pieces: [`ObjectStore::put_stream`] and
//! [`ObjectStore::upload_part_stream`] publish a body while it is still
//! arriving, so a server need not hold a whole object (or part) in
//! memory.
//!
//! The sender (a server reading a request) pushes [`Piece::Data`] in
//! order and ends with [`Piece::End`], which carries the checksums it
//! computed over the same pieces once every check of its own passed. A
//! store publishes only after `End`, and only if its own CRC-64/NVME of
//! what it wrote equals the sender's: a body that stops early, fails a
//! check of the sender's (the sender sends an error, or simply drops the
//! sender) or was altered on the way publishes nothing.
//!
//! The channel between the two holds at most [`StreamedBody::channel`]'s
//! `depth` pieces, so the memory a body pins is that many pieces, however
//! long the body is; a slow disk slows the sender down instead.
//!
//! [`ObjectStore::put_stream`]: crate::ObjectStore::put_stream
//! [`ObjectStore::upload_part_stream`]: crate::ObjectStore::upload_part_stream

use bytes::{Bytes, BytesMut};
use tokio::sync::mpsc;

use crate::ObjectError;

/// One item of a streamed body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// The next bytes.
    Data(Bytes),
    /// The body is complete, and these are its checksums as the sender
    /// computed them.
    End(BodySums),
}

/// What the sender of a streamed body computed over it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodySums {
    /// The CRC-64/NVME of every byte sent; the store's own must match.
    pub crc64: u64,
    /// The MD5 to record with the version, if the sender computed one
    /// (see `PutOptions::content_md5`). Ignored for parts.
    pub content_md5: Option<[u8; 16]>,
}

/// The receiving end of a streamed body, handed to the store.
#[derive(Debug)]
pub struct StreamedBody {
    pieces: mpsc::Receiver<Result<Piece, ObjectError>>,
}

/// The sending end of a streamed body.
#[derive(Debug, Clone)]
pub struct BodySender {
    pieces: mpsc::Sender<Result<Piece, ObjectError>>,
}

impl StreamedBody {
    /// A body fed through the returned sender, holding at most `depth`
    /// pieces (at least one) between the two ends.
    pub fn channel(depth: usize) -> (BodySender, StreamedBody) {
        let (sender, pieces) = mpsc::channel(depth.max(1));
        (BodySender { pieces: sender }, StreamedBody { pieces })
    }

    /// A body of `bytes` in one piece, with their CRC-64/NVME (for tests
    /// and callers that already hold the bytes).
    pub fn of(bytes: Bytes, sums: BodySums) -> StreamedBody {
        let (sender, body) = Self::channel(2);
        // Room for both, so neither send can fail or wait.
        let _ = sender.pieces.try_send(Ok(Piece::Data(bytes)));
        let _ = sender.pieces.try_send(Ok(Piece::End(sums)));
        body
    }

    /// The next item; `None` once the sender is gone.
    pub async fn next(&mut self) -> Option<Result<Piece, ObjectError>> {
        self.pieces.recv().await
    }

    /// [`StreamedBody::next`] from a thread that may block (never from
    /// an async task: it would hold the runtime's worker).
    pub fn blocking_next(&mut self) -> Option<Result<Piece, ObjectError>> {
        self.pieces.blocking_recv()
    }

    /// Feeds every piece to `sink`, in order, at most `limit` bytes, and
    /// returns the sender's checksums; from a thread that may block. The
    /// caller checks its own CRC of what `sink` saw against them.
    ///
    /// # Errors
    /// As [`StreamedBody::collect`], and `sink`'s.
    pub fn blocking_drain(
        mut self,
        limit: u64,
        mut sink: impl FnMut(&[u8]) -> Result<(), ObjectError>,
    ) -> Result<BodySums, ObjectError> {
        let mut len = 0u64;
        loop {
            match self.blocking_next() {
                Some(Ok(Piece::Data(bytes))) => {
                    len += bytes.len() as u64;
                    if len > limit {
                        return Err(too_long(limit));
                    }
                    sink(&bytes)?;
                }
                Some(Ok(Piece::End(sums))) => return Ok(sums),
                Some(Err(error)) => return Err(error),
                None => return Err(ended_early()),
            }
        }
    }

    /// The whole body and its sender's checksums, for a backend that
    /// publishes whole bodies; at most `limit` bytes.
    ///
    /// # Errors
    /// The sender's error; `InvalidArgument` past `limit` or for a body
    /// that ended without [`Piece::End`].
    pub async fn collect(mut self, limit: u64) -> Result<(Bytes, BodySums), ObjectError> {
        let mut whole = BytesMut::new();
        loop {
            match self.next().await {
                Some(Ok(Piece::Data(bytes))) => {
                    if (whole.len() + bytes.len()) as u64 > limit {
                        return Err(too_long(limit));
                    }
                    whole.extend_from_slice(&bytes);
                }
                Some(Ok(Piece::End(sums))) => return Ok((whole.freeze(), sums)),
                Some(Err(error)) => return Err(error),
                None => return Err(ended_early()),
            }
        }
    }
}

impl BodySender {
    /// Sends the next bytes, waiting while the channel is full.
    ///
    /// # Errors
    /// `Unavailable` when the store stopped reading (it failed or gave
    /// up; its own answer says why).
    pub async fn data(&self, bytes: Bytes) -> Result<(), ObjectError> {
        self.send(Ok(Piece::Data(bytes))).await
    }

    /// Ends the body: every check of the sender's passed.
    ///
    /// # Errors
    /// As [`BodySender::data`].
    pub async fn end(self, sums: BodySums) -> Result<(), ObjectError> {
        self.send(Ok(Piece::End(sums))).await
    }

    /// Ends the body as failed: nothing may be published.
    pub async fn fail(self, error: ObjectError) {
        // A store that stopped reading publishes nothing either.
        let _ = self.pieces.send(Err(error)).await;
    }

    async fn send(&self, item: Result<Piece, ObjectError>) -> Result<(), ObjectError> {
        self.pieces.send(item).await.map_err(|_| {
            ObjectError::Unavailable("the store stopped reading the streamed body".into())
        })
    }
}

fn too_long(limit: u64) -> ObjectError {
    ObjectError::InvalidArgument(format!("a streamed body is longer than {limit} bytes").into())
}

/// The error for a body whose sender went away before [`Piece::End`].
fn ended_early() -> ObjectError {
    ObjectError::InvalidArgument(
        "the streamed body ended before its sender confirmed it complete; nothing was stored"
            .into(),
    )
}
