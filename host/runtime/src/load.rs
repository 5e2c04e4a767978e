//! Loading a plugin from a path: telling apart every way a file can fail
//! to be a plugin, compiling (or fetching from the disk cache), checking
//! the contract version, and linking once into an `InstancePre`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, InstancePre};

use super::host::CallState;
use super::{Runtime, json};

pub use custodian_contract::version::CONTRACT_VERSION;
use custodian_contract::version::{
    HOST_INTERFACES, POLICY_SERVICE_INTERFACES, POLICY_TYPE_INTERFACES, compatible,
};

/// The policy worlds of `custodian:policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum World {
    /// The takedown and preservation state machine.
    Takedown,
    /// Retention and legal-hold decisions.
    Retention,
    /// Which exact versions may be permanently deleted.
    Purge,
    /// Where an archived version now lives.
    Archive,
    /// Who may do what on the data plane, for every API request.
    Access,
}

impl World {
    /// Every world, in a stable order.
    pub const ALL: [World; 5] = [
        World::Takedown,
        World::Retention,
        World::Purge,
        World::Archive,
        World::Access,
    ];

    /// The world's name, as in the WIT.
    pub fn name(self) -> &'static str {
        match self {
            World::Takedown => "takedown",
            World::Retention => "retention",
            World::Purge => "purge",
            World::Archive => "archive",
            World::Access => "access",
        }
    }

    /// The interface a plugin of this world exports.
    pub fn interface(self) -> &'static str {
        match self {
            World::Takedown => "takedown-steps",
            World::Retention => "retention-rules",
            World::Purge => "purge-rules",
            World::Archive => "archive-map",
            World::Access => "access-rules",
        }
    }

    /// The export's full name at the host's contract version.
    pub fn export_name(self) -> String {
        format!("custodian:policy/{}@{CONTRACT_VERSION}", self.interface())
    }

    fn from_interface(interface: &str) -> Option<World> {
        World::ALL.into_iter().find(|w| w.interface() == interface)
    }
}

impl std::str::FromStr for World {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        World::ALL
            .into_iter()
            .find(|w| w.name() == s)
            .ok_or_else(|| {
                let worlds: Vec<&str> = World::ALL.iter().map(|w| w.name()).collect();
                format!("unknown world {s:?}; the worlds are {}", worlds.join(", "))
            })
    }
}

impl serde::Serialize for World {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl std::fmt::Display for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a file could not be loaded as a plugin.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Nothing at the path.
    #[error("no plugin at {0}: the file does not exist")]
    NotFound(PathBuf),
    /// The file exists but cannot be read.
    #[error("cannot read {path}")]
    Unreadable {
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Not WebAssembly at all.
    #[error("{0} is not WebAssembly (it does not start with the \\0asm magic bytes)")]
    NotWasm(String),
    /// A core module, not a component.
    #[error(
        "{0} is a core WebAssembly module, not a component: build the plugin for the \
         wasm32-wasip2 target (or wrap the module with `wasm-tools component new`)"
    )]
    CoreModule(String),
    /// WebAssembly that does not validate or compile.
    #[error("{source_name} is not a valid component: {reason}")]
    Invalid {
        /// Where it came from.
        source_name: String,
        /// The validator's or compiler's message.
        reason: String,
    },
    /// Built against an incompatible contract version.
    #[error(
        "{source_name} was built against an incompatible contract: its {direction} {item} \
         is version {found}, and this host speaks {CONTRACT_VERSION} (compatible: {compatible})",
        compatible = custodian_contract::version::COMPATIBLE_DESCRIPTION
    )]
    IncompatibleVersion {
        /// Where it came from.
        source_name: String,
        /// `import` or `export`.
        direction: &'static str,
        /// The versioned name that does not match.
        item: String,
        /// Its version.
        found: String,
    },
    /// Imports something this host does not provide.
    #[error("{source_name} imports {item}, which this host does not provide")]
    UnknownImport {
        /// Where it came from.
        source_name: String,
        /// The import.
        item: String,
    },
    /// Not a plugin of the world it was loaded for.
    #[error(
        "{source_name} is not a {expected} plugin: it does not export {}{}",
        expected.export_name(),
        if found.is_empty() { " (it exports no policy world)".to_owned() }
        else { format!(" (it is a plugin for: {})", found.iter().map(|w| w.name()).collect::<Vec<_>>().join(", ")) }
    )]
    WrongWorld {
        /// Where it came from.
        source_name: String,
        /// The world asked for.
        expected: World,
        /// The worlds it does implement.
        found: Vec<World>,
    },
    /// The component's imports or exports do not type-check against the
    /// host's.
    #[error("{source_name} does not link against this host: {reason}")]
    Link {
        /// Where it came from.
        source_name: String,
        /// wasmtime's message, naming the item.
        reason: String,
    },
}

