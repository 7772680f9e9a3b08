//! The resource server: what the lock clients protect, run inside the orchestrator on a
//! loopback port, with an unfenced side and five fenced copies ([`Fences`]).
//!
//! Clients speak one line per request and get one line back:
//! `enter CLIENT TOKEN NODE HELD` (the holder starts its turn), `write CLIENT TOKEN NODE HELD`,
//! `exit CLIENT`. `TOKEN` is the fencing token, or `-` for a lock that has none; `NODE` the
//! holder's ZooKeeper lock node, or `-`; `HELD` is `held` or `lost`: what the client's
//! `is_held()` said just before it sent the line (a zombie writes either way; a careful client
//! would not have sent a `lost` line). Replies are `ok`, `refused` (a fence turned the write
//! away) or `error WHY`.
//!
//! Invariants:
//! - **Requests are handled one at a time**, in arrival order, so the fences see the writes in
//!   the order the table counts them.
//! - **Unfenced side**: a client is inside from its `enter` until its `exit` or until its
//!   connection closes (a killed holder's turn ends with its process). An `enter` while as
//!   many clients as the lock admits (its *capacity*: 1, or N for a semaphore of N leases)
//!   are inside overlaps their turns: more holders at once than the lock allows, which it
//!   exists to prevent. Each turn counts at most once however many enter during it.
//! - **Stale writes**: a write (or an `enter`) from a client someone entered after (a lock of
//!   one holder), or whose turn was overlapped (a lock of several): the lock passed on past
//!   it. (`is_recent` tells the orchestrator when as many as the lock admits entered after a
//!   client.) Each is *attempted*; it is *refused* if any fence
//!   refused it, and *accepted* by each fence that took it. With tokens that only grow every
//!   fence refuses every one (the ZooKeeper fence also refuses a holder whose node is gone), so
//!   a fence's accepted count is nonzero only if a backend handed out a token that did not grow.
//!   Attempts sent while `is_held()` still said `held` are counted apart: what a careful client
//!   would also have sent.
//! - Malformed lines get `error` naming the line; nothing a client sends panics the server.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockkeeper::FencingToken;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

use crate::admission::Admission;
use crate::check::exclusion::{self, Event};
use crate::fences::{Fences, NAMES, Verdict};

/// Stale writes, counted by what happened to them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Stale {
    /// Writes and entries from a client someone had entered after.
    pub attempted: u64,
    /// Of those, the ones sent while the client's `is_held()` still said `held`: what a
    /// careful client, checking right before each write, would have sent too.
    pub attempted_careful: u64,
    /// Refused by at least one fence.
    pub refused: u64,
    /// Accepted, per fence in [`NAMES`] order.
    pub accepted: [u64; 5],
}

/// What the resource saw during one run.
#[derive(Clone, Debug, Default)]
pub(crate) struct Counts {
    /// Turns begun (`enter` lines).
    pub turns: u64,
    /// Writes received, fenced or not.
    pub writes: u64,
    /// Turns some other client entered during (unfenced): each turn counts once.
    pub overlaps: u64,
    /// Stale writes and entries.
    pub stale: Stale,
    /// Writes each fence could not judge (its store did not answer in time or failed), per
    /// fence in [`NAMES`] order.
    pub unavailable: [u64; 5],
    /// Whether any client presented a token (a lock without tokens leaves the fences unused).
    pub fenced: bool,
    /// The longest time between two consecutive `enter`s (or from the last one to when the
    /// counts were read): the lock's longest unavailability, plus at most one ordinary turn.
    pub max_gap: Duration,
}

struct State {
    /// Who is inside, for the unfenced side and the stale writes.
    admission: Admission,
    last_enter: Option<Instant>,
    counts: Counts,
    fences: Fences,
    /// The history for the exclusion checker: accepted entries, exits, accepted writes.
    events: Vec<Event>,
}

/// The resource server; stops accepting when dropped.
pub(crate) struct Resource {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    accept: JoinHandle<()>,
}

