//! The wgpu backend (feature `wgpu`): WGSL compute shaders on any Vulkan/Metal/DX12 GPU,
//! and on the lavapipe software driver in CI.
//!
//! On the GPU: the NTT — forward, inverse and coset — with BN254 Fr in Montgomery form as
//! eight u32 limbs (`wgsl/field.wgsl`), and the G1 and G2 MSMs (Pippenger with signed
//! digits, sorted into buckets on the host by [`crate::plan`], accumulated and reduced by
//! `wgsl/msm.wgsl` in XYZZ coordinates, `wgsl/curve.wgsl`, over Fq for G1 and Fq2,
//! `wgsl/fe2.wgsl`, for G2: the coordinate type is chosen by the prelude the host puts
//! in front, `wgsl/coords_g1.wgsl` or `wgsl/coords_g2.wgsl`). Every result is compared
//! with the CPU reference in the tests.

use std::sync::mpsc;

use ark_bn254::{Fq, Fr, G1Affine, G1Projective, G2Affine, G2Projective};
use ark_ec::short_weierstrass::{Affine, Projective};
use ark_ec::{AffineRepr, CurveGroup};
use ark_ff::{One, PrimeField, Zero};
use wgpu::util::DeviceExt;

use crate::gpu::{GpuKernels, ScaleJob};
use crate::plan::GpuCurve;
use crate::plan::{NttJob, NttKind, fr_bytes, read_fr};
use crate::{Error, Result};

const FIELD_WGSL: &str = include_str!("wgsl/field.wgsl");
const BINDINGS_WGSL: &str = include_str!("wgsl/bindings.wgsl");
const NTT_WGSL: &str = include_str!("wgsl/ntt.wgsl");
const FE2_WGSL: &str = include_str!("wgsl/fe2.wgsl");
const COORDS_G1_WGSL: &str = include_str!("wgsl/coords_g1.wgsl");
const COORDS_G2_WGSL: &str = include_str!("wgsl/coords_g2.wgsl");
const CURVE_WGSL: &str = include_str!("wgsl/curve.wgsl");
const ADD_CHECK_WGSL: &str = include_str!("wgsl/add_check.wgsl");
const MSM_WGSL: &str = include_str!("wgsl/msm.wgsl");
const WORKGROUP: u32 = 64;
/// Bytes of one field element on the GPU.
const FE: u64 = crate::plan::FE_BYTES as u64;

fn gpu_err(reason: impl std::fmt::Display) -> Error {
    Error::Unavailable {
        backend: "wgpu".into(),
        reason: reason.to_string(),
    }
}

/// WGSL constants for a field with modulus limbs `p` (little-endian u64).
fn field_constants(p: [u64; 4]) -> String {
    let limbs: Vec<u32> = p
        .iter()
        .flat_map(|l| [*l as u32, (*l >> 32) as u32])
        .collect();
    // −p⁻¹ mod 2^32 by Newton iteration on the low limb.
    let p0 = limbs[0];
    let mut inv = 1u32;
    for _ in 0..5 {
        inv = inv.wrapping_mul(2u32.wrapping_sub(p0.wrapping_mul(inv)));
    }
    let list: Vec<String> = limbs.iter().map(|l| format!("{l}u")).collect();
    format!(
        "const P: array<u32, 8> = array<u32, 8>({});\nconst INV: u32 = {}u;\n",
        list.join(", "),
        inv.wrapping_neg()
    )
}

/// A wgpu device with the NTT pipelines compiled.
pub struct WgpuBackend {
    name: String,
    device: wgpu::Device,
    queue: wgpu::Queue,
    layout: wgpu::BindGroupLayout,
    stage: wgpu::ComputePipeline,
    scale: wgpu::ComputePipeline,
    pipeline_layout: wgpu::PipelineLayout,
    /// The G1 and G2 addition check pipelines, compiled on first use (slow to compile on
    /// lavapipe).
    add_check: [std::sync::OnceLock<wgpu::ComputePipeline>; 2],
    /// The bindings of `wgsl/msm.wgsl`'s kernels: out, src, idx, params.
    msm_layout: wgpu::BindGroupLayout,
    msm_pipeline_layout: wgpu::PipelineLayout,
    /// The G1 and G2 MSM pipelines, compiled on first use.
    msm: [std::sync::OnceLock<MsmPipelines>; 2],
    /// The G1 `scale` kernel of `wgsl/msm.wgsl` (a batch verification's weights),
    /// compiled on first use.
    scale_g1: std::sync::OnceLock<wgpu::ComputePipeline>,
    max_storage: u64,
    /// G2 MSMs of fewer points run on the CPU backend.
    g2_gpu_from: usize,
    /// Identity for the bases this backend keeps ([`crate::fixed::Kept`]).
    owner: u64,
}

