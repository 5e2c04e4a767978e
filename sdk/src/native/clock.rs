/// The native host's `clock.now-ms`; see `wit/deps/host/clock.wit`.
pub fn now_ms() -> u64 {
    super::with(|host| host.now_ms)
}
