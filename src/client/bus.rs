//! The system bus: one connection made on demand, the bus daemon's own `GetId`, and how a
//! zbus error is classified into a [`super::ErrorKind`] (by variant and D-Bus error name).
//!
//! The connection is shared by the `dbus`, `systemd` (bus path) and `logind` probes and kept
//! between rounds; a failed or abandoned call drops it, so the next round connects afresh.

use std::path::{Path, PathBuf};

use zbus::Connection;

use super::{Error, ErrorKind};

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
    pub async fn connection(&mut self) -> Result<Connection, Error> {
        if !self.enabled || !self.socket.exists() {
            return Err(Error::new(ErrorKind::NotInstalled, "no system bus socket"));
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
pub async fn connect(socket: &Path) -> Result<Connection, Error> {
    let address = format!("unix:path={}", socket.display());
    Ok(zbus::connection::Builder::address(address.as_str())
        .build()
        .await?)
}

/// Ask the bus daemon for its id (only the bus daemon answers this).
pub async fn get_id(conn: &Connection) -> Result<String, Error> {
    let proxy = zbus::fdo::DBusProxy::builder(conn)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await?;
    let id = proxy.get_id().await?;
    Ok(id.as_str().to_owned())
}

/// D-Bus error names that mean "nobody owns (or can activate) this name": the service is not
/// installed or not running.
const NOT_ON_THE_BUS: [&str; 2] = [
    "org.freedesktop.DBus.Error.ServiceUnknown",
    "org.freedesktop.DBus.Error.NameHasNoOwner",
];

/// The kind of a D-Bus error reply, by its error name (an identifier, not prose).
pub fn kind_of_error_name(name: &str) -> ErrorKind {
    match name {
        n if NOT_ON_THE_BUS.contains(&n) => ErrorKind::NotInstalled,
        "org.freedesktop.DBus.Error.NoReply" | "org.freedesktop.DBus.Error.Disconnected" => {
            ErrorKind::Disconnected
        }
        "org.freedesktop.DBus.Error.Timeout" | "org.freedesktop.DBus.Error.TimedOut" => {
            ErrorKind::Timeout
        }
        _ => ErrorKind::Failed,
    }
}

/// The kind of a zbus error, by its variant. The bus daemon's `NoReply`/`Disconnected` (how a
/// `Reexecute` over the bus ends) and a failed socket are disconnects.
pub fn kind_of(e: &zbus::Error) -> ErrorKind {
    use zbus::fdo::Error as Fdo;
    match e {
        zbus::Error::InputOutput(io) => match super::io_kind(io) {
            Some(k @ (ErrorKind::Timeout | ErrorKind::Refused | ErrorKind::NotInstalled)) => k,
            _ => ErrorKind::Disconnected,
        },
        zbus::Error::MethodError(name, _, _) => kind_of_error_name(name.as_str()),
        zbus::Error::FDO(fdo) => match **fdo {
            Fdo::ServiceUnknown(_) | Fdo::NameHasNoOwner(_) => ErrorKind::NotInstalled,
            Fdo::NoReply(_) | Fdo::Disconnected(_) => ErrorKind::Disconnected,
            Fdo::Timeout(_) | Fdo::TimedOut(_) => ErrorKind::Timeout,
            Fdo::IOError(_) => ErrorKind::Disconnected,
            _ => ErrorKind::Failed,
        },
        zbus::Error::Address(_) => ErrorKind::NotInstalled,
        zbus::Error::InvalidReply
        | zbus::Error::IncorrectType
        | zbus::Error::InvalidField
        | zbus::Error::MissingField
        | zbus::Error::ExcessData
        | zbus::Error::IncorrectEndian
        | zbus::Error::SignatureMismatch(..) => ErrorKind::Protocol,
        _ => ErrorKind::Failed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disconnect_is_told_by_its_type() {
        let no_reply = zbus::Error::FDO(Box::new(zbus::fdo::Error::NoReply(
            "Message recipient disconnected from message bus without replying".into(),
        )));
        assert_eq!(kind_of(&no_reply), ErrorKind::Disconnected);
        let io = zbus::Error::InputOutput(std::sync::Arc::new(std::io::Error::from(
            std::io::ErrorKind::UnexpectedEof,
        )));
        assert_eq!(kind_of(&io), ErrorKind::Disconnected);
        let denied = zbus::Error::FDO(Box::new(zbus::fdo::Error::AccessDenied(
            "disconnect is in this text but it is no disconnect".into(),
        )));
        assert_eq!(kind_of(&denied), ErrorKind::Failed);
    }

    #[test]
    fn service_unknown_means_not_installed_by_its_type() {
        let fdo = zbus::Error::FDO(Box::new(zbus::fdo::Error::ServiceUnknown(
            "The name is not activatable".into(),
        )));
        assert_eq!(kind_of(&fdo), ErrorKind::NotInstalled);
        let other = zbus::Error::FDO(Box::new(zbus::fdo::Error::AccessDenied(
            "ServiceUnknown in the text is not enough".into(),
        )));
        assert_eq!(kind_of(&other), ErrorKind::Failed);
        assert_eq!(kind_of(&zbus::Error::InvalidReply), ErrorKind::Protocol);
    }

    #[test]
    fn a_refused_connect_is_refused() {
        let io = zbus::Error::InputOutput(std::sync::Arc::new(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        )));
        assert_eq!(kind_of(&io), ErrorKind::Refused);
    }
}
