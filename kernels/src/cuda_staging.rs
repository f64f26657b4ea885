//! Page-locked host buffers that the CUDA backend's copies go through.
//!
//! The driver copies pageable memory through a small staging buffer of its own, one
//! chunk at a time: on an H200 a 2^20 NTT's 32 MB download took 39–42 ms that way
//! (0.8 GB/s) and its upload 17–20 ms, while the kernels took 1–2 ms. From page-locked
//! memory the copy engine reads and writes at the bus's speed. Allocating page-locked
//! memory is slow (the driver pins every page), so [`Staging`] keeps one buffer per
//! direction, grown to the largest transfer seen (a power of two, at most
//! [`STAGING_MAX`] bytes each); larger transfers go from and to pageable memory as before.
//!
//! The host writes a transfer's bytes straight into the buffer (the packing of points and
//! field elements is the copy), and reads a download straight out of it, so a transfer
//! costs no pageable vector either. The upload buffer is write-combined (fast for the
//! host's sequential writes and the device's reads, slow to read back on the host); the
//! download buffer is ordinary cached memory.
#![allow(unsafe_code)]

use std::sync::{Arc, Mutex};

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DriverError, PinnedHostSlice, sys};

/// The largest page-locked buffer kept per direction. Pinned memory cannot be swapped
/// out: 256 MiB each way holds a 2^20-point G2 MSM's bases or a 2^22 NTT, and a node
/// that never moves that much never allocates it.
pub(crate) const STAGING_MAX: usize = 256 << 20;
/// The smallest buffer allocated, so that small transfers do not reallocate it in steps.
const STAGING_MIN: usize = 1 << 20;

/// One page-locked buffer per direction, allocated on first use and grown on demand.
pub(crate) struct Staging {
    ctx: Arc<CudaContext>,
    up: Mutex<Option<PinnedHostSlice<u8>>>,
    down: Mutex<Option<PinnedHostSlice<u8>>>,
}

impl Staging {
    pub(crate) fn new(ctx: Arc<CudaContext>) -> Staging {
        Staging {
            ctx,
            up: Mutex::new(None),
            down: Mutex::new(None),
        }
    }

    /// A device buffer of `len` bytes whose contents `fill` writes (given exactly `len`
    /// bytes; the buffer has one byte when `len` is 0: the driver refuses empty
    /// allocations, and kernels never read past their counts). Returns after the copy
    /// has finished.
    pub(crate) fn upload(
        &self,
        stream: &Arc<CudaStream>,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<CudaSlice<u8>, DriverError> {
        let wanted = len;
        let len = len.max(1);
        if len > STAGING_MAX {
            let mut host = vec![0u8; len];
            fill(&mut host);
            return stream.clone_htod(&host);
        }
        let mut slot = self.up.lock().unwrap_or_else(|p| p.into_inner());
        let buf = self.buffer(&mut slot, len, sys::CU_MEMHOSTALLOC_WRITECOMBINED)?;
        let host = &mut buf.as_mut_slice()?[..len];
        host[0] = 0;
        fill(&mut host[..wanted]);
        // SAFETY: `memcpy_htod` below overwrites all `len` bytes before anything reads them.
        let mut device = unsafe { stream.alloc::<u8>(len) }?;
        stream.memcpy_htod(&host[..], &mut device)?;
        // the copy from page-locked memory is asynchronous: it must finish before the
        // buffer is written again (the lock is released on return)
        stream.synchronize()?;
        Ok(device)
    }

    /// The first `len` bytes of `device`, given to `read` (after every kernel queued on
    /// `stream` before it has finished).
    pub(crate) fn download<R>(
        &self,
        stream: &Arc<CudaStream>,
        device: &CudaSlice<u8>,
        len: usize,
        read: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, DriverError> {
        if len == 0 {
            stream.synchronize()?;
            return Ok(read(&[]));
        }
        let src = device.slice(..len);
        if len > STAGING_MAX {
            let host = stream.clone_dtoh(&src)?;
            return Ok(read(&host));
        }
        let mut slot = self.down.lock().unwrap_or_else(|p| p.into_inner());
        let buf = self.buffer(&mut slot, len, 0)?;
        let host = &mut buf.as_mut_slice()?[..len];
        stream.memcpy_dtoh(&src, host)?;
        stream.synchronize()?;
        Ok(read(host))
    }

    /// The slot's buffer, reallocated when it holds fewer than `len` bytes.
    fn buffer<'a>(
        &self,
        slot: &'a mut Option<PinnedHostSlice<u8>>,
        len: usize,
        flags: u32,
    ) -> Result<&'a mut PinnedHostSlice<u8>, DriverError> {
        if slot.as_ref().is_some_and(|b| b.len() < len) {
            *slot = None;
        }
        if slot.is_none() {
            let size = len.next_power_of_two().clamp(STAGING_MIN, STAGING_MAX);
            // SAFETY: the buffer's bytes are only read after `fill` or a copy wrote them
            // (upload and download slice exactly what they wrote)
            let buf = unsafe { self.ctx.alloc_pinned_with_flags::<u8>(size, flags) }?;
            tracing::debug!(
                target: "gpu.phase",
                backend = "cuda",
                op = "staging",
                bytes = size,
                write_combined = flags != 0,
            );
            *slot = Some(buf);
        }
        Ok(slot.as_mut().expect("allocated above"))
    }
}
