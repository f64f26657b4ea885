//! Witness generation from a circom witness calculator (`circuit_js/circuit.wasm`) and an
//! `input.json`, run inside wasmtime — what `snarkjs wtns calculate` does in Node.
//!
//! Compile the module once ([`WitnessCalculator::new`]) and call
//! [`WitnessCalculator::calculate`] per input; each call gets a fresh instance, so one
//! failed input (a failed `assert`, a missing signal) cannot affect the next. Supports the
//! calculators of circom 2.x (the `getFieldNumLen32`/`setInputSignal` interface).
//!
//! Inputs follow snarkjs: each key of the JSON object is a signal name, its value a number,
//! a decimal or `0x` hex string (optionally negative, reduced mod r), or a (nested) array
//! of them for an array signal, flattened in row-major order.

use std::time::{Duration, Instant};

use ark_bn254::Fr;
use ark_ff::{BigInt, PrimeField};
use num_bigint::{BigInt as Big, Sign};
use serde_json::Value;
use wasmtime::{Caller, Engine, Instance, Linker, Module, Store, TypedFunc};

use crate::{Error, Result};

/// A compiled circom witness calculator.
pub struct WitnessCalculator {
    engine: Engine,
    module: Module,
    /// Keeps the epoch ticker alive; the ticker stops once this is dropped.
    _ticker: std::sync::Arc<()>,
}

/// Epoch granularity of the wall-clock limit.
const TICK: Duration = Duration::from_millis(50);

impl std::fmt::Debug for WitnessCalculator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WitnessCalculator").finish_non_exhaustive()
    }
}

fn werr(e: impl std::fmt::Display) -> Error {
    Error::Witness(e.to_string())
}

/// Host state: the error text circom writes through `printErrorMessage` (the wall-clock
/// limit is the store's epoch deadline).
#[derive(Default)]
struct Host {
    messages: String,
}

/// circom's error codes passed to `exceptionHandler`.
fn exception(code: i32) -> &'static str {
    match code {
        1 => "signal not found",
        2 => "too many signals set",
        3 => "signal already set",
        4 => "assert failed",
        5 => "not enough memory",
        6 => "input signal array access exceeds the size",
        _ => "unknown error",
    }
}

