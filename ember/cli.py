"""The `ember` command line.

    ember info            version, devices and their backends, settings in force, optional extras
    ember info --json     the same as JSON
    ember serve --device cpu [--allow NODE_ID ...] [--token-file F] [--max-memory GiB] [--relay off]
                          serve a device to `Device.remote(ticket)` clients; prints the ticket
    ember id              this machine's client node id (what a server's --allow lists)
    ember --version
    ember launch --nproc N [--nnodes M --node-rank R --master ADDR:PORT] script.py args...

Example:
    >>> main(["info"])  # doctest: +SKIP
    ember 0.1.0 (Python 3.11.14, NumPy 2.3.5)
    ...
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import platform
import sys
from typing import Any, Sequence

# (what it enables, distribution names to look for, module to find): the optional extras `ember info` lists.
EXTRAS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("torch", ("torch",), "torch"),
    ("rich", ("rich",), "rich"),
    ("matplotlib", ("matplotlib",), "matplotlib"),
    ("Pillow", ("Pillow", "pillow"), "PIL"),
    ("safetensors", ("safetensors",), "safetensors"),
    ("tinygrad", ("tinygrad",), "tinygrad"),
    ("cuda-bindings", ("cuda-bindings", "cuda-python"), "cuda"),
    ("wgpu", ("wgpu",), "wgpu"),
    ("psutil", ("psutil",), "psutil"),
    ("iroh", ("iroh",), "iroh"),
    ("msgpack", ("msgpack",), "msgpack"),
)


def extras() -> list[dict[str, Any]]:
    """Each optional extra: name, whether it is installed, and its version (None when missing).

    Example:
        >>> {e["name"] for e in extras()} >= {"torch", "rich", "matplotlib"}
        True
    """
    found = []
    for name, distributions, module in EXTRAS:
        installed = _module_exists(module)
        version = next((v for v in map(_version, distributions) if v), None) if installed else None
        found.append({"name": name, "installed": installed, "version": version})
    return found


def devices() -> list[dict[str, Any]]:
    """Every device kind: the usable ones (best first, with their backend) and why others are not.

    Example:
        >>> devices()[0]["available"]
        True
    """
    from .device import Device
    from .errors import DeviceUnavailableError
    usable = Device.enumerate()
    rows = [{"device": _name(d), "available": True, "backend": d.backend.name, "default": d is Device.default()}
            for d in usable]
    for row, d in zip(rows, usable):
        if d.kind == "wgpu":  # which adapter, and through which API (Vulkan, Metal, D3D12, OpenGL)
            from .cube.runtime.wgpu import listed_adapters
            row["adapter"] = listed_adapters()[d.index].name
    for candidate in (Device.cuda(0), Device.wgpu(0)):
        if candidate in usable:
            continue
        try:
            backend = candidate.backend.name
        except DeviceUnavailableError as e:
            rows.append({"device": _name(candidate), "available": False, "reason": str(e)})
        else:
            rows.append({"device": _name(candidate), "available": True, "backend": backend, "default": False})
    return rows


def settings_in_force() -> dict[str, Any]:
    """The `ember.toml` / `EMBER_*` settings with their sources, or the error reading them.

    Example:
        >>> settings_in_force()["values"]["autotune.level"]["value"]
        'balanced'
    """
    from . import settings
    from .errors import ConfigError
    try:
        current = settings.load()
    except ConfigError as e:
        return {"error": str(e)}
    return {"files": [str(p) for p in settings.config_files()],
            "values": {f"{s}.{k}": {"value": v, "source": src} for (s, k), v, src in current.items()}}


def info() -> dict[str, Any]:
    """Everything `ember info` shows, as a dict."""
    import numpy

    from . import __version__
    return {"ember": __version__, "python": platform.python_version(), "numpy": numpy.__version__,
            "platform": platform.platform(), "devices": devices(), "settings": settings_in_force(),
            "extras": extras()}


def format_info(data: dict[str, Any]) -> str:
    """`info()` as the text `ember info` prints."""
    lines = [f"ember {data['ember']} (Python {data['python']}, NumPy {data['numpy']}) on {data['platform']}",
             "", "devices:"]
    for d in data["devices"]:
        if d["available"]:
            mark = "  (default)" if d["default"] else ""
            adapter = f" on {d['adapter']}" if "adapter" in d else ""
            lines.append(f"  {d['device']:<8} backend {d['backend']}{adapter}{mark}")
        else:
            lines.append(f"  {d['device']:<8} unavailable: {d['reason']}")
    lines += ["", "settings:"]
    settings = data["settings"]
    if "error" in settings:
        lines.append(f"  error: {settings['error']}")
    else:
        lines.append("  files: " + (", ".join(settings["files"]) or "none (defaults and EMBER_* variables)"))
        for key, entry in settings["values"].items():
            lines.append(f"  {key:<26} {entry['value']!r:<28} {entry['source']}")
    lines += ["", "optional extras:"]
    for e in data["extras"]:
        state = f"installed {e['version'] or ''}".rstrip() if e["installed"] else "missing"
        lines.append(f"  {e['name']:<14} {state}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    from . import __version__
    parser = argparse.ArgumentParser(prog="ember", description="ember: a deep-learning framework on Burn's design.")
    parser.add_argument("--version", action="version", version=f"ember {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="command")
    info_parser = commands.add_parser("info", help="version, devices, settings and optional extras",
                                      description="Show the version, the devices found and their backends, "
                                                  "the settings in force and which optional extras are installed.")
    info_parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    launch = commands.add_parser("launch", help="run a script as the ranks of a distributed job",
                                 description="Start --nproc ranks of `python script args` on this node "
                                             "(torchrun's variables; docs/distributed.md).")
    launch.add_argument("--nproc", type=int, default=1, help="ranks on this node")
    launch.add_argument("--nnodes", type=int, default=1, help="nodes in the job")
    launch.add_argument("--node-rank", type=int, default=0, help="this node's index")
    launch.add_argument("--master", default="127.0.0.1:29500", help="ADDR:PORT of rank 0 (the rendezvous)")
    launch.add_argument("--via", default="auto", choices=("auto", "mpirun", "spawn"),
                        help="start ranks with mpirun (MPI backend) or as plain processes (NCCL)")
    launch.add_argument("script", help="the Python script each rank runs")
    launch.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    serve_parser = commands.add_parser("serve", help="serve a device to remote clients (docs/remote.md)",
                                       description="Serve an ember device to Device.remote(ticket) clients over "
                                                   "iroh; prints the ticket and runs until stopped.")
    serve_parser.add_argument("--device", default="cpu", help="the device served: cpu, cuda:0, numpy, ...")
    serve_parser.add_argument("--allow", nargs="*", default=[], metavar="NODE_ID",
                              help="client node ids admitted (`ember id` prints one); with no --token-file, "
                                   "only these are admitted")
    serve_parser.add_argument("--token-file", help="a file holding the credential the ticket carries "
                                                   "(default: a fresh one per run)")
    serve_parser.add_argument("--max-memory", type=float, metavar="GiB", help="device memory quota per client")
    serve_parser.add_argument("--relay", choices=("on", "off"), default="off", help="use iroh's relays")
    serve_parser.add_argument("--transport", choices=("tcp", "iroh"), default="tcp",
                              help="tcp: frames on a TCP stream keyed over iroh (fast, not encrypted); "
                                   "iroh: everything on QUIC (encrypted)")
    serve_parser.add_argument("--host", default="127.0.0.1", help="the address to listen on (0.0.0.0: all)")
    serve_parser.add_argument("--log", default="info", choices=("debug", "info", "warning"), help="log level")
    commands.add_parser("id", help="this machine's client node id", description="Print this machine's client "
                        "node id (EMBER_REMOTE_KEY, else ~/.config/ember/remote.key), for a server's --allow.")
    return parser


def serve(args: argparse.Namespace) -> int:
    """`ember serve`: logs to stderr, the ticket to stdout."""
    import logging

    from .device import Device
    from .remote import serve as run
    logging.basicConfig(level=args.log.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    credential = None
    if args.token_file:
        with open(args.token_file, "rb") as f:
            credential = f.read().strip()
        if len(credential) < 16:
            raise SystemExit(f"ember serve: the credential in {args.token_file} must have at least 16 bytes")
    max_memory = None if args.max_memory is None else int(args.max_memory * (1 << 30))
    run(Device(args.device), allow=args.allow, credential=credential, max_memory=max_memory,
        transport=args.transport, relay=args.relay == "on", host=args.host)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status.

    Example:
        >>> main(["info", "--json"])  # doctest: +SKIP
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    if args.command == "launch":
        from .distributed.launch import launch
        from .errors import DistributedError
        try:
            return launch(args.script, args.args, args.nproc, args.nnodes, args.node_rank, args.master, args.via)
        except DistributedError as e:
            print(e, file=sys.stderr)
            return 2
    if args.command == "serve":
        return serve(args)
    if args.command == "id":
        from .backend.remote.transport import client_key, node_id
        print(node_id(client_key()))
        return 0
    data = info()
    try:
        print(json.dumps(data, indent=2) if args.json else format_info(data))
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`ember info | head`): not an error; keep Python's exit flush quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _module_exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _name(device: Any) -> str:
    return device.kind if device.kind in ("cpu", "numpy") else f"{device.kind}:{device.index}"


if __name__ == "__main__":
    sys.exit(main())
