//! The `dbus` target: the system bus daemon itself, asked for its id
//! (`org.freedesktop.DBus.GetId`), which only the bus daemon answers.
//!
//! The connection is shared with the `systemd` (bus path) and `logind` probes and kept between
//! rounds; a failed or abandoned call drops it, so the next round connects afresh.

use std::path::{Path, PathBuf};

use zbus::Connection;

/// The system bus connection, made on demand and dropped after a failure.
pub struct SystemBus {
    enabled: bool,
    socket: PathBuf,
    connection: Option<Connection>,
}

impl SystemBus {
    /// A bus at `socket` (not connected yet).
    pub fn new(enabled: bool, socket: PathBuf) -> Self {
        SystemBus {
            enabled,
            socket,
            connection: None,
        }
    }

    /// Whether the bus probes are enabled.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// The bus socket path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Whether the bus socket exists (a node without D-Bus has no bus targets).
    pub fn socket_exists(&self) -> bool {
        self.socket.exists()
    }

    /// The connection, connecting first when there is none. Callers bound this with the
    /// round's deadline; an abandoned connect leaves nothing behind.
    pub async fn connection(&mut self) -> Result<Connection, zbus::Error> {
        if !self.enabled || !self.socket.exists() {
            return Err(zbus::Error::Address("no system bus socket".into()));
        }
        if let Some(c) = &self.connection {
            return Ok(c.clone());
        }
        let c = connect(&self.socket).await?;
        self.connection = Some(c.clone());
        Ok(c)
    }

    /// Drop the connection (after a failure): the next round connects afresh.
    pub fn reset(&mut self) {
        self.connection = None;
    }
}

/// Connect to the system bus at `socket` (with the usual `Hello`).
pub async fn connect(socket: &Path) -> Result<Connection, zbus::Error> {
    let address = format!("unix:path={}", socket.display());
    zbus::connection::Builder::address(address.as_str())
        .build()
        .await
}

/// Ask the bus daemon for its id.
pub async fn get_id(conn: &Connection) -> Result<String, zbus::Error> {
    let proxy = zbus::fdo::DBusProxy::builder(conn)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await?;
    let id = proxy.get_id().await?;
    Ok(format!(
        "bus id {}",
        id.as_str().get(..8).unwrap_or(id.as_str())
    ))
}
