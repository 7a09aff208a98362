//! Between etcd-client's types and the fleet's: errors sorted into [`FleetError`] kinds by
//! their types and gRPC codes (never by their text), the calls' timeout, the transactions of
//! [`super::group`] as etcd takes them, and answers checked before they are read.

use std::error::Error as StdError;
use std::time::Duration;

use etcd_client::proto::{PbTxnOpResponse, PbTxnResponse};
use etcd_client::{Compare, CompareOp, Event, PutOptions, Txn, TxnOp, TxnOpResponse, TxnResponse};

use super::group::{Cmp, Cond, Op, RawKv, TxnPlan};
use super::tls::tls_in_chain;
use crate::fleet::FleetError;

/// Sort an etcd client error; `authenticating`: the call was the connect's authentication.
pub fn classify(e: &etcd_client::Error, authenticating: bool) -> FleetError {
    use etcd_client::Error as E;
    use tonic::Code;
    match e {
        E::GRpcStatus(s) => {
            let msg = format!("{:?}: {}", s.code(), s.message());
            match s.code() {
                Code::Unauthenticated | Code::PermissionDenied => FleetError::Auth(msg),
                Code::InvalidArgument if authenticating => FleetError::Auth(msg),
                _ if tls_in_chain(s.source()) => FleetError::Tls(msg),
                Code::InvalidArgument | Code::OutOfRange | Code::Unimplemented => {
                    FleetError::Protocol(msg)
                }
                _ => FleetError::Unreachable(msg),
            }
        }
        E::TransportError(t) if tls_in_chain(t.source()) => FleetError::Tls(t.to_string()),
        E::TransportError(t) => FleetError::Unreachable(t.to_string()),
        E::IoError(io) if io.get_ref().is_some_and(|i| tls_in_chain(Some(i))) => {
            FleetError::Tls(io.to_string())
        }
        E::IoError(io) => FleetError::Unreachable(io.to_string()),
        E::InvalidArgs(m) | E::EndpointError(m) => FleetError::Config(m.clone()),
        E::InvalidUri(u) => FleetError::Config(u.to_string()),
        E::LeaseKeepAliveError(m) | E::WatchError(m) => FleetError::Unreachable(m.clone()),
        other => FleetError::Protocol(other.to_string()),
    }
}

/// Bound one call by the request timeout.
pub(super) async fn bounded<T>(
    timeout: Duration,
    what: &str,
    call: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, FleetError> {
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(classify(&e, false)),
        Err(_) => Err(FleetError::Unreachable(format!(
            "{what}: no answer within {}",
            humantime::format_duration(timeout)
        ))),
    }
}

/// A transaction of [`super::group`] as etcd takes it.
pub(super) fn txn_of(plan: &TxnPlan) -> Txn {
    txn_reading(plan, Vec::new())
}

/// [`txn_of`], with reads `also` after the writes when the compares hold.
pub(super) fn txn_reading(plan: &TxnPlan, also: Vec<TxnOp>) -> Txn {
    let when: Vec<Compare> = plan
        .when
        .iter()
        .map(|c| match c {
            Cond::CreateRevision {
                key,
                end,
                cmp,
                revision,
            } => {
                let op = match cmp {
                    Cmp::Equal => CompareOp::Equal,
                    Cmp::Less => CompareOp::Less,
                    Cmp::Greater => CompareOp::Greater,
                };
                let c = Compare::create_revision(key.clone(), op, *revision);
                match end {
                    Some(end) => c.with_range(end.clone()),
                    None => c,
                }
            }
            Cond::ModRevision { key, revision } => {
                Compare::mod_revision(key.clone(), CompareOp::Equal, *revision)
            }
        })
        .collect();
    let then: Vec<TxnOp> = plan
        .then
        .iter()
        .map(|op| match op {
            Op::Put { key, value, lease } => TxnOp::put(
                key.clone(),
                value.clone(),
                (*lease != 0).then(|| PutOptions::new().with_lease(*lease)),
            ),
            Op::Delete { key } => TxnOp::delete(key.clone(), None),
            Op::Txn(inner) => TxnOp::txn(txn_of(inner)),
        })
        .chain(also)
        .collect();
    let txn = Txn::new().when(when).and_then(then);
    match &plan.otherwise {
        Some(other) => txn.or_else([TxnOp::txn(txn_of(other))]),
        None => txn,
    }
}

