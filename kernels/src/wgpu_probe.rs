//! wgpu adapter enumeration (feature `wgpu`).

use crate::Result;
use crate::probe::GpuAdapter;

/// Every adapter wgpu can see on any compiled-in backend.
pub(crate) fn adapters() -> Result<Vec<GpuAdapter>> {
    let instance =
        wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
    let adapters = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()));
    Ok(adapters
        .iter()
        .map(|a| {
            let info = a.get_info();
            GpuAdapter {
                name: info.name,
                backend: format!("{:?}", info.backend).to_lowercase(),
                device_type: format!("{:?}", info.device_type),
                driver: info.driver,
                driver_info: info.driver_info,
                vendor: info.vendor,
                device: info.device,
            }
        })
        .collect())
}