/// 64-bit FNV-1a of the signal name, as circom hashes input names.
fn fnv1a(name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// 32-bit words in a BN254 element: the only field size accepted.
const N32: usize = 8;

struct Exports {
    write_shared: TypedFunc<(u32, u32), ()>,
    read_shared: TypedFunc<u32, u32>,
    set_input: TypedFunc<(u32, u32, u32), ()>,
    input_size: TypedFunc<(u32, u32), i32>,
    get_witness: TypedFunc<u32, ()>,
}

fn read_message(caller: &mut Caller<'_, Host>) -> String {
    let Some(f) = caller
        .get_export("getMessageChar")
        .and_then(|e| e.into_func())
        .and_then(|f| f.typed::<(), u32>(&*caller).ok())
    else {
        return String::new();
    };
    let mut out = Vec::new();
    while let Ok(c) = f.call(&mut *caller, ()) {
        if c == 0 || out.len() > 4096 {
            break;
        }
        out.push(c as u8);
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl WitnessCalculator {
    /// Compiles a circom witness calculator.
    ///
    /// # Errors
    /// [`Error::Witness`] if the bytes are not a WebAssembly module wasmtime accepts.
    pub fn new(wasm: &[u8]) -> Result<WitnessCalculator> {
        let mut config = wasmtime::Config::new();
        config.epoch_interruption(true);
        let engine = Engine::new(&config).map_err(werr)?;
        let module = Module::new(&engine, wasm)
            .map_err(|e| Error::Witness(format!("not a usable witness calculator: {e:#}")))?;
        // One ticker per calculator advances the epoch every TICK; each store traps once
        // its limit in ticks has passed. It ends when the calculator is dropped.
        let ticker = std::sync::Arc::new(());
        let alive = std::sync::Arc::downgrade(&ticker);
        let e = engine.clone();
        std::thread::Builder::new()
            .name("witness-epoch".into())
            .spawn(move || {
                while alive.upgrade().is_some() {
                    std::thread::sleep(TICK);
                    e.increment_epoch();
                }
            })
            .map_err(werr)?;
        Ok(WitnessCalculator {
            engine,
            module,
            _ticker: ticker,
        })
    }

    fn instantiate(&self, limit: Duration) -> Result<(Store<Host>, Instance)> {
        let mut store = Store::new(&self.engine, Host::default());
        store.set_epoch_deadline((limit.as_millis() / TICK.as_millis()).max(1) as u64 + 1);
        let mut linker = Linker::new(&self.engine);
        linker
            .func_wrap(
                "runtime",
                "exceptionHandler",
                |mut caller: Caller<'_, Host>, code: i32| -> wasmtime::Result<()> {
                    let msg = std::mem::take(&mut caller.data_mut().messages);
                    Err(wasmtime::Error::msg(format!(
                        "{}{}",
                        exception(code),
                        if msg.is_empty() {
                            String::new()
                        } else {
                            format!(": {}", msg.trim())
                        }
                    )))
                },
            )
            .map_err(werr)?;
        linker
            .func_wrap(
                "runtime",
                "printErrorMessage",
                |mut caller: Caller<'_, Host>| {
                    let m = read_message(&mut caller);
                    let host = caller.data_mut();
                    if host.messages.len() < 8192 {
                        host.messages.push_str(&m);
                        host.messages.push(' ');
                    }
                },
            )
            .map_err(werr)?;
        linker
            .func_wrap(
                "runtime",
                "writeBufferMessage",
                |mut caller: Caller<'_, Host>| {
                    // circom's `log(...)`: forwarded to tracing, never to stdout.
                    let m = read_message(&mut caller);
                    tracing::debug!(target: "witness.log", "{}", m.trim_end());
                },
            )
            .map_err(werr)?;
        linker
            .func_wrap("runtime", "showSharedRWMemory", |_: Caller<'_, Host>| {})
            .map_err(werr)?;
        let instance = linker
            .instantiate(&mut store, &self.module)
            .map_err(|e| Error::Witness(format!("cannot instantiate the calculator: {e:#}")))?;
        Ok((store, instance))
    }

    /// Computes the full witness for `input` (a JSON object of signal names to values),
    /// with a 60-second limit.
    ///
    /// # Errors
    /// [`Error::Input`] for an unknown signal, a wrong number of values, a value that is
    /// not a number, or missing inputs; [`Error::Witness`] when the circuit traps (a failed
    /// `assert`, with circom's message) or runs past the limit.
    pub fn calculate(&self, input: &Value) -> Result<Vec<Fr>> {
        self.calculate_with_limit(input, Duration::from_secs(60))
    }

    /// [`WitnessCalculator::calculate`] with an explicit wall-clock limit.
    ///
    /// # Errors
    /// As [`WitnessCalculator::calculate`].
    pub fn calculate_with_limit(&self, input: &Value, limit: Duration) -> Result<Vec<Fr>> {
        let t = Instant::now();
        let obj = input.as_object().ok_or_else(|| Error::Input {
            signal: String::new(),
            reason: "input.json must be a JSON object of signal names".into(),
        })?;
        let (mut store, instance) = self.instantiate(limit)?;
        let func = |store: &mut Store<Host>, name: &str| {
            instance.get_func(&mut *store, name).ok_or_else(|| {
                Error::Witness(format!(
                    "not a circom 2 witness calculator: it does not export {name}"
                ))
            })
        };
        let trap = |e: wasmtime::Error| -> Error {
            if e.downcast_ref::<wasmtime::Trap>() == Some(&wasmtime::Trap::Interrupt) {
                Error::Witness(format!("witness generation ran past {limit:?}"))
            } else {
                Error::Witness(format!("the circuit failed: {}", e.root_cause()))
            }
        };
        macro_rules! typed {
            ($name:literal) => {
                func(&mut store, $name)?.typed(&store).map_err(|e| {
                    Error::Witness(format!("export {} has an unexpected type: {e}", $name))
                })?
            };
        }
        let init: TypedFunc<u32, ()> = typed!("init");
        let n32_f: TypedFunc<(), u32> = typed!("getFieldNumLen32");
        let raw_prime: TypedFunc<(), ()> = typed!("getRawPrime");
        let witness_size: TypedFunc<(), u32> = typed!("getWitnessSize");
        let input_count: TypedFunc<(), u32> = typed!("getInputSize");
        let n32 = n32_f.call(&mut store, ()).map_err(trap)? as usize;
        if n32 != N32 {
            return Err(Error::Witness(format!(
                "the calculator's field is {n32} 32-bit words, BN254 needs 8"
            )));
        }
        let ex = Exports {
            write_shared: typed!("writeSharedRWMemory"),
            read_shared: typed!("readSharedRWMemory"),
            set_input: typed!("setInputSignal"),
            input_size: typed!("getInputSignalSize"),
            get_witness: typed!("getWitness"),
        };
        raw_prime.call(&mut store, ()).map_err(trap)?;
        if read_fr_raw(&mut store, &ex).map_err(trap)? != Fr::MODULUS {
            return Err(Error::Witness(
                "the calculator was compiled for another prime (only bn128 is supported)".into(),
            ));
        }
        init.call(&mut store, 1).map_err(trap)?;

        let mut set = 0usize;
        for (name, value) in obj {
            let mut values = Vec::new();
            flatten(name, value, &mut values)?;
            let h = fnv1a(name);
            let (hi, lo) = ((h >> 32) as u32, h as u32);
            let size = ex.input_size.call(&mut store, (hi, lo)).map_err(trap)?;
            // circom answers 0 (older versions −1) for a name it does not know.
            if size <= 0 {
                return Err(Error::Input {
                    signal: name.clone(),
                    reason: "the circuit has no input signal of this name".into(),
                });
            }
            if values.len() != size as usize {
                return Err(Error::Input {
                    signal: name.clone(),
                    reason: format!("expects {size} value(s), got {}", values.len()),
                });
            }
            for (i, v) in values.iter().enumerate() {
                let limbs = v.into_bigint().0;
                for j in 0..N32 {
                    let word = (limbs[j / 2] >> (32 * (j % 2))) as u32;
                    ex.write_shared
                        .call(&mut store, (j as u32, word))
                        .map_err(trap)?;
                }
                ex.set_input
                    .call(&mut store, (hi, lo, i as u32))
                    .map_err(trap)?;
            }
            set += values.len();
        }
        let expected = input_count.call(&mut store, ()).map_err(trap)? as usize;
        if set < expected {
            return Err(Error::Input {
                signal: String::new(),
                reason: format!("only {set} of the circuit's {expected} input values were given"),
            });
        }
        let n = witness_size.call(&mut store, ()).map_err(trap)? as usize;
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            ex.get_witness.call(&mut store, i as u32).map_err(trap)?;
            let raw = read_fr_raw(&mut store, &ex).map_err(trap)?;
            out.push(Fr::from_bigint(raw).ok_or_else(|| {
                Error::Witness(format!("witness[{i}] from the calculator is not below r"))
            })?);
        }
        tracing::debug!(
            target: "witness",
            wires = n,
            ms = t.elapsed().as_secs_f64() * 1e3,
            "witness computed"
        );
        Ok(out)
    }
}

