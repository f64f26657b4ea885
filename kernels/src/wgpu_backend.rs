//! The wgpu backend (feature `wgpu`): WGSL compute shaders on any Vulkan/Metal/DX12 GPU,
//! and on the lavapipe software driver in CI.
//!
//! Today it runs the NTT on the GPU — forward, inverse and coset — with BN254 Fr in
//! Montgomery form as eight u32 limbs (`wgsl/field.wgsl`); the MSMs use the trait's CPU
//! reference until the MSM kernels land. Every result is compared with the CPU reference
//! in the tests.

use std::sync::mpsc;

use ark_bn254::Fr;
use ark_ff::{One, PrimeField};
use ark_poly::EvaluationDomain;
use wgpu::util::DeviceExt;

use crate::ops::{MsmNtt, NttDirection, domain};
use crate::{Error, Result};

const FIELD_WGSL: &str = include_str!("wgsl/field.wgsl");
const NTT_WGSL: &str = include_str!("wgsl/ntt.wgsl");
const WORKGROUP: u32 = 64;
/// Bytes of one field element on the GPU.
const FE: u64 = 32;

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

fn to_bytes(v: &[Fr]) -> Vec<u8> {
    v.iter()
        .flat_map(|x| x.0.0.iter().flat_map(|l| l.to_le_bytes()))
        .collect()
}

fn from_bytes(b: &[u8]) -> Vec<Fr> {
    b.chunks_exact(32)
        .map(|c| {
            let mut l = [0u64; 4];
            for (i, limb) in l.iter_mut().enumerate() {
                *limb = u64::from_le_bytes(c[8 * i..8 * i + 8].try_into().unwrap());
            }
            Fr::new_unchecked(ark_ff::BigInt(l))
        })
        .collect()
}

