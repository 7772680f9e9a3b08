//! What the kernel says about a process on this machine: its resident memory and the CPU time
//! it has used, read from `/proc`. The benchmark reports both for the server it loads (when it
//! knows the server's PID), so these are the only two readings; anything unreadable is an error
//! naming the PID, never a made-up zero.

use std::fs;
use std::io;
use std::time::Duration;

/// Resident set size (`VmRSS` in `/proc/PID/status`) of any process, in KiB.
pub fn rss_kib(pid: u32) -> io::Result<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))?;
    parse_vm_rss(&status).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("no VmRSS line in /proc/{pid}/status"),
        )
    })
}

/// CPU time (user + system) a process has used so far, from `/proc/PID/stat`.
pub fn cpu_time(pid: u32) -> io::Result<Duration> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let ticks = parse_cpu_ticks(&stat).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("unexpected /proc/{pid}/stat"),
        )
    })?;
    // SAFETY: sysconf only reads a system constant.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let per_second = u64::try_from(per_second)
        .ok()
        .filter(|&t| t > 0)
        .unwrap_or(100);
    Ok(Duration::from_micros(
        ticks.saturating_mul(1_000_000) / per_second,
    ))
}

/// utime + stime in clock ticks. The command name (field 2) is in parentheses and may contain
/// spaces, so fields are counted from the last `)`: utime and stime are fields 14 and 15.
fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let mut fields = line["VmRSS:".len()..].split_whitespace();
    let value = fields.next()?.parse().ok()?;
    match fields.next() {
        Some("kB") | None => Some(value),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn vm_rss_is_read_in_kib() {
        let status = "Name:\tjava\nVmPeak:\t  999 kB\nVmRSS:\t   62240 kB\nRssAnon:\t 1 kB\n";
        assert_eq!(parse_vm_rss(status), Some(62240));
    }

    #[test]
    fn vm_rss_missing_or_odd_unit_is_none() {
        assert_eq!(parse_vm_rss("Name:\tzombie\n"), None);
        assert_eq!(parse_vm_rss("VmRSS:\t 12 MB\n"), None);
    }

    #[test]
    fn cpu_ticks_are_read_past_a_command_name_with_spaces() {
        let stat = "4242 (java main) S 1 4242 4242 0 -1 4194560 100 0 0 0 1234 56 0 0 20 0 30 0";
        assert_eq!(parse_cpu_ticks(stat), Some(1234 + 56));
        assert_eq!(parse_cpu_ticks("4242 (x) S 1 2"), None);
    }

    #[test]
    fn own_cpu_time_grows_with_work() {
        let before = cpu_time(std::process::id()).expect("cpu time");
        let start = Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_millis(200) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let after = cpu_time(std::process::id()).expect("cpu time");
        assert!(after > before, "{before:?} -> {after:?}");
    }

    #[test]
    fn own_rss_is_positive() {
        let kib = rss_kib(std::process::id()).expect("read own /proc status");
        assert!(kib > 0);
    }
}