impl Resource {
    /// Binds `ip` (loopback, or the namespaces' bridge) on a free port and serves clients of a
    /// lock that admits `capacity` at once, writing through `fences`, until dropped.
    pub(crate) async fn start(
        fences: Fences,
        ip: std::net::Ipv4Addr,
        capacity: usize,
    ) -> std::io::Result<Resource> {
        let listener = TcpListener::bind((ip, 0)).await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State {
            admission: Admission::new(capacity),
            last_enter: None,
            counts: Counts::default(),
            fences,
            events: Vec::new(),
        }));
        let accept = tokio::spawn({
            let state = state.clone();
            async move {
                while let Ok((stream, _)) = listener.accept().await {
                    tokio::spawn(serve(stream, state.clone()));
                }
            }
        });
        Ok(Resource {
            addr,
            state,
            accept,
        })
    }

    /// Where clients connect.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The client holding the resource now: the latest to enter, if it is still inside.
    pub(crate) async fn holder(&self) -> Option<String> {
        self.state
            .lock()
            .await
            .admission
            .holder()
            .map(str::to_owned)
    }

    /// Whether `client` is among the last clients to enter, as many as the lock admits: the
    /// lock has not passed on past it.
    pub(crate) async fn is_recent(&self, client: &str) -> bool {
        self.state.lock().await.admission.is_recent(client)
    }

    /// The counts so far; the gap since the last `enter` counts as unavailability too.
    pub(crate) async fn counts(&self) -> Counts {
        let state = self.state.lock().await;
        let mut counts = state.counts.clone();
        if let Some(last) = state.last_enter {
            counts.max_gap = counts.max_gap.max(last.elapsed());
        }
        counts
    }

    /// Each fence's history checked against its store: one line per problem.
    pub(crate) async fn check_fences(&self) -> Vec<String> {
        self.state.lock().await.fences.check().await
    }

    /// The resource's history through the exclusion checker, for a lock of `holders` at once
    /// whose turns are terms (`terms_rise`: a leader's). More than `holders` inside is the
    /// overlaps count's business, so only the token problems are returned: an accepted write
    /// below an earlier one, or a term whose token is not above the last.
    pub(crate) async fn check_history(&self, holders: usize, terms_rise: bool) -> Vec<String> {
        let state = self.state.lock().await;
        exclusion::check(&state.events, holders, terms_rise)
            .into_iter()
            .filter(|problem| !matches!(problem, exclusion::Problem::TooMany { .. }))
            .map(|problem| format!("{problem:?}"))
            .collect()
    }
}