/// The default for [`WgpuBackend::set_g2_gpu_from`]: below this many points a G2 MSM runs
/// on the CPU. Fq2 makes the G2 kernels ~3× the G1 code, and some drivers take minutes to
/// compile them (lavapipe: ~4 min for the two MSM kernels on 2 cores), so a node proving
/// small circuits should not pay that; a GPU's G2 MSM pays off only at thousands of points
/// anyway (to be measured per device by bench/gpu/run.sh).
const G2_GPU_FROM: usize = 1 << 12;

/// The two MSM kernels of `wgsl/msm.wgsl`.
struct MsmPipelines {
    accumulate: wgpu::ComputePipeline,
    reduce: wgpu::ComputePipeline,
}

/// WGSL for `fe_one()`: 1 in Montgomery form over Fq.
fn fq_one_wgsl() -> String {
    let limbs: Vec<String> = Fq::one()
        .0
        .0
        .iter()
        .flat_map(|l| [*l as u32, (*l >> 32) as u32])
        .map(|l| format!("{l}u"))
        .collect();
    format!(
        "fn fe_one() -> Fe {{\n    return Fe(array<u32, 8>({}));\n}}\n",
        limbs.join(", ")
    )
}

/// The field code, constants and point arithmetic of `P` (G1 or G2), for a shader.
fn curve_wgsl<P: GpuCurve>() -> String {
    let coords = match P::COORD_FE {
        1 => COORDS_G1_WGSL.to_owned(),
        _ => format!("{FE2_WGSL}\n{COORDS_G2_WGSL}"),
    };
    format!(
        "{}{FIELD_WGSL}\n{}{coords}\n{CURVE_WGSL}\n",
        field_constants(Fq::MODULUS.0),
        fq_one_wgsl()
    )
}

/// Index 0 for G1, 1 for G2, into the per-group pipelines.
fn group<P: GpuCurve>() -> usize {
    P::COORD_FE - 1
}

impl std::fmt::Debug for WgpuBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WgpuBackend")
            .field("adapter", &self.name)
            .finish_non_exhaustive()
    }
}

