//! A guest for the runtime's tests: each function misbehaves in one way.
// wit-bindgen generates the ABI glue (unsafe, undocumented) in this crate.
#![allow(unsafe_code, missing_docs)]

use std::hint::black_box;

use custodian_sdk::{Error, kv, objects};

wit_bindgen::generate!({
    path: ["../../../sdk/wit/deps/host", "wit"],
    world: "custodian-test:probe/probe-guest@0.1.0",
    with: {
        "custodian:host/types@0.2.0": custodian_sdk::bindings::host::custodian::host::types,
        "custodian:host/kv@0.2.0": custodian_sdk::bindings::host::custodian::host::kv,
        "custodian:host/objects@0.2.0": custodian_sdk::bindings::host::custodian::host::objects,
        "custodian:host/checksum@0.2.0": custodian_sdk::bindings::host::custodian::host::checksum,
        "custodian:host/clock@0.2.0": custodian_sdk::bindings::host::custodian::host::clock,
        "custodian:host/audit@0.2.0": custodian_sdk::bindings::host::custodian::host::audit,
        "custodian:host/log@0.2.0": custodian_sdk::bindings::host::custodian::host::log,
    },
});

struct Probe;

impl exports::custodian_test::probe::probe::Guest for Probe {
    fn noop() -> u32 {
        7
    }

    fn blake3(data: Vec<u8>) -> Vec<u8> {
        custodian_sdk::bindings::host::custodian::host::checksum::blake3(&data)
    }

    fn read_twice(partition: String) -> u32 {
        let read = |key: &[u8]| match kv::get(&partition, key) {
            Ok(value) => u32::from(value.is_some()),
            Err(e) => panic!("the host refused a read: {e}"),
        };
        read(b"a") + read(b"b")
    }

    fn spin(seed: u64) -> u64 {
        let mut x = seed | 1;
        loop {
            x = black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
        }
    }

    fn hog(mebibytes: u32) -> u32 {
        let block = vec![1u8; (mebibytes as usize) << 20];
        black_box(&block).iter().map(|b| u32::from(*b)).sum()
    }

    fn crash(message: String) -> u32 {
        panic!("{message}");
    }

    fn touch_partition(partition: String) -> Result<bool, Error> {
        Ok(kv::get(&partition, b"k")?.is_some())
    }

    fn touch_store(store: String) -> Result<bool, Error> {
        match objects::head(&store, "k") {
            Ok(_) => Ok(true),
            Err(Error::NotFound(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn list_versions(store: String) -> Result<u32, Error> {
        let page = objects::list_versions(&store, "", None, 10)?;
        Ok(page.versions.len() as u32)
    }

    fn burn(partition: String) -> u32 {
        let mut calls = 0u32;
        for _ in 0..10_000_000 {
            let _ = black_box(kv::get(&partition, b"k"));
            calls += 1;
        }
        calls
    }

    fn burn_politely(partition: String) -> Result<u32, Error> {
        let mut calls = 0u32;
        loop {
            match kv::get(&partition, b"k") {
                Ok(_) => calls += 1,
                Err(Error::BudgetExhausted(_)) => return Ok(calls),
                Err(other) => return Err(other),
            }
        }
    }

    fn read_many(partition: String, count: u32) -> Result<u64, Error> {
        let keys: Vec<Vec<u8>> = (0..count).map(|i| i.to_be_bytes().to_vec()).collect();
        let values = kv::get_many(&partition, &keys)?;
        Ok(values.iter().flatten().map(|v| v.len() as u64).sum())
    }

    fn scan_page(partition: String, limit: u32) -> Result<(u32, bool), Error> {
        let page = kv::scan(&partition, &[], None, None, limit)?;
        Ok((page.entries.len() as u32, page.next.is_some()))
    }

    fn read_snapshot(
        get_partition: String,
        gets: u32,
        scan_partition: String,
        limit: u32,
    ) -> Result<(u64, u32, bool), Error> {
        let mut reads: Vec<kv::ReadOp> = (0..gets)
            .map(|i| {
                kv::ReadOp::Get(kv::KeyRef {
                    partition: get_partition.clone(),
                    key: i.to_be_bytes().to_vec(),
                })
            })
            .collect();
        reads.push(kv::ReadOp::Scan(kv::ScanRange {
            partition: scan_partition,
            start: Vec::new(),
            end: None,
            cursor: None,
            limit,
        }));
        let mut bytes = 0u64;
        let mut page = (0, false);
        for answer in kv::read(&reads)? {
            match answer {
                kv::ReadAnswer::Value(value) => bytes += value.map_or(0, |v| v.len() as u64),
                kv::ReadAnswer::Page(p) => page = (p.entries.len() as u32, p.next.is_some()),
            }
        }
        Ok((bytes, page.0, page.1))
    }
}

export!(Probe);
