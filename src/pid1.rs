//! A client of PID 1 by either path: its private socket (peer-to-peer, [`crate::dbus_p2p`])
//! or the system bus (zbus). The actions use it to re-execute PID 1 and restart units; the
//! `systemd` probe reads `Version` through it.

use std::path::Path;

use zbus_systemd::systemd1::{ManagerProxy, UnitProxy};

use crate::dbus_p2p::{MethodCall, P2pConnection, P2pError};

/// PID 1's object path.
pub const MANAGER_PATH: &str = "/org/freedesktop/systemd1";
/// PID 1's manager interface.
pub const MANAGER_INTERFACE: &str = "org.freedesktop.systemd1.Manager";
const UNIT_INTERFACE: &str = "org.freedesktop.systemd1.Unit";
const PROPERTIES: &str = "org.freedesktop.DBus.Properties";

/// Which way to reach PID 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `/run/systemd/private`: works while the bus is wedged.
    Private,
    /// The system bus.
    Bus,
}

impl Route {
    /// For messages.
    pub fn name(self) -> &'static str {
        match self {
            Route::Private => "private socket",
            Route::Bus => "system bus",
        }
    }
}

/// Why a call to PID 1 failed.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Pid1Error {
    /// What went wrong.
    pub message: String,
    /// The connection was closed by PID 1 (how it answers `Reexecute`).
    pub disconnected: bool,
}

impl From<P2pError> for Pid1Error {
    fn from(e: P2pError) -> Self {
        Pid1Error {
            disconnected: e.is_disconnect(),
            message: e.to_string(),
        }
    }
}

impl From<zbus::Error> for Pid1Error {
    fn from(e: zbus::Error) -> Self {
        Pid1Error {
            message: e.to_string(),
            disconnected: is_disconnect(&e),
        }
    }
}

/// Whether PID 1 (or the connection to it) went away instead of answering: our socket
/// closed, or the bus daemon's `NoReply`/`Disconnected` error ("recipient disconnected from
/// message bus without replying", how a `Reexecute` over the bus ends). Told by type.
fn is_disconnect(e: &zbus::Error) -> bool {
    match e {
        zbus::Error::InputOutput(_) => true,
        zbus::Error::FDO(fdo) => matches!(
            **fdo,
            zbus::fdo::Error::NoReply(_) | zbus::fdo::Error::Disconnected(_)
        ),
        _ => false,
    }
}

/// A connection to PID 1.
pub enum Pid1 {
    /// Over the private socket.
    Private(P2pConnection),
    /// Over the system bus.
    Bus(zbus::Connection),
}

impl Pid1 {
    /// Connect by `route`. Bound it with a timeout.
    pub async fn connect(
        route: Route,
        private_socket: &Path,
        bus_socket: &Path,
    ) -> Result<Self, Pid1Error> {
        Ok(match route {
            Route::Private => Pid1::Private(P2pConnection::connect(private_socket).await?),
            Route::Bus => Pid1::Bus(crate::probe::dbus::connect(bus_socket).await?),
        })
    }

    async fn manager(conn: &zbus::Connection) -> Result<ManagerProxy<'static>, zbus::Error> {
        ManagerProxy::builder(conn)
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
            .await
    }

    /// PID 1's `Version` property.
    pub async fn version(&mut self) -> Result<String, Pid1Error> {
        match self {
            Pid1::Private(c) => Ok(c
                .call(&MethodCall {
                    path: MANAGER_PATH,
                    interface: PROPERTIES,
                    member: "Get",
                    args: &[MANAGER_INTERFACE, "Version"],
                })
                .await?
                .variant_string()?),
            Pid1::Bus(c) => Ok(Self::manager(c).await?.version().await?),
        }
    }

    /// Ask PID 1 to re-execute. It answers by closing the connection: that is reported as an
    /// error with `disconnected` set, which callers treat as "sent".
    pub async fn reexecute(&mut self) -> Result<(), Pid1Error> {
        match self {
            Pid1::Private(c) => {
                c.call(&MethodCall {
                    path: MANAGER_PATH,
                    interface: MANAGER_INTERFACE,
                    member: "Reexecute",
                    args: &[],
                })
                .await?;
                Ok(())
            }
            Pid1::Bus(c) => Ok(Self::manager(c).await?.reexecute().await?),
        }
    }

    /// `RestartUnit(unit, "replace")`.
    pub async fn restart_unit(&mut self, unit: &str) -> Result<(), Pid1Error> {
        match self {
            Pid1::Private(c) => {
                c.call(&MethodCall {
                    path: MANAGER_PATH,
                    interface: MANAGER_INTERFACE,
                    member: "RestartUnit",
                    args: &[unit, "replace"],
                })
                .await?;
                Ok(())
            }
            Pid1::Bus(c) => {
                Self::manager(c)
                    .await?
                    .restart_unit(unit.to_owned(), "replace".to_owned())
                    .await?;
                Ok(())
            }
        }
    }

    /// The unit's `ActiveState` (`active`, `activating`, `failed`, ...).
    pub async fn active_state(&mut self, unit: &str) -> Result<String, Pid1Error> {
        match self {
            Pid1::Private(c) => {
                let path = c
                    .call(&MethodCall {
                        path: MANAGER_PATH,
                        interface: MANAGER_INTERFACE,
                        member: "GetUnit",
                        args: &[unit],
                    })
                    .await?
                    .string()?;
                Ok(c.call(&MethodCall {
                    path: &path,
                    interface: PROPERTIES,
                    member: "Get",
                    args: &[UNIT_INTERFACE, "ActiveState"],
                })
                .await?
                .variant_string()?)
            }
            Pid1::Bus(c) => {
                let path = Self::manager(c).await?.get_unit(unit.to_owned()).await?;
                let proxy = UnitProxy::builder(c)
                    .path(path)
                    .cache_properties(zbus::proxy::CacheProperties::No)
                    .build()
                    .await?;
                Ok(proxy.active_state().await?)
            }
        }
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
        assert!(Pid1Error::from(no_reply).disconnected);
        let io = zbus::Error::InputOutput(std::sync::Arc::new(std::io::Error::from(
            std::io::ErrorKind::UnexpectedEof,
        )));
        assert!(Pid1Error::from(io).disconnected);
        let denied = zbus::Error::FDO(Box::new(zbus::fdo::Error::AccessDenied(
            "disconnect is in this text but it is no disconnect".into(),
        )));
        assert!(!Pid1Error::from(denied).disconnected);
    }
}