impl WgpuBackend {
    /// Opens adapter `index` of wgpu's enumeration (as [`crate::Inventory::wgpu`] lists
    /// them) and compiles the shaders.
    ///
    /// # Errors
    /// [`Error::Unavailable`] when there is no such adapter or it refuses a device.
    pub fn new(index: usize) -> Result<WgpuBackend> {
        let instance =
            wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        let adapters = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()));
        let adapter = adapters
            .into_iter()
            .nth(index)
            .ok_or_else(|| gpu_err(format!("no wgpu adapter {index}")))?;
        let name = adapter.get_info().name;
        let limits = adapter.limits();
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("fleetmesh-kernels"),
            required_limits: limits.clone(),
            ..Default::default()
        }))
        .map_err(|e| gpu_err(format!("{name}: {e}")))?;
        let source = format!(
            "{}{FIELD_WGSL}\n{BINDINGS_WGSL}\n{NTT_WGSL}",
            field_constants(Fr::MODULUS.0)
        );
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("ntt"),
            source: wgpu::ShaderSource::Wgsl(source.into()),
        });
        let entry = |binding, ty| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty,
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        };
        let storage =
            |binding, read_only| entry(binding, wgpu::BufferBindingType::Storage { read_only });
        let uniform = |binding| entry(binding, wgpu::BufferBindingType::Uniform);
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("ntt"),
            entries: &[storage(0, false), storage(1, true), uniform(2)],
        });
        let pl = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("ntt"),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let pipeline = |entry: &str| {
            device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(entry),
                layout: Some(&pl),
                module: &module,
                entry_point: Some(entry),
                compilation_options: Default::default(),
                cache: None,
            })
        };
        let (stage, scale) = (pipeline("stage"), pipeline("scale"));
        let msm_layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("msm"),
            entries: &[
                storage(0, false),
                storage(1, true),
                storage(2, true),
                uniform(3),
            ],
        });
        let msm_pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("msm"),
            bind_group_layouts: &[Some(&msm_layout)],
            immediate_size: 0,
        });
        Ok(WgpuBackend {
            name,
            max_storage: limits.max_storage_buffer_binding_size,
            g2_gpu_from: G2_GPU_FROM,
            owner: crate::fixed::new_owner(),
            device,
            queue,
            layout,
            stage,
            scale,
            pipeline_layout: pl,
            add_check: Default::default(),
            msm_layout,
            msm_pipeline_layout,
            msm: Default::default(),
            scale_g1: Default::default(),
        })
    }

    fn add_pipeline<P: GpuCurve>(&self) -> wgpu::ComputePipeline {
        let source = format!("{}{BINDINGS_WGSL}\n{ADD_CHECK_WGSL}", curve_wgsl::<P>());
        let module = self
            .device
            .create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(P::OP),
                source: wgpu::ShaderSource::Wgsl(source.into()),
            });
        self.device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some("add_mixed"),
                layout: Some(&self.pipeline_layout),
                module: &module,
                entry_point: Some("add_mixed"),
                compilation_options: Default::default(),
                cache: None,
            })
    }

    /// `wgsl/msm.wgsl` for `P`'s coordinates, with the pipelines of `entries` compiled.
    fn msm_module<P: GpuCurve>(&self, entries: &[&str]) -> Vec<wgpu::ComputePipeline> {
        let source = format!("{}{MSM_WGSL}", curve_wgsl::<P>());
        let module = self
            .device
            .create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(P::OP),
                source: wgpu::ShaderSource::Wgsl(source.into()),
            });
        entries
            .iter()
            .map(|name| {
                self.device
                    .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                        label: Some(name),
                        layout: Some(&self.msm_pipeline_layout),
                        module: &module,
                        entry_point: Some(name),
                        compilation_options: Default::default(),
                        cache: None,
                    })
            })
            .collect()
    }

    fn msm_pipelines<P: GpuCurve>(&self) -> MsmPipelines {
        let mut phases = crate::gpu::Phases::new("wgpu", P::OP, 0);
        let [accumulate, reduce]: [wgpu::ComputePipeline; 2] = self
            .msm_module::<P>(&["accumulate", "reduce"])
            .try_into()
            .unwrap_or_else(|_| unreachable!("two entries asked for"));
        phases.mark("compile the MSM pipelines");
        MsmPipelines { accumulate, reduce }
    }

    /// G2 MSMs of at least `points` points run on this GPU, smaller ones on the CPU
    /// (default 4096: their kernels are slow to compile on some drivers and pay off only
    /// for large MSMs; 0: all on the GPU).
    pub fn set_g2_gpu_from(&mut self, points: usize) {
        self.g2_gpu_from = points;
    }

    /// `p[i] + q[i]` for each i, by the GPU's G1 arithmetic (XYZZ mixed addition, the
    /// MSM's bucket step), returned in affine form. A self-check of the curve code against
    /// the CPU; `p[i]` may be the point at infinity, `q[i]` may not.
    ///
    /// # Errors
    /// [`Error::Arith`] for unequal lengths or a `q[i]` at infinity; a device failure.
    pub fn g1_add_check(&self, p: &[G1Affine], q: &[G1Affine]) -> Result<Vec<G1Affine>> {
        self.add_check(p, q)
    }

    fn add_check<P: GpuCurve>(&self, p: &[Affine<P>], q: &[Affine<P>]) -> Result<Vec<Affine<P>>> {
        let err = |reason: &str| Error::Arith {
            op: "add_check",
            reason: reason.into(),
        };
        if p.len() != q.len() || q.iter().any(|x| x.is_zero()) {
            return Err(err("needs equal lengths and no point at infinity in q"));
        }
        let n = u32::try_from(p.len()).map_err(|_| err("too many points"))?;
        let coord = P::COORD_FE * FE as usize;
        let one = P::BaseField::one();
        let mut bytes = vec![0u8; p.len() * 4 * coord];
        for (a, o) in p.iter().zip(bytes.chunks_exact_mut(4 * coord)) {
            if let Some((x, y)) = a.xy() {
                for (c, o) in [x, y, one, one].iter().zip(o.chunks_exact_mut(coord)) {
                    P::put(c, o);
                }
            }
        }
        let aux_bytes = crate::plan::affine_bytes(q);
        let aux_buf = self.buffer("add aux", &aux_bytes, wgpu::BufferUsages::STORAGE);
        if n > 0 {
            let pipeline = self.add_check[group::<P>()].get_or_init(|| self.add_pipeline::<P>());
            self.run_bytes(&mut bytes, &[(pipeline, &aux_buf, 0, 0, n)])?;
        }
        Ok(bytes
            .chunks_exact(4 * coord)
            .map(|c| crate::plan::xyzz_to_projective::<P>(c).into_affine())
            .collect())
    }

    fn params(&self, half: u32, stride: u32, count: u32) -> (wgpu::Buffer, u32, u32) {
        let groups = count.div_ceil(WORKGROUP).max(1);
        let x = groups.min(65_535);
        let y = groups.div_ceil(x);
        let words = [half, stride, count, x * WORKGROUP];
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        (
            self.buffer("params", &bytes, wgpu::BufferUsages::UNIFORM),
            x,
            y,
        )
    }

    /// Runs `passes` (pipeline, aux buffer, half, stride, count) over `values` in order,
    /// in one submission, and reads the result back.
    fn run(
        &self,
        values: &mut [Fr],
        passes: &[(&wgpu::ComputePipeline, &wgpu::Buffer, u32, u32, u32)],
    ) -> Result<()> {
        let mut bytes = fr_bytes(values);
        self.run_bytes(&mut bytes, passes)?;
        read_fr(&bytes, values);
        Ok(())
    }

    /// Runs `passes` over `bytes` (field elements of 32 bytes) in one submission and
    /// reads the result back into `bytes`.
    fn run_bytes(
        &self,
        bytes: &mut [u8],
        passes: &[(&wgpu::ComputePipeline, &wgpu::Buffer, u32, u32, u32)],
    ) -> Result<()> {
        let size = bytes.len() as u64;
        if size > self.max_storage {
            return Err(Error::Arith {
                op: "wgpu",
                reason: format!(
                    "{} elements exceed the adapter's {} byte storage binding",
                    size / FE,
                    self.max_storage
                ),
            });
        }
        let data = self
            .device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("data"),
                contents: bytes,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
            });
        let mut enc = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("ntt") });
        for (pipeline, aux, half, stride, count) in passes {
            let (params, x, y) = self.params(*half, *stride, *count);
            self.encode(
                &mut enc,
                pipeline,
                &self.layout,
                &[&data, aux, &params],
                (x, y),
            );
        }
        let out = self.read_back(enc, &data, size)?;
        bytes.copy_from_slice(&out);
        Ok(())
    }

    /// Appends a compute pass to `enc`: `pipeline` over `buffers` (bound in order, from
    /// binding 0) with `groups` (x, y) workgroups.
    fn encode(
        &self,
        enc: &mut wgpu::CommandEncoder,
        pipeline: &wgpu::ComputePipeline,
        layout: &wgpu::BindGroupLayout,
        buffers: &[&wgpu::Buffer],
        groups: (u32, u32),
    ) {
        let entries: Vec<wgpu::BindGroupEntry<'_>> = buffers
            .iter()
            .enumerate()
            .map(|(i, b)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource: b.as_entire_binding(),
            })
            .collect();
        let group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout,
            entries: &entries,
        });
        let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, &group, &[]);
        pass.dispatch_workgroups(groups.0, groups.1, 1);
    }

    /// Finishes `enc` with a copy of `src` (its first `size` bytes) into a mappable buffer,
    /// submits, waits and returns the bytes.
    fn read_back(
        &self,
        mut enc: wgpu::CommandEncoder,
        src: &wgpu::Buffer,
        size: u64,
    ) -> Result<Vec<u8>> {
        let readback = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("readback"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        enc.copy_buffer_to_buffer(src, 0, &readback, 0, size);
        self.queue.submit([enc.finish()]);
        let (tx, rx) = mpsc::channel();
        readback.map_async(wgpu::MapMode::Read, .., move |r| {
            let _ = tx.send(r);
        });
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| gpu_err(format!("{}: {e}", self.name)))?;
        rx.recv()
            .map_err(|e| gpu_err(e.to_string()))?
            .map_err(|e| gpu_err(format!("{}: reading back: {e}", self.name)))?;
        let out = readback
            .slice(..)
            .get_mapped_range()
            .map_err(|e| gpu_err(format!("{}: reading back: {e:?}", self.name)))?
            .to_vec();
        readback.unmap();
        Ok(out)
    }

    fn buffer(&self, label: &str, contents: &[u8], usage: wgpu::BufferUsages) -> wgpu::Buffer {
        self.device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(label),
                contents,
                usage,
            })
    }

    fn upload(&self, v: &[Fr]) -> wgpu::Buffer {
        self.buffer("aux", &fr_bytes(v), wgpu::BufferUsages::STORAGE)
    }
}