/// One export of a plugin, for inspection.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ExportInfo {
    /// The export's name, e.g. `custodian:policy/retention-rules@0.2.0`.
    pub name: String,
    /// Its functions' signatures.
    pub functions: Vec<String>,
}

/// The content hash a plugin is known by everywhere (its info, the
/// compile cache, swaps, the shared plugin set, the audit): BLAKE3 of its
/// bytes, as lowercase hex.
pub fn content_hash(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

/// What is known about a loaded plugin.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PluginInfo {
    /// The path or name it was loaded from.
    pub source: String,
    /// Size of the `.wasm`, in bytes.
    pub size: u64,
    /// BLAKE3 of the `.wasm`, hex: the plugin's identity.
    pub hash: String,
    /// The policy worlds it implements.
    pub worlds: Vec<World>,
    /// The `custodian:policy` version of its exports, if any: the
    /// contract version the plugin was built against (`0.1.x` plugins are
    /// linked through the host's frozen copy of the 0.1 contract).
    pub policy_version: Option<String>,
    /// Its imports.
    pub imports: Vec<String>,
    /// Its exports.
    pub exports: Vec<ExportInfo>,
    /// Whether the compiled code came from the disk cache.
    pub from_cache: bool,
    /// Time to compile (or fetch from the cache) and link.
    #[serde(serialize_with = "millis")]
    pub load_time: Duration,
}

fn millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1e3)
}

impl PluginInfo {
    /// The identity recorded in audit records and logs:
    /// `plugin:<world>@<first 12 hex of the hash>`.
    pub fn actor(&self) -> String {
        let world = self.worlds.first().map_or("component", |w| w.name());
        format!("plugin:{world}@{}", &self.hash[..12])
    }
}

/// Which generation of the contract's bindings a plugin is linked and
/// called through (see `crate::bindings::v0_1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Generation {
    /// Built against `custodian:policy@0.1.x`.
    V0_1,
    /// Built against the contract this host speaks, [`CONTRACT_VERSION`].
    Current,
}

impl Generation {
    /// The generation of a plugin whose policy exports are at `version`
    /// (`None`: it exports no policy world, and is called as current).
    fn of(version: Option<&str>) -> Self {
        match version.and_then(custodian_contract::version::series) {
            Some((0, 1)) => Self::V0_1,
            _ => Self::Current,
        }
    }
}

/// A loaded, linked plugin: compile once, instantiate per call.
pub struct Plugin {
    pub(crate) info: PluginInfo,
    pub(crate) generation: Generation,
    pub(crate) component: Component,
    pub(crate) pre: InstancePre<CallState>,
    /// Keeps the runtime's epoch ticker running while the plugin can be
    /// called, even after the [`Runtime`] itself is dropped.
    _ticker: std::sync::Arc<super::engine::EpochTicker>,
}

impl Plugin {
    /// What is known about it.
    pub fn info(&self) -> &PluginInfo {
        &self.info
    }

    /// Checks that the plugin implements `world`.
    ///
    /// # Errors
    /// [`LoadError::WrongWorld`].
    pub fn expect_world(&self, world: World) -> Result<(), LoadError> {
        if self.info.worlds.contains(&world) {
            Ok(())
        } else {
            Err(LoadError::WrongWorld {
                source_name: self.info.source.clone(),
                expected: world,
                found: self.info.worlds.clone(),
            })
        }
    }
}

/// `namespace:package/interface@version` split apart.
struct ItemName<'a> {
    package: &'a str,
    interface: &'a str,
    version: Option<&'a str>,
}

fn parse_name(name: &str) -> Option<ItemName<'_>> {
    let (path, version) = match name.split_once('@') {
        Some((path, version)) => (path, Some(version)),
        None => (name, None),
    };
    let (package, interface) = path.split_once('/')?;
    Some(ItemName {
        package,
        interface,
        version,
    })
}

impl Runtime {
    /// Loads the plugin at `path`.
    ///
    /// # Errors
    /// A [`LoadError`] saying which way the file fails to be a plugin.
    pub fn load_file(&self, path: &Path) -> Result<Plugin, LoadError> {
        let bytes = std::fs::read(path).map_err(|source| {
            if source.kind() == std::io::ErrorKind::NotFound {
                LoadError::NotFound(path.to_owned())
            } else {
                LoadError::Unreadable {
                    path: path.to_owned(),
                    source,
                }
            }
        })?;
        self.load_bytes(&bytes, &path.display().to_string())
    }

