//! Hosts of their own: network namespaces joined by a bridge, for faults that cut packets
//! silently instead of closing connections.
//!
//! Layout: a bridge `lk<id>-br` in this (the orchestrator's) namespace with address
//! `10.<a>.<b>.1/24`; host `i` is a namespace `lk<id>-h<i>` whose `eth0` (one end of a veth
//! pair, the other end on the bridge) has `10.<a>.<b>.<i + 2>/24`. Every host reaches every
//! other and the orchestrator (the resource server listens on the bridge's address); nothing
//! is routed anywhere else.
//!
//! Faults are nftables rules in a host's own namespace: a *partition* drops every packet the
//! host sends to a peer and every packet it receives from it, so connections stay open and
//! nobody is told (as a switch that died would leave them); a *one-way* cut drops only what
//! the host receives from the peer; a *lossy* host drops a share of what it receives, at
//! random. Healing deletes the host's table. A *slow* host hands what it receives to a
//! delaying process through an iptables `NFQUEUE` rule ([`crate::delay`]).
//!
//! Invariants: names carry this process's id and the net's number in it, so runs and
//! backends do not collide; everything created is
//! deleted on drop (namespaces take their veth ends with them); only `ip`, `nft` and
//! `iptables` are run,
//! and every failure names the command and its output. Needs CAP_NET_ADMIN:
//! [`Net::create`] fails (and the suite skips the rows) without it.

use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// The nftables table a fault adds in a host's namespace.
const TABLE: &str = "lockkeeper_faults";

/// A bridge and its hosts.
pub(crate) struct Net {
    id: String,
    bridge: String,
    subnet: [u8; 3],
    hosts: usize,
}

/// Runs `ip`/`nft` with `args`; the error names the command and what it printed.
fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let output = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program} {}: {e}", args.join(" ")))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim(),
            String::from_utf8_lossy(&output.stdout).trim()
        ))
    }
}

impl Net {
    /// Creates the bridge and `hosts` namespaces (at most 250).
    pub(crate) fn create(hosts: usize) -> Result<Net, String> {
        assert!(hosts <= 250, "at most 250 hosts on one /24");
        // Names and a /24 from the process id and a count of this process's nets: a net
        // just dropped may linger a moment (a namespace goes once its last process has
        // exited), and the next backend's must not collide with it.
        static CREATED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let seq = CREATED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let pid = std::process::id();
        let id = format!("{}n{}", pid % 100_000, seq % 100);
        let subnet = [10, 77 + ((pid / 250 + seq) % 100) as u8, (pid % 250) as u8];
        let net = Net {
            bridge: format!("lk{id}-br"),
            id,
            subnet,
            hosts: 0,
        };
        let mut net = net;
        run("ip", &["link", "add", &net.bridge, "type", "bridge"])?;
        let cidr = format!("{}/24", net.bridge_addr());
        run("ip", &["addr", "add", &cidr, "dev", &net.bridge])?;
        run("ip", &["link", "set", &net.bridge, "up"])?;
        for host in 0..hosts {
            // Counted first, so a host that failed halfway is deleted too.
            net.hosts = host + 1;
            net.add_host(host)?;
        }
        Ok(net)
    }

    fn add_host(&self, host: usize) -> Result<(), String> {
        let ns = self.namespace(host);
        let outside = format!("lk{}-v{host}", self.id);
        run("ip", &["netns", "add", &ns])?;
        run(
            "ip",
            &[
                "link", "add", &outside, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ],
        )?;
        run("ip", &["link", "set", &outside, "master", &self.bridge])?;
        run("ip", &["link", "set", &outside, "up"])?;
        let cidr = format!("{}/24", self.addr(host));
        for args in [
            vec!["addr", "add", &cidr, "dev", "eth0"],
            vec!["link", "set", "eth0", "up"],
            vec!["link", "set", "lo", "up"],
        ] {
            let mut full = vec!["netns", "exec", &ns, "ip"];
            full.extend(args);
            run("ip", &full)?;
        }
        Ok(())
    }

    /// How many hosts it has.
    pub(crate) fn hosts(&self) -> usize {
        self.hosts
    }

    /// The namespace of `host`.
    pub(crate) fn namespace(&self, host: usize) -> String {
        format!("lk{}-h{host}", self.id)
    }

    /// The orchestrator's address on the bridge.
    pub(crate) fn bridge_addr(&self) -> Ipv4Addr {
        Ipv4Addr::new(self.subnet[0], self.subnet[1], self.subnet[2], 1)
    }

    /// `host` as testkit places a server on it.
    pub(crate) fn host(&self, host: usize) -> lockkeeper_testkit::Host {
        lockkeeper_testkit::Host {
            netns: self.namespace(host),
            ip: self.addr(host),
        }
    }

    /// The address of `host`.
    pub(crate) fn addr(&self, host: usize) -> Ipv4Addr {
        Ipv4Addr::new(
            self.subnet[0],
            self.subnet[1],
            self.subnet[2],
            host as u8 + 2,
        )
    }

