"""nutshell's own wallet, in process, as `fleetmesh-bench cashu` times it.

Usage: bench_wallet.py MINT_URL N WORKDIR ROUNDS. Mints enough for ROUNDS rounds (the
mint's FakeWallet pays) in a payer's wallet, prints "ready", then for each line on stdin
makes N payments of 8 sat (the payer sends a token, a second wallet receives it: what
nutshell's `cashu send` and `cashu receive` run) and prints the nanoseconds they took. Its
start-up is not timed; what it prints of its own goes to stderr.
"""

import asyncio
import sys
import time

from cashu.wallet.helpers import deserialize_token_from_string, receive, send
from cashu.wallet.wallet import Wallet


async def main(url: str, n: int, workdir: str, rounds: int) -> None:
    # nutshell prints as it goes (a new mnemonic, each token sent): not on our answers
    answers = sys.stdout
    sys.stdout = sys.stderr
    payer = await Wallet.with_db(url, workdir + "/payer", name="payer")
    payee = await Wallet.with_db(url, workdir + "/payee", name="payee")
    for w in (payer, payee):
        await w.load_mint()
    amount = 10 * n * (rounds + 2) + 64
    quote = await payer.request_mint(amount)
    await payer.mint(amount, quote_id=quote.quote)
    print("ready", file=answers, flush=True)
    for _ in sys.stdin:
        start = time.perf_counter_ns()
        for _ in range(n):
            _, token = await send(payer, amount=8, lock="", legacy=False)
            await receive(payee, deserialize_token_from_string(token))
        print(time.perf_counter_ns() - start, file=answers, flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])))
