//! `lockkeeper elect` on an `etcd://` backend: the library's etcd [`Election`] (Go's
//! `concurrency.Election` layout, so `etcdctl elect NAME` candidates and this command share
//! one election at NAME; the proclaimed value is the participant's id).
//!
//! The same contract as on ZooKeeper (see the parent module): CMD starts only once elected,
//! runs under [`run::supervise`] with the term's fencing token (the candidacy key's create
//! revision), and is stopped when the leadership is lost; the participant then campaigns again
//! (its next token is higher) or exits 76 with `--once`. Differences, both etcd's:
//! - an etcd session (one lease) that is lost stays lost, so after a loss the participant opens
//!   a new session before it campaigns again, retrying every second while etcd does not answer
//!   (SIGINT or SIGTERM end the wait); with `--timeout` or `--try` it tries once (bounded by
//!   `--connect-timeout`), and a session lost during such a wait ends it with 69, since
//!   retrying would outlast the bound the operator asked for;
//! - `--listen` prints `leader ID token N` for each new leader (or new value), as `etcdctl
//!   elect --listen` does; `no leader` only when there is none at the start, since etcd's
//!   observation waits for the next leader rather than reporting the gap.

use std::time::Duration;

use lockkeeper::FencingToken;
use lockkeeper::etcd::{Election, Leadership, Session};

use super::{
    ElectArgs, Interrupts, Term, Wait, WayOut, default_id, not_leading, serve_term, wait_failed,
};
use crate::backend::{Failure, Handle};

/// How long to wait before opening a new session again when etcd did not answer.
const RECONNECT_PAUSE: Duration = Duration::from_secs(1);

/// Runs `elect` on etcd; `args.backend` is an `etcd://` URL.
pub(super) async fn elect(args: &ElectArgs, interrupts: &mut Interrupts) -> Result<u8, Failure> {
    let (backend, mut session) = connect(args).await?;
    let what = format!("{} on {backend}", args.name);
    let way_out = WayOut::new(args.release_timeout);
    let result = if args.listen {
        listen(&session, args, &what, interrupts).await
    } else {
        lead(&mut session, args, &what, interrupts, &way_out).await
    };
    // The session in use last: `lead` replaces a lost one.
    close(&session, &way_out).await;
    result
}

/// A new session on the backend (the lease's TTL is `--session-timeout`).
async fn connect(args: &ElectArgs) -> Result<(String, Session), Failure> {
    let (backend, handle) = args.backend.connect(args.session_timeout).await?;
    match handle {
        Handle::Etcd(session) => Ok((backend.to_string(), session)),
        _ => Err(Failure::software(format!(
            "{backend}: expected an etcd backend"
        ))),
    }
}

/// Closes by the way out's deadline (`--release-timeout`, shared with the resignation; the
/// lease then ends a TTL later at most).
async fn close(session: &Session, way_out: &WayOut) {
    let limit = way_out.limit();
    match tokio::time::timeout_at(way_out.deadline(), session.close()).await {
        // A lost session has nothing left to close; the loss was reported.
        Ok(Ok(()) | Err(lockkeeper::Error::SessionLost)) => {}
        Ok(Err(err)) => eprintln!("lockkeeper elect: closing the etcd session: {err}"),
        Err(_) => eprintln!(
            "lockkeeper elect: closing the etcd session was not confirmed within {limit:?}; \
             its lease ends a TTL later"
        ),
    }
}

/// A live session: `session` while it lives, else a new one (`None` when an interrupt came
/// first). Retried until it opens when `wait` is [`Wait::Forever`]; else tried once, and a
/// failure returned (a bounded wait must not outlast its bound reconnecting).
async fn live(
    session: Session,
    args: &ElectArgs,
    wait: Wait,
    interrupts: &mut Interrupts,
) -> Result<Option<Session>, Failure> {
    if session.is_alive() {
        return Ok(Some(session));
    }
    // Not the way out: a lost session closed before a new one, with a deadline of its own.
    close(&session, &WayOut::new(args.release_timeout)).await;
    loop {
        let attempt = tokio::select! {
            attempt = connect(args) => attempt,
            () = interrupts.recv() => return Ok(None),
        };
        match attempt {
            Ok((_, session)) => return Ok(Some(session)),
            Err(failure) if !matches!(wait, Wait::Forever) => return Err(failure),
            Err(failure) => eprintln!(
                "lockkeeper elect: a new etcd session after the last was lost: {}",
                failure.message
            ),
        }
        tokio::select! {
            () = tokio::time::sleep(RECONNECT_PAUSE) => {}
            () = interrupts.recv() => return Ok(None),
        }
    }
}

