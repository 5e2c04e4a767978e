//! The on-disk cache of compiled components.
//!
//! An entry is named `<blake3 of the .wasm>-<engine key>.cwasm`, where the
//! engine key hashes wasmtime's `precompile_compatibility_hash` (compiler
//! version, target, every setting that changes generated code). A changed
//! plugin or a changed engine is a different name, so a stale artifact is
//! never looked up.
//!
//! An entry is `MAGIC ++ blake3(payload) ++ payload`, written to a temporary
//! file and renamed into place, so a reader sees a whole entry or none. The
//! hash is checked before the (unsafe) deserialization, so a truncated or
//! corrupted file is recompiled instead of loaded. The directory is created
//! private to the host's user: only artifacts this host produced are ever
//! deserialized.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

use wasmtime::Engine;
use wasmtime::component::Component;

const MAGIC: &[u8; 16] = b"custodian-cwasm1";

/// Compiled components by content hash.
pub(crate) struct DiskCache {
    dir: PathBuf,
    engine_key: String,
}

impl DiskCache {
    /// Opens (creating) `dir` for `engine`.
    pub(crate) fn open(dir: &Path, engine: &Engine) -> std::io::Result<Self> {
        create_private_dir(dir)?;
        let mut hasher = std::hash::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Ok(Self {
            dir: dir.to_owned(),
            engine_key: format!("{:016x}", hasher.finish()),
        })
    }

    fn path(&self, content_hash: &str) -> PathBuf {
        self.dir
            .join(format!("{content_hash}-{}.cwasm", self.engine_key))
    }

    /// The cached compilation of the component whose `.wasm` hashes to
    /// `content_hash`, if a whole, intact one exists.
    pub(crate) fn load(&self, engine: &Engine, content_hash: &str) -> Option<Component> {
        let bytes = std::fs::read(self.path(content_hash)).ok()?;
        let payload = bytes.strip_prefix(MAGIC.as_slice())?;
        let (digest, payload) = payload.split_at_checked(32)?;
        if blake3::hash(payload).as_bytes() != digest {
            return None;
        }
        // SAFETY: the payload is an artifact this host serialized with an
        // engine of the same compatibility hash (it is in the name), and it
        // is byte-for-byte what was written (its hash was just checked).
        #[allow(unsafe_code)]
        unsafe {
            Component::deserialize(engine, payload).ok()
        }
    }

    /// Stores `component`'s compilation. Failures only cost a recompile on
    /// the next start, so the caller may ignore them.
    pub(crate) fn store(&self, content_hash: &str, component: &Component) -> std::io::Result<()> {
        let payload = component
            .serialize()
            .map_err(|e| std::io::Error::other(format!("{e:#}")))?;
        let mut file = tempfile::NamedTempFile::new_in(&self.dir)?;
        file.write_all(MAGIC)?;
        file.write_all(blake3::hash(&payload).as_bytes())?;
        file.write_all(&payload)?;
        file.as_file().sync_all()?;
        file.persist(self.path(content_hash)).map_err(|e| e.error)?;
        Ok(())
    }
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)
}