impl Drop for Resource {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// One client connection: requests in order; on close, the clients it spoke for leave.
async fn serve(stream: TcpStream, state: Arc<Mutex<State>>) {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    let mut spoke_for = HashSet::new();
    while let Ok(Some(line)) = lines.next_line().await {
        let reply = match Request::parse(&line) {
            Ok(request) => {
                spoke_for.insert(request.client.to_owned());
                handle(&mut *state.lock().await, request).await
            }
            Err(err) => format!("error {err}"),
        };
        if write
            .write_all(format!("{reply}\n").as_bytes())
            .await
            .is_err()
        {
            break;
        }
    }
    let mut state = state.lock().await;
    for client in spoke_for {
        state.admission.exit(&client);
        state.events.push(Event::Exit { client });
    }
}

/// One parsed request line.
#[derive(Debug, PartialEq, Eq)]
struct Request<'a> {
    verb: Verb,
    client: &'a str,
    token: Option<FencingToken>,
    node: Option<&'a str>,
    held: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verb {
    Enter,
    Write,
    Exit,
}

impl<'a> Request<'a> {
    fn parse(line: &'a str) -> Result<Request<'a>, String> {
        let words: Vec<&str> = line.split_whitespace().collect();
        let (verb, client, token, node, held) = match words.as_slice() {
            [verb @ ("enter" | "write"), client, token, node, held] => {
                let verb = if *verb == "enter" {
                    Verb::Enter
                } else {
                    Verb::Write
                };
                (verb, *client, *token, *node, *held)
            }
            ["exit", client] => {
                return Ok(Request {
                    verb: Verb::Exit,
                    client,
                    token: None,
                    node: None,
                    held: true,
                });
            }
            _ => return Err(format!("malformed request {line:?}")),
        };
        let token = match token {
            "-" => None,
            raw => match raw.parse::<u64>() {
                Ok(value) => Some(FencingToken::new(value)),
                Err(_) => return Err(format!("token {raw:?} in {line:?} is not a number")),
            },
        };
        let node = (node != "-").then_some(node);
        let held = match held {
            "held" => true,
            "lost" => false,
            other => return Err(format!("{other:?} in {line:?} is neither held nor lost")),
        };
        Ok(Request {
            verb,
            client,
            token,
            node,
            held,
        })
    }
}

async fn handle(state: &mut State, request: Request<'_>) -> String {
    let client = request.client;
    match request.verb {
        Verb::Enter => {
            let now = Instant::now();
            if let Some(last) = state.last_enter {
                state.counts.max_gap = state.counts.max_gap.max(now - last);
            }
            state.last_enter = Some(now);
            state.counts.turns += 1;
            state.counts.overlaps += state
                .admission
                .enter(client, request.token.map(lockkeeper::FencingToken::get));
            let reply = fenced(state, &request).await;
            if reply == "ok" {
                state.events.push(Event::Enter {
                    client: client.to_owned(),
                    token: request.token.map(lockkeeper::FencingToken::get),
                });
            }
            reply
        }
        Verb::Write => {
            state.counts.writes += 1;
            let reply = fenced(state, &request).await;
            match (reply.as_str(), request.token) {
                // Only fenced writes are accepted by token: several holders' are not.
                ("ok", Some(token)) if state.admission.capacity() == 1 => {
                    state.events.push(Event::Accepted {
                        client: client.to_owned(),
                        token: token.get(),
                    });
                }
                // A refused holder is out: its writes no longer reach the resource.
                ("refused", _) => state.events.push(Event::Exit {
                    client: client.to_owned(),
                }),
                _ => {}
            }
            reply
        }
        Verb::Exit => {
            state.admission.exit(client);
            state.events.push(Event::Exit {
                client: client.to_owned(),
            });
            "ok".into()
        }
    }
}

/// Presents the request's token to every fence, counting a stale attempt and what each fence
/// did with it.
async fn fenced(state: &mut State, request: &Request<'_>) -> String {
    let stale = state.admission.is_stale(request.client);
    if stale {
        state.counts.stale.attempted += 1;
        if request.held {
            state.counts.stale.attempted_careful += 1;
        }
    }
    let Some(token) = request.token.filter(|_| state.admission.capacity() == 1) else {
        // No token, no fence: the write happens. Several holders at once hold several tokens,
        // which no single fence can tell from a stale one: the write happens too.
        return "ok".into();
    };
    state.counts.fenced = true;
    let verdicts = state
        .fences
        .write(request.client, token, request.node)
        .await;
    for (i, verdict) in verdicts.iter().enumerate() {
        match verdict {
            Verdict::Accepted if stale => state.counts.stale.accepted[i] += 1,
            Verdict::Unavailable(why) => {
                state.counts.unavailable[i] += 1;
                eprintln!("fence {}: {why}", NAMES[i]);
            }
            _ => {}
        }
    }
    if verdicts.iter().all(|v| *v == Verdict::Accepted) {
        "ok".into()
    } else {
        if stale {
            state.counts.stale.refused += 1;
        }
        "refused".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_and_bad_ones_are_named() {
        assert_eq!(
            Request::parse("write c1.0 17 /l/_c_x-lock-0000000001 held"),
            Ok(Request {
                verb: Verb::Write,
                client: "c1.0",
                token: Some(FencingToken::new(17)),
                node: Some("/l/_c_x-lock-0000000001"),
                held: true,
            })
        );
        assert_eq!(
            Request::parse("enter c2.1 - - lost").map(|r| (r.token, r.node, r.held)),
            Ok((None, None, false))
        );
        assert_eq!(Request::parse("exit c0.0").map(|r| r.verb), Ok(Verb::Exit));
        let bad = Request::parse("write c1.0 x - held").unwrap_err();
        assert!(bad.contains("\"x\" in"), "{bad}");
        let bad = Request::parse("write c1.0 1 - maybe").unwrap_err();
        assert!(bad.contains("neither held nor lost"), "{bad}");
        assert!(
            Request::parse("enter c1.0 1")
                .unwrap_err()
                .contains("malformed")
        );
    }
}
