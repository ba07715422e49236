//! The controller processes of one scenario: one replica, or two electing a leader; killed
//! with SIGKILL and started again as a node failure and a Deployment would.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::Controller;

/// Election timing short enough for a failover within a scenario.
const ELECTION: [&str; 4] = [
    "--leader-elect",
    "--lease-duration=2s",
    "--lease-renew-deadline=1500ms",
    "--lease-retry-period=200ms",
];

pub struct Fleet {
    kubeconfig: PathBuf,
    flags: Vec<String>,
    leader_elect: bool,
    replicas: Vec<Option<Controller>>,
    /// Processes started, the first ones included.
    pub starts: u32,
    /// Processes killed with SIGKILL.
    pub kills: u32,
    /// Processes that exited by themselves (e.g. a failed preflight at start) and were started
    /// again, as a Deployment restarts a crashed container.
    pub crashes: u32,
}

impl Fleet {
    /// Starts `replicas` processes (with leader election when more than one) and waits until
    /// one reconciles.
    pub fn start(
        kubeconfig: PathBuf,
        flags: Vec<String>,
        replicas: usize,
        patience: Duration,
    ) -> Fleet {
        let mut fleet = Fleet {
            kubeconfig,
            flags,
            leader_elect: replicas > 1,
            replicas: Vec::new(),
            starts: 0,
            kills: 0,
            crashes: 0,
        };
        for index in 0..replicas.max(1) {
            let controller = fleet.spawn(index);
            fleet.replicas.push(Some(controller));
        }
        fleet.wait_leader(patience);
        fleet
    }

    fn spawn(&mut self, index: usize) -> Controller {
        let mut flags = self.flags.clone();
        if self.leader_elect {
            flags.extend(ELECTION.iter().map(|s| s.to_string()));
            flags.push(format!("--identity=replica-{index}"));
        }
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        self.starts += 1;
        Controller::start_with_kubeconfig(&self.kubeconfig, &flags)
    }

    pub fn replicas(&self) -> usize {
        self.replicas.len()
    }

    /// The replica that reconciles now: the only one, or the one whose `/readyz` says it leads
    /// (and is ready).
    pub fn leader(&self) -> Option<usize> {
        self.replicas.iter().enumerate().find_map(|(index, c)| {
            let controller = c.as_ref()?;
            let (status, body) = controller.get("/readyz").ok()?;
            let leads = !self.leader_elect || body.contains("leader: yes");
            (status == 200 && leads).then_some(index)
        })
    }

    /// Waits until a replica reconciles, restarting any that exited; panics after `patience`.
    pub fn wait_leader(&mut self, patience: Duration) -> usize {
        let deadline = Instant::now() + patience;
        loop {
            self.revive();
            if let Some(index) = self.leader() {
                return index;
            }
            if Instant::now() > deadline {
                panic!(
                    "no replica became ready and leading within {patience:?}\n{}",
                    self.log_tail(30)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGKILLs replica `index` (if running).
    pub fn kill(&mut self, index: usize) {
        if let Some(mut controller) = self.replicas[index].take() {
            controller.kill();
            self.kills += 1;
        }
    }

    /// Starts replica `index` again (if not running).
    pub fn restart(&mut self, index: usize) {
        if self.replicas[index].is_none() {
            let controller = self.spawn(index);
            self.replicas[index] = Some(controller);
        }
    }

    /// Starts again every replica whose process exited by itself.
    pub fn revive(&mut self) {
        for index in 0..self.replicas.len() {
            let exited = self.replicas[index]
                .as_mut()
                .is_some_and(|c| matches!(c.child.try_wait(), Ok(Some(_))));
            if exited {
                self.crashes += 1;
                self.replicas[index] = None;
                self.restart(index);
            }
        }
    }

    /// Starts every replica not running.
    pub fn restore(&mut self) {
        self.revive();
        for index in 0..self.replicas.len() {
            self.restart(index);
        }
    }

    /// The leader's `/metrics`.
    pub fn metrics(&self) -> Option<String> {
        let controller = self.replicas[self.leader()?].as_ref()?;
        controller.get("/metrics").ok().map(|(_, body)| body)
    }

    /// Writes every running replica's log to `dir/replica-<n>.jsonl`; returns `dir`.
    pub fn dump_logs(&self, dir: &std::path::Path) -> std::io::Result<PathBuf> {
        std::fs::create_dir_all(dir)?;
        for (index, controller) in self.replicas.iter().enumerate() {
            let Some(controller) = controller else {
                continue;
            };
            let lines: Vec<String> = controller.logs().iter().map(|l| l.to_string()).collect();
            std::fs::write(dir.join(format!("replica-{index}.jsonl")), lines.join("\n"))?;
        }
        Ok(dir.to_path_buf())
    }

    /// The last `lines` warnings and errors (and stderr) of every running replica, for a
    /// failure's message.
    pub fn log_tail(&self, lines: usize) -> String {
        let mut text = String::new();
        for (index, controller) in self.replicas.iter().enumerate() {
            let Some(controller) = controller else {
                continue;
            };
            // How many of each message too: the last lines alone may all be one kind.
            let mut by_message = std::collections::BTreeMap::<String, usize>::new();
            let notable: Vec<String> = controller
                .logs()
                .into_iter()
                .filter(|l| l["level"] != "INFO" && l["level"] != "DEBUG")
                .map(|l| {
                    let mut fields = l["fields"].clone();
                    let message = fields
                        .as_object_mut()
                        .and_then(|f| f.remove("message"))
                        .unwrap_or_default();
                    *by_message.entry(message.to_string()).or_default() += 1;
                    format!("{} {} {message} {fields}", l["timestamp"], l["level"])
                })
                .collect();
            let skip = notable.len().saturating_sub(lines);
            text.push_str(&format!(
                "--- replica {index}: {} warnings/errors ({by_message:?}), the last {}:\n",
                notable.len(),
                notable.len() - skip
            ));
            for line in &notable[skip..] {
                text.push_str(line);
                text.push('\n');
            }
            let stderr = controller.stderr();
            if !stderr.trim().is_empty() {
                text.push_str(&format!("stderr: {}\n", stderr.trim()));
            }
        }
        text
    }
}