impl WgpuBackend {
    /// `Σ scalars[i] · bases[i]` in G1 or G2 on the GPU: the host sorts
    /// ([`crate::plan::Plan`]), one submission runs the accumulation and the reduction,
    /// the host adds the chunk sums and combines the windows. The bases are read from
    /// `kept` (a copy of exactly these bases) when given, else uploaded.
    fn msm_gpu<P: GpuCurve>(
        &self,
        kept: Option<&wgpu::Buffer>,
        bases: &[Affine<P>],
        scalars: &[Fr],
    ) -> Result<Projective<P>> {
        let mut phases = crate::gpu::Phases::new("wgpu", P::OP, bases.len());
        let plan = crate::plan::Plan::new(bases, scalars)?;
        if plan.segment_count() == 0 {
            return Ok(Projective::<P>::zero());
        }
        phases.mark("plan");
        let points_size = bases.len() as u64 * 2 * P::COORD_FE as u64 * FE;
        let (idx, off) = plan.indices();
        use rayon::prelude::*;
        let mut bytes = vec![0u8; 4 * idx.len()];
        bytes
            .par_chunks_mut(4 << 12)
            .zip(idx.par_chunks(1 << 12))
            .for_each(|(out, v)| {
                for (o, x) in out.chunks_exact_mut(4).zip(v) {
                    o.copy_from_slice(&x.to_le_bytes());
                }
            });
        let idx = bytes;
        let point_size = 4 * P::COORD_FE as u64 * FE;
        let partial_size = plan.segment_count() as u64 * point_size;
        let out_size = plan.shape.reduce_count() as u64 * point_size;
        for (what, size) in [
            ("points", points_size),
            ("bucket indices", idx.len() as u64),
            ("partial sums", partial_size),
        ] {
            if size > self.max_storage {
                return Err(Error::Arith {
                    op: P::OP,
                    reason: format!(
                        "{} points need {size} bytes of {what}, over the adapter's {} byte \
                         storage binding",
                        bases.len(),
                        self.max_storage
                    ),
                });
            }
        }
        let p = self.msm[group::<P>()].get_or_init(|| self.msm_pipelines::<P>());
        let storage = wgpu::BufferUsages::STORAGE;
        let uploaded;
        let points = match kept {
            Some(points) => points,
            None => {
                uploaded = self.buffer("msm points", &crate::plan::affine_bytes(bases), storage);
                &uploaded
            }
        };
        let idx = self.buffer("msm indices", &idx, storage);
        let scratch = |label, size| {
            self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size,
                usage: storage | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            })
        };
        let partial = scratch("msm partials", partial_size);
        let out = scratch("msm chunk sums", out_size);
        phases.mark(if kept.is_some() {
            "upload (bases kept)"
        } else {
            "upload"
        });
        let u32_of = |v: usize| v as u32;
        // (pipeline, destination, source, threads, Some(first pair) for a combining pass);
        // a combining pass is the reduce kernel in its combine mode (one g1_add to compile)
        let mut steps = vec![(
            &p.accumulate,
            &partial,
            points,
            u32_of(plan.segment_count()),
            None,
        )];
        for &(first, count) in &plan.passes {
            steps.push((&p.reduce, &partial, points, count, Some(first)));
        }
        steps.push((
            &p.reduce,
            &out,
            &partial,
            u32_of(plan.shape.reduce_count()),
            None,
        ));
        let mut enc = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("msm") });
        for (pipeline, dst, src, count, pass) in steps {
            let groups = count.div_ceil(WORKGROUP).max(1);
            let x = groups.min(65_535);
            let y = groups.div_ceil(x);
            let words = [
                count,
                x * WORKGROUP,
                plan.shape.chunks,
                plan.shape.chunk,
                plan.shape.buckets,
                off.segments,
                off.bucket_segments,
                off.pairs + pass.map_or(0, |first| 2 * first),
                u32::from(pass.is_some()),
                0,
                0,
                0,
            ];
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            let params = self.buffer("msm params", &bytes, wgpu::BufferUsages::UNIFORM);
            self.encode(
                &mut enc,
                pipeline,
                &self.msm_layout,
                &[dst, src, &idx, &params],
                (x, y),
            );
        }
        let bytes = self.read_back(enc, &out, out_size)?;
        phases.mark("kernels and download");
        let sums: Vec<Projective<P>> = bytes
            .chunks_exact(point_size as usize)
            .map(crate::plan::xyzz_to_projective::<P>)
            .collect();
        let sum = plan.shape.combine(&sums);
        phases.mark("combine");
        Ok(sum)
    }
}