/// A transaction's answers, each first checked to carry its response, a nested
/// transaction's too: etcd-client's `op_responses` panics on one without, which etcd never
/// sends but a proxy or another server speaking its protocol might.
pub fn op_answers(resp: &TxnResponse) -> Result<Vec<TxnOpResponse>, FleetError> {
    fn whole(r: &PbTxnResponse) -> bool {
        r.responses.iter().all(|op| match &op.response {
            None => false,
            Some(PbTxnOpResponse::ResponseTxn(inner)) => whole(inner),
            Some(_) => true,
        })
    }
    if whole(&resp.0) {
        Ok(resp.op_responses())
    } else {
        Err(FleetError::Protocol(
            "a transaction's answer lacks one of its responses".to_owned(),
        ))
    }
}

/// Whether a watch event is a put (`Some(false)`), a delete (`Some(true)`) or of a type
/// etcd does not send (None; etcd-client's `event_type` panics on it).
pub fn is_delete(ev: &Event) -> Option<bool> {
    match ev.0.r#type {
        0 => Some(false),
        1 => Some(true),
        _ => None,
    }
}

/// Whether a handoff's transaction ([`handoff_plan`](super::group::handoff_plan): the offers nested in the branch the
/// shared compares lead to, each else the next waiter, the last a plain release) handed the
/// slot over: the branch taken put the holder key.
pub(super) fn handed_over(answers: &[TxnOpResponse]) -> bool {
    // the answers of the branch taken: first a put (a handoff), a delete (the plain release)
    // or the nested transaction it went on to
    match answers.first() {
        Some(TxnOpResponse::Put(_)) => true,
        Some(TxnOpResponse::Txn(inner)) => op_answers(inner).is_ok_and(|a| handed_over(&a)),
        _ => false,
    }
}

/// A key of a range's answer.
pub(super) fn raw(kv: &etcd_client::KeyValue) -> RawKv<'_> {
    RawKv {
        key: kv.key(),
        value: kv.value(),
        create_revision: kv.create_revision(),
        mod_revision: kv.mod_revision(),
        lease: kv.lease(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An answer etcd never sends but a proxy might (a response op without its response, a
    /// watch event of an unknown type) is an error or skipped, not a panic of the task.
    #[test]
    fn a_malformed_answer_is_an_error_not_a_panic() {
        use etcd_client::proto::{PbEvent, PbResponseOp};
        let op = |response| PbResponseOp { response };
        let txn = |responses| {
            TxnResponse(PbTxnResponse {
                header: None,
                succeeded: true,
                responses,
            })
        };
        let nested = |responses| {
            Some(PbTxnOpResponse::ResponseTxn(PbTxnResponse {
                header: None,
                succeeded: true,
                responses,
            }))
        };
        assert!(op_answers(&txn(vec![op(None)])).is_err());
        assert!(op_answers(&txn(vec![op(nested(vec![op(None)]))])).is_err());
        assert_eq!(
            op_answers(&txn(vec![op(nested(Vec::new()))]))
                .map(|a| a.len())
                .ok(),
            Some(1)
        );
        let event = |r#type| {
            Event(PbEvent {
                r#type,
                kv: None,
                prev_kv: None,
            })
        };
        assert_eq!(is_delete(&event(0)), Some(false));
        assert_eq!(is_delete(&event(1)), Some(true));
        assert_eq!(is_delete(&event(7)), None);
    }

    #[test]
    fn codes_sort_errors_not_their_text() {
        let status = |code| etcd_client::Error::GRpcStatus(tonic::Status::new(code, "x"));
        assert!(matches!(
            classify(&status(tonic::Code::PermissionDenied), false),
            FleetError::Auth(_)
        ));
        assert!(matches!(
            classify(&status(tonic::Code::InvalidArgument), true),
            FleetError::Auth(_)
        ));
        assert!(matches!(
            classify(&status(tonic::Code::Unavailable), false),
            FleetError::Unreachable(_)
        ));
        assert!(matches!(
            classify(&etcd_client::Error::InvalidArgs("e".into()), false),
            FleetError::Config(_)
        ));
    }
}
