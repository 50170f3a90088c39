//! Standard input as the three programs a user starts by hand read it:
//! `lease-elect` (without COMMAND), the `elect` example and the
//! `test_server` example stop when a parent closes a pipe (or socket) on
//! their stdin, and never read a terminal or `/dev/null`: started with
//! stdin `/dev/null` (every pod, every script) or as a background job of an
//! interactive shell (`&`), each keeps running until signalled.
//!
//! The interactive shell is `bash -i` on a pseudo-terminal made by
//! `script(1)`; the tests that need it skip, saying so, where it is
//! missing.

#![cfg(feature = "cli")]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use lease_elector::testing::TestApiServer;

mod common;

use common::procs::state;
use common::tempdir::TempDir;
use common::RawLeases;
use common::{example, WAIT};

/// How long a program must keep running on its own.
const KEEPS_RUNNING: Duration = Duration::from_secs(3);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Program {
    LeaseElect,
    Elect,
    TestServer,
}

const PROGRAMS: [Program; 3] = [Program::LeaseElect, Program::Elect, Program::TestServer];

impl Program {
    /// The program and its arguments; electors compete for `lease` on
    /// `server`, the test server writes its kubeconfig into `dir`.
    fn argv(self, server: &TestApiServer, lease: &str, dir: &TempDir) -> Vec<String> {
        let elector = |bin: String| {
            let mut v = vec![bin];
            v.extend(
                [
                    "--server",
                    &server.url(),
                    "--namespace",
                    "stdin",
                    "--name",
                    lease,
                    "--identity",
                    "me",
                    "--lease-duration",
                    "2",
                    "--renew-deadline",
                    "1.5",
                    "--retry-period",
                    "0.3",
                ]
                .map(String::from),
            );
            v
        };
        match self {
            Program::LeaseElect => elector(env!("CARGO_BIN_EXE_lease-elect").into()),
            Program::Elect => elector(example("elect").display().to_string()),
            Program::TestServer => vec![
                example("test_server").display().to_string(),
                "--kubeconfig".into(),
                dir.0.join("kubeconfig").display().to_string(),
            ],
        }
    }

    /// Its first stdout line when it is up.
    fn up(self, line: &str) -> bool {
        match self {
            Program::LeaseElect | Program::Elect => line == "LEADING me",
            Program::TestServer => line.starts_with("serving "),
        }
    }
}

