"""The Python worker of the e2e tests (e2e/python_test.go): it serves the agent_loop handler
"count" with reins_worker, as e2e/testdata/loopworker does in Go. Each iteration appends its
number to the checkpoint (an array whose first item is the input), runs a side effect through
the effect leases, and continues, until the iteration in the input's "until"; then it
completes with the iterations the checkpoint holds. It prints one line per event the tests
wait for:

    ready                          the worker consumes tasks
    start RUN ITERATION ATTEMPT    the handler began an iteration
    effect RUN ITERATION           the side effect ran (the call itself, not a recorded result)
    done RUN ITERATION             the handler's answer was stored
    hang RUN ITERATION             the handler will never answer this iteration (--hang)

With --hang N it never answers iteration N the first time any worker reaches it (a marker file
in --state records that): after its checkpoint write and its effect, so that a worker killed
there leaves both behind. With --hang-in-effect the hang is inside the effect instead (its
claim held and renewed until the worker dies). The effect appends "RUN ITERATION KEY" to
--effects, one line per call. An input with "pad" (a long string) keeps it in the checkpoint
and in every iteration's output, so that both travel by reference through the object store.
"""

import argparse
import asyncio
import os
import signal
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

from reins_worker import Worker  # noqa: E402


def say(line: str) -> None:
    print(line, flush=True)


def claim(state: str, run: str) -> bool:
    """Creates the hang marker of run; True when this call created it."""
    if not state:
        return False
    try:
        fd = os.open(os.path.join(state, "hang-" + os.path.basename(run)), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nats", required=True)
    ap.add_argument("--token", default="")
    ap.add_argument("--user", default="")
    ap.add_argument("--password", default="")
    ap.add_argument("--namespace", default="")
    ap.add_argument("--ack-wait", type=float, default=1.0)
    ap.add_argument("--hang", type=int, default=0)
    ap.add_argument("--hang-in-effect", action="store_true")
    ap.add_argument("--state", default="")
    ap.add_argument("--effects", default="")
    args = ap.parse_args()

    w = Worker(args.nats, token=args.token, user=args.user, password=args.password, namespace=args.namespace,
               ack_wait=args.ack_wait, name="pycount")

    async def effect_call(tc, key: str):
        line = f"{tc.run_id} {tc.iteration}"
        with open(args.effects, "a") as f:
            f.write(f"{line} {key}\n")
            f.flush()
            os.fsync(f.fileno())
        say(f"effect {line}")
        if args.hang_in_effect and tc.iteration == args.hang and claim(args.state, tc.run_id):
            say(f"hang {line}")
            await asyncio.Event().wait()
        return {"appended": line}

    @w.handle("count")
    async def count(tc):
        if tc.iteration == 1:
            until = (tc.input or {}).get("until", 0)
            if not isinstance(until, int) or until < 1:
                await tc.fail_permanent(f"input {tc.input!r}: want {{\"until\": N > 0}}")
                return
            await tc.checkpoint([{"until": until, "pad": tc.input.get("pad", "")}])
        ck = await tc.load_checkpoint()
        until, pad = ck[0]["until"], ck[0]["pad"]
        say(f"start {tc.run_id} {tc.iteration} {tc.attempt}")
        await tc.append_checkpoint(tc.iteration)
        tc.add_usage(tool_calls=1)
        if args.effects:
            got = await tc.effect("append", lambda key: effect_call(tc, key))
            if got != {"appended": f"{tc.run_id} {tc.iteration}"}:
                await tc.fail_permanent(f"the effect returned {got!r}")
                return
        if tc.iteration == args.hang and not args.hang_in_effect and claim(args.state, tc.run_id):
            say(f"hang {tc.run_id} {tc.iteration}")
            await asyncio.Event().wait()  # killed here by the test
        if tc.iteration >= until:
            ck = await tc.load_checkpoint()
            out = {"iterations": tc.iteration, "seen": ck[1:]}
            if pad:
                out["pad"] = len(pad) if tc.input.get("pad") == pad else -1
            await tc.complete(out, stop_reason="done")
        else:
            await tc.continue_({"iteration": tc.iteration, "pad": pad} if pad else {"iteration": tc.iteration})
        say(f"done {tc.run_id} {tc.iteration}")

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for s in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(s, stop.set)
        task = asyncio.ensure_future(w.run(stop))
        ready = asyncio.ensure_future(w.ready.wait())
        await asyncio.wait([task, ready], return_when=asyncio.FIRST_COMPLETED)
        if ready.done():
            say("ready")
        await task

    try:
        asyncio.run(run())
    except Exception as e:  # one line, for the test's log
        print(f"pycount: {e}", file=sys.stderr, flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
