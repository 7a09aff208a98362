//! Clients for the services pleg-guard talks to that have no ready-made small client crate
//! (docker has bollard, D-Bus has zbus): the CRI v1 runtime service.

pub mod cri;