/// Campaigns, runs the command while leader, campaigns again; see the module docs. A lost
/// `session` is replaced in place.
async fn lead(
    session: &mut Session,
    args: &ElectArgs,
    what: &str,
    interrupts: &mut Interrupts,
    way_out: &WayOut,
) -> Result<u8, Failure> {
    let name = args.name.as_str();
    let id = args.id.clone().unwrap_or_else(default_id);
    let wait = args.wait();
    loop {
        *session = match live(session.clone(), args, wait, interrupts).await? {
            Some(session) => session,
            None => return Ok(0),
        };
        let election: Election = session
            .election(name)
            .map_err(|e| Failure::from_lib(what, e))?;
        let campaign = async {
            match wait {
                Wait::Forever => election.campaign(id.as_bytes()).await.map(Some),
                Wait::Try => election.try_campaign(id.as_bytes()).await,
                Wait::Within(d) => election.campaign_timeout(id.as_bytes(), d).await,
            }
        };
        let leadership = tokio::select! {
            leadership = campaign => leadership,
            // The campaign is dropped, which withdraws the candidacy.
            () = interrupts.recv() => return Ok(0),
        };
        let leadership = match leadership {
            Ok(Some(leadership)) => leadership,
            Ok(None) => return Ok(not_leading(what, wait)),
            // The lease was lost while waiting: campaign again in a new session.
            Err(lockkeeper::Error::SessionLost) if matches!(wait, Wait::Forever) => continue,
            Err(err) => return Err(wait_failed(what, wait, err)),
        };
        let term = (name, id.as_str());
        if let Some(code) = serve_term(
            leadership,
            args,
            interrupts,
            way_out,
            term,
            "campaigns again",
        )
        .await?
        {
            return Ok(code);
        }
    }
}

impl Term for Leadership {
    fn fencing_token(&self) -> FencingToken {
        Leadership::fencing_token(self)
    }

    fn node(&self) -> Option<&str> {
        None
    }

    fn lost(&self) -> impl Future<Output = ()> + Send {
        Leadership::lost(self)
    }

    fn valid_until(&self) -> Option<tokio::time::Instant> {
        Leadership::valid_until(self)
    }

    async fn cause(&self, observed: &crate::loss::Observed) -> String {
        let cause = observed.local_cause(
            "etcd lease",
            "etcd did not answer the lease's keep-alives in time (lease not renewed)",
        );
        match cause {
            Some(cause) => format!("leadership lost: {cause}"),
            None => "leadership lost (the etcd lease expired or could not be renewed in time, \
                     or the candidacy key was deleted)"
                .to_owned(),
        }
    }

    async fn resign(self, name: &str) {
        if let Err(err) = Leadership::resign(self).await {
            eprintln!("lockkeeper elect: resigning {name}: {err}");
        }
    }
}

/// Prints one line per new leader; see the module docs.
async fn listen(
    session: &Session,
    args: &ElectArgs,
    what: &str,
    interrupts: &mut Interrupts,
) -> Result<u8, Failure> {
    let election = session
        .election(&args.name)
        .map_err(|e| Failure::from_lib(what, e))?;
    let current = tokio::select! {
        current = election.leader() => current.map_err(|e| Failure::from_lib(what, e))?,
        () = interrupts.recv() => return Ok(0),
    };
    if current.is_none() {
        println!("no leader");
    }
    let mut observer = election.observe();
    loop {
        let leader = tokio::select! {
            leader = observer.next() => leader.map_err(|e| Failure::from_lib(what, e))?,
            () = interrupts.recv() => return Ok(0),
        };
        println!(
            "leader {} token {}",
            String::from_utf8_lossy(&leader.value),
            leader.token
        );
    }
}
