//! The node's side of the compute market: `/v1/jobs` ([`http`]) over
//! `fleetmesh_market::service::JobService`, and what the engines borrow from the node —
//! its Blossom store ([`crate::blossom::Blossom`] as `Blobs`) and its inference API
//! ([`crate::inference_service::InferenceService`] as `Llm`).

pub mod http;

pub use http::{receipt, result, status, submit};
