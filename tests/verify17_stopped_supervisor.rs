//! Issue 17, verifier's reproduction: `lease-elect` relies on its
//! supervisor alone to SIGKILL COMMAND. When the supervisor cannot act
//! (here COMMAND stops it with SIGSTOP; a wedged supervisor is the same),
//! `lease-elect` waits forever ("has not ended since SIGKILL") while
//! COMMAND and what it started keep running: past a lost term, and past
//! `lease-elect`'s own death. Expected: after SIGKILL was ordered and the
//! supervisor has not ended within a short time, `lease-elect` (a child
//! subreaper itself) SIGKILLs the supervisor and everything below it.

#![cfg(feature = "cli")]

use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use lease_elector::testing::TestApiServer;
use serde_json::json;

mod common;
use common::eventually;
use common::procs::{alive, stat_field};
use common::tempdir::TempDir;

const BIN: &str = env!("CARGO_BIN_EXE_lease-elect");

/// Records its own pid and its supervisor's, starts a grandchild in a
/// session of its own, stops the supervisor, ignores SIGTERM and waits.
const COMMAND: &str = r#"
dir=$1
/usr/bin/setsid /bin/sleep 300 &
echo $! > "$dir/grandchild"
echo $PPID > "$dir/supervisor"
echo $$ > "$dir/command"
kill -STOP $PPID
trap '' TERM
wait
"#;

struct Cleanup(Vec<u32>, Child);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = self.1.kill();
        let _ = self.1.wait();
        for pid in &self.0 {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    }
}

fn pid(dir: &TempDir, file: &str) -> u32 {
    dir.read(file).trim().parse().unwrap()
}

#[test]
fn a_stopped_supervisor_does_not_keep_command_alive_past_a_lost_term() {
    let server = TestApiServer::start().unwrap();
    let dir = TempDir::new();
    let script = dir.script("command.sh", COMMAND).display().to_string();
    let child = Command::new(BIN)
        .args([
            "--server",
            &server.url(),
            "--namespace",
            "ns",
            "--name",
            "lock",
        ])
        .args(["--identity", "me", "--no-events", "--grace", "1"])
        .args([
            "--lease-duration",
            "4",
            "--renew-deadline",
            "3",
            "--retry-period",
            "1",
        ])
        .args(["--", "/bin/sh", &script, &dir.0.display().to_string()])
        .env("PATH", "")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut cleanup = Cleanup(Vec::new(), child);
    eventually("COMMAND ran", || !dir.read("command").is_empty());
    let (command, grandchild, supervisor) = (
        pid(&dir, "command"),
        pid(&dir, "grandchild"),
        pid(&dir, "supervisor"),
    );
    cleanup.0 = vec![supervisor, command, grandchild];
    eventually("the supervisor is stopped", || {
        common::procs::state(supervisor) == Some('T')
    });
    assert_eq!(stat_field(supervisor, 1), Some(cleanup.1.id()));

    // Another candidate takes the lease: this term is over.
    let mut lease = server.lease("ns", "lock").unwrap();
    lease["spec"]["holderIdentity"] = json!("other");
    server.put_lease("ns", lease);
    let lost = Instant::now();

    // Whatever the supervisor does, nothing COMMAND started may run once
    // the lease could expire for the other candidate (4 s), let alone 8 s.
    while lost.elapsed() < Duration::from_secs(8) {
        if !alive(command) && !alive(grandchild) {
            return;
        }
        thread::sleep(Duration::from_millis(50));
    }
    panic!(
        "8 s after the term was lost COMMAND (alive: {}) and its grandchild (alive: {}) still run: \
         lease-elect never kills them itself when its supervisor cannot",
        alive(command),
        alive(grandchild)
    );
}