impl GpuKernels for WgpuBackend {
    type Points = wgpu::Buffer;

    fn device(&self) -> String {
        format!("wgpu ({})", self.name)
    }

    fn owner(&self) -> u64 {
        self.owner
    }

    fn keep(&self, bytes: &[u8]) -> Result<wgpu::Buffer> {
        if bytes.len() as u64 > self.max_storage {
            return Err(Error::Arith {
                op: "keep",
                reason: format!(
                    "{} bytes of bases, over the adapter's {} byte storage binding",
                    bytes.len(),
                    self.max_storage
                ),
            });
        }
        Ok(self.buffer("kept bases", bytes, wgpu::BufferUsages::STORAGE))
    }

    fn msm_g1_gpu(
        &self,
        kept: Option<&wgpu::Buffer>,
        bases: &[G1Affine],
        scalars: &[Fr],
    ) -> Result<G1Projective> {
        self.msm_gpu(kept, bases, scalars)
    }

    fn g2_gpu_from(&self) -> Option<usize> {
        Some(self.g2_gpu_from)
    }

    fn msm_g2_gpu(
        &self,
        kept: Option<&wgpu::Buffer>,
        bases: &[G2Affine],
        scalars: &[Fr],
    ) -> Result<G2Projective> {
        self.msm_gpu(kept, bases, scalars)
    }

