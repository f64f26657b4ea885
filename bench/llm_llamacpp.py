"""llama.cpp (through PyPI llama-cpp-python) on one GGUF file, for `fleetmesh-bench llm-gguf`.

    python llm_llamacpp.py MODEL.gguf THREADS ROUNDS DECODE < prompt_ids.json

Greedy decoding on the given prompt ids, batch 1: each round times the prefill (the prompt in
one eval, its last logits only) and DECODE tokens (argmax of the last logits, one eval each).
Prints one JSON object: the ids of the last round, and the per-round prefill and decode
seconds. `FLEETMESH_LLAMA_CPP_KV=f32` keeps llama.cpp's KV cache in F32 (its default is F16,
which fleetmesh does not do: with it, greedy ids part ways sooner). The argmax is taken over llama.cpp's own logits buffer (the lowest id among equal
ones, as fleetmesh's argmax), so the Python side adds microseconds per token.
"""

import json
import os
import sys
import time

import numpy as np
import llama_cpp
from llama_cpp import Llama


def kv_cache_type() -> dict:
    if os.environ.get("FLEETMESH_LLAMA_CPP_KV") == "f32":
        return {"type_k": llama_cpp.GGML_TYPE_F32, "type_v": llama_cpp.GGML_TYPE_F32}
    return {}


def main() -> None:
    path, threads, rounds, decode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    prompt = json.load(sys.stdin)
    m = Llama(
        model_path=path,
        n_ctx=len(prompt) + decode + 8,
        n_batch=max(512, len(prompt)),
        n_threads=threads,
        n_threads_batch=threads,
        verbose=False,
        **kv_cache_type(),
    )
    vocab = m.n_vocab()

    def last_logits() -> np.ndarray:
        ptr = llama_cpp.llama_get_logits_ith(m.ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(vocab,))

    out = {"prefill_s": [], "decode_s": [], "ids": []}
    for _ in range(rounds + 1):  # the first round warms up
        m.reset()
        t = time.perf_counter()
        m.eval(prompt)
        prefill = time.perf_counter() - t
        ids = []
        t = time.perf_counter()
        for _ in range(decode):
            nxt = int(np.argmax(last_logits()))
            ids.append(nxt)
            m.eval([nxt])
        out["decode_s"].append(time.perf_counter() - t)
        out["prefill_s"].append(prefill)
        out["ids"] = ids
    out["prefill_s"] = out["prefill_s"][1:]
    out["decode_s"] = out["decode_s"][1:]
    out["llama_cpp_python"] = llama_cpp.__version__
    print(json.dumps(out))


if __name__ == "__main__":
    main()
