use crate::bindings::host::custodian::host::log::Level;

/// The native host's `log.log`; see `wit/deps/host/log.wit`.
pub fn log(level: Level, message: &str) {
    super::with(|host| host.logs.push((level, message.to_owned())));
}