    /// A batch verification's weights times its points: one thread per point
    /// (`scale` in `wgsl/msm.wgsl`), in one submission.
    fn scale_gpu(&self, job: &ScaleJob) -> Result<Vec<u8>> {
        let count = job.count();
        let mut phases = crate::gpu::Phases::new("wgpu", "scale_g1", count as usize);
        let out_size = u64::from(count) * 4 * FE;
        for (what, size) in [("points", job.points.len() as u64), ("products", out_size)] {
            if size > self.max_storage {
                return Err(Error::Arith {
                    op: "scale_g1",
                    reason: format!(
                        "{count} points need {size} bytes of {what}, over the adapter's {} \
                         byte storage binding",
                        self.max_storage
                    ),
                });
            }
        }
        let pipeline = self.scale_g1.get_or_init(|| {
            let mut compile = crate::gpu::Phases::new("wgpu", "scale_g1", 0);
            let p = self.msm_module::<ark_bn254::g1::Config>(&["scale"]);
            compile.mark("compile the scale pipeline");
            p.into_iter().next().expect("one entry asked for")
        });
        let storage = wgpu::BufferUsages::STORAGE;
        let points = self.buffer("scale points", &job.points, storage);
        let weights: Vec<u8> = job.weights.iter().flat_map(|w| w.to_le_bytes()).collect();
        let weights = self.buffer("scale weights", &weights, storage);
        let out = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("scale products"),
            size: out_size,
            usage: storage | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let groups = count.div_ceil(WORKGROUP).max(1);
        let x = groups.min(65_535);
        let y = groups.div_ceil(x);
        // MsmParams: count and threads per row; the rest is unused by `scale`
        let mut words = [0u32; 12];
        words[0] = count;
        words[1] = x * WORKGROUP;
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let params = self.buffer("scale params", &bytes, wgpu::BufferUsages::UNIFORM);
        phases.mark("upload");
        let mut enc = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("scale"),
            });
        self.encode(
            &mut enc,
            pipeline,
            &self.msm_layout,
            &[&out, &points, &weights, &params],
            (x, y),
        );
        let bytes = self.read_back(enc, &out, out_size)?;
        phases.mark("kernel and download");
        Ok(bytes)
    }

    /// An NTT of `values` on the GPU (see [`NttJob`]), in one submission.
    fn transform(&self, values: &mut [Fr], kind: NttKind) -> Result<()> {
        let mut phases = crate::gpu::Phases::new("wgpu", "ntt", values.len());
        let Some(job) = NttJob::new(values, kind)? else {
            return Ok(());
        };
        phases.mark("prepare");
        let tw = self.upload(&job.twiddles());
        let post_buf = job.post.map(|s| self.upload(&[s]));
        let mut passes = Vec::new();
        for (half, stride) in job.stages() {
            passes.push((&self.stage, &tw, half, stride, job.n / 2));
        }
        if let Some(b) = &post_buf {
            passes.push((&self.scale, b, 0, 0, job.n));
        }
        self.run(values, &passes)?;
        phases.mark("upload, kernels and download");
        Ok(())
    }
}