/// A wgpu device with the NTT pipelines compiled.
pub struct WgpuBackend {
    name: String,
    device: wgpu::Device,
    queue: wgpu::Queue,
    layout: wgpu::BindGroupLayout,
    stage: wgpu::ComputePipeline,
    mul: wgpu::ComputePipeline,
    scale: wgpu::ComputePipeline,
    max_storage: u64,
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
        let source = format!("{}{FIELD_WGSL}\n{NTT_WGSL}", field_constants(Fr::MODULUS.0));
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("ntt"),
            source: wgpu::ShaderSource::Wgsl(source.into()),
        });
        let storage = |binding, read_only| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage { read_only },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        };
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("ntt"),
            entries: &[
                storage(0, false),
                storage(1, true),
                wgpu::BindGroupLayoutEntry {
                    binding: 2,
                    visibility: wgpu::ShaderStages::COMPUTE,
                    ty: wgpu::BindingType::Buffer {
                        ty: wgpu::BufferBindingType::Uniform,
                        has_dynamic_offset: false,
                        min_binding_size: None,
                    },
                    count: None,
                },
            ],
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
        let (stage, mul, scale) = (pipeline("stage"), pipeline("mul"), pipeline("scale"));
        Ok(WgpuBackend {
            name,
            max_storage: limits.max_storage_buffer_binding_size,
            device,
            queue,
            layout,
            stage,
            mul,
            scale,
        })
    }

    fn params(&self, half: u32, stride: u32, count: u32) -> (wgpu::Buffer, u32, u32) {
        let groups = count.div_ceil(WORKGROUP).max(1);
        let x = groups.min(65_535);
        let y = groups.div_ceil(x);
        let words = [half, stride, count, x * WORKGROUP];
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let buf = self
            .device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("params"),
                contents: &bytes,
                usage: wgpu::BufferUsages::UNIFORM,
            });
        (buf, x, y)
    }

    /// Runs `passes` (pipeline, aux buffer, half, stride, count) over `values` in order,
    /// in one submission, and reads the result back.
    fn run(
        &self,
        values: &mut [Fr],
        passes: &[(&wgpu::ComputePipeline, &wgpu::Buffer, u32, u32, u32)],
    ) -> Result<()> {
        let size = values.len() as u64 * FE;
        if size > self.max_storage {
            return Err(Error::Arith {
                op: "ntt",
                reason: format!(
                    "{} elements exceed the adapter's {} byte storage binding",
                    values.len(),
                    self.max_storage
                ),
            });
        }
        let data = self
            .device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("data"),
                contents: &to_bytes(values),
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
            });
        let readback = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("readback"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut enc = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("ntt") });
        let mut keep = Vec::new();
        for (pipeline, aux, half, stride, count) in passes {
            let (params, x, y) = self.params(*half, *stride, *count);
            let group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &self.layout,
                entries: &[
                    wgpu::BindGroupEntry {
                        binding: 0,
                        resource: data.as_entire_binding(),
                    },
                    wgpu::BindGroupEntry {
                        binding: 1,
                        resource: aux.as_entire_binding(),
                    },
                    wgpu::BindGroupEntry {
                        binding: 2,
                        resource: params.as_entire_binding(),
                    },
                ],
            });
            {
                let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
                pass.set_pipeline(pipeline);
                pass.set_bind_group(0, &group, &[]);
                pass.dispatch_workgroups(x, y, 1);
            }
            keep.push((params, group));
        }
        enc.copy_buffer_to_buffer(&data, 0, &readback, 0, size);
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
        let out = {
            let view = readback
                .slice(..)
                .get_mapped_range()
                .map_err(|e| gpu_err(format!("{}: reading back: {e:?}", self.name)))?;
            from_bytes(&view)
        };
        values.copy_from_slice(&out);
        readback.unmap();
        Ok(())
    }

    fn upload(&self, v: &[Fr]) -> wgpu::Buffer {
        self.device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("aux"),
                contents: &to_bytes(v),
                usage: wgpu::BufferUsages::STORAGE,
            })
    }

    /// Bit-reverses `values` on the host, then on the GPU: an optional element-wise
    /// product by `pre` (the coset shift's powers, reversed alike), the log₂ n butterfly
    /// stages with twiddles of `omega`, and an optional scaling by `post` (1/n).
    fn transform(
        &self,
        values: &mut [Fr],
        omega: Fr,
        pre: Option<&[Fr]>,
        post: Option<Fr>,
    ) -> Result<()> {
        let n = values.len();
        if n <= 1 {
            for v in values.iter_mut() {
                *v *= pre.map_or(Fr::one(), |p| p[0]) * post.unwrap_or(Fr::one());
            }
            return Ok(());
        }
        let n32 = u32::try_from(n).map_err(|_| Error::Arith {
            op: "ntt",
            reason: format!("{n} elements are too many for one dispatch"),
        })?;
        let bits = n.trailing_zeros();
        let rev = |v: &[Fr]| -> Vec<Fr> {
            (0..n)
                .map(|i| v[i.reverse_bits() >> (usize::BITS - bits)])
                .collect()
        };
        let mut twiddles = Vec::with_capacity(n / 2);
        let mut w = Fr::one();
        for _ in 0..n / 2 {
            twiddles.push(w);
            w *= omega;
        }
        let tw = self.upload(&twiddles);
        let pre_buf = pre.map(|p| self.upload(&rev(p)));
        let post_buf = post.map(|s| self.upload(&[s]));
        let reversed = rev(values);
        values.copy_from_slice(&reversed);
        let mut passes = Vec::new();
        if let Some(b) = &pre_buf {
            passes.push((&self.mul, b, 0, 0, n32));
        }
        let mut half = 1u32;
        while half < n32 {
            passes.push((&self.stage, &tw, half, n32 / (2 * half), n32 / 2));
            half *= 2;
        }
        if let Some(b) = &post_buf {
            passes.push((&self.scale, b, 0, 0, n32));
        }
        self.run(values, &passes)
    }
}

impl MsmNtt for WgpuBackend {
    fn describe(&self) -> String {
        format!("wgpu ({}; NTT on the GPU, MSM on the CPU)", self.name)
    }

    fn ntt(&self, values: &mut Vec<Fr>, direction: NttDirection) -> Result<()> {
        let d = domain(values.len())?;
        match direction {
            NttDirection::Forward => self.transform(values, d.group_gen(), None, None),
            NttDirection::Inverse => {
                self.transform(values, d.group_gen_inv(), None, Some(d.size_inv()))
            }
        }
    }

    fn coset_ntt(&self, values: &mut Vec<Fr>, shift: Fr) -> Result<()> {
        let d = domain(values.len())?;
        let mut powers = Vec::with_capacity(values.len());
        let mut p = Fr::one();
        for _ in 0..values.len() {
            powers.push(p);
            p *= shift;
        }
        self.transform(values, d.group_gen(), Some(&powers), None)
    }
}
