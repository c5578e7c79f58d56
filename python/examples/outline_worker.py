"""The worker of the Python example (python/README.md, "A runnable pair"): it serves the
handler "outline" of outline.toml with reins_worker, installed (pip install ./python).

Each iteration of the step adds one section about the input's topic to the step's checkpoint
and asks for another iteration; the third completes the step with the outline. The worker
connects to --nats (default $REINS_NATS_URL, else nats://127.0.0.1:4222) with --token (default
$REINS_TOKEN: a worker principal's token on reins serve; none on reins run --listen, whose
server has no authentication) and serves until interrupted or until the server goes away (it
does not reconnect: it exits 1 saying so).
"""

import argparse
import asyncio
import os
import signal
import sys

from reins_worker import TransportError, Worker

SECTIONS = ["{}: why", "{}: how", "{}: what to try first"]


def say(line: str) -> None:
    print(line, flush=True)


def serve(url: str, token: str, namespace: str) -> Worker:
    w = Worker(url, token=token, namespace=namespace, name="outline-worker")

    @w.handle("outline")
    async def outline(tc):
        topic = tc.input.get("topic") if isinstance(tc.input, dict) else None
        if not isinstance(topic, str) or not topic:
            await tc.fail_permanent(f'the input {tc.input!r} has no "topic": want {{"topic": "..."}}')
            return
        sections = list(await tc.load_checkpoint() or [])  # a copy: the worker's own is appended to below
        section = SECTIONS[len(sections)].format(topic)
        await tc.append_checkpoint(section)
        say(f"outline {tc.run_id} iteration {tc.iteration}: {section}")
        if len(sections) + 1 < len(SECTIONS):
            await tc.continue_({"topic": topic})  # the next iteration's input
        else:
            await tc.complete({"topic": topic, "sections": sections + [section]}, stop_reason="done")

    return w


async def main(args: argparse.Namespace) -> None:
    w = serve(args.nats, args.token, args.namespace)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for s in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(s, stop.set)
    run = asyncio.ensure_future(w.run(stop))
    ready = asyncio.ensure_future(w.ready.wait())
    await asyncio.wait([run, ready], return_when=asyncio.FIRST_COMPLETED)
    if ready.done():
        say(f"ready: serving outline on {args.nats}")
    await run


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="Serve the handler outline of outline.toml.")
    ap.add_argument("--nats", default=os.environ.get("REINS_NATS_URL", "nats://127.0.0.1:4222"), help="the NATS server's URL")
    ap.add_argument("--token", default=os.environ.get("REINS_TOKEN", ""), help="a worker principal's token (default $REINS_TOKEN)")
    ap.add_argument("--namespace", default=os.environ.get("REINS_NAMESPACE", ""), help="the server's namespace (reins serve --namespace)")
    try:
        asyncio.run(main(ap.parse_args()))
    except (TransportError, RuntimeError, OSError) as e:
        print(f"outline_worker: {e}", file=sys.stderr, flush=True)
        sys.exit(1)
