"""What ``pip install llama-index-hiqa`` costs: a fresh venv's size and install time per extra.

Builds this checkout's wheel once (the ONNX graph of all-MiniLM-L6-v2 inside it), then for each
variant makes a fresh venv in a temporary folder outside the repository, installs the wheel
with that extra (dependencies from the package index as pip is configured), times it, measures
the venv with ``du`` and checks whether ``import torch`` works there. Each venv is deleted
after it is measured.

Variants:

``core``         ``pip install llama-index-hiqa``
``torch-cpu``    PyTorch's CPU build first, then ``llama-index-hiqa[torch]`` (as the Makefile does)
``dev-cpu``      PyTorch's CPU build first, then ``llama-index-hiqa[dev]``
``torch``        ``llama-index-hiqa[torch]`` alone: pip takes torch's CUDA build on Linux (GBs)

pip's download cache is left as it is; its size before the run goes into the section (empty:
every package was downloaded; a second run of a variant is faster).

    python benchmarks/bench_install.py --variants core torch-cpu dev-cpu
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import markdown_table, write_section  # noqa: E402

TORCH_CPU = "torch==2.13.0"  # the Makefile's TORCH_CPU: pip finds the +cpu wheel on these machines
VARIANTS: Dict[str, Dict[str, object]] = {
    "core": {"extra": "", "torch_first": False},
    "torch-cpu": {"extra": "[torch]", "torch_first": True},
    "dev-cpu": {"extra": "[dev]", "torch_first": True},
    "torch": {"extra": "[torch]", "torch_first": False},
}


def _run(args: List[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True)


def du_mib(path: Path) -> float:
    out = subprocess.run(["du", "-sk", str(path)], capture_output=True, text=True, check=True).stdout
    return int(out.split()[0]) / 1024


def build_wheel(out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    built = _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                  "-w", str(out), str(ROOT)], cwd=out)
    if built.returncode != 0:
        raise SystemExit(built.stderr[-3000:])
    return next(out.glob("llama_index_hiqa-*.whl"))


def measure(variant: str, wheel: Path, tmp: Path) -> Dict[str, object]:
    spec = VARIANTS[variant]
    venv = tmp / f"venv-{variant}"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    subprocess.run([python, "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True, capture_output=True)
    empty = du_mib(venv)
    start = time.perf_counter()
    if spec["torch_first"]:
        first = _run([python, "-m", "pip", "install", "-q", TORCH_CPU], cwd=tmp)
        if first.returncode != 0:
            raise SystemExit(first.stderr[-3000:])
    done = _run([python, "-m", "pip", "install", "-q", f"{wheel}{spec['extra']}"], cwd=tmp)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{variant}: {done.stderr[-3000:]}")
    size = du_mib(venv)
    torch_ok = _run([python, "-c", "import torch"], cwd=tmp).returncode == 0
    nvidia = sum(1 for p in (venv / "lib").glob("python3*/site-packages/nvidia*") if p.is_dir())
    default = _run([python, "-c", "from llama_index_hiqa.models.defaults import packaged_embed_model as p; m = p(); "
                    "print(type(m).__name__, m.model_name, len(m.get_text_embedding('hello')))"], cwd=tmp)
    packages = _run([python, "-m", "pip", "list", "--format=freeze"], cwd=tmp).stdout.count("\n")
    shutil.rmtree(venv)
    return {"variant": variant, "command": f"pip install llama-index-hiqa{spec['extra']}"
            + (f" (after pip install {TORCH_CPU})" if spec["torch_first"] else ""),
            "seconds": seconds, "mib": size - empty, "packages": packages, "torch": torch_ok,
            "nvidia": nvidia, "default": default.stdout.strip() or default.stderr.strip().splitlines()[-1]}


def _body(rows: List[Dict[str, object]], wheel_mib: float, cache_dir: Path, cache: str) -> str:
    table = markdown_table(
        ["command", "time (s)", "venv size (MiB)", "packages", "import torch", "nvidia-* packages", "default embedding"],
        [[r["command"], f"{r['seconds']:.0f}", f"{r['mib']:.0f}", r["packages"], "yes" if r["torch"] else "no",
          r["nvidia"], r["default"]] for r in rows],
    )
    return (
        f"The wheel of this checkout ({wheel_mib:.1f} MiB, the ONNX graph of all-MiniLM-L6-v2 inside) installed "
        f"into a fresh venv (Python {sys.version.split()[0]}) per row, its dependencies from the package index; "
        f"size: `du` of the venv less the empty venv's. pip's download cache ({cache_dir}): {cache}. "
        "'default embedding': the packaged model the pack uses when none is set, its identity and dimension, "
        "as that venv loads it.\n\n" + table
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", default=["core", "torch-cpu", "dev-cpu"], choices=list(VARIANTS))
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    cache_dir = Path(_run([sys.executable, "-m", "pip", "cache", "dir"], cwd=ROOT).stdout.strip() or "/nonexistent")
    cache = f"{du_mib(cache_dir):.0f} MiB before the run" if cache_dir.is_dir() else "empty (no cache folder) before the run"
    rows: List[Dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="hiqa-install-") as name:
        tmp = Path(name)
        wheel = build_wheel(tmp / "dist")
        wheel_mib = wheel.stat().st_size / 2**20
        for variant in args.variants:
            rows.append(measure(variant, wheel, tmp))
            print(rows[-1], flush=True)
            if not args.no_write:  # after each variant: a long run cut short keeps its rows
                write_section("install", "Install", _body(rows, wheel_mib, cache_dir, cache))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
