//! The `dbus` target: the system bus daemon itself, asked for its id
//! (`org.freedesktop.DBus.GetId`), which only the bus daemon answers. The connection and the
//! call are the bus client's ([`crate::client::bus`]).

use zbus::Connection;

pub use crate::client::bus::SystemBus;
use crate::client::{self, bus};

/// Ask the bus daemon for its id; the detail names its first 8 characters.
pub async fn get_id(conn: &Connection) -> Result<String, client::Error> {
    let id = bus::get_id(conn).await?;
    Ok(format!(
        "bus id {}",
        id.as_str().get(..8).unwrap_or(id.as_str())
    ))
}
