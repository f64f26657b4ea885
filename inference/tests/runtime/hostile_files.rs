//! Model files made to break the readers (each found by `bench/fuzz.sh`; the target is
//! named): they must be refused with an error, never panic or allocate without bound.

use std::io::Cursor;
use std::path::Path;

use fleetmesh_inference::tiny::make_tiny;
use fleetmesh_inference::{Error, Llama, TextTokenizer};

/// Sets the dimensions of `tensor` in a GGUF (v2/v3) written by `make_tiny`: its tensor
/// index entry is the name, a u32 dimension count, then that many u64 dimensions.
fn set_gguf_dims(gguf: &mut [u8], tensor: &str, dims: &[u64]) {
    let name = tensor.as_bytes();
    let at = gguf
        .windows(name.len() + 4)
        .position(|w| &w[..name.len()] == name && w[name.len()..] == [2, 0, 0, 0])
        .expect("the tensor's index entry")
        + name.len();
    assert_eq!(dims.len(), 2);
    for (i, d) in dims.iter().enumerate() {
        let o = at + 4 + 8 * i;
        gguf[o..o + 8].copy_from_slice(&d.to_le_bytes());
    }
}

// model_gguf: candle multiplies a tensor's dimensions unchecked (an overflow panic in
// debug builds, a wrapped size in release).
#[test]
fn a_gguf_tensor_whose_shape_overflows_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    make_tiny(dir.path(), 7).unwrap();
    let mut gguf = std::fs::read(dir.path().join("model.gguf")).unwrap();
    set_gguf_dims(&mut gguf, "blk.0.ffn_up.weight", &[1 << 33, 1 << 33]);
    match Llama::read_gguf(&mut Cursor::new(&gguf), Path::new("hostile.gguf")) {
        Err(Error::Model { reason, .. }) => {
            assert!(reason.contains("blk.0.ffn_up.weight"), "{reason}");
            assert!(reason.contains("more than any file holds"), "{reason}");
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a tensor of 2^66 elements loaded"),
    }
    let path = dir.path().join("hostile.gguf");
    std::fs::write(&path, &gguf).unwrap();
    assert!(matches!(Llama::load_gguf(&path), Err(Error::Model { .. })));
}

// tokenizer_json: tokenizers 0.23 `expect`s while reading a decoder (so any syntax error
// inside one panics) and a Precompiled normalizer.
#[test]
fn a_tokenizer_json_that_makes_the_tokenizers_crate_panic_is_refused() {
    for bad in [
        &br#"{"decoder":"#[..],
        br#"{"decoder":{"type":"ByteLevel","#,
        br#"{"normalizer":{"type":"Precompiled"},"model":{"type":"BPE","vocab":{},"merges":[]}}"#,
    ] {
        match TextTokenizer::from_bytes(bad, None) {
            Err(Error::Model { path, .. }) => assert_eq!(path, Path::new("tokenizer.json")),
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("{} loaded", String::from_utf8_lossy(bad)),
        }
    }
    // the same through a file
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokenizer.json");
    std::fs::write(&path, br#"{"decoder":"#).unwrap();
    assert!(matches!(
        TextTokenizer::load(&path),
        Err(Error::Model { .. })
    ));
}

// model_gguf: a tensor with a zero dimension has no data, and candle views that empty
// buffer through a pointer cast to the element type, misaligned: undefined behaviour (a
// debug build stops on `slice::from_raw_parts`'s precondition check).
#[test]
fn a_gguf_tensor_without_elements_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    make_tiny(dir.path(), 7).unwrap();
    let mut gguf = std::fs::read(dir.path().join("model.gguf")).unwrap();
    set_gguf_dims(&mut gguf, "output.weight", &[64, 0]);
    match Llama::read_gguf(&mut Cursor::new(&gguf), Path::new("hostile.gguf")) {
        Err(Error::Model { reason, .. }) => {
            assert!(
                reason.contains("output.weight: shape [0, 64] has no elements"),
                "{reason}"
            );
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("an empty output projection loaded"),
    }
}

// model_gguf: the vocabulary size was read as the embedding's first dimension by index,
// which panicked for a tensor of no dimensions.
#[test]
fn a_gguf_embedding_without_dimensions_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    make_tiny(dir.path(), 7).unwrap();
    let gguf = std::fs::read(dir.path().join("model.gguf")).unwrap();
    let name = b"token_embd.weight";
    let at = gguf
        .windows(name.len() + 4)
        .position(|w| &w[..name.len()] == name && w[name.len()..] == [2, 0, 0, 0])
        .unwrap()
        + name.len();
    // a dimension count of 0, and no dimensions
    let hostile = [&gguf[..at], &[0, 0, 0, 0], &gguf[at + 4 + 16..]].concat();
    match Llama::read_gguf(&mut Cursor::new(&hostile), Path::new("hostile.gguf")) {
        Err(Error::Model { reason, .. }) => {
            assert_eq!(reason, "token_embd.weight has no dimensions");
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("an embedding without dimensions loaded"),
    }
}

/// Sets the u32 metadata value `key` in a GGUF written by `make_tiny`: the key, its type
/// (4, u32), then the value.
fn set_gguf_u32(gguf: &mut [u8], key: &str, value: u32) {
    let key = key.as_bytes();
    let at = gguf
        .windows(key.len() + 4)
        .position(|w| &w[..key.len()] == key && w[key.len()..] == [4, 0, 0, 0])
        .expect("the key")
        + key.len()
        + 4;
    gguf[at..at + 4].copy_from_slice(&value.to_le_bytes());
}

// model_gguf (found by the corpus replay's seeded mutations): the layer count was
// reserved up front, so a huge `llama.block_count` aborted on the allocation.
#[test]
fn a_gguf_announcing_billions_of_layers_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    make_tiny(dir.path(), 7).unwrap();
    let mut gguf = std::fs::read(dir.path().join("model.gguf")).unwrap();
    set_gguf_u32(&mut gguf, "llama.block_count", u32::MAX);
    match Llama::read_gguf(&mut Cursor::new(&gguf), Path::new("hostile.gguf")) {
        Err(Error::Model { reason, .. }) => assert!(reason.contains("no tensor"), "{reason}"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a model of 2^32 - 1 layers loaded"),
    }
}

// model_gguf: a huge `llama.context_length` made the rotary tables (built up front) a
// 33 GB allocation, an abort.
#[test]
fn a_gguf_announcing_an_endless_context_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    make_tiny(dir.path(), 7).unwrap();
    let mut gguf = std::fs::read(dir.path().join("model.gguf")).unwrap();
    set_gguf_u32(&mut gguf, "llama.context_length", u32::MAX);
    match Llama::read_gguf(&mut Cursor::new(&gguf), Path::new("hostile.gguf")) {
        Err(Error::Model { reason, .. }) => assert!(reason.contains("rotary"), "{reason}"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a context of 2^32 - 1 positions loaded"),
    }
}