fn read_fr_raw(store: &mut Store<Host>, ex: &Exports) -> wasmtime::Result<BigInt<4>> {
    let mut limbs = [0u64; 4];
    for j in 0..N32 {
        let w = u64::from(ex.read_shared.call(&mut *store, j as u32)?);
        limbs[j / 2] |= w << (32 * (j % 2));
    }
    Ok(BigInt(limbs))
}

/// Flattens a signal's JSON value into field elements, snarkjs-style.
fn flatten(name: &str, v: &Value, out: &mut Vec<Fr>) -> Result<()> {
    let bad = |reason: String| Error::Input {
        signal: name.to_owned(),
        reason,
    };
    match v {
        Value::Array(items) => items.iter().try_for_each(|i| flatten(name, i, out)),
        Value::Number(n) => {
            let s = n.to_string();
            if s.contains(['.', 'e', 'E']) {
                return Err(bad(format!("{s} is not an integer")));
            }
            out.push(parse_int(&s).ok_or_else(|| bad(format!("{s} is not an integer")))?);
            Ok(())
        }
        Value::String(s) => {
            out.push(
                parse_int(s)
                    .ok_or_else(|| bad(format!("{s:?} is not a decimal or 0x-hex integer")))?,
            );
            Ok(())
        }
        Value::Bool(b) => {
            out.push(Fr::from(u64::from(*b)));
            Ok(())
        }
        other => Err(bad(format!("{other} is not a number, string or array"))),
    }
}

/// An integer in decimal or `0x` hex, optionally negative, reduced mod r.
fn parse_int(s: &str) -> Option<Fr> {
    let s = s.trim();
    let (neg, digits) = match s.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, s),
    };
    let mag = match digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        Some(hex) if !hex.is_empty() => num_bigint::BigUint::parse_bytes(hex.as_bytes(), 16)?,
        Some(_) => return None,
        None if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => {
            num_bigint::BigUint::parse_bytes(digits.as_bytes(), 10)?
        }
        None => return None,
    };
    let r = num_bigint::BigUint::from(Fr::MODULUS);
    let m = Big::from_biguint(if neg { Sign::Minus } else { Sign::Plus }, mag);
    let rb = Big::from_biguint(Sign::Plus, r);
    let reduced = ((m % &rb) + &rb) % &rb;
    Some(Fr::from_le_bytes_mod_order(&reduced.to_bytes_le().1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_matches_circom() {
        // FNV-1a 64 of "" is the offset basis; of "a" the published vector.
        assert_eq!(fnv1a(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a("a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn integers_parse_like_snarkjs() {
        assert_eq!(parse_int("5"), Some(Fr::from(5u64)));
        assert_eq!(parse_int("0x10"), Some(Fr::from(16u64)));
        assert_eq!(parse_int("-1"), Some(-Fr::from(1u64)));
        assert_eq!(parse_int("1.5"), None);
        assert_eq!(parse_int(""), None);
        assert_eq!(parse_int("0x"), None);
        assert_eq!(parse_int("12a"), None);
    }
}
