"""reins_worker: serve the tasks of reins workflows from Python (docs/protocol.md, version 1).

    import asyncio
    from reins_worker import Worker

    w = Worker("nats://127.0.0.1:4222", token="...")

    @w.handle("count")
    async def count(tc):
        ...
        await tc.continue_({"n": 1})

    asyncio.run(w.run())

No third-party dependency: natsclient.py speaks the part of the NATS protocol the worker
needs; transport.Transport is the seam where nats-py can be dropped in.
"""

from .effects import Lease, LeaseLost, NotRecorded
from .protocol import VERSION, Names, ProtocolError
from .transport import Transport, TransportError
from .worker import AnsweredError, CheckpointTooLarge, TaskContext, Worker

__all__ = ["VERSION", "AnsweredError", "CheckpointTooLarge", "Lease", "LeaseLost", "Names", "NotRecorded",
           "ProtocolError", "TaskContext", "Transport", "TransportError", "Worker"]
__version__ = "0.1.0"
