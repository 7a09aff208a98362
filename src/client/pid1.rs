//! A client of PID 1 by either path: its private socket (peer-to-peer, [`super::p2p`])
//! or the system bus (zbus). The actions use it to re-execute PID 1 and restart units; the
//! `systemd` probe reads `Version` through it. On the bus the calls to PID 1 are ordinary
//! methods of its manager, never `Introspect` or `Peer.Ping`, and `Properties.Get` only for
//! the one `Version` read the probe guards (no private socket, serial far from 2^32, no call
//! unanswered): those calls, sent to a PID 1 that has run out of bus serials (systemd#11809),
//! make it drop its bus connection. Failures are [`super::Error`]s; PID 1 closing the
//! connection (how it answers `Reexecute`) is [`super::ErrorKind::Disconnected`].

use std::path::Path;

use zbus_systemd::systemd1::{ManagerProxy, ServiceProxy, UnitProxy};

use super::Error;
use super::p2p::{MethodCall, P2pConnection};

/// PID 1's object path.
pub const MANAGER_PATH: &str = "/org/freedesktop/systemd1";
/// PID 1's manager interface.
pub const MANAGER_INTERFACE: &str = "org.freedesktop.systemd1.Manager";
const UNIT_INTERFACE: &str = "org.freedesktop.systemd1.Unit";
const SERVICE_INTERFACE: &str = "org.freedesktop.systemd1.Service";
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
    ) -> Result<Self, Error> {
        Ok(match route {
            Route::Private => Pid1::Private(P2pConnection::connect(private_socket).await?),
            Route::Bus => Pid1::Bus(super::bus::connect(bus_socket).await?),
        })
    }

    async fn manager(conn: &zbus::Connection) -> Result<ManagerProxy<'static>, zbus::Error> {
        ManagerProxy::builder(conn)
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
            .await
    }

    /// PID 1's `Version` property.
    pub async fn version(&mut self) -> Result<String, Error> {
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
    /// error of kind `Disconnected`, which callers treat as "sent".
    pub async fn reexecute(&mut self) -> Result<(), Error> {
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
    pub async fn restart_unit(&mut self, unit: &str) -> Result<(), Error> {
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
    pub async fn active_state(&mut self, unit: &str) -> Result<String, Error> {
        match self {
            Pid1::Private(c) => {
                let path = private_unit_path(c, unit).await?;
                Ok(c.call(&MethodCall {
                    path: &path,
                    interface: PROPERTIES,
                    member: "Get",
                    args: &[UNIT_INTERFACE, "ActiveState"],
                })
                .await?
                .variant_string()?)
            }
            // Over the bus only ordinary calls: `Properties.Get` on a PID 1 that has run out
            // of serials makes it drop its bus connection (see `crate::probe::systemd`), so
            // the state is read from `ListUnits`, a method of the manager.
            Pid1::Bus(c) => {
                let units = Self::manager(c).await?.list_units().await?;
                units
                    .into_iter()
                    .find(|u| u.0 == unit)
                    .map(|u| u.3)
                    .ok_or_else(|| {
                        Error::new(
                            super::ErrorKind::Failed,
                            format!("{unit} is not among PID 1's loaded units"),
                        )
                    })
            }
        }
    }
}

/// The object path of `unit`, asked over PID 1's private socket (`Manager.GetUnit`).
async fn private_unit_path(c: &mut P2pConnection, unit: &str) -> Result<String, Error> {
    Ok(c.call(&MethodCall {
        path: MANAGER_PATH,
        interface: MANAGER_INTERFACE,
        member: "GetUnit",
        args: &[unit],
    })
    .await?
    .string()?)
}

/// What PID 1 says of a service unit: its state, since when, and its main process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceState {
    /// `ActiveState` (`active`, `activating`, `deactivating`, `failed`, ...).
    pub active_state: String,
    /// `ActiveEnterTimestampMonotonic`: when it last became active, in µs of CLOCK_MONOTONIC
    /// (0: never).
    pub active_since_us: u64,
    /// `MainPID` (0: none).
    pub main_pid: u32,
    /// `WatchdogUSec`: the unit's own `WatchdogSec=` in µs (0: no watchdog armed).
    pub watchdog_usec: u64,
}

impl Pid1 {
    /// The state of service `unit`. Over the bus this reads properties (`Properties.Get`):
    /// callers ask the private socket first, and the bus only while PID 1 is not wedged.
    pub async fn service_state(&mut self, unit: &str) -> Result<ServiceState, Error> {
        match self {
            Pid1::Private(c) => {
                let path = private_unit_path(c, unit).await?;
                let mut get = async |interface: &str, property: &str| {
                    c.call(&MethodCall {
                        path: &path,
                        interface: PROPERTIES,
                        member: "Get",
                        args: &[interface, property],
                    })
                    .await
                };
                let active_state = get(UNIT_INTERFACE, "ActiveState").await?.variant_string()?;
                let active_since_us = get(UNIT_INTERFACE, "ActiveEnterTimestampMonotonic")
                    .await?
                    .variant_u64()?;
                let main_pid = get(SERVICE_INTERFACE, "MainPID").await?.variant_u32()?;
                let watchdog_usec = get(SERVICE_INTERFACE, "WatchdogUSec")
                    .await?
                    .variant_u64()?;
                Ok(ServiceState {
                    active_state,
                    active_since_us,
                    main_pid,
                    watchdog_usec,
                })
            }
            Pid1::Bus(c) => {
                let path = Self::manager(c).await?.get_unit(unit.to_owned()).await?;
                let u = UnitProxy::builder(c)
                    .path(path.clone())
                    .cache_properties(zbus::proxy::CacheProperties::No)
                    .build()
                    .await?;
                let s = ServiceProxy::builder(c)
                    .path(path)
                    .cache_properties(zbus::proxy::CacheProperties::No)
                    .build()
                    .await?;
                Ok(ServiceState {
                    active_state: u.active_state().await?,
                    active_since_us: u.active_enter_timestamp_monotonic().await?,
                    main_pid: s.main_pid().await?,
                    watchdog_usec: s.watchdog_u_sec().await?,
                })
            }
        }
    }
}

/// Ask PID 1 over the bus with an ordinary method call, `Manager.GetUnit(unit)`, and return
/// the serial of its reply. An error reply (`NoSuchUnit`) is an answer too: PID 1 sent it.
pub async fn get_unit_reply_serial(conn: &zbus::Connection, unit: &str) -> Result<u32, Error> {
    let reply = conn
        .call_method(
            Some("org.freedesktop.systemd1"),
            MANAGER_PATH,
            Some(MANAGER_INTERFACE),
            "GetUnit",
            &(unit,),
        )
        .await;
    match reply {
        Ok(m) | Err(zbus::Error::MethodError(_, _, m)) => Ok(m.primary_header().serial_num().get()),
        Err(e) => Err(e.into()),
    }
}