/// A sign that `program` works now: an elector renewed `lease` within
/// the last second; the test server (whose `serving URL` line is `up`)
/// answered a request.
fn works(program: Program, server: &TestApiServer, lease: &str, up: &str) -> bool {
    match program {
        Program::LeaseElect | Program::Elect => {
            let renew = server.lease_value("stdin", lease).and_then(|l| {
                l["spec"]["renewTime"]
                    .as_str()
                    .and_then(|t| t.parse::<lease_elector::MicroTime>().ok())
            });
            renew.is_some_and(|t| {
                std::time::SystemTime::now()
                    .duration_since(t.to_system_time())
                    .is_ok_and(|age| age < Duration::from_secs(1))
            })
        }
        Program::TestServer => {
            let url = up.trim_start_matches("serving ").trim();
            let addr = url.trim_start_matches("http://");
            let Ok(mut s) = std::net::TcpStream::connect(addr) else {
                return false;
            };
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let _ = write!(
                s,
                "GET /apis/coordination.k8s.io/v1/leases HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            );
            let mut answer = String::new();
            let _ = std::io::Read::read_to_string(&mut s, &mut answer);
            answer.starts_with("HTTP/1.1 200")
        }
    }
}

/// `pid` keeps running (never stopped, never gone) for [`KEEPS_RUNNING`],
/// then shows it works.
fn assert_keeps_running(
    program: Program,
    how: &str,
    pid: u32,
    server: &TestApiServer,
    lease: &str,
    up: &str,
) {
    let until = Instant::now() + KEEPS_RUNNING;
    while Instant::now() < until {
        let st = state(pid);
        assert!(
            matches!(st, Some('R' | 'S' | 'D')),
            "{program:?} {how}: state {st:?} (T: stopped, Z or None: exited)"
        );
        thread::sleep(Duration::from_millis(50));
    }
    let deadline = Instant::now() + WAIT;
    while !works(program, server, lease, up) {
        assert!(
            Instant::now() < deadline,
            "{program:?} {how}: runs but does not work"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

fn kill(sig: &str, pid: u32) {
    let _ = Command::new("kill").args([sig, &pid.to_string()]).status();
}

/// Start `argv` with `stdin`; its first stdout line (within [`WAIT`]).
fn start(argv: &[String], stdin: Stdio) -> (Child, String) {
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .env_remove("LEASE_ELECT_LOG")
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.starts_with("LEADING") || line.starts_with("serving ") => {
                // Keep reading, so that the program never blocks on stdout.
                thread::spawn(move || rx.into_iter().for_each(drop));
                return (child, line);
            }
            Ok(_) => {}
            Err(e) => {
                let status = child.try_wait().unwrap();
                let _ = child.kill();
                panic!("{} never came up ({e}); exit: {status:?}", argv[0]);
            }
        }
    }
}

/// Wait for `child` to exit (within [`WAIT`]); its exit code.
fn exit_code(child: &mut Child) -> Option<i32> {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("did not exit");
        }
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn with_stdin_dev_null_each_program_keeps_running_until_signalled() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace("stdin");
    let dir = TempDir::new();
    for program in PROGRAMS {
        let lease = format!("null-{program:?}").to_lowercase();
        let argv = program.argv(&server, &lease, &dir);
        let (mut child, up) = start(&argv, Stdio::null());
        assert!(program.up(&up), "{up}");
        assert_keeps_running(program, "with /dev/null", child.id(), &server, &lease, &up);
        kill("-TERM", child.id());
        assert_eq!(
            exit_code(&mut child),
            Some(0),
            "{program:?}: SIGTERM stops it"
        );
    }
}

#[test]
fn with_a_pipe_on_stdin_each_program_stops_when_it_closes() {
    let server = TestApiServer::start().unwrap();
    server.add_namespace("stdin");
    let dir = TempDir::new();
    for program in PROGRAMS {
        let lease = format!("pipe-{program:?}").to_lowercase();
        let argv = program.argv(&server, &lease, &dir);
        let (mut child, _) = start(&argv, Stdio::piped());
        let stdin: ChildStdin = child.stdin.take().unwrap();
        drop(stdin);
        assert_eq!(exit_code(&mut child), Some(0), "{program:?}: stdin closed");
    }
}

/// `bash -i` on a pseudo-terminal (`script -qfec`), fed from a pipe.
struct Shell {
    child: Child,
    input: ChildStdin,
}

impl Shell {
    fn start(dir: &TempDir) -> Option<Shell> {
        let mut child = Command::new("script")
            .args(["-qfec", "bash --norc --noprofile -i", "/dev/null"])
            .current_dir(&dir.0)
            .env_remove("LEASE_ELECT_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let input = child.stdin.take()?;
        Some(Shell { child, input })
    }

    fn run(&mut self, line: &str) {
        writeln!(self.input, "{line}").unwrap();
        self.input.flush().unwrap();
    }
}

impl Drop for Shell {
    fn drop(&mut self) {
        let _ = writeln!(self.input, "kill -KILL %1 2>/dev/null; exit");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn quote(words: &[String]) -> String {
    words
        .iter()
        .map(|w| format!("'{}'", w.replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn as_a_background_job_of_an_interactive_shell_each_program_keeps_running() {
    let have = |tool: &str| {
        Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !have("script") || !have("bash") {
        eprintln!("SKIPPED: script(1) or bash missing: no interactive shell on a pseudo-terminal");
        return;
    }
    let server = TestApiServer::start().unwrap();
    server.add_namespace("stdin");
    for program in PROGRAMS {
        let dir = TempDir::new();
        let lease = format!("tty-{program:?}").to_lowercase();
        let argv = program.argv(&server, &lease, &dir);
        let mut shell = Shell::start(&dir).expect("script starts");
        shell.run(&format!("{} > out 2> err & echo $! > pid", quote(&argv)));
        let deadline = Instant::now() + WAIT;
        let (pid, up) = loop {
            let pid = dir.read("pid").trim().parse::<u32>().ok();
            let up = dir
                .read("out")
                .lines()
                .find(|l| program.up(l))
                .map(str::to_string);
            if let (Some(pid), Some(up)) = (pid, up) {
                break (pid, up);
            }
            if let Some(pid) = pid {
                assert_ne!(
                    state(pid),
                    Some('T'),
                    "{program:?} was stopped before it came up (reading the terminal?)"
                );
            }
            assert!(
                Instant::now() < deadline,
                "{program:?} never came up: {}",
                dir.read("err")
            );
            thread::sleep(Duration::from_millis(20));
        };
        assert_keeps_running(program, "in the background", pid, &server, &lease, &up);
        kill("-TERM", pid);
        let deadline = Instant::now() + WAIT;
        while matches!(state(pid), Some(s) if s != 'Z') {
            assert!(
                Instant::now() < deadline,
                "{program:?}: SIGTERM did not stop it"
            );
            thread::sleep(Duration::from_millis(10));
        }
    }
}
