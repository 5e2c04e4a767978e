//! The AWS SDK for Rust against the S3 endpoint, with its default
//! settings: over plain HTTP it streams a file body as `aws-chunked` with
//! every chunk signed and a signed CRC trailer
//! (`STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER`). boto3 and the AWS CLI
//! send chunked bodies only over HTTPS, so this is where a real client
//! exercises chunk and trailer signatures end to end. What the SDK sent
//! is captured as it went out and asserted.

use std::sync::{Arc, Mutex};

use aws_sdk_s3::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_s3::config::{
    BehaviorVersion, ConfigBag, Credentials, Intercept, Region, RuntimeComponents,
};
use aws_sdk_s3::error::BoxError;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{ChecksumAlgorithm, ChecksumMode, CompletedMultipartUpload, CompletedPart};
use md5::Digest as _;

use crate::s3::serve_with_key;

/// Records the payload mode (`x-amz-content-sha256`) of every request the
/// SDK sends.
#[derive(Debug, Default, Clone)]
struct PayloadModes(Arc<Mutex<Vec<String>>>);

impl Intercept for PayloadModes {
    fn name(&self) -> &'static str {
        "payload-modes"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        _config: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let mode = context
            .request()
            .headers()
            .get("x-amz-content-sha256")
            .unwrap_or("")
            .to_owned();
        self.0.lock().unwrap().push(mode);
        Ok(())
    }
}

impl PayloadModes {
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut self.0.lock().unwrap())
    }
}

#[test]
fn the_aws_sdk_for_rust_streams_files_as_aws_chunked_with_crc_trailers_and_reads_them_back_checked()
{
    let (server, access, secret) = serve_with_key("", &["writer:store/serving"]);
    let endpoint = server.s3.clone().unwrap();
    let modes = PayloadModes::default();
    let config = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(&endpoint)
        .force_path_style(true)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new(&access, &secret, None, None, "e2e"))
        .interceptor(modes.clone())
        .build();
    let s3 = aws_sdk_s3::Client::from_conf(config);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("upload.bin");
    let bytes: Vec<u8> = (0..(6u32 << 20) + 123)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 9) as u8)
        .collect();
    std::fs::write(&path, &bytes).unwrap();
    let md5 = hex::encode(md5::Md5::digest(&bytes));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        // A file body, the SDK's default checksum (CRC32) as a trailer.
        let put = s3
            .put_object()
            .bucket("serving")
            .key("sdk/file.bin")
            .body(ByteStream::from_path(&path).await.unwrap())
            .send()
            .await
            .unwrap();
        assert_eq!(modes.take(), ["STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"]);
        assert_eq!(put.e_tag(), Some(format!("\"{md5}\"").as_str()));
        assert!(put.checksum_crc32().is_some(), "{put:?}");

        // CRC-64/NVME asked for by name, also as a trailer; the server
        // answers with the same value it recorded.
        let put = s3
            .put_object()
            .bucket("serving")
            .key("sdk/crc64.bin")
            .checksum_algorithm(ChecksumAlgorithm::Crc64Nvme)
            .body(ByteStream::from_path(&path).await.unwrap())
            .send()
            .await
            .unwrap();
        assert_eq!(modes.take(), ["STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"]);
        let crc = custodian_base::checksum::crc64_nvme(&bytes);
        let wire = custodian_base::checksum::to_wire(crc);
        assert_eq!(put.checksum_crc64_nvme(), Some(wire.as_str()));

        // Read back with checksum validation on: the SDK checks the
        // whole-object CRC-64/NVME the server sends against the bytes.
        let got = s3
            .get_object()
            .bucket("serving")
            .key("sdk/crc64.bin")
            .checksum_mode(ChecksumMode::Enabled)
            .send()
            .await
            .unwrap();
        assert_eq!(got.checksum_crc64_nvme(), Some(wire.as_str()));
        let body = got.body.collect().await.unwrap().into_bytes();
        assert!(body[..] == bytes[..], "the object read back differs");

        // Multipart, each part a slice of the file streamed with its own
        // trailer.
        let upload = s3
            .create_multipart_upload()
            .bucket("serving")
            .key("sdk/parts.bin")
            .send()
            .await
            .unwrap();
        let id = upload.upload_id().unwrap();
        let part_len = 5u64 << 20;
        let mut parts = Vec::new();
        for (index, offset) in (0..bytes.len() as u64)
            .step_by(part_len as usize)
            .enumerate()
        {
            let number = i32::try_from(index + 1).unwrap();
            let body = ByteStream::read_from()
                .path(&path)
                .offset(offset)
                .length(aws_sdk_s3::primitives::Length::UpTo(part_len))
                .build()
                .await
                .unwrap();
            let done = s3
                .upload_part()
                .bucket("serving")
                .key("sdk/parts.bin")
                .upload_id(id)
                .part_number(number)
                .body(body)
                .send()
                .await
                .unwrap();
            parts.push(
                CompletedPart::builder()
                    .part_number(number)
                    .e_tag(done.e_tag().unwrap())
                    .build(),
            );
        }
        modes.take();
        s3.complete_multipart_upload()
            .bucket("serving")
            .key("sdk/parts.bin")
            .upload_id(id)
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .set_parts(Some(parts))
                    .build(),
            )
            .send()
            .await
            .unwrap();
        let head = s3
            .head_object()
            .bucket("serving")
            .key("sdk/parts.bin")
            .send()
            .await
            .unwrap();
        assert_eq!(head.content_length(), Some(bytes.len() as i64));
        // An assembled object's ETag names no MD5.
        assert!(head.e_tag().unwrap().ends_with("-1\""), "{head:?}");
        let got = s3
            .get_object()
            .bucket("serving")
            .key("sdk/parts.bin")
            .range("bytes=5242870-5242889")
            .send()
            .await
            .unwrap();
        let body = got.body.collect().await.unwrap().into_bytes();
        assert_eq!(body[..], bytes[5_242_870..5_242_890]);
    });
}

