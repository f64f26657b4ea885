//! The engines a job runs on: `wasm` and `data` (WASI under `fleetmesh-wasi`),
//! `groth16-prove` and `groth16-verify` (the node's proving queue and verify gatherer), `llm` (the
//! node's inference API under the ask's mode), each an [`EngineRun`]. Each ends in
//! `JobService::conclude`.
//!
//! A new engine is a type implementing [`EngineRun`] and a line in `engine`.

use fleetmesh_proto::Engine;
use fleetmesh_proto::ask::Ask;

use super::{JobService, Run};
use crate::Refusal;
use crate::jobs::JobRecord;
use fleetmesh_proto::unix_now;

mod groth16;
mod llm;
mod wasi;

/// One way of running a job: what an ask's `engine` names. It runs on a worker thread,
/// checks what the engine needs of the job message, and ends in `JobService::conclude`
/// (or a [`Refusal`], which fails the job).
pub(super) trait EngineRun: Sync {
    /// Runs `r` for `svc`.
    fn run(&self, svc: &JobService, r: &Run<'_>) -> Result<(), Refusal>;
}

/// The engine an ask names.
fn engine(e: Engine) -> &'static dyn EngineRun {
    match e {
        Engine::Wasm | Engine::Data => &wasi::Wasi,
        Engine::Groth16Prove => &groth16::Prove,
        Engine::Groth16Verify => &groth16::Verify,
        Engine::Llm => &llm::Llm,
    }
}

impl JobService {
    /// Runs `job` on its ask's engine.
    pub(super) fn run(&self, job: &JobRecord) -> Result<(), Refusal> {
        let started_at = unix_now();
        let ask = Ask::parse(&job.ask, 0)?;
        let msg = self.open_job(&ask, &job.payload)?;
        let run = Run {
            job,
            ask: &ask,
            msg: &msg,
            started_at,
        };
        engine(ask.engine).run(self, &run)
    }
}