    /// Loads a plugin from its `.wasm` bytes; `source` names it in errors.
    ///
    /// # Errors
    /// A [`LoadError`] saying which way the bytes fail to be a plugin.
    pub fn load_bytes(&self, bytes: &[u8], source: &str) -> Result<Plugin, LoadError> {
        let started = Instant::now();
        let source_name = source.to_owned();
        match bytes.get(..8) {
            Some([0, b'a', b's', b'm', 1, 0, 0, 0]) => {
                return Err(LoadError::CoreModule(source_name));
            }
            Some([0, b'a', b's', b'm', _, _, 1, 0]) => {}
            Some([0, b'a', b's', b'm', ..]) => {
                return Err(LoadError::Invalid {
                    source_name,
                    reason: "unknown WebAssembly encoding version".into(),
                });
            }
            _ => return Err(LoadError::NotWasm(source_name)),
        }
        let hash = content_hash(bytes);
        let cached = self
            .cache
            .as_ref()
            .and_then(|c| c.load(&self.engine, &hash));
        let from_cache = cached.is_some();
        let component = match cached {
            Some(component) => component,
            None => {
                let component =
                    Component::new(&self.engine, bytes).map_err(|e| LoadError::Invalid {
                        source_name: source_name.clone(),
                        reason: format!("{e:#}"),
                    })?;
                if let Some(cache) = &self.cache
                    && let Err(e) = cache.store(&hash, &component)
                {
                    tracing::warn!("cannot cache the compiled plugin {source_name}: {e}");
                }
                component
            }
        };
        let (imports, exports, worlds, policy_version) =
            self.check_contract(&component, &source_name)?;
        let pre = self
            .linker
            .instantiate_pre(&component)
            .map_err(|e| LoadError::Link {
                source_name: source_name.clone(),
                reason: format!("{e:#}"),
            })?;
        Ok(Plugin {
            _ticker: self.ticker.clone(),
            generation: Generation::of(policy_version.as_deref()),
            info: PluginInfo {
                source: source_name,
                size: bytes.len() as u64,
                hash,
                worlds,
                policy_version,
                imports,
                exports,
                from_cache,
                load_time: started.elapsed(),
            },
            component,
            pre,
        })
    }

    /// Reads the component's imports and exports and checks every
    /// `custodian:*` name against the host's contract.
    #[allow(clippy::type_complexity)]
    fn check_contract(
        &self,
        component: &Component,
        source_name: &str,
    ) -> Result<(Vec<String>, Vec<ExportInfo>, Vec<World>, Option<String>), LoadError> {
        let ty = component.component_type();
        let mut imports = Vec::new();
        for (name, _) in ty.imports(&self.engine) {
            imports.push(name.to_owned());
            let Some(item) = parse_name(name) else {
                continue;
            };
            if !item.package.starts_with("custodian:") {
                continue;
            }
            let provided = match item.package {
                "custodian:host" => HOST_INTERFACES.contains(&item.interface),
                "custodian:policy" => {
                    POLICY_TYPE_INTERFACES.contains(&item.interface)
                        || POLICY_SERVICE_INTERFACES.contains(&item.interface)
                }
                _ => false,
            };
            if !provided {
                return Err(LoadError::UnknownImport {
                    source_name: source_name.to_owned(),
                    item: name.to_owned(),
                });
            }
            if !compatible(item.version) {
                return Err(LoadError::IncompatibleVersion {
                    source_name: source_name.to_owned(),
                    direction: "import",
                    item: name.to_owned(),
                    found: item.version.unwrap_or("unversioned").to_owned(),
                });
            }
        }
        let mut exports = Vec::new();
        let mut worlds = Vec::new();
        let mut policy_version = None;
        for (name, item) in ty.exports(&self.engine) {
            let functions = match item.ty {
                ComponentItem::ComponentInstance(instance) => instance
                    .exports(&self.engine)
                    .filter_map(|(f, item)| match item.ty {
                        ComponentItem::ComponentFunc(func) => Some(json::signature(f, &func)),
                        _ => None,
                    })
                    .collect(),
                ComponentItem::ComponentFunc(func) => vec![json::signature(name, &func)],
                _ => Vec::new(),
            };
            exports.push(ExportInfo {
                name: name.to_owned(),
                functions,
            });
            let Some(parsed) = parse_name(name) else {
                continue;
            };
            if parsed.package != "custodian:policy" {
                continue;
            }
            if !compatible(parsed.version) {
                return Err(LoadError::IncompatibleVersion {
                    source_name: source_name.to_owned(),
                    direction: "export",
                    item: name.to_owned(),
                    found: parsed.version.unwrap_or("unversioned").to_owned(),
                });
            }
            if let Some(world) = World::from_interface(parsed.interface) {
                worlds.push(world);
                policy_version = parsed.version.map(str::to_owned);
            }
        }
        Ok((imports, exports, worlds, policy_version))
    }
}