/// The server's peak resident memory so far (`VmHWM`), in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("a VmHWM line");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("VmHWM in kB");
    kib * 1024
}

/// Parts uploaded at once, and each part's size: held whole, they would
/// pin 8 × 48 MiB = 384 MiB of the server's memory.
const PARALLEL_PARTS: usize = 8;
const LARGE_PART: usize = 48 << 20;

#[test]
fn parts_uploaded_in_parallel_stream_to_disk_through_a_bounded_buffer() {
    let (server, access, secret) = serve_with_key("", &["writer:store/serving"]);
    let config = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .endpoint_url(server.s3.clone().unwrap())
        .force_path_style(true)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new(&access, &secret, None, None, "e2e"))
        .build();
    let s3 = aws_sdk_s3::Client::from_conf(config);
    let parts: Vec<bytes::Bytes> = (0..PARALLEL_PARTS)
        .map(|n| {
            (0..LARGE_PART)
                .map(|i| ((i * 7 + n * 13) % 251) as u8)
                .collect::<Vec<u8>>()
                .into()
        })
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let before = peak_rss(server.pid());
    runtime.block_on(async {
        let upload = s3
            .create_multipart_upload()
            .bucket("serving")
            .key("big/parallel.bin")
            .send()
            .await
            .unwrap();
        let id = upload.upload_id().unwrap();
        let sends = parts.iter().enumerate().map(|(index, part)| {
            let number = i32::try_from(index + 1).unwrap();
            s3.upload_part()
                .bucket("serving")
                .key("big/parallel.bin")
                .upload_id(id)
                .part_number(number)
                .body(ByteStream::from(part.clone()))
                .send()
        });
        let done = futures::future::join_all(sends).await;
        let completed = done
            .into_iter()
            .enumerate()
            .map(|(index, sent)| {
                CompletedPart::builder()
                    .part_number(i32::try_from(index + 1).unwrap())
                    .e_tag(sent.unwrap().e_tag().unwrap())
                    .build()
            })
            .collect();
        s3.complete_multipart_upload()
            .bucket("serving")
            .key("big/parallel.bin")
            .upload_id(id)
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .set_parts(Some(completed))
                    .build(),
            )
            .send()
            .await
            .unwrap();
        // Read back in order, checked piece by piece against the parts.
        let mut got = s3
            .get_object()
            .bucket("serving")
            .key("big/parallel.bin")
            .send()
            .await
            .unwrap()
            .body;
        let whole: Vec<u8> = parts.concat();
        let mut offset = 0;
        while let Some(piece) = got.next().await {
            let piece = piece.unwrap();
            assert!(
                piece[..] == whole[offset..offset + piece.len()],
                "the object differs at byte {offset}"
            );
            offset += piece.len();
        }
        assert_eq!(offset, whole.len(), "the object is whole");
    });
    let grown = peak_rss(server.pid()).saturating_sub(before);
    eprintln!(
        "server peak RSS grew by {} MiB for {PARALLEL_PARTS} parallel parts of {} MiB",
        grown >> 20,
        LARGE_PART >> 20
    );
    // Held whole, the parts alone would be 384 MiB; streamed, each holds
    // a few MiB (`body::STREAMED_HOLD`), plus the allocator's slack.
    assert!(
        grown < 96 << 20,
        "the server's peak memory grew by {} MiB",
        grown >> 20
    );
}