    /// Makes `command` start inside `host`'s namespace (the process keeps its own PID, so it
    /// is signalled as any other child).
    pub(crate) fn enter(&self, host: usize, command: &mut Command) -> Result<(), String> {
        let path = format!("/var/run/netns/{}", self.namespace(host));
        let file = std::fs::File::open(&path).map_err(|e| format!("{path}: {e}"))?;
        // SAFETY: setns(2) only, between fork and exec; `file` lives in the closure, so the
        // descriptor is open in the child when it runs.
        unsafe {
            command.pre_exec(move || {
                if libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
        Ok(())
    }

    /// Cuts `host` from `peer` silently: in `host`'s namespace, every packet to `peer` and,
    /// unless `one_way`, every packet from it is dropped. One-way keeps what the host sends
    /// and drops only what it receives (it is heard, but hears nothing back).
    pub(crate) fn cut(&self, host: usize, peer: Ipv4Addr, one_way: bool) -> Result<(), String> {
        let peer = peer.to_string();
        self.drop_rule(host, "in", &["ip", "saddr", &peer, "drop"])?;
        if !one_way {
            self.drop_rule(host, "out", &["ip", "daddr", &peer, "drop"])?;
        }
        Ok(())
    }

    /// Makes `host` drop `percent` % of the packets it receives from the other hosts, at
    /// random (nftables' `numgen random`): a lossy network, which TCP turns into
    /// retransmissions and stalls of hundreds of milliseconds.
    pub(crate) fn lossy(&self, host: usize, percent: u32) -> Result<(), String> {
        let (subnet, below) = (self.subnet(), percent.to_string());
        self.drop_rule(
            host,
            "in",
            &[
                "ip", "saddr", &subnet, "numgen", "random", "mod", "100", "<", &below, "drop",
            ],
        )
    }

    /// Adds `rule` to `host`'s table, in its chain `in` (the input hook) or `out` (output),
    /// creating both as needed ([`heal`](Net::heal) deletes the table).
    fn drop_rule(&self, host: usize, chain: &str, rule: &[&str]) -> Result<(), String> {
        let ns = self.namespace(host);
        let nft = |args: &[&str]| {
            let mut full = vec!["netns", "exec", &ns, "nft"];
            full.extend(args);
            run("ip", &full)
        };
        let hook = match chain {
            "in" => "{ type filter hook input priority 0; }",
            _ => "{ type filter hook output priority 0; }",
        };
        nft(&["add", "table", "inet", TABLE])?;
        nft(&["add", "chain", "inet", TABLE, chain, hook])?;
        let mut add = vec!["add", "rule", "inet", TABLE, chain];
        add.extend(rule);
        nft(&add)
    }

    /// The hosts' /24, `10.A.B.0/24`.
    fn subnet(&self) -> String {
        format!(
            "{}.{}.{}.0/24",
            self.subnet[0], self.subnet[1], self.subnet[2]
        )
    }

    /// Slows `host` down: every packet it receives from the other hosts is handed to the
    /// `delay` subcommand of `exe` (started in `host`'s namespace, returned to be killed),
    /// which holds it `latency` plus up to `jitter`. An iptables `NFQUEUE` rule, because this
    /// kernel has no `netem`; `--queue-bypass` lets packets through once the delayer is gone.
    pub(crate) fn slow(
        &self,
        host: usize,
        exe: &std::path::Path,
        latency: std::time::Duration,
        jitter: std::time::Duration,
    ) -> Result<std::process::Child, String> {
        let ns = self.namespace(host);
        let mut delayer = Command::new(exe);
        delayer
            .arg("delay")
            .arg("--latency-ms")
            .arg(latency.as_millis().to_string())
            .arg("--jitter-ms")
            .arg(jitter.as_millis().to_string())
            .stdin(std::process::Stdio::null());
        self.enter(host, &mut delayer)?;
        lockkeeper_testkit::die_with_parent(&mut delayer);
        let child = delayer
            .spawn()
            .map_err(|e| format!("{} delay: {e}", exe.display()))?;
        let subnet = self.subnet();
        run(
            "ip",
            &[
                "netns",
                "exec",
                &ns,
                "iptables",
                "-A",
                "INPUT",
                "-s",
                &subnet,
                "-j",
                "NFQUEUE",
                "--queue-num",
                "0",
                "--queue-bypass",
            ],
        )?;
        Ok(child)
    }

    /// Ends [`slow`](Net::slow) on `host`: the rule goes (the caller kills the delayer).
    pub(crate) fn unslow(&self, host: usize) -> Result<(), String> {
        let ns = self.namespace(host);
        run("ip", &["netns", "exec", &ns, "iptables", "-F", "INPUT"])
    }

    /// Ends every cut of `host`.
    pub(crate) fn heal(&self, host: usize) -> Result<(), String> {
        let ns = self.namespace(host);
        run(
            "ip",
            &[
                "netns", "exec", &ns, "nft", "delete", "table", "inet", TABLE,
            ],
        )
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for host in 0..self.hosts {
            let _ = run("ip", &["netns", "del", &self.namespace(host)]);
        }
        let _ = run("ip", &["link", "del", &self.bridge]);
    }
}
