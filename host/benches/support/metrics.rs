//! Reading a host's `/metrics` (Prometheus text) in the benchmarks.

/// The value of an unlabelled series, or the sum of a family's series
/// whose labels contain `labels` (`""`: every series of the family).
pub fn metric(text: &str, name: &str, labels: &str) -> u64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(series, _)| {
            series == &name || (series.starts_with(&format!("{name}{{")) && series.contains(labels))
        })
        .filter_map(|(_, v)| v.parse::<u64>().ok())
        .sum()
}

/// Every series of family `name`: its labels (as written between the
/// braces) and its value.
// Only `takedown_scale` and `scale_out` break a family down; every
// benchmark includes this module whole.
#[allow(dead_code)]
pub fn series(text: &str, name: &str) -> std::collections::BTreeMap<String, u64> {
    let prefix = format!("{name}{{");
    text.lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .filter_map(|l| l.rsplit_once("} "))
        .filter_map(|(labels, v)| Some((labels.to_owned(), v.parse::<u64>().ok()?)))
        .collect()
}

/// KV transactions (`apply` calls).
pub fn kv_applies(text: &str) -> u64 {
    metric(text, "custodian_kv_calls_total", "operation=\"apply\"")
}

/// KV reads: point reads, multi-key reads, scans and snapshot reads of
/// several rows and ranges, each one call.
pub fn kv_reads(text: &str) -> u64 {
    ["get", "get_many", "scan", "read"]
        .iter()
        .map(|op| {
            metric(
                text,
                "custodian_kv_calls_total",
                &format!("operation=\"{op}\""),
            )
        })
        .sum()
}

/// Timer steps that failed or lost a race (and will run again).
pub fn failed_steps(text: &str) -> u64 {
    metric(text, "custodian_steps_total", "outcome=\"failed\"")
        + metric(text, "custodian_steps_total", "outcome=\"lost\"")
}
