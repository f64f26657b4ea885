//! The node's side of the compute market (`fleetmesh-market` holds the job store and
//! receipts): [`service`] runs jobs on the engines and serves `/v1/jobs`.

pub mod service;
