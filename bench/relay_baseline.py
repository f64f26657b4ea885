"""The relay bench's baseline: rust-nostr's LocalRelay (PyPI nostr-sdk, the Rust relay under
a thin Python start-up), its rate limit raised like ours, on 127.0.0.1 at a free port, on
its default in-memory store (which keeps the newest 75 000 events).

    python relay_baseline.py

Prints the relay's ws:// URL on one line, then serves until its stdin closes.

(Its LMDB store cannot be used from here: a `NostrLmdb` made in Python is handed to the relay
as a Python-implemented database, so every store call would go through Python callbacks —
and they fail outside an asyncio loop.)
"""

import asyncio
import sys

import nostr_sdk


async def main() -> None:
    builder = nostr_sdk.LocalRelayBuilder().rate_limit(
        nostr_sdk.RateLimit(max_reqs=100_000, notes_per_minute=2**32 - 1)
    )
    if sys.argv[1:]:
        sys.exit("usage: relay_baseline.py")
    relay = builder.build()
    await relay.run()
    print(await relay.url(), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    relay.shutdown()


asyncio.run(main())
